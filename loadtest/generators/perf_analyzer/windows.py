"""perf_analyzer 2.51 as a soak's load generator: Poisson arrivals at a fixed rate, one measurement pass
per window, p99 per pass.

A Python load generator on one core adds its own stalls to what it measures: at 918 req/s Locust used
two thirds of its core, and its p99 per minute wandered between 10 and 26 ms while perf_analyzer (C++)
measured the same server at 6.5 to 7.3 ms. ``python -m loadtest.studies.soak --generator perf_analyzer`` runs
this instead of Locust, so the soak's p99 check judges the server.

perf_analyzer keeps the load running between passes. It stops after three passes within
``--stability-percentage`` of each other, so the percentage is set to a value no three windows meet, and it
runs ``--max-trials`` passes, then exits with code 2 and "Failed to obtain stable measurement": the normal
end here. Any other end, or fewer passes than windows, is a failure of the run.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from loadtest.generators.perf_analyzer.perf import PERF_ANALYZER, output_tail, time_limit_s, write_input_data

PASS_LINE = re.compile(r"Pass \[(\d+)\] throughput: ([\d.]+) infer/sec\. p99 latency: (\d+) usec")
NOT_STABLE = "Failed to obtain stable measurement"
# Never met by three windows, so perf_analyzer measures every one of --max-trials.
NEVER_STABLE_PERCENTAGE = 0.0001


class PerfWindowsError(RuntimeError):
    """perf_analyzer did not complete the windows; the message ends with its output tail."""


def parse_passes(text: str, window_s: float) -> list[dict[str, Any]]:
    """perf_analyzer's ``-v`` output with ``--percentile 99`` -> one window per pass, in the shape of the
    Locust windows (``t``, ``length_s``, ``requests``, ``failures``, ``p50_ms``, ``p99_ms``)."""
    windows = []
    for match in PASS_LINE.finditer(text):
        index, throughput, p99_us = int(match.group(1)), float(match.group(2)), int(match.group(3))
        windows.append(
            {
                "t": (index - 1) * window_s,
                "length_s": window_s,
                "requests": round(throughput * window_s),
                "failures": 0,
                "p50_ms": None,
                "p99_ms": p99_us / 1000,
                "throughput_rps": throughput,
            }
        )
    return windows


def command(
    model: str,
    url: str,
    protocol: str,
    rate: float,
    windows: int,
    window_s: float,
    input_data: Path | None,
    binary: Path = PERF_ANALYZER,
) -> list[str]:
    cmd = [
        str(binary),
        "-m",
        model,
        "-u",
        url,
        "-i",
        protocol,
        "--request-rate-range",
        f"{rate:g}",
        "--request-distribution",
        "poisson",
        "--measurement-interval",
        str(int(window_s * 1000)),
        "--percentile",
        "99",
        "--stability-percentage",
        f"{NEVER_STABLE_PERCENTAGE:g}",
        "--max-trials",
        str(int(windows)),
        "-v",
    ]
    if input_data is not None:
        cmd += ["--input-data", str(input_data)]
    return cmd


def run(
    model: str,
    url: str,
    protocol: str,
    rate: float,
    windows: int,
    window_s: float,
    samples: list[dict] | None = None,
    binary: Path = PERF_ANALYZER,
    log=print,
    config=None,
) -> dict[str, Any]:
    """``windows`` passes of ``window_s`` at ``rate`` req/s: ``{"windows", "requests", "throughput_rps",
    "command"}``; ``samples``: batch-1 payloads (``loadtest.generators.payloads``) of the served ``config``.
    Raises :class:`PerfWindowsError` when perf_analyzer fails a request or stops early."""
    if windows < 2 or window_s <= 0 or rate <= 0:
        raise ValueError(f"needs windows >= 2, window_s > 0 and rate > 0, got {windows}, {window_s}, {rate}")
    with tempfile.TemporaryDirectory(prefix="perf-windows-") as tmp:
        input_data = write_input_data(Path(tmp) / "input.json", samples, config) if samples else None
        cmd = command(model, url, protocol, rate, windows, window_s, input_data, binary)
        log(" ".join(cmd))
        timeout_s = time_limit_s(window_s * 1000, windows)
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        except FileNotFoundError:
            raise PerfWindowsError(f"no perf_analyzer at {binary}: run `make setup`") from None
        except subprocess.TimeoutExpired:
            raise PerfWindowsError(f"perf_analyzer ran past {timeout_s:.0f} s: {' '.join(cmd)}") from None
    output = proc.stdout + proc.stderr
    found = parse_passes(output, window_s)
    ended_normally = proc.returncode == 0 or (proc.returncode == 2 and NOT_STABLE in output)
    if not ended_normally or len(found) < windows:
        raise PerfWindowsError(
            f"perf_analyzer exited with code {proc.returncode} after {len(found)} of {windows} "
            f"windows: {' '.join(cmd)}\n{output_tail(output)}"
        )
    requests = sum(w["requests"] for w in found)
    return {
        "windows": found,
        "requests": requests,
        "throughput_rps": requests / (len(found) * window_s),
        "command": cmd,
    }
