"""Intervals, the three-way SLO verdict, interleaving, the A/B verdict and goodput, on recorded trial values."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest
from hdrh.histogram import HdrHistogram

from loadtest.core import evidence, slo
from loadtest.core.evidence import Difference, EvidenceError, Verdict
from loadtest.core.spec import Slo

# p99 (ms) of five digits trials at 16 users, as a campaign printed them on a shared 2-core machine.
RECORDED_P99 = [8.2, 9.7, 12.4, 15.5, 14.9]


def _samples(p99, errors=None, goodput=None):
    n = len(p99)
    return {
        "throughput": [1000.0] * n,
        "p50_ms": [1.0] * n,
        "p99_ms": list(p99),
        "error_rate": list(errors or [0.0] * n),
        "goodput_share": list(goodput or [1.0] * n),
        "goodput_rps": [1000.0] * n,
    }


def test_the_interval_is_students_t_around_the_mean_of_the_trials():
    iv = evidence.interval(RECORDED_P99)
    assert iv.estimate == pytest.approx(12.14)
    # t(0.975, 4) = 2.7764; half = t * sd / sqrt(5)
    assert iv.half_width == pytest.approx(2.7764 * statistics.stdev(RECORDED_P99) / math.sqrt(5), rel=1e-4)
    assert iv.trials == 5 and iv.has_interval


def test_one_trial_has_no_interval_and_says_so():
    iv = evidence.interval([7.0])
    assert (iv.low, iv.high, iv.trials) == (7.0, 7.0, 1)
    assert "1 trial, no interval" in iv.text()


def test_nans_are_left_out_of_the_interval():
    assert evidence.interval([1.0, math.nan, 3.0]).trials == 2


def test_a_rate_interval_is_clipped_at_zero():
    assert evidence.interval([0.0, 0.0, 0.01], lower_bound=0.0).low == 0.0


def test_trials_well_under_the_budget_pass():
    verdict = slo.verdict(_samples([4.1, 4.3, 4.2, 4.0]), Slo(p99_ms=10))
    assert verdict.verdict is Verdict.PASS
    assert verdict.reasons == []


def test_trials_well_over_the_budget_fail():
    verdict = slo.verdict(_samples(RECORDED_P99), Slo(p99_ms=5))
    assert verdict.verdict is Verdict.FAIL
    assert "p99" in verdict.reasons[0] and "misses" in verdict.reasons[0]


def test_trials_straddling_the_budget_are_inconclusive_and_say_how_many_more_trials_would_settle_it():
    # mean 12.14, CI about 8.2-16.1: a 13 ms budget lies inside it
    verdict = slo.verdict(_samples(RECORDED_P99), Slo(p99_ms=13))
    assert verdict.verdict is Verdict.INCONCLUSIVE
    assert "straddles" in verdict.reasons[0]
    assert "more trials" in verdict.settle or "unlikely" in verdict.settle


def test_a_mean_far_enough_from_the_budget_is_settled_by_a_counted_number_of_trials():
    # mean 10, sd 1, limit 11.5: t(4) / sqrt(5) = 1.24 < 1.5 first at five trials
    assert evidence.interval([9.0, 11.0, 10.0]).high > 11.5
    assert evidence.trials_to_settle([9.0, 11.0, 10.0], 11.5) == 5
    assert evidence.trials_to_settle([9.0, 11.0, 10.0], 12.5) == 3  # already settled


def test_a_mean_on_the_limit_cannot_be_settled():
    assert evidence.trials_to_settle([9.0, 11.0], 10.0) is None


def test_latencies_are_judged_on_the_log_scale_so_a_tiny_budget_fails_rather_than_straddles():
    # two noisy trials: on the linear scale their interval reaches below 0 and would straddle 0.001 ms
    assert evidence.interval([5.156, 18.242], lower_bound=0.0).low == 0.0
    verdict = slo.verdict(_samples([5.156, 18.242]), Slo(p99_ms=0.001))
    assert verdict.verdict is Verdict.FAIL
    p99 = verdict.limits[0].interval
    assert p99.estimate == pytest.approx(math.sqrt(5.156 * 18.242)) and p99.low > 0.001


def test_one_trial_gives_a_pass_or_fail_on_its_value():
    assert slo.verdict(_samples([4.0]), Slo(p99_ms=5)).verdict is Verdict.PASS
    assert slo.verdict(_samples([6.0]), Slo(p99_ms=5)).verdict is Verdict.FAIL


def test_the_error_rate_limit_is_part_of_the_verdict():
    verdict = slo.verdict(_samples([1.0, 1.1, 1.2], errors=[0.2, 0.25, 0.3]), Slo(p99_ms=5, max_error_rate=0.01))
    assert verdict.verdict is Verdict.FAIL
    assert verdict.reasons[0].startswith("error rate")


def test_a_goodput_floor_fails_when_too_few_requests_answer_within_the_budget():
    verdict = slo.verdict(_samples([1.0, 1.1, 1.2], goodput=[0.90, 0.91, 0.92]), Slo(p99_ms=5, min_goodput=0.99))
    assert verdict.verdict is Verdict.FAIL
    assert verdict.reasons[0].startswith("goodput")


def test_no_budget_judges_the_errors_only():
    verdict = slo.verdict(_samples([100.0, 200.0]), Slo(p99_ms=math.inf))
    assert verdict.verdict is Verdict.PASS
    assert [lim.name for lim in verdict.limits] == ["error rate"]


def test_a_trial_with_no_success_fails_the_p99_limit():
    verdict = slo.verdict(_samples([math.nan]), Slo(p99_ms=5))
    assert verdict.verdict is Verdict.FAIL


def test_arms_are_interleaved_round_by_round_with_odd_rounds_reversed():
    order = evidence.interleaved(["A", "B", "C"], 3)
    assert [arm for _, arm in order] == ["A", "B", "C", "C", "B", "A", "A", "B", "C"]
    assert [r for r, _ in order] == [0, 0, 0, 1, 1, 1, 2, 2, 2]


def test_interleaving_refuses_two_arms_of_one_name():
    with pytest.raises(EvidenceError):
        evidence.interleaved(["A", "A"], 2)


def test_fewer_than_two_trials_is_refused_where_an_interval_is_asked_for():
    with pytest.raises(EvidenceError, match="at least 2 trials"):
        evidence.require_trials(1)
    assert evidence.require_trials(3) == 3


def test_two_samples_of_one_thing_are_no_different_within_the_minimum_effect():
    a = [5000, 5100, 4950, 5050, 5020]
    b = [5030, 5060, 4990, 5010, 5040]
    assert evidence.compare("throughput", a, b, 0.05).verdict is Difference.SAME


def test_a_slower_p50_is_worse_and_a_faster_one_better():
    a = [0.50, 0.52, 0.49, 0.51]
    b = [5.4, 5.6, 5.5, 5.3]
    worse = evidence.compare("p50_ms", a, b, 0.05)
    assert worse.verdict is Difference.WORSE
    assert worse.change.low > 9  # B/A - 1: about ten times slower
    assert evidence.compare("p50_ms", b, a, 0.05).verdict is Difference.BETTER
    assert "worse" in worse.text()


def test_a_change_surely_there_but_maybe_smaller_than_the_minimum_effect_is_inconclusive():
    a = [100.0, 100.0, 100.0, 100.0]
    b = [101.0, 106.0, 104.0, 105.0]  # about +0.6% to +7.3%: surely slower, not surely by 5%
    assert evidence.compare("p99_ms", a, b, 0.05).verdict is Difference.INCONCLUSIVE
    assert evidence.compare("p99_ms", a, b, 0.02).verdict is Difference.WORSE


def test_higher_throughput_is_better():
    assert evidence.compare("throughput", [100, 101, 99], [150, 149, 152], 0.05).verdict is Difference.BETTER


def test_a_difference_smaller_than_the_noise_is_inconclusive():
    a = [5000, 7000, 4000, 6500]
    b = [5600, 6100, 5200, 7300]
    assert evidence.compare("throughput", a, b, 0.02).verdict is Difference.INCONCLUSIVE


def test_pairing_by_round_cancels_a_drift_that_both_arms_share():
    a = [1000, 2000, 3000, 4000]
    b = [1010, 2020, 3030, 4040]  # 1% better every round, on a machine whose speed drifts fourfold
    assert evidence.compare("throughput", a, b, 0.05).verdict is Difference.SAME
    assert evidence.compare("throughput", a, b, 0.0).verdict is Difference.BETTER


def test_identical_noisy_arms_are_called_different_about_as_often_as_the_confidence_allows():
    rng = np.random.default_rng(7)
    runs = 2000
    called = sum(
        compare_verdict(rng.lognormal(0, 0.1, 3), rng.lognormal(0, 0.1, 3)) in (Difference.BETTER, Difference.WORSE)
        for _ in range(runs)
    )
    # 95% intervals exclude no change in at most 5% of A/A runs; the minimum effect removes some of those.
    assert 0 < called / runs <= 0.06


def compare_verdict(a, b) -> Difference:
    return evidence.compare("p50_ms", list(a), list(b), 0.1).verdict


def test_an_error_rate_of_zero_is_compared_as_an_absolute_difference():
    comparison = evidence.compare("error_rate", [0.0, 0.0, 0.0], [0.0, 0.0, 0.0], 0.001)
    assert not comparison.relative and comparison.verdict is Difference.SAME


def test_comparing_needs_two_trials_a_side():
    with pytest.raises(EvidenceError, match="at least 2 trials"):
        evidence.compare("p99_ms", [1.0], [1.0, 2.0], 0.05)


def test_goodput_counts_the_successes_within_the_budget_over_every_request():
    hist = HdrHistogram(1, 120_000_000, 4)
    for us in (500, 900, 1000, 4000, 12000):
        hist.record_value(us)
    encoded = hist.encode().decode()
    assert evidence.count_within(encoded, 1.0) == 3
    assert evidence.count_within(encoded, math.inf) == 5
    assert evidence.count_within("", 1.0) == 0
    share, rate = evidence.goodput(3, 6, 2.0)  # one more request failed
    assert share == pytest.approx(0.5) and rate == pytest.approx(1.5)


def test_a_run_with_fewer_than_ten_requests_above_its_p99_is_called_thin():
    note = evidence.thin_tail(52)
    assert "about 52 requests has 0.5 above its p99" in note and "at least 1,000 requests" in note
    assert evidence.thin_tail(1000) == ""
    assert "at least 200 requests" in evidence.thin_tail(150, quantile=0.95)
    with pytest.raises(EvidenceError, match="quantile=1"):
        evidence.thin_tail(100, quantile=1)


def test_a_figures_interval_stays_where_the_figure_can_go_and_on_the_verdicts_scale():
    share = evidence.figure_interval("goodput_share", [0.55, 1.0, 1.0])
    assert share.high == 1.0 and 0.0 <= share.low < share.estimate < 1.0, "a share never passes 100%"
    assert evidence.figure_interval("error_rate", [0.0, 0.0, 0.9]).low == 0.0
    p99 = evidence.figure_interval("p99_ms", [10.0, 1000.0])
    assert p99.estimate == pytest.approx(100.0) and p99.low > 0, "latencies: the geometric mean, never below 0"
    rate = evidence.figure_interval("throughput", [1.0, 9.0, 1.0])
    assert rate.low == 0.0 and rate.high > 9.0, "rates: only the floor"


@pytest.mark.parametrize(("count", "total"), [(1, 7), (2, 7), (5, 100), (60, 1000), (7, 7), (1, 1)])
def test_a_shares_lower_bound_is_wilsons_one_sided_bound(count, total):
    from scipy.stats import binomtest

    # A two-sided 90 % interval's low end is the one-sided 95 % lower bound.
    expected = binomtest(count, total).proportion_ci(confidence_level=0.90, method="wilson").low
    assert evidence.share_lower_bound(count, total) == pytest.approx(expected, abs=1e-12)
    assert evidence.share_lower_bound(count, total) < count / total


def test_a_share_of_nothing_has_a_lower_bound_of_zero():
    assert evidence.share_lower_bound(0, 50) == 0.0 and evidence.share_lower_bound(0, 0) == 0.0


def test_the_prediction_interval_is_the_t_interval_for_one_more_value():
    from scipy import stats

    iv = evidence.prediction_interval([1.0, 2.0, 3.0])
    half = stats.t.ppf(0.975, 2) * 1.0 * math.sqrt(1 + 1 / 3)
    assert (iv.estimate, iv.low, iv.high, iv.trials) == pytest.approx((2.0, 2.0 - half, 2.0 + half, 3))
    assert evidence.prediction_interval([5.0]).low == -math.inf  # one value predicts nothing
    assert math.isnan(evidence.prediction_interval([]).estimate)
