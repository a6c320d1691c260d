"""The campaign's order of trials (interleaved per scenario) and the gate's exit status and lines, without a
server: ``gate_status`` on recorded trial values."""

from loadtest.campaign.execution import gate_status, schedule
from loadtest.core.spec import Candidate, Scenario
from tests.trial_samples import BUDGET, FAILING, PASSING, STRADDLING, campaign_of, run_of
from tritonkit_errors import ExitStatus


def scenario(name: str, trials: int) -> Scenario:
    return Scenario(name, "digits", "grpc", {"kind": "users", "users": 2}, trials=trials)


def test_one_trial_keeps_the_variant_by_variant_order():
    a, b, s, t = Candidate("a"), Candidate("b"), scenario("s", 1), scenario("t", 1)
    order = schedule([(a, s), (a, t), (b, s), (b, t)])
    assert [(v.name, x.name, i) for v, x, i in order] == [("a", "s", 0), ("a", "t", 0), ("b", "s", 0), ("b", "t", 0)]


def test_trials_interleave_the_variants_scenario_by_scenario():
    a, b, s, t = Candidate("a"), Candidate("b"), scenario("s", 2), scenario("t", 1)
    order = schedule([(a, s), (a, t), (b, s), (b, t)])
    assert [(v.name, x.name, i) for v, x, i in order] == [
        ("a", "s", 0),
        ("b", "s", 0),
        ("b", "s", 1),  # odd rounds run backwards: a config switch fewer, and drift within a round cancels
        ("a", "s", 1),
        ("a", "t", 0),
        ("b", "t", 0),
    ]


def test_a_passing_campaign_exits_ok(capsys):
    assert gate_status(campaign_of(run_of(PASSING)), BUDGET) is ExitStatus.OK
    assert "SLO gate passed: p99 <= 10 ms" in capsys.readouterr().out


def test_a_failing_run_exits_failed_naming_it(capsys):
    assert gate_status(campaign_of(run_of(PASSING, "a"), run_of(FAILING, "b")), BUDGET) is ExitStatus.FAILED
    err = capsys.readouterr().err
    assert "SLO gate FAILED" in err and "b / v: p99 15.495 ms" in err and "exceeds the 10 ms budget by" in err


def test_a_straddling_run_exits_inconclusive_with_the_trials_that_would_settle_it(capsys):
    assert gate_status(campaign_of(run_of(PASSING, "a"), run_of(STRADDLING, "b")), BUDGET) is ExitStatus.INCONCLUSIVE
    err = capsys.readouterr().err
    assert "SLO gate INCONCLUSIVE" in err
    (line,) = [x for x in err.splitlines() if x.startswith("  ")]
    assert line.startswith("  b / v: inconclusive:") and "more trials (14 in all) would likely settle p99" in line


def test_a_run_whose_generator_was_the_limit_is_not_judged_and_exits_broken_naming_it(capsys):
    limited = run_of(FAILING, "b")
    limited.generator_limit = "the generator, not the server, was the limit (40 arrivals dropped unsent)"
    assert gate_status(campaign_of(run_of(PASSING, "a"), limited), BUDGET) is ExitStatus.BROKEN
    err = capsys.readouterr().err
    assert "SLO gate not judged" in err and "FAILED" not in err
    assert "  b / v: the generator, not the server, was the limit (40 arrivals dropped unsent)" in err


def test_a_failing_run_whose_generator_kept_up_still_fails_the_gate_beside_a_limited_one(capsys):
    limited = run_of(PASSING, "b")
    limited.generator_limit = "the generator, not the server, was the limit (its CPU at 97% of its cores)"
    assert gate_status(campaign_of(run_of(FAILING, "a"), limited), BUDGET) is ExitStatus.FAILED


def test_a_passing_run_whose_generator_took_much_of_the_budget_is_named_in_a_note(capsys):
    heavy, light = run_of(PASSING, "a"), run_of(PASSING, "b")
    heavy.generator_floor_ms, light.generator_floor_ms = {"p50": 1.2, "p99": 3.1}, {"p50": 0.4, "p99": 0.9}
    assert gate_status(campaign_of(heavy, light), BUDGET) is ExitStatus.OK
    err = capsys.readouterr().err
    assert "  note: a / v: the load generator's own p99 is 3.10 ms of the 10 ms budget (over 25%)" in err
    assert "b / v" not in err


def test_a_campaign_that_passes_with_a_limited_generator_passes_and_notes_it(capsys):
    limited = run_of(PASSING, "b")
    limited.generator_limit = "the generator, not the server, was the limit (its CPU at 95% of its cores)"
    assert gate_status(campaign_of(run_of(PASSING, "a"), limited), BUDGET) is ExitStatus.OK
    assert "  note: b / v: the generator, not the server, was the limit" in capsys.readouterr().err
