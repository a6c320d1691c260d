"""The bench's figures over trials: rows from their trials, ratios paired by round, targets met, missed or
inconclusive on their intervals, and the tables with intervals (no server)."""

from __future__ import annotations

import json
import math

import pytest

from loadtest.measure.evidence import Interval
from loadtest.measure.trials import ArmResult
from loadtest.studies import bench_report
from loadtest.studies.bench_report import Trial


def trial(throughput: float, p50: float = 10.0, p99: float = 20.0, error: str = "") -> Trial:
    return Trial(throughput, p50, p99, 0.0, "locust", error=error, requests=100, failures=0)


def entry(rounds: dict[str, list[float | None]], trials: int | None = 3) -> dict:
    """A model's bench.json entry whose rows measured ``rounds`` (None: that round's trial failed)."""
    rows = {}
    for key, values in rounds.items():
        result = ArmResult(key, [trial(v) if v is not None else Trial.failed("locust", "boom") for v in values])
        rows[key] = bench_report.row_summary(result, note="n")
    return {"users": 8, "duration_s": 3.0, "warmup_s": 0.5, "trials": trials, "rows": rows}


def test_a_ratio_pairs_the_rows_by_round_and_is_the_geometric_mean_of_the_rounds_ratios():
    got = bench_report.paired_ratio([300.0, 200.0, 260.0], [100.0, 100.0, 130.0])
    assert got.estimate == pytest.approx(math.prod([3.0, 2.0, 2.0]) ** (1 / 3))
    assert got.trials == 3 and got.low < got.estimate < got.high
    # both rows drifting alike over the rounds: paired by round, the drift cancels out of the interval
    drift = bench_report.paired_ratio([300.0, 150.0, 240.0], [100.0, 50.0, 80.0])
    assert (drift.estimate, drift.low, drift.high) == pytest.approx((3.0, 3.0, 3.0))
    unpaired = bench_report.paired_ratio([300.0, 150.0, 240.0], [50.0, 80.0, 100.0])
    assert unpaired.high - unpaired.low > 1.0


def test_a_round_where_either_row_failed_is_left_out_of_the_ratio():
    got = bench_report.paired_ratio([300.0, None, 260.0, 280.0], [100.0, 100.0, None, 140.0])
    assert got.trials == 2 and got.estimate == pytest.approx(math.sqrt(3.0 * 2.0))
    one = bench_report.paired_ratio([300.0, None], [100.0, 100.0])
    assert (one.estimate, one.trials, one.has_interval) == (3.0, 1, False)
    assert bench_report.paired_ratio([None, 1.0], [1.0, None]) is None
    assert bench_report.paired_ratio([], []) is None


@pytest.mark.parametrize(
    "interval, op, threshold, status",
    [
        (Interval(2.5, 2.2, 2.8, 3), ">=", 2.0, "met"),
        (Interval(2.1, 1.8, 2.4, 3), ">=", 2.0, "inconclusive"),
        (Interval(1.5, 1.2, 1.8, 3), ">=", 2.0, "missed"),
        (Interval(0.3, 0.25, 0.35, 3), "<", 0.4, "met"),
        (Interval(0.38, 0.3, 0.46, 3), "<", 0.4, "inconclusive"),
        (Interval(1.6, 1.55, 1.7, 3), "<=", 1.5, "missed"),
        (Interval(1.5, 1.5, 1.5, 1), "<=", 1.5, "met"),  # one trial: its value decides
        (1.7, "<=", 1.5, "missed"),
        (None, ">=", 1.0, "missed"),
    ],
)
def test_a_target_is_met_missed_or_inconclusive_on_its_interval(interval, op, threshold, status):
    assert bench_report.status(interval, op, threshold) == status


def test_a_row_is_the_mean_of_its_usable_trials_and_says_how_many_failed():
    result = ArmResult(
        "fastapi", [trial(100.0, 8.0), Trial.failed("locust", "ConnectionError: gone"), trial(120.0, 12.0)]
    )
    row = bench_report.row_summary(result, note="uvicorn")
    # throughput: the arithmetic mean; latencies: the geometric mean (evidence.interval(log=True))
    assert row["throughput"] == pytest.approx(110.0) and row["p50_ms"] == pytest.approx(math.sqrt(8.0 * 12.0))
    assert row["intervals"]["throughput"]["trials"] == 2
    assert row["intervals"]["throughput"]["low"] < 110.0 < row["intervals"]["throughput"]["high"]
    assert [t.get("error") for t in row["trials"]] == [None, "failed: ConnectionError: gone", None]
    assert row["note"] == "uvicorn; 1 of 3 trials failed (failed: ConnectionError: gone)"
    assert json.loads(json.dumps(row)) == row  # no NaN: bench.json reads back equal
    failed = bench_report.row_summary(ArmResult("fastapi", [Trial.failed("locust", "no server")]))
    assert failed["throughput"] is None and failed["error"] == "failed: no server"


def test_targets_on_ratios_are_inconclusive_when_the_interval_straddles_the_threshold():
    e = entry(
        {
            "inprocess": [1000.0, 1000.0, 1000.0],
            "triton_plain": [100.0, 100.0, 100.0],
            "triton_tuned": [300.0, 150.0, 260.0],
            "fastapi": [100.0, 100.0, 100.0],
            "fastapi_batcher": [100.0, 100.0, 100.0],
        }
    )
    targets = {t["target"]: t for t in bench_report.evaluate_targets({"models": {"minilm": e}})}
    two_x = targets["tuned Triton >= 2x FastAPI (3/4)"]
    assert two_x["status"] == "inconclusive" and two_x["interval"]["low"] < 2.0 < two_x["interval"]["high"]
    assert "95% CI" in two_x["measured"] and "3 trials" in two_x["measured"]
    assert targets["tuned Triton >= 0.95x the in-process limit (3/1)"]["status"] == "missed"
    one = entry({"triton_tuned": [300.0], "fastapi": [100.0]}, trials=1)
    (only,) = [t for t in bench_report.evaluate_targets({"models": {"minilm": one}}) if "(3/4)" in t["target"]]
    assert only["status"] == "met" and only["measured"] == "3.00x (1 trial, no interval)"


def test_the_tables_print_each_figure_with_its_interval_and_the_targets_three_ways():
    e = entry(
        {
            "inprocess": [400.0, 410.0, 390.0],
            "triton_plain": [100.0, 110.0, 90.0],
            "triton_tuned": [300.0, 150.0, 260.0],
            "fastapi": [100.0, 100.0, 100.0],
            "fastapi_batcher": [100.0, 100.0, 100.0],
        }
    )
    result = bench_report.finish({"models": {"minilm": e}})
    text = bench_report.render(json.loads(json.dumps(result)))
    assert "| 2. Triton plain | 100 (75-125) | 10.000 (10.000-10.000) |" in text
    assert "3 rounds, every row once a round" in text
    assert "3/4 = 2.27x (95% CI 0.91x-5.63x, 3 trials)" in text
    assert "| minilm | tuned Triton >= 2x FastAPI (3/4) |" in text and "| inconclusive |" in text
    assert "One run each, after the rounds" in text
    assert result["models"]["minilm"]["ratio_intervals"]["3/4"]["trials"] == 3
