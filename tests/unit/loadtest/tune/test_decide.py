"""loadtest.tune.decide on given trials: a candidate replaces the served config only when its throughput is
better beyond the noise and its SLO verdict passes; ties keep the served config; no pick names the best
candidate."""

import json
from pathlib import Path

from loadtest.core.measurement import Measurement
from loadtest.core.spec import Slo
from loadtest.tune import decide, report
from loadtest.tune.search import Trial
from loadtest.tune.space import Point
from tritonkit_errors import ExitStatus

SERVED = Point("torchscript/fp32", 1000, (8, 16), 2, 64)
NO_DELAY = Point("torchscript/fp32", 0, (), 2, 64)
ONNX = Point("onnx/fp32", 0, (), 2, 64)
SLO = Slo(10.0)
RECORDED = Path(__file__).resolve().parents[3] / "data" / "tune" / "digits_leaders.json"
"""The served config and two leaders, 3 interleaved trials each, of a real `tritonkit tune digits` (see its
`command` and `note`)."""


def run(throughput: float, p99: float, errors: float = 0.0, saturated: str = "") -> Measurement:
    return Measurement(throughput, p99 / 2, p99, errors, "perf_analyzer", 0.3, saturated=saturated)


def leader(point: Point, order: int, *trials: tuple[float, float]) -> Trial:
    """A screened trial (its probe looked great) with its interleaved trials."""
    return Trial(point, [run(99999, 0.1)], order=order, confirmed=[run(t, p) for t, p in trials])


def test_two_candidates_within_the_noise_of_the_served_config_keep_it():
    # Round by round the machine drifts by +-25%; the candidates follow it within a few percent.
    served = leader(SERVED, 1, (4000, 6.0), (5000, 6.5), (3200, 7.0))
    a = leader(NO_DELAY, 4, (4100, 5.0), (4900, 5.5), (3300, 6.0))
    b = leader(ONNX, 7, (3950, 6.0), (5100, 6.0), (3250, 6.5))
    decision = decide.decide([served, a, b], SLO, min_effect=0.05)
    assert decision.pick is served and decision.kept_served and decision.status is ExitStatus.OK
    assert decide.NO_BETTER in decision.reason and "#4: throughput" in decision.reason
    assert {c.verdict.value for c in decision.comparisons.values()} <= {"no difference", "inconclusive"}


def test_one_candidate_clearly_better_beyond_the_noise_replaces_the_served_config():
    served = leader(SERVED, 1, (4000, 6.0), (5000, 6.5), (3200, 7.0))
    tie = leader(NO_DELAY, 4, (4100, 5.0), (4900, 5.5), (3300, 6.0))
    better = leader(ONNX, 7, (5200, 5.0), (6400, 5.5), (4200, 6.0))  # +30% in every round
    decision = decide.decide([served, tie, better], SLO, min_effect=0.05)
    assert decision.pick is better and not decision.kept_served and decision.status is ExitStatus.OK
    assert decision.comparisons[7].verdict.value == "better" and "its SLO verdict is PASS" in decision.reason


def test_a_better_candidate_whose_slo_verdict_does_not_pass_does_not_replace_the_served_config():
    served = leader(SERVED, 1, (4000, 6.0), (5000, 6.5), (3200, 7.0))
    faster = leader(ONNX, 7, (5200, 6.0), (6400, 14.0), (4200, 9.0))  # p99 straddles 10 ms
    decision = decide.decide([served, faster], SLO, min_effect=0.05)
    assert decision.comparisons[7].verdict.value == "better"
    assert decision.verdicts[7].verdict.value == "inconclusive"
    assert decision.pick is served and "#7: SLO inconclusive" in decision.reason


def test_a_served_config_that_misses_the_slo_gives_way_to_a_leader_that_meets_it():
    served = leader(SERVED, 1, (4000, 16.0), (5000, 17.0), (3200, 18.0))
    meets = leader(NO_DELAY, 4, (3900, 5.0), (4800, 5.5), (3100, 6.0))
    decision = decide.decide([served, meets], SLO)
    assert decision.pick is meets and decision.status is ExitStatus.OK
    assert "where the served config's is fail" in decision.reason


def test_no_leader_meeting_the_slo_names_the_best_and_fails():
    served = leader(SERVED, 1, (4000, 16.0), (5000, 17.0), (3200, 18.0))
    closer = leader(NO_DELAY, 4, (3900, 12.0), (4800, 12.5), (3100, 13.0))
    decision = decide.decide([served, closer], SLO)
    assert decision.pick is None and decision.status is ExitStatus.FAILED
    assert decision.best is closer and "the best, #4" in decision.reason


def test_an_inconclusive_leader_with_none_passing_is_inconclusive_and_says_what_would_settle_it():
    served = leader(SERVED, 1, (4000, 16.0), (5000, 17.0), (3200, 18.0))
    unsure = leader(NO_DELAY, 4, (3900, 8.0), (4800, 12.0), (3100, 9.0))
    decision = decide.decide([served, unsure], SLO)
    assert decision.pick is None and decision.status is ExitStatus.INCONCLUSIVE
    assert decision.best is unsure and "stays inconclusive" in decision.reason and "trials" in decision.reason


def test_a_leader_whose_generator_saturated_in_a_trial_is_not_picked():
    served = leader(SERVED, 1, (4000, 6.0), (5000, 6.5), (3200, 7.0))
    fast = leader(ONNX, 7, (8000, 5.0), (9000, 5.0), (7000, 5.0))
    fast.confirmed[1] = run(9000, 5.0, saturated="its CPU at 97% of its cores")
    decision = decide.decide([served, fast], SLO)
    assert decision.pick is served and "generator saturated" in decision.reason


def test_the_leaders_are_the_served_config_and_the_best_others_of_the_screening():
    start = Trial(SERVED, [run(3000, 6.0)], order=1)
    others = [Trial(Point("torchscript/fp32", 0, (), n, 64), [run(1000 * n, 5.0)], order=n + 1) for n in (1, 2, 3)]
    slow_but_over = Trial(ONNX, [run(20000, 50.0)], order=9)
    saturated = Trial(NO_DELAY, [run(50000, 1.0, saturated="cpu")], order=10)
    chosen = decide.leaders([start, *others, slow_but_over, saturated], start, SLO, count=2)
    assert chosen == [start, others[2], others[1]]


def recorded_leaders() -> tuple[dict, list[Trial]]:
    raw = json.loads(RECORDED.read_text())
    trials = {t.order: t for t in report.load_trials(raw)}
    return raw, [trials[order] for order in raw["decision"]["leaders"]]


def test_a_recorded_tune_whose_noise_makes_the_candidates_tie_keeps_the_served_config():
    raw, chosen = recorded_leaders()
    assert raw["decision"] == {"status": "inconclusive", "pick": None, "served": 1, "leaders": [1, 8, 10]}
    assert all(len(t.confirmed) == 3 for t in chosen)
    # At the recorded 20 ms budget the served config's p99 straddles it: no pick, and more trials would say.
    at_run = decide.decide(chosen, Slo(raw["slo"]["p99_ms"]))
    assert at_run.status is ExitStatus.INCONCLUSIVE and at_run.pick is None
    # With a budget every leader's trials meet, the throughput differences are within the noise of the
    # machine (the change's interval spans zero): the served config stays.
    decision = decide.decide(chosen, Slo(60.0))
    assert all(v.verdict.value == "pass" for v in decision.verdicts.values())
    assert decision.kept_served and decision.status is ExitStatus.OK and decide.NO_BETTER in decision.reason
    assert all(c.verdict.value == "inconclusive" for c in decision.comparisons.values())
    # One probe each would have "found" a winner: the screening had #8 within the budget at its first probe.
    assert chosen[1].measurements[0].p99_ms < raw["slo"]["p99_ms"] < chosen[0].measurements[0].p99_ms
