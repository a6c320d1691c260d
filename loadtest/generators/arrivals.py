"""Open-loop arrival patterns: when each request of an open-loop run is due, and (for a replay) what it sends.

One class per pattern, spelled as keys of the campaign's ``open`` shape or as ``--arrival SPEC`` on the
command line (:func:`parse_arrival`):

- ``poisson`` (default): exponential gaps at ``rate``.
- ``gamma:B``: gaps ~ Gamma(shape=B, scale=1/(rate*B)), as vLLM's ``benchmark_serving.py --burstiness`` and
  AIPerf take it: mean 1/rate, coefficient of variation 1/sqrt(B). B = 1 is Poisson, B < 1 burstier, B > 1
  more regular. Shape keys ``arrival = "gamma", burstiness = B``.
- ``ramp:END``: Poisson whose rate goes linearly from ``rate`` to END over the run (``duration_s``, warm-up
  included). Shape keys ``arrival = "ramp", rate_end = END``.
- ``replay:FILE``: a recorded schedule (:func:`read_schedule`), played at its recorded offsets, divided by
  ``speed``, or scaled so that its mean rate is ``rate`` when one is given, and looped when the run is
  longer, as perf_analyzer loops ``--request-intervals``. Shape keys ``arrival = "replay", schedule = FILE``
  (optional ``speed``).

Every pattern yields one global schedule (:meth:`Arrival.schedule`). With several Locust processes each
generates the same schedule from the run's shared seed and sends every N-th arrival (:meth:`Arrival.share`),
so the union of their arrivals is the schedule itself: independent gamma streams would superpose into
something closer to Poisson and lose the burstiness asked for.

:func:`write_request_intervals` writes any schedule as perf_analyzer 2.51's ``--request-intervals`` file,
e.g. ``python -m loadtest.generators schedule.jsonl intervals.txt``.
"""

from __future__ import annotations

import abc
import csv
import dataclasses
import itertools
import json
import math
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

import numpy as np

from loadtest.errors import CampaignError

SPECS = "poisson, gamma:B, ramp:END_RATE or replay:FILE"
SCHEDULE_SUFFIXES = {".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv"}


class ArrivalError(CampaignError, ValueError):
    """An arrival spec, shape or schedule file is invalid; the message names the value and the file line."""


class Due(NamedTuple):
    t: float
    """Seconds from the start of the run."""
    payload: int | None
    """Which payload to send (a replay's recorded index, taken modulo the payload count); None: the next one."""


def _positive(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value > 0):
        raise ArrivalError(f"{what}={value!r} must be a number > 0")
    return float(value)


class Arrival(abc.ABC):
    """One arrival pattern, without its rate (the open shape's ``rate``, passed to :meth:`schedule`)."""

    name: ClassVar[str]

    def shape_keys(self) -> dict[str, Any]:
        """The keys that put this pattern into an open shape (``rate`` excluded)."""
        return {"arrival": self.name}

    @abc.abstractmethod
    def describe(self) -> str:
        """One phrase for logs and reports, e.g. ``gamma arrivals, burstiness 0.5``."""

    @abc.abstractmethod
    def schedule(self, rate: float | None, duration_s: float = math.inf, seed: int = 0) -> Iterator[Due]:
        """Every arrival of the run in time order, from time 0; endless (the caller stops at its end)."""

    def share(self, rate: float | None, duration_s: float, seed: int, index: int, count: int) -> Iterator[Due]:
        """Generator ``index`` of ``count``'s arrivals: every ``count``-th of the one schedule."""
        if not 0 <= index < count:
            raise ArrivalError(f"generator index {index} is not in [0, {count})")
        return itertools.islice(self.schedule(rate, duration_s, seed), index, None, count)


class RateArrival(Arrival):
    """A pattern drawn gap by gap from a seeded numpy generator at a given rate."""

    @abc.abstractmethod
    def next_gap(self, rng: np.random.Generator, rate: float, t: float = 0.0, duration_s: float = math.inf) -> float:
        """Seconds from an arrival at ``t`` to the next one."""

    def schedule(self, rate: float | None, duration_s: float = math.inf, seed: int = 0) -> Iterator[Due]:
        rate = _positive(rate, f"{self.name} arrivals: rate")
        rng = np.random.default_rng(seed)
        t = 0.0
        while True:
            t += self.next_gap(rng, rate, t, duration_s)
            yield Due(t, None)


@dataclasses.dataclass(frozen=True)
class Poisson(RateArrival):
    name: ClassVar[str] = "poisson"

    def describe(self) -> str:
        return "Poisson arrivals"

    def next_gap(self, rng, rate, t=0.0, duration_s=math.inf) -> float:
        return float(rng.exponential(1.0 / rate))


@dataclasses.dataclass(frozen=True)
class Gamma(RateArrival):
    burstiness: float
    name: ClassVar[str] = "gamma"

    def __post_init__(self) -> None:
        _positive(self.burstiness, "burstiness")

    def shape_keys(self) -> dict[str, Any]:
        return {**super().shape_keys(), "burstiness": self.burstiness}

    def describe(self) -> str:
        return f"gamma arrivals, burstiness {self.burstiness:g}"

    def next_gap(self, rng, rate, t=0.0, duration_s=math.inf) -> float:
        return float(rng.gamma(self.burstiness, 1.0 / (rate * self.burstiness)))


@dataclasses.dataclass(frozen=True)
class Ramp(RateArrival):
    rate_end: float
    name: ClassVar[str] = "ramp"

    def __post_init__(self) -> None:
        _positive(self.rate_end, "rate_end")

    def shape_keys(self) -> dict[str, Any]:
        return {**super().shape_keys(), "rate_end": self.rate_end}

    def describe(self) -> str:
        return f"Poisson arrivals, rate ramping linearly to {self.rate_end:g}/s over the run"

    def rate_at(self, rate: float, t: float, duration_s: float) -> float:
        """The intended rate at ``t``: ``rate`` at 0, ``rate_end`` at ``duration_s`` and after."""
        return rate + (self.rate_end - rate) * min(1.0, t / duration_s)

    def next_gap(self, rng, rate, t=0.0, duration_s=math.inf) -> float:
        if not math.isfinite(duration_s):
            raise ArrivalError("ramp arrivals need the run's duration_s to ramp over")
        # Thinning (Lewis and Shedler): candidates at the top rate, each kept with probability rate(t) / top.
        top = max(rate, self.rate_end)
        candidate = t
        while True:
            candidate += float(rng.exponential(1.0 / top))
            if rng.random() * top < self.rate_at(rate, candidate, duration_s):
                return candidate - t


@dataclasses.dataclass(frozen=True)
class Replay(Arrival):
    """A recorded schedule (:func:`read_schedule`): offsets in seconds, sorted, and the payload each sent."""

    path: str
    offsets: tuple[float, ...]
    payloads: tuple[int | None, ...]
    speed: float | None = None
    name: ClassVar[str] = "replay"

    def __post_init__(self) -> None:
        if self.speed is not None:
            _positive(self.speed, "speed")
        if not self.offsets or self.offsets[-1] <= 0:
            raise ArrivalError(f"schedule {self.path}: its requests span no time (the last offset must be > 0)")

    @classmethod
    def load(cls, path: str | Path, speed: float | None = None) -> Replay:
        offsets, payloads = read_schedule(path)
        return cls(str(Path(path).resolve()), tuple(offsets), tuple(payloads), speed)

    @property
    def recorded_rate(self) -> float:
        """Requests per second as recorded: the line count over the last offset."""
        return len(self.offsets) / self.offsets[-1]

    def shape_keys(self) -> dict[str, Any]:
        keys = {**super().shape_keys(), "schedule": self.path}
        return keys if self.speed is None else {**keys, "speed": self.speed}

    def describe(self) -> str:
        scale = f", speed {self.speed:g}" if self.speed is not None else ""
        return (
            f"replay of {Path(self.path).name} ({len(self.offsets)} requests over {self.offsets[-1]:g} s, "
            f"{self.recorded_rate:.4g}/s{scale})"
        )

    def factor(self, rate: float | None) -> float:
        """How much faster than recorded it plays: ``speed``, or ``rate`` over the recorded rate."""
        if rate is not None and self.speed is not None:
            raise ArrivalError("a replay takes a rate or a speed, not both")
        if rate is not None:
            return _positive(rate, "replay: rate") / self.recorded_rate
        return self.speed or 1.0

    def schedule(self, rate: float | None, duration_s: float = math.inf, seed: int = 0) -> Iterator[Due]:
        factor = self.factor(rate)
        period = self.offsets[-1]  # perf_analyzer's loop: the next pass starts where the last interval ends
        for turn in itertools.count():
            for t, payload in zip(self.offsets, self.payloads, strict=True):
                yield Due((turn * period + t) / factor, payload)


PATTERNS: dict[str, type[Arrival]] = {cls.name: cls for cls in (Poisson, Gamma, Ramp, Replay)}
"""Pattern name -> class; the names and their shape keys are ``loadtest.core.spec.ARRIVAL_KEYS``'s."""


def parse_arrival(spec: str, where: str = "--arrival") -> Arrival:
    """``poisson``, ``gamma:B``, ``ramp:END_RATE`` or ``replay:FILE`` as an :class:`Arrival`; ArrivalError
    (a ValueError) naming ``where`` and the spec otherwise. A replay's file is read now."""
    name, sep, value = spec.strip().partition(":")
    name = name.lower()
    if name not in PATTERNS:
        raise ArrivalError(f"{where} {spec!r}: unknown pattern {name!r}; give {SPECS}")
    if name == "poisson":
        if sep:
            raise ArrivalError(f"{where} {spec!r}: poisson takes no value")
        return Poisson()
    if not value:
        example = {"gamma": "gamma:0.5", "ramp": "ramp:1600", "replay": "replay:schedule.jsonl"}[name]
        raise ArrivalError(f"{where} {spec!r}: {name} needs a value, e.g. {example}")
    if name == "replay":
        if not Path(value).is_file():
            raise ArrivalError(f"{where} {spec!r}: schedule file {value!r} does not exist")
        return _replay(value, None, where)
    try:
        number = float(value)
    except ValueError:
        raise ArrivalError(f"{where} {spec!r}: {value!r} is not a number") from None
    try:
        return Gamma(number) if name == "gamma" else Ramp(number)
    except ArrivalError as exc:
        raise ArrivalError(f"{where} {spec!r}: {exc}") from None


def _replay(path: str, speed: float | None, where: str) -> Replay:
    try:
        return Replay.load(path, speed)
    except ArrivalError as exc:
        raise ArrivalError(f"{where}: {exc}") from None


def from_shape(shape: dict[str, Any], where: str = "shape") -> Arrival:
    """The pattern of an open shape (its ``arrival`` key and that pattern's keys; default Poisson)."""
    name = shape.get("arrival", "poisson")
    if name not in PATTERNS:
        raise ArrivalError(f"{where}.arrival={name!r} is not one of {sorted(PATTERNS)}")
    try:
        if name == "gamma":
            return Gamma(shape.get("burstiness"))
        if name == "ramp":
            return Ramp(shape.get("rate_end"))
    except ArrivalError as exc:
        raise ArrivalError(f"{where}.{exc}") from None
    if name == "replay":
        schedule = shape.get("schedule")
        if not isinstance(schedule, str) or not Path(schedule).is_file():
            raise ArrivalError(f"{where}.schedule={schedule!r}: no such file")
        return _replay(schedule, shape.get("speed"), where)
    return Poisson()


def read_schedule(path: str | Path) -> tuple[list[float], list[int | None]]:
    """A recorded schedule's offsets (seconds from the start, sorted) and payload indices (None where a line
    names none). JSON Lines (``.jsonl``/``.ndjson``): one object a line, ``{"t": 0.0123, "payload": 3}``;
    CSV (``.csv``): a header naming ``t`` (and optionally ``payload``), one request a row. Other fields are
    ignored; blank lines are skipped."""
    path = Path(path)
    kind = SCHEDULE_SUFFIXES.get(path.suffix.lower())
    if kind is None:
        raise ArrivalError(f"schedule {path}: name it .jsonl (JSON Lines) or .csv, not {path.suffix or 'no suffix'!r}")
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ArrivalError(f"schedule {path}: cannot be read: {exc}") from None
    rows = _jsonl_rows(path, text) if kind == "jsonl" else _csv_rows(path, text)
    entries = [(_offset(path, line, row.get("t")), _payload(path, line, row.get("payload"))) for line, row in rows]
    if not entries:
        raise ArrivalError(f"schedule {path}: no requests in it")
    entries.sort(key=lambda entry: entry[0])  # stable: lines recorded out of order play in time order
    return [t for t, _ in entries], [p for _, p in entries]


def _jsonl_rows(path: Path, text: str) -> Iterator[tuple[int, dict]]:
    for line, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ArrivalError(f"schedule {path}:{line}: not JSON: {exc.msg}") from None
        if not isinstance(row, dict):
            raise ArrivalError(f'schedule {path}:{line}: expected an object like {{"t": 0.5, "payload": 3}}')
        yield line, row


def _csv_rows(path: Path, text: str) -> Iterator[tuple[int, dict]]:
    reader = csv.DictReader(text.splitlines())
    if not reader.fieldnames or "t" not in [f.strip() for f in reader.fieldnames]:
        raise ArrivalError(f"schedule {path}:1: the header must name a 't' column (and optionally 'payload')")
    for row in reader:
        row = {(k or "").strip(): (v or "").strip() for k, v in row.items()}
        if any(row.values()):
            yield reader.line_num, {k: v for k, v in row.items() if v != ""}


def _offset(path: Path, line: int, value: Any) -> float:
    try:
        t = float(value) if isinstance(value, (int, float, str)) and not isinstance(value, bool) else math.nan
    except ValueError:
        t = math.nan
    if not (math.isfinite(t) and t >= 0):
        raise ArrivalError(f"schedule {path}:{line}: t={value!r} must be seconds from the start, >= 0")
    return t


def _payload(path: Path, line: int, value: Any) -> int | None:
    if value is None:
        return None
    try:
        index = int(value) if not isinstance(value, (bool, float)) else -1
    except ValueError:
        index = -1
    if index < 0:
        raise ArrivalError(f"schedule {path}:{line}: payload={value!r} must be an index >= 0")
    return index


def request_intervals_us(offsets: Iterable[float]) -> list[int]:
    """Offsets (seconds from the start, non-decreasing) as perf_analyzer's intervals: whole microseconds from
    one request to the next, the first from the start. Rounded on the offsets, so the sum stays exact."""
    micros = np.rint(np.asarray(list(offsets), dtype=float) * 1e6).astype(np.int64)
    gaps = np.diff(micros, prepend=0)
    if micros.size and (micros[0] < 0 or (gaps < 0).any()):
        raise ArrivalError("offsets must be >= 0 and in time order")
    return [int(g) for g in gaps]


def write_request_intervals(path: str | Path, offsets: Iterable[float]) -> Path:
    """Write perf_analyzer 2.51's ``--request-intervals`` file: one interval in µs a line. perf_analyzer
    loops the file as :class:`Replay` loops a schedule; it sends its ``--input-data`` entries in turn, so
    a schedule's payload indices do not carry over."""
    path = Path(path)
    path.write_text("".join(f"{gap}\n" for gap in request_intervals_us(offsets)))
    return path
