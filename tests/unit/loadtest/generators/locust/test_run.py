"""A streamed run's goodput and SLO verdict against TTFT/ITL budgets (``loadtest.generators.locust.run.run_result``,
which judges through ``loadtest.core.slo``), over one trial and several."""

from __future__ import annotations

import math

from loadtest.core.client_stats import ClientStats
from loadtest.core.latency import new_histogram, to_us
from loadtest.core.results import Trial, goodput_of
from loadtest.core.spec import Candidate, Scenario, Slo
from loadtest.core.streams import stream_summary
from loadtest.generators.locust.run import run_result
from tests.trial_samples import trial as plain_trial

SCENARIO = Scenario("gen", "text_generator", "grpc", {"kind": "users", "users": 2})
NO_BUDGET = Slo(math.inf)


def stream_trial(ttfts_ms, itl_ms=5.0, latency_ms=100.0, failures=0, budget: Slo = NO_BUDGET) -> Trial:
    """A trial of streamed requests with these TTFTs (one ITL and latency for all), judged for goodput the way
    ``trial_of`` does."""
    rows = [[latency_ms, t, itl_ms, 16] for t in ttfts_ms]
    hist = new_histogram()
    hist.record_value(to_us(latency_ms / 1000), len(rows))
    client = ClientStats(
        len(rows) + failures,
        failures,
        10.0,
        {"p50": latency_ms, "p99": latency_ms, "mean": latency_ms},
        hdr=hist.encode().decode(),
        streams=rows,
        **stream_summary(rows, 10.0),
    )
    share, rate = goodput_of(client, budget.p99_ms, budget.ttft_ms, budget.itl_ms)
    return Trial(client, None, share, rate, budget.p99_ms, budget.ttft_ms, budget.itl_ms)


def judged(trials, budget: Slo):
    return run_result(SCENARIO, Candidate("v"), "text_generator", trials, budget)


FAST = [10.0] * 95 + [50.0] * 5  # p99 TTFT 50 ms; 95% of the requests within 10 ms


def test_goodput_of_a_stream_counts_only_requests_within_the_ttft_and_itl_budgets():
    budget = Slo(math.inf, ttft_ms=20.0)
    run = judged([stream_trial(FAST, budget=budget)], budget)
    assert run.goodput_share == 0.95 and run.goodput_rps == 9.5
    tight_itl = Slo(math.inf, itl_ms=4.0)
    assert judged([stream_trial(FAST, budget=tight_itl)], tight_itl).goodput_share == 0


def test_failed_streams_count_against_goodput():
    budget = Slo(math.inf, ttft_ms=100.0, max_error_rate=0.5)
    run = judged([stream_trial([10.0] * 90, failures=10, budget=budget)], budget)
    assert run.goodput_share == 0.9


def test_a_p99_ttft_over_its_budget_fails_the_run_and_says_by_how_much():
    budget = Slo(math.inf, ttft_ms=40.0)
    run = judged([stream_trial(FAST, budget=budget)], budget)
    assert run.verdict == "fail"
    assert run.slo_violations == ["p99 TTFT 50.000 ms exceeds the 40 ms budget by 10.000 ms (25%)"]


def test_budgets_the_stream_meets_pass():
    budget = Slo(math.inf, ttft_ms=60.0, itl_ms=6.0)
    run = judged([stream_trial(FAST, budget=budget)], budget)
    assert run.verdict == "pass" and run.slo_violations == []


def test_a_p99_itl_over_its_budget_fails_the_run():
    budget = Slo(math.inf, itl_ms=4.0)
    run = judged([stream_trial(FAST, itl_ms=5.0, budget=budget)], budget)
    assert run.verdict == "fail"
    assert run.slo_violations == ["p99 ITL 5.000 ms exceeds the 4 ms budget by 1.000 ms (25%)"]


def test_a_ttft_budget_on_a_model_that_does_not_stream_fails_and_says_why():
    budget = Slo(math.inf, ttft_ms=100.0)
    run = run_result(SCENARIO, Candidate("v"), "digits", [plain_trial(5.0)], budget)
    assert run.verdict == "fail"
    assert run.slo_violations == [
        "no p99 TTFT: no request streamed text (not a decoupled model, or every stream failed)"
    ]


def test_the_goodput_floor_is_judged_on_goodput_within_the_stream_budgets():
    budget = Slo(math.inf, ttft_ms=20.0, min_goodput=0.99)
    run = judged([stream_trial(FAST, budget=budget)], budget)
    # p99 TTFT (50 ms) and goodput (95%) both miss
    assert run.verdict == "fail"
    assert run.slo_violations[-1] == "goodput 95.00% is below the floor 99.00%"


def test_ttft_straddling_its_budget_over_trials_is_inconclusive():
    budget = Slo(math.inf, ttft_ms=50.0)
    trials = [stream_trial([t] * 100, budget=budget) for t in (45.0, 49.0, 52.0, 55.0)]
    run = judged(trials, budget)
    assert run.verdict == "inconclusive"
    assert run.slo_violations[0].startswith("p99 TTFT ") and "straddles the 50 ms budget" in run.slo_violations[0]
    assert "ttft_p99_ms" in run.intervals and "itl_p99_ms" in run.intervals


def test_a_plain_run_keeps_its_figures_without_stream_ones():
    run = run_result(SCENARIO, Candidate("v"), "digits", [plain_trial(5.0), plain_trial(5.2)], Slo(10.0))
    assert run.verdict == "pass"
    assert "ttft_p99_ms" not in run.intervals and run.client.ttft_ms == {}
