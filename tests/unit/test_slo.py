"""The SLO verdict of a run over its trials and the campaign gate over its runs, on recorded trial values."""

from loadtest.campaign import Slo
from loadtest.measure import slo
from loadtest.measure.evidence import Verdict
from tests.trial_samples import BUDGET, FAILING, PASSING, STRADDLING, campaign_of, run_of


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
