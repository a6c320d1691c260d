"""loadtest.studies.compare.gate without a server: the verdicts per metric map to the exit status, only
rounds where both arms were usable are compared, an inconclusive metric says how many trials would settle it,
and the report renders."""

import dataclasses
import math

from loadtest.core.evidence import Difference, compare
from loadtest.core.measurement import Measurement
from loadtest.core.trials import ArmResult
from loadtest.studies.compare import gate
from tritonkit_errors import ExitStatus


def _m(p50: float, throughput: float = 1000.0, goodput: float = math.nan, **kw) -> Measurement:
    return Measurement(throughput, p50, p50 * 3, 0.0, "perf_analyzer", 0.3, goodput_rps=goodput, **kw)


def _results(a: list[Measurement], b: list[Measurement]) -> dict[str, ArmResult]:
    return {"A": ArmResult("A", a), "B": ArmResult("B", b)}


def _comparison(verdict: Difference):
    values = {
        Difference.SAME: ([1.0, 1.01, 0.99], [1.0, 1.0, 1.0]),
        Difference.WORSE: ([1.0, 1.0, 1.0], [2.0, 2.1, 1.9]),
        Difference.BETTER: ([2.0, 2.1, 1.9], [1.0, 1.0, 1.0]),
        Difference.INCONCLUSIVE: ([1.0, 1.0, 1.0], [0.5, 1.0, 2.0]),
    }[verdict]
    found = compare("p50_ms", *values, 0.05)
    assert found.verdict is verdict
    return found


def test_worse_anywhere_fails_then_inconclusive_then_ok():
    better, worse, same, unsure = (_comparison(d) for d in Difference)
    assert gate.exit_status([same, better]) is ExitStatus.OK
    assert gate.exit_status([same, unsure, better]) is ExitStatus.INCONCLUSIVE
    assert gate.exit_status([unsure, worse, better]) is ExitStatus.FAILED
    assert gate.exit_status([same], broken="no trial ran") is ExitStatus.BROKEN
    assert gate.exit_status([]) is ExitStatus.OK


def test_a_slower_b_is_worse_in_p50_and_throughput():
    verdict = gate.judge(
        _results([_m(1.0, 900), _m(1.1, 880), _m(0.9, 910)], [_m(6, 150), _m(6.2, 145), _m(5.9, 152)]), 0.05
    )
    by_metric = {c.metric: c.verdict for c in verdict.comparisons}
    assert by_metric["p50_ms"] is Difference.WORSE and by_metric["throughput"] is Difference.WORSE
    assert verdict.status is ExitStatus.FAILED and verdict.rounds == 3
    assert "goodput_rps" in verdict.skipped  # no budget: not judged


def test_goodput_is_judged_with_a_budget():
    a = [_m(1.0, goodput=900), _m(1.0, goodput=905), _m(1.0, goodput=895)]
    b = [_m(1.0, goodput=450), _m(1.0, goodput=460), _m(1.0, goodput=440)]
    verdict = gate.judge(_results(a, b), 0.05, budget_ms=5.0)
    goodput = next(c for c in verdict.comparisons if c.metric == "goodput_rps")
    assert goodput.verdict is Difference.WORSE and set(verdict.skipped) == {"error_rate"}  # no counts here


def _counted(failures: int, requests: int = 3000) -> Measurement:
    return _m(1.0, server={"requests": requests - failures, "failures": failures})


def test_a_b_with_a_few_percent_errors_is_worse_whatever_its_latency():
    verdict = gate.judge(_results([_counted(0)] * 3, [_counted(90), _counted(80), _counted(100)]), 0.05)
    errors = next(c for c in verdict.comparisons if c.metric == "error_rate")
    assert errors.verdict is Difference.WORSE and not errors.relative
    assert errors.a.estimate == 0 and errors.b.estimate == 270 / 9000
    assert verdict.status is ExitStatus.FAILED  # p50 and throughput are the same


def test_error_free_arms_have_no_difference_in_errors_and_a_stray_error_is_no_finding():
    same = gate.judge(_results([_counted(0)] * 3, [_counted(0)] * 3), 0.05, aa=True)
    assert {c.metric: c.verdict for c in same.comparisons}["error_rate"] is Difference.SAME
    assert same.status is ExitStatus.OK
    stray = gate.judge(_results([_counted(0)] * 3, [_counted(1), _counted(0), _counted(0)]), 0.05)
    assert {c.metric: c.verdict for c in stray.comparisons}["error_rate"] is Difference.SAME


def test_only_rounds_where_both_arms_were_usable_pair_up():
    hot = _m(9.0, saturated="its CPU at 97% of its cores")
    a = [_m(1.0), hot, _m(1.0), _m(1.0)]
    b = [_m(1.0), _m(1.0), Measurement.failed("perf_analyzer", "boom"), _m(1.0)]
    first, second = gate.paired(_results(a, b))
    assert len(first) == len(second) == 2
    assert gate.judge(_results(a, b), 0.05).rounds == 2


def test_too_few_usable_rounds_is_a_broken_measurement_naming_why():
    failed = Measurement.failed("perf_analyzer", "perf_analyzer exited with code 99")
    verdict = gate.judge(_results([_m(1.0), failed], [_m(1.0), _m(1.0)]), 0.05)
    assert verdict.status is ExitStatus.BROKEN and "exited with code 99" in verdict.broken
    assert gate.lines(verdict, aa=False)[0].startswith("compare: the measurement failed")


def test_an_inconclusive_metric_says_how_many_trials_would_settle_it():
    # p50 about 8% higher in B, noisily: more rounds would show it.
    a = [_m(1.0), _m(1.0), _m(1.0)]
    b = [_m(1.0), _m(1.16), _m(1.08)]
    verdict = gate.judge(_results(a, b), 0.05)
    assert verdict.status is ExitStatus.INCONCLUSIVE
    total = verdict.settle["p50_ms"]
    assert total is not None and total > 3
    assert f"--trials {total}" in verdict.settle_line()


def test_a_change_sitting_on_the_minimum_effect_is_called_unlikely_to_settle():
    comparison = compare("p50_ms", [1.0, 1.0, 1.0], [1.0, 1.1, 1.0], 0.0)
    assert comparison.verdict is Difference.INCONCLUSIVE
    # The mean change is not on the edge here, so some count settles it; a zero-spread A/A sits on no change.
    assert gate.trials_to_settle(comparison, [1.0, 1.0, 1.0], [1.0, 1.1, 1.0]) is not None
    verdict = gate.Verdict([comparison], {}, 3, {"p50_ms": None})
    assert "unlikely to settle" in verdict.settle_line()


def test_the_a_a_lines_state_the_noise_floor_and_the_report_renders():
    a = [_m(1.0), _m(1.01), _m(0.99)]
    b = [_m(1.0), _m(1.0), _m(1.0)]
    results = _results(a, b)
    verdict = gate.judge(results, 0.05)
    text = "\n".join(gate.lines(verdict, aa=True))
    assert "A/A noise floor" in text and "p50" in text
    assert set(gate.noise_floor(verdict.comparisons)) == {"throughput", "p50_ms", "p99_ms"}
    data = {
        "model": "digits",
        "mode": "A/A",
        "arms": [{"spec": "as served", "served": "digits"}, {"spec": "as served", "served": "digits__b"}],
        "load": "1 users (closed loop)",
        "generator": "perf_analyzer",
        "trials": 3,
        "duration_s": 2.0,
        "warmup_rounds": 1,
        "min_effect": 0.05,
        "budget_ms": None,
        "command": "tritonkit compare digits --aa --users 1",
        "results": {name: r.to_dict() for name, r in results.items()},
        "verdict": verdict.to_dict(),
    }
    summary = gate.markdown(data)
    assert "| p50 |" in summary and "| A | 1 |" in summary and "| B | 3 |" in summary


def test_an_a_a_difference_is_inconclusive_and_named_never_a_failure():
    a = [_m(1.0), _m(1.0), _m(1.0)]
    b = [_m(1.3), _m(1.31), _m(1.29)]  # B "worse" by 30%: against itself, that is chance or a biased set-up
    assert gate.judge(_results(a, b), 0.05).status is ExitStatus.FAILED
    verdict = gate.judge(_results(a, b), 0.05, aa=True)
    assert verdict.status is ExitStatus.INCONCLUSIVE
    assert "p50_ms" in verdict.to_dict()["aa_differences"]
    assert "A/A found a difference in" in "\n".join(gate.lines(verdict, aa=True))
    same = gate.judge(_results(a, [_m(1.0), _m(1.001), _m(0.999)]), 0.05, aa=True)
    assert same.status is ExitStatus.OK and not same.aa_differences()


def test_p99_is_judged_against_its_own_minimum_effect():
    a = [dataclasses.replace(_m(1.0), p99_ms=10.0) for _ in range(4)]
    b = [dataclasses.replace(_m(1.0), p99_ms=v) for v in (11.5, 11.0, 11.6, 11.2)]  # +10% to +16%
    strict = {c.metric: c for c in gate.judge(_results(a, b), 0.05).comparisons}
    tail = {c.metric: c for c in gate.judge(_results(a, b), 0.05, p99_min_effect=0.2).comparisons}
    assert strict["p99_ms"].verdict is Difference.WORSE and strict["p99_ms"].min_effect == 0.05
    assert tail["p99_ms"].verdict is Difference.SAME and tail["p99_ms"].min_effect == 0.2
    assert tail["throughput"].min_effect == 0.05
