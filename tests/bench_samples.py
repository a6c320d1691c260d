"""Bench trials and a model's bench.json entry built from rounds of throughputs, for the unit tests of the
bench's rows, ratios and targets (test_bench_report.py, test_bench_targets.py)."""

from __future__ import annotations

from loadtest.core.trials import ArmResult
from loadtest.studies.bench import report as bench_report
from loadtest.studies.bench.report import Trial


def trial(throughput: float, p50: float = 10.0, p99: float = 20.0, error: str = "") -> Trial:
    return Trial(throughput, p50, p99, 0.0, "locust", error=error, requests=100, failures=0)


def entry(rounds: dict[str, list[float | None]], trials: int | None = 3) -> dict:
    """A model's bench.json entry whose rows measured ``rounds`` (None: that round's trial failed)."""
    rows = {}
    for key, values in rounds.items():
        result = ArmResult(key, [trial(v) if v is not None else Trial.failed("locust", "boom") for v in values])
        rows[key] = bench_report.row_summary(result, note="n")
    return {"users": 8, "duration_s": 3.0, "warmup_s": 0.5, "trials": trials, "rows": rows}
