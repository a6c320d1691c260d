"""loadtest/studies/bench/report.py: rows from their trials, and the tables with each figure's interval and the
targets (no server)."""

from __future__ import annotations

import json
import math

import pytest

from loadtest.core.client_stats import ClientStats
from loadtest.core.trials import ArmResult
from loadtest.studies.bench import report as bench_report
from loadtest.studies.bench import targets as bench_targets
from loadtest.studies.bench.report import Trial
from tests.bench_samples import entry, trial


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


def test_a_locust_trial_without_a_successful_request_is_a_failed_trial_not_a_figure():
    empty = ClientStats(requests=0, failures=0, duration_s=0.75, latency_ms={"p50": math.nan, "p99": math.nan})
    got = bench_report.locust_trial(empty)
    assert not got.usable and got.error == "no request succeeded in the 0.75 s window: 0 done"
    refused = ClientStats(requests=3, failures=3, duration_s=1.0, latency_ms={"p50": math.nan}, errors={"503: busy": 3})
    assert bench_report.locust_trial(refused).error.endswith("3 done (503: busy)")
    fine = bench_report.locust_trial(ClientStats(requests=4, failures=0, duration_s=1.0, latency_ms={"p50": 2.0}))
    assert fine.usable and fine.p50_ms == 2.0 and fine.requests == 4


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
    result = bench_targets.finish({"models": {"minilm": e}})
    text = bench_report.render(json.loads(json.dumps(result)))
    assert "| 2. Triton plain | 100 (75-125) | 10.000 (10.000-10.000) |" in text
    assert "3 rounds, every row once a round" in text
    assert "3/4 = 2.27x (95% CI 0.91x-5.63x, 3 trials)" in text
    assert "| minilm | tuned Triton >= 2x FastAPI (3/4) |" in text and "| inconclusive |" in text
    assert "One run each, after the rounds" in text
    assert result["models"]["minilm"]["ratio_intervals"]["3/4"]["trials"] == 3
