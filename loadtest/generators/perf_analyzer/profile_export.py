"""perf_analyzer's ``--profile-export-file``: every request's send and answer times, read as a stream.

The export (the file GenAI-Perf reads) is one line of compact JSON: per load level (``experiment``) its requests, each
with its send ``timestamp``, its inputs, its ``response_timestamps`` and outputs, and the ``window_boundaries`` of the
measurement windows perf_analyzer ran (consecutive windows share a boundary). perf_analyzer's figures merge its last
``STABILITY_WINDOWS`` windows; a request belongs to the window its last answer came in. Goodput counts these requests'
latencies against a budget (``loadtest.generators.perf_analyzer.perf.run`` with ``profile_export=True``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np

STABILITY_WINDOWS = 3
"""perf_analyzer reports the merge of its last 3 measurement windows (its fixed stability window)."""


def stable_window_ms(duration_s: float) -> int:
    """perf_analyzer's window for a run of ``duration_s`` measured seconds: its ``STABILITY_WINDOWS`` merged windows
    last ``duration_s``, as a Locust run of that duration does (100 ms at least)."""
    return max(100, round(duration_s * 1000 / STABILITY_WINDOWS))


@dataclasses.dataclass
class MeasuredRequests:
    """The requests of one load level whose answer came in the windows perf_analyzer reported (its last
    ``STABILITY_WINDOWS``): each one's latency, and how long those windows lasted."""

    mode: str
    """``concurrency`` or ``request_rate``."""
    value: float
    latencies_ms: np.ndarray
    duration_s: float

    def within(self, budget_ms: float) -> int:
        """How many answered within ``budget_ms`` (all of them for an infinite budget)."""
        return int(np.count_nonzero(self.latencies_ms <= budget_ms))

    def to_dict(self) -> dict:
        return {
            "mode": self.mode,
            "value": self.value,
            "requests": len(self.latencies_ms),
            "duration_s": self.duration_s,
        }


# The profile export is one line of compact JSON (rapidjson's Writer) whose requests hold their inputs and
# outputs: far larger than the timestamps wanted, so it is scanned for these tokens in chunks instead of
# parsed whole. Each pattern is anchored on the keys around it, so a tensor named "timestamp" cannot match.
_EXPORT_TOKENS = re.compile(
    rb'\{"experiment":\{"mode":"(?P<mode>\w+)","value":(?P<value>[-+.\deE]+)\},"requests":\['
    rb'|\{"timestamp":(?P<start>\d+),(?:"sequence_id":\d+,)?"request_inputs":'
    rb'|"response_timestamps":\[(?P<responses>[\d,]*)\],"response_outputs":'
    rb'|"window_boundaries":\[(?P<windows>[\d,]*)\]'
)
_CHUNK = 1 << 20
_LONGEST_TOKEN = 1 << 16
"""Longer than any token above (a response list of thousands of stream answers): kept across chunks."""


def _tokens(path: Path) -> Iterator[re.Match]:
    """The export's tokens in file order, reading ``_CHUNK`` bytes at a time."""
    buffer = b""
    with open(path, "rb") as stream:
        while True:
            chunk = stream.read(_CHUNK)
            buffer += chunk
            # A token that starts in the last _LONGEST_TOKEN bytes may be cut: it is found again next round.
            safe = len(buffer) if not chunk else len(buffer) - _LONGEST_TOKEN
            consumed = 0
            for match in _EXPORT_TOKENS.finditer(buffer):
                if match.start() >= safe:
                    break
                consumed = match.end()
                yield match
            if not chunk:
                return
            buffer = buffer[max(consumed, len(buffer) - _LONGEST_TOKEN) :]


def read_profile_export(path: Path, windows: int = STABILITY_WINDOWS) -> list[MeasuredRequests]:
    """perf_analyzer's ``--profile-export-file`` -> per load level, the latency of each request answered in its
    last ``windows`` measurement windows (those its figures merge; a request counts in the window its last
    answer came in, as perf_analyzer counts it) and their length. A request's latency runs from its send to
    its last answer. Raises ValueError for a file that is not a profile export."""
    levels: list[tuple[str, float, list[tuple[int, int]], list[int]]] = []
    start: int | None = None
    for match in _tokens(Path(path)):
        if match["mode"] is not None:
            levels.append((match["mode"].decode(), float(match["value"]), [], []))
        elif not levels:
            raise ValueError(f"{path}: not a perf_analyzer profile export (a request before any experiment)")
        elif match["start"] is not None:
            start = int(match["start"])
        elif match["responses"] is not None:
            answers = match["responses"].split(b",") if match["responses"] else []
            if start is not None and answers:
                levels[-1][2].append((start, int(answers[-1])))
            start = None
        else:
            levels[-1][3].extend(int(b) for b in match["windows"].split(b",") if b)
    if not levels:
        raise ValueError(f"{path}: not a perf_analyzer profile export (no experiment in it)")
    measured = []
    for mode, value, requests, boundaries in levels:
        times = np.asarray(requests, dtype=np.int64).reshape(-1, 2)
        if len(boundaries) >= 2:  # consecutive windows share their boundaries: n windows, n + 1 numbers
            first, last = boundaries[max(0, len(boundaries) - 1 - windows)], boundaries[-1]
            times = times[(times[:, 1] >= first) & (times[:, 1] <= last)]
            duration_s = (last - first) / 1e9
        else:
            duration_s = (int(times[:, 1].max()) - int(times[:, 0].min())) / 1e9 if len(times) else 0.0
        latencies = (times[:, 1] - times[:, 0]) / 1e6
        measured.append(MeasuredRequests(mode, value, latencies, duration_s))
    return measured
