"""A recorded open-loop run for the unit tests of the overload study (test_overload.py, test_overload_rows.py)."""

from __future__ import annotations

from loadtest.core.client_stats import ClientStats, TimelinePoint
from loadtest.core.results import RunResult, ServerStats


def recorded_run(
    variant: str, *, offered: int, accepted: int, refused: int, dropped: int, p99: float, warmup_failures: int = 0
) -> RunResult:
    """A 10 s open-loop run, 2 s of warm-up: the counts of the measured 8 s spread over its seconds."""
    failures = offered - accepted
    timeline = [TimelinePoint(0.0, warmup_failures, warmup_failures, None, None, warmup_failures)]
    for second in range(2, 10):

        def share(n: int, second: int = second) -> int:
            return n // 8 + (1 if second - 2 < n % 8 else 0)

        timeline.append(TimelinePoint(float(second), share(offered), share(failures), 1.0, p99, share(refused)))
    statuses = {"503": refused + warmup_failures, **({"dropped": dropped} if dropped else {})}
    client = ClientStats(
        requests=offered + warmup_failures,
        failures=failures + warmup_failures,
        duration_s=8.0,
        latency_ms={"p50": 1.0, "p99": p99},
        timeline=timeline,
        dropped=dropped,
        refused=refused + warmup_failures,
        failure_statuses=statuses,
    )
    server = ServerStats(accepted, refused, accepted, accepted // 4, {"queue": 0.5})
    return RunResult("s", variant, "digits", "digits", "http", {"kind": "open", "rate": offered / 8}, client, server)
