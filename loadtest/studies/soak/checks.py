"""The soak's three checks (``loadtest.studies.soak.command``): no errors, p99 steady from the first full window to the
last, memory flat from the first window after the memory warm-up to the last.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

P99_DRIFT = 0.20
MEMORY_GROWTH = 0.05


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def check_errors(client_failures: int, server_failures: int | None, statuses: dict[str, int]) -> dict[str, Any]:
    failures = client_failures + (server_failures or 0)
    return {
        "name": "no errors",
        "passed": failures == 0,
        "client_failures": client_failures,
        "server_failures": server_failures,
        "failure_statuses": statuses,
        "detail": "no failed request"
        if failures == 0
        else f"{client_failures} failed at the client ({statuses}), {server_failures or 0} counted by Triton",
    }


def full_windows(windows: list[dict[str, Any]], duration_s: float) -> list[dict[str, Any]]:
    """The windows that end within the run and hold successes (the first one's latency starts after the
    warm-up seconds; a last, partial window is left out)."""
    return [w for w in windows if w["t"] + w["length_s"] <= duration_s + 1e-9 and w.get("p99_ms") is not None]


def p99_trend(windows: list[dict[str, Any]]) -> float | None:
    """The least-squares line through the windows' p99: its change from the first window's start to the
    last one's, relative to the mean p99. Unlike first-vs-last, one noisy window moves it little, so it
    tells drift (a leak, fragmentation) from window-to-window noise."""
    times, p99s = [w["t"] for w in windows], [w["p99_ms"] for w in windows]
    if len(set(times)) < 2 or not statistics.fmean(p99s):
        return None
    slope, _ = statistics.linear_regression(times, p99s)
    return slope * (times[-1] - times[0]) / statistics.fmean(p99s)


def check_p99(windows: list[dict[str, Any]], limit: float = P99_DRIFT) -> dict[str, Any]:
    if len(windows) < 2:
        return {
            "name": "p99 steady",
            "passed": False,
            "first_ms": None,
            "last_ms": None,
            "drift": None,
            "trend": None,
            "detail": f"needs two full windows with successes, has {len(windows)}",
        }
    first, last = windows[0]["p99_ms"], windows[-1]["p99_ms"]
    drift = abs(last - first) / first if first else math.inf
    trend = p99_trend(windows)
    values = [w["p99_ms"] for w in windows]
    detail = (
        f"p99 first window {first:.3f} ms, last {last:.3f} ms: {drift:.1%} apart (limit {limit:.0%}); "
        f"windows {min(values):.3f} to {max(values):.3f} ms"
    )
    if trend is not None:
        detail += f", fitted trend over the run {trend:+.1%}"
    return {
        "name": "p99 steady",
        "passed": drift <= limit,
        "first_ms": first,
        "last_ms": last,
        "drift": drift,
        "trend": trend,
        "detail": detail,
    }


def check_memory(
    samples: list[dict[str, Any]], warmup_s: float, window_s: float, limit: float = MEMORY_GROWTH
) -> dict[str, Any]:
    """Mean RSS of the first window after the warm-up against the mean of the last window."""
    if not samples:
        return {"name": "memory flat", "passed": False, "detail": "no memory sample"}
    end = samples[-1]["t"]
    first = [s["total_bytes"] for s in samples if warmup_s <= s["t"] < warmup_s + window_s]
    last = [s["total_bytes"] for s in samples if s["t"] > end - window_s and s["t"] >= warmup_s + window_s]
    if not first or not last:
        return {
            "name": "memory flat",
            "passed": False,
            "baseline_bytes": _mean(first),
            "final_bytes": _mean(last),
            "growth": None,
            "detail": f"needs samples in the window after the {warmup_s:g} s warm-up and in a "
            f"later window of {window_s:g} s; run longer",
        }
    baseline, final = _mean(first), _mean(last)
    growth = (final - baseline) / baseline
    return {
        "name": "memory flat",
        "passed": growth <= limit,
        "baseline_bytes": baseline,
        "final_bytes": final,
        "growth": growth,
        "detail": f"server + stubs RSS {baseline / 2**20:.1f} MiB after warm-up, "
        f"{final / 2**20:.1f} MiB at the end: {growth:+.2%} (limit {limit:.0%})",
    }
