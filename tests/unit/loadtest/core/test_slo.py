"""The SLO verdict of a run over its trials and the campaign gate over its runs, on recorded trial values."""

import math

from scipy.stats import binomtest

from loadtest.core import evidence, slo
from loadtest.core.evidence import Verdict
from loadtest.core.measurement import Measurement
from loadtest.core.spec import Candidate, Scenario, Slo
from loadtest.core.trials import ArmResult
from loadtest.generators.locust.run import run_result
from tests.trial_samples import BUDGET, FAILING, PASSING, STRADDLING, campaign_of, run_of, trial


def test_a_run_passes_fails_or_straddles_on_its_trials_interval():
    assert run_of(PASSING).verdict == "pass" and run_of(PASSING).slo_violations == []
    failing = run_of(FAILING)
    assert failing.verdict == "fail"
    (sentence,) = failing.slo_violations
    assert sentence.startswith("p99 15.495 ms (95% CI ") and "exceeds the 10 ms budget by 5.495 ms (55%)" in sentence
    straddling = run_of(STRADDLING)
    assert straddling.verdict == "inconclusive" and not straddling.passed
    assert "straddles the 10 ms budget" in straddling.slo_violations[0]
    assert "more trials (14 in all) would likely settle p99" in straddling.settle


def test_one_trial_is_judged_on_its_value_alone():
    assert run_of([9.9]).verdict == "pass"
    assert run_of([10.1]).slo_violations == ["p99 10.100 ms exceeds the 10 ms budget by 0.100 ms (1%)"]


def test_the_goodput_floor_is_judged_from_each_trials_histogram():
    floor = Slo(p99_ms=10.0, min_goodput=0.995)
    # p99 9 ms: every success within 10 ms; p99 12 ms: the top 1% of successes beyond it.
    assert run_of([9.0, 9.1], budget=floor).verdict == "pass"
    over = run_of([12.0, 12.5], budget=Slo(p99_ms=100.0, min_goodput=0.995))
    assert over.verdict == "pass"  # within a 100 ms budget every success counts
    (verdict, sentences) = slo.run_verdict(run_of([12.0, 12.5]), floor)
    assert verdict.verdict is Verdict.FAIL
    assert any(s.startswith("goodput 99.00%") and "is below the floor 99.50%" in s for s in sentences)


def test_every_run_gate_fails_on_a_failing_run_before_an_inconclusive_one():
    result = campaign_of(run_of(PASSING, "a"), run_of(STRADDLING, "b"), run_of(FAILING, "c"))
    gate = slo.campaign_verdict(result, BUDGET)
    assert gate.verdict is Verdict.FAIL
    (line,) = gate.lines
    assert line.startswith("c / v: p99 15.495 ms")


def test_every_run_gate_is_inconclusive_when_none_fails_and_one_straddles():
    gate = slo.campaign_verdict(campaign_of(run_of(PASSING, "a"), run_of(STRADDLING, "b")), BUDGET)
    assert gate.verdict is Verdict.INCONCLUSIVE
    (line,) = gate.lines
    assert line.startswith("b / v: inconclusive: p99 ") and "would likely settle p99" in line
    assert slo.campaign_verdict(campaign_of(run_of(PASSING, "a")), BUDGET).verdict is Verdict.PASS


def test_best_variant_gate_needs_a_passing_variant_per_scenario():
    best = Slo(p99_ms=10.0, gate="best-variant")
    one_passes = campaign_of(run_of(FAILING, "s", "x", best), run_of(PASSING, "s", "y", best), budget=best)
    assert slo.campaign_verdict(one_passes, best).verdict is Verdict.PASS
    open_ = campaign_of(run_of(FAILING, "s", "x", best), run_of(STRADDLING, "s", "y", best), budget=best)
    gate = slo.campaign_verdict(open_, best)
    assert gate.verdict is Verdict.INCONCLUSIVE and gate.lines[0].startswith("s: no variant passed yet")
    none = campaign_of(run_of(FAILING, "s", "x", best), run_of([20.0, 21.0], "s", "y", best), budget=best)
    (line,) = slo.gate(none, best)
    assert line.startswith("s: no variant met the SLO; closest x: p99 15.495 ms")


def _run_with_errors(failures: list[int], limit: float, requests: int = 1000):
    shaped = Scenario("s", "digits", "grpc", {"kind": "users", "users": 2}, trials=len(failures))
    trials = [trial(5.0, requests, f) for f in failures]
    return run_result(shaped, Candidate("v"), "digits", trials, Slo(p99_ms=10.0, max_error_rate=limit))


def test_one_error_under_a_limit_of_zero_is_a_certain_fail_and_none_a_certain_pass():
    assert _run_with_errors([0, 1, 0], 0.0).verdict == "fail"
    (sentence,) = _run_with_errors([0, 1, 0], 0.0).slo_violations
    assert sentence == "error rate 0.033% (1 of 3000 in all) exceeds the limit 0.000%"
    assert _run_with_errors([0, 0, 0], 0.0).verdict == "pass"


def test_three_error_free_trials_of_a_thousand_requests_do_not_prove_a_limit_of_half_a_per_mille():
    run = _run_with_errors([0, 0, 0], 0.0005)
    assert run.verdict == "inconclusive"  # 0 of 3000: the exact 95% interval reaches 0.123%
    assert "0 of 3000 in all) straddles the limit 0.050%" in run.slo_violations[0]
    assert _run_with_errors([0, 0, 0], 0.002).verdict == "pass"
    assert _run_with_errors([5, 4, 6], 0.002).verdict == "fail"  # 15 of 3000: its lower bound passes 0.2%


def test_the_error_rates_interval_is_the_exact_binomial_one_over_every_request():
    iv = evidence.count_interval(7, 3000, trials=3)
    exact = binomtest(7, 3000).proportion_ci(0.95, method="exact")
    assert (iv.estimate, iv.low, iv.high, iv.trials) == (7 / 3000, exact.low, exact.high, 3)
    assert math.isnan(evidence.count_interval(0, 0, trials=1).estimate)


def test_an_arms_error_count_comes_from_tritons_counters_of_its_usable_trials():
    def measured(requests: int, failures: int, saturated: str = "") -> Measurement:
        view = {"requests": requests, "failures": failures}
        return Measurement(100.0, 1.0, 2.0, 0.0, "perf_analyzer", server=view, saturated=saturated)

    arm = ArmResult("a", [measured(990, 10), measured(1000, 0), measured(5, 995, "its CPU at 99%")])
    assert arm.error_counts() == (10, 2000)
    assert ArmResult("b", [Measurement.failed("perf_analyzer", "boom")]).error_counts() is None
