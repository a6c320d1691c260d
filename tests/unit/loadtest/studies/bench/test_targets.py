"""loadtest/studies/bench/targets.py: ratios paired by round (rounds where a row failed left out), targets met,
missed or inconclusive on their intervals (no server)."""

from __future__ import annotations

import math

import pytest

from loadtest.core.evidence import Interval
from loadtest.studies.bench import targets as bench_targets
from tests.bench_samples import entry


def test_a_ratio_pairs_the_rows_by_round_and_is_the_geometric_mean_of_the_rounds_ratios():
    got = bench_targets.paired_ratio([300.0, 200.0, 260.0], [100.0, 100.0, 130.0])
    assert got.estimate == pytest.approx(math.prod([3.0, 2.0, 2.0]) ** (1 / 3))
    assert got.trials == 3 and got.low < got.estimate < got.high
    # both rows drifting alike over the rounds: paired by round, the drift cancels out of the interval
    drift = bench_targets.paired_ratio([300.0, 150.0, 240.0], [100.0, 50.0, 80.0])
    assert (drift.estimate, drift.low, drift.high) == pytest.approx((3.0, 3.0, 3.0))
    unpaired = bench_targets.paired_ratio([300.0, 150.0, 240.0], [50.0, 80.0, 100.0])
    assert unpaired.high - unpaired.low > 1.0


def test_a_round_where_either_row_failed_is_left_out_of_the_ratio():
    got = bench_targets.paired_ratio([300.0, None, 260.0, 280.0], [100.0, 100.0, None, 140.0])
    assert got.trials == 2 and got.estimate == pytest.approx(math.sqrt(3.0 * 2.0))
    one = bench_targets.paired_ratio([300.0, None], [100.0, 100.0])
    assert (one.estimate, one.trials, one.has_interval) == (3.0, 1, False)
    assert bench_targets.paired_ratio([None, 1.0], [1.0, None]) is None
    assert bench_targets.paired_ratio([], []) is None


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
    assert bench_targets.status(interval, op, threshold) == status


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
    targets = {t["target"]: t for t in bench_targets.evaluate_targets({"models": {"minilm": e}})}
    two_x = targets["tuned Triton >= 2x FastAPI (3/4)"]
    assert two_x["status"] == "inconclusive" and two_x["interval"]["low"] < 2.0 < two_x["interval"]["high"]
    assert "95% CI" in two_x["measured"] and "3 trials" in two_x["measured"]
    assert targets["tuned Triton >= 0.95x the in-process limit (3/1)"]["status"] == "missed"
    one = entry({"triton_tuned": [300.0], "fastapi": [100.0]}, trials=1)
    (only,) = [t for t in bench_targets.evaluate_targets({"models": {"minilm": one}}) if "(3/4)" in t["target"]]
    assert only["status"] == "met" and only["measured"] == "3.00x (1 trial, no interval)"


def test_a_models_targets_hold_for_its_other_formats_and_not_for_other_models():
    e = entry({"inprocess": [100.0, 100.0], "triton_tuned": [100.0, 100.0], "fastapi": [40.0, 40.0]}, trials=2)
    for served, expected in (("minilm_onnx", 3), ("minilm", 3), ("minilmx", 1)):
        targets = bench_targets.evaluate_targets({"models": {served: e}})
        assert len(targets) == expected, served  # minilm's two ratios and the first-request check; only the last
    (limit,) = [
        t for t in bench_targets.evaluate_targets({"models": {"minilm_onnx": e}}) if "in-process" in t["target"]
    ]
    assert limit["model"] == "minilm_onnx" and limit["status"] == "met"
