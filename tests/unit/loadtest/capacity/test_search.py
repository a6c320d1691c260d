"""loadtest/capacity/search.py: the knee search on a recorded latency-against-rate curve (with noise), the
knee's rounds and the verdicts over them, the step down, the outcomes of one run and bad input."""

import dataclasses
import math

import pytest

from loadtest.capacity import knee
from loadtest.capacity.command import thin_runs_hint
from loadtest.capacity.search import (
    BEHIND,
    ERRORS,
    GENERATOR,
    OVER,
    PASS,
    CapacityError,
    Probe,
    find_capacity,
    next_rate,
    run_outcome,
)
from loadtest.core.evidence import EvidenceError
from loadtest.core.measurement import Measurement
from loadtest.core.spec import Slo
from tests.capacity_samples import BUDGET, TRUE_KNEE, Curve, m, quiet
from tritonkit_errors import ExitStatus

# --- the search -----------------------------------------------------------------------------------


def test_the_knee_interval_covers_the_recorded_curves_knee_about_as_often_as_it_claims():
    results = [find_capacity(Curve(seed=seed), BUDGET, 20.0, trials=3, log=quiet) for seed in range(40)]
    assert all(r.status is ExitStatus.OK and r.capacity is r.knee.interval for r in results)
    covered = sum(r.capacity.low <= TRUE_KNEE <= r.capacity.high for r in results)
    assert covered >= 34  # 95% intervals: 38 of 40 expected, fewer than 34 would be a biased estimate
    assert all(r.capacity.relative_width < 0.15 for r in results)  # 5% noise on the log p99: a few per cent
    assert all(r.rate <= TRUE_KNEE for r in results)  # the verdict passed below the knee


def test_the_search_takes_few_runs():
    curve = Curve()
    result = find_capacity(curve, BUDGET, 20.0, trials=3, log=quiet)
    # 1 warm-up, 6 doublings from 20 to 1280, at most 4 narrowing runs, 3 rounds of 3 rates.
    assert len(result.probes) <= 11
    assert len(curve.rates) == 1 + len(result.probes) + 3 * 3


def test_the_rounds_run_around_the_highest_passing_rate_interleaved():
    curve = Curve()
    result = find_capacity(curve, BUDGET, 20.0, trials=3, log=quiet)
    best = max(p.rate for p in result.probes if p.passed)
    low, mid, high = knee.sweep_rates(best)
    assert curve.rates[-9:] == [low, mid, high, high, mid, low, low, mid, high]
    assert result.knee.rates == [low, mid, high]
    assert [c.rate for c in result.confirmations][:3] == [high, mid, low]


def test_a_budget_no_rate_meets_fails_naming_the_lowest_rate_and_its_p99():
    curve = Curve(noise=0.0)
    result = find_capacity(curve, Slo(0.001), 20.0, trials=2, log=quiet)
    assert result.status is ExitStatus.FAILED and result.below_start
    # one run missed, then its trials failed too: only then is there no rate
    assert [p.rate for p in result.probes] == [20.0] and len(result.confirmations[0].result.trials) == 2
    assert result.sentence().startswith(
        f"no rate meets p99 <= 0.001 ms: the lowest probed, 20 req/s, had p99 {curve.p99(20):.3f} ms (95% CI"
    )


def test_one_hiccup_at_the_lowest_rate_does_not_end_the_search():
    curve = Curve(noise=0.0)
    calls = []

    def hiccup_first(rate: float) -> Measurement:
        m = curve(rate)
        calls.append(rate)
        return dataclasses.replace(m, p99_ms=90.0) if len(calls) == 1 else m  # the first run's one slow spike

    result = find_capacity(hiccup_first, BUDGET, 20.0, trials=2, log=quiet, warmup_runs=0)
    assert result.status is ExitStatus.OK and not result.below_start
    assert result.rate > 400  # it carried the bracket on past the start rate


def straddling(low: float, high: float):
    """Runs pass (20 ms) up to ``high`` req/s and fail (80 ms) above it; from the second run at ``high`` on (the
    trials), every run in (``low``, ``high``] alternates 45 and 55 ms: its interval straddles a 50 ms budget."""
    calls: dict[float, int] = {}

    def measure(rate: float) -> Measurement:
        calls[rate] = calls.get(rate, 0) + 1
        if rate > high:
            return m(rate, 80.0)
        if rate > low and not (rate == high and calls[rate] == 1):
            return m(rate, 45.0 if calls[rate] % 2 else 55.0)
        return m(rate, 20.0)

    return measure


def test_an_inconclusive_verdict_at_the_knee_takes_the_rate_one_spread_below():
    result = find_capacity(straddling(750.0, 800.0), BUDGET, 100.0, trials=4, log=quiet)
    assert result.status is ExitStatus.OK
    assert [c.rate for c in result.confirmations] == pytest.approx([880.0, 800.0, 720.0])
    assert [c.verdict.verdict.value for c in result.confirmations] == ["fail", "inconclusive", "pass"]
    assert result.rate == 720.0
    assert 720.0 < result.capacity.estimate < 880.0  # the rounds cross the budget between 720 and 880


def test_a_verdict_that_stays_inconclusive_steps_down_and_is_status_4():
    result = find_capacity(straddling(600.0, 800.0), BUDGET, 100.0, trials=4, log=quiet)
    assert result.status is ExitStatus.INCONCLUSIVE
    assert [c.rate for c in result.confirmations] == pytest.approx([880.0, 800.0, 720.0, 648.0])
    assert result.notes == ["no verdict passed at 720-800 req/s: stepped down to 648"]
    assert result.sentence().startswith("p99 <= 50 ms not confirmed down to 648 req/s: INCONCLUSIVE")


def test_trials_that_fail_at_every_step_down_are_status_1():
    calls = iter(range(10**6))

    def measure(rate):  # the search's runs pass up to 400 req/s; every later run is over the budget
        return m(rate, 10.0 if next(calls) < 4 and rate <= 400 else 90.0)

    result = find_capacity(measure, BUDGET, 100.0, trials=2, log=quiet, warmup_runs=0)
    assert result.status is ExitStatus.FAILED
    assert [round(c.rate) for c in result.confirmations] == [440, 400, 360, 324]
    assert result.capacity is None and result.plan_rate is None


def test_a_generator_that_cannot_offer_the_rate_makes_the_capacity_a_lower_bound():
    def measure(rate):
        if rate > 300:
            return m(rate * 0.5, 5.0, offered_rate=rate, sent_rate=rate * 0.5, saturated="its CPU at 97% of its cores")
        return m(rate, 5.0)

    result = find_capacity(measure, BUDGET, 100.0, trials=2, log=quiet)
    assert result.status is ExitStatus.OK
    assert result.first_fail.outcome == GENERATOR and result.lower_bound_only
    assert "holds up to at least" in result.sentence()
    assert f"the generator could not offer {result.first_fail.rate:g} req/s, the server may hold more" in (
        result.sentence()
    )


def test_a_generator_that_cannot_offer_the_first_rate_is_status_3():
    def measure(rate):
        return m(rate, 5.0, saturated="its CPU at 99% of its cores")

    result = find_capacity(measure, BUDGET, 100.0, trials=2, log=quiet)
    assert result.status is ExitStatus.BROKEN
    assert "could not offer 100 req/s" in result.notes[0]


def test_a_failed_run_stops_the_search_with_status_3():
    def measure(rate):
        return Measurement.failed("test", "connection refused") if rate > 150 else m(rate)

    result = find_capacity(measure, BUDGET, 100.0, trials=2, log=quiet)
    assert result.status is ExitStatus.BROKEN
    assert result.notes == ["the run at 200 req/s failed: connection refused"]


def test_max_rate_ends_a_search_that_never_fails():
    result = find_capacity(lambda rate: m(rate), BUDGET, 100.0, trials=2, log=quiet, max_rate=500)
    assert result.status is ExitStatus.OK and result.rate == 400.0
    assert result.first_fail is None and result.lower_bound_only
    assert "every rate up to 400 req/s met the budget" in result.notes[0]


# --- streams: TTFT and ITL budgets ---------------------------------------------------------------------

TTFT_KNEE = 600 + 200 * math.log(20 / 11) / math.log(30 / 11)
"""Where the recorded curve's TTFT (half its p99) crosses 10 ms: p99 20 ms, between 11 ms at 600 and 30 at 800."""


def streamed(curve: Curve):
    """The recorded curve as a stream: p99 TTFT half the p99, p99 ITL 2 ms, 16 tokens a request."""

    def measure(rate: float) -> Measurement:
        run = curve(rate)
        return dataclasses.replace(
            run, ttft_p99_ms=run.p99_ms / 2, itl_p99_ms=2.0, output_token_throughput=16 * run.throughput
        )

    return measure


def test_a_ttft_budget_tighter_than_the_p99_one_lowers_the_capacity_to_where_ttft_meets_it():
    p99_only = find_capacity(streamed(Curve()), BUDGET, 20.0, trials=3, log=quiet)
    both = find_capacity(streamed(Curve()), Slo(50.0, ttft_ms=10.0), 20.0, trials=3, log=quiet)
    assert p99_only.status is both.status is ExitStatus.OK and both.knee_applies
    assert both.capacity.high < p99_only.capacity.low
    assert both.capacity.low <= TTFT_KNEE <= both.capacity.high
    assert "p99 TTFT" in [limit.name for limit in both.confirmed.verdict.limits]  # the verdict judged it too
    assert both.rate <= TTFT_KNEE


@pytest.mark.parametrize(
    ("figures", "budget", "outcome"),
    [
        ({"ttft_p99_ms": 400.0}, Slo(50.0, ttft_ms=300.0), "p99 TTFT over budget"),
        ({"ttft_p99_ms": 100.0}, Slo(50.0, ttft_ms=300.0), PASS),  # an ITL without a budget is not judged
        ({}, Slo(50.0, ttft_ms=300.0), "p99 TTFT over budget"),  # no stream figures: the budget is missed
        ({"p99_ms": 60.0, "ttft_p99_ms": 100.0, "itl_p99_ms": 50.0}, Slo(50.0, 0, ttft_ms=300.0, itl_ms=40.0), None),
    ],
)
def test_the_outcome_names_the_latency_budgets_a_run_missed(figures, budget, outcome):
    run = dataclasses.replace(m(100.0, 10.0), **figures)
    assert run_outcome(run, 100.0, budget) == (outcome or "p99 and p99 ITL over budget")


def test_the_narrowing_follows_the_tightest_budget():
    budget = Slo(50.0, ttft_ms=10.0)
    low = Probe(800.0, m(800.0, 20.0, ttft_p99_ms=8.0), "bracket", PASS)  # 40% of p99's budget, 80% of TTFT's
    high = Probe(900.0, m(900.0, 30.0, ttft_p99_ms=12.0), "bracket", "p99 TTFT over budget")
    assert next_rate(low, high, budget) == pytest.approx(math.sqrt(800 * 900))  # TTFT meets 10 ms half way


# --- one run --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("measurement", "outcome"),
    [
        (m(100.0, 10.0), PASS),
        (m(100.0, 60.0), OVER),
        (m(100.0, math.nan), OVER),
        (m(100.0, 10.0, error_rate=0.01), ERRORS),
        (m(70.0, 10.0), BEHIND),
        (m(100.0, 10.0, saturated="its CPU at 95% of its cores"), GENERATOR),
    ],
)
def test_one_run_is_judged_against_the_budget(measurement, outcome):
    assert run_outcome(measurement, 100.0, BUDGET) == outcome


@pytest.mark.parametrize("budget_ms", [11.0, 30.0, 50.0])
def test_a_run_exactly_on_its_budget_meets_it(budget_ms):
    # One run is judged by the SLO's own verdict on one trial, whose value is its own interval: no round trip
    # through the log scale may put 30 ms over a 30 ms budget (exp(log(30)) > 30 in floating point).
    assert run_outcome(m(100.0, budget_ms), 100.0, Slo(budget_ms)) == PASS


def test_a_send_shortfall_within_poisson_noise_is_not_the_generators_limit():
    # 20 req/s over 1.5 s: 30 +- 5.5 arrivals; 24 sent is within 3 sigma, 10 is not. The one fell-behind rule
    # (probe.saturation) judges the run where it is measured; capacity reads what it recorded.
    from loadtest.core.measurement import Load
    from loadtest.generators.probe import saturation

    load = Load(rate=20.0)
    close = m(16.0, 10.0, offered_rate=20.0, sent_rate=16.0, measured_s=1.5)
    close.saturated = saturation(0.2, load, close.sent_rate, measured_s=close.measured_s)
    far = m(6.7, 10.0, offered_rate=20.0, sent_rate=6.7, measured_s=1.5)
    far.saturated = saturation(0.2, load, far.sent_rate, measured_s=far.measured_s)
    assert close.saturated == ""
    assert run_outcome(close, 20.0, BUDGET) == PASS
    assert far.saturated == "sent 6.7 of 20 req/s asked"
    assert run_outcome(far, 20.0, BUDGET) == GENERATOR
    unknown = saturation(0.2, load, 16.0)
    assert unknown == "sent 16.0 of 20 req/s asked"  # unknown run length: no forgiveness
    assert run_outcome(m(16.0, 10.0, offered_rate=20.0, sent_rate=16.0), 20.0, BUDGET) == BEHIND


def test_the_next_rate_interpolates_the_budget_inside_the_bracket():
    low, high = Probe(800.0, m(800.0, 30.0), "bracket", PASS), Probe(900.0, m(900.0, 70.0), "bracket", OVER)
    assert 800 < next_rate(low, high, BUDGET) < 900
    assert next_rate(low, high, BUDGET) == pytest.approx(math.exp(math.log(800) + 0.5 * math.log(900 / 800)))
    far = Probe(1600.0, m(1600.0, 5000.0), "bracket", OVER)
    assert next_rate(low, far, BUDGET) == pytest.approx(math.exp(math.log(800) + 0.2 * math.log(2)))
    behind = Probe(1600.0, m(900.0, 5000.0), "bracket", BEHIND)
    assert next_rate(low, behind, BUDGET) == pytest.approx(math.sqrt(800 * 1600))


# --- bad input ------------------------------------------------------------------------------------


def test_fewer_than_two_trials_is_refused():
    with pytest.raises(EvidenceError, match="at least 2 trials"):
        find_capacity(Curve(), BUDGET, 20.0, trials=1, log=quiet)


@pytest.mark.parametrize(
    ("start", "growth", "tolerance"), [(0.0, 2.0, 0.05), (-5.0, 2.0, 0.05), (10.0, 1.0, 0.05), (10.0, 2.0, 0.0)]
)
def test_a_bad_start_growth_or_tolerance_is_refused(start, growth, tolerance):
    with pytest.raises(CapacityError):
        find_capacity(Curve(), BUDGET, start, trials=2, growth=growth, tolerance=tolerance, log=quiet)


def test_an_inconclusive_verdict_at_the_start_rate_carries_the_search_on_and_says_so():
    calls = iter(range(10**6))

    def noisy_start(rate: float) -> Measurement:  # at 20 req/s the p99 of few requests swings about 50 ms
        if rate == 20.0:
            return m(rate, 80.0 if next(calls) % 2 == 0 else 30.0)
        return Curve(noise=0.0)(rate)

    result = find_capacity(noisy_start, BUDGET, 20.0, trials=4, log=quiet, warmup_runs=0)
    assert result.confirmations[0].rate == 20.0 and result.confirmations[0].verdict.verdict.value == "inconclusive"
    assert result.status is ExitStatus.OK and result.rate > 400
    assert result.notes[0] == "the verdict at the start rate 20 req/s was inconclusive: the search carried on"


def test_an_inconclusive_answer_from_thin_runs_hints_at_the_duration_that_fills_them():
    result = find_capacity(straddling(600.0, 800.0), BUDGET, 100.0, trials=4, log=quiet)
    assert result.status is ExitStatus.INCONCLUSIVE and result.confirmations[-1].rate == pytest.approx(648.0)
    assert thin_runs_hint(result, 1.0).startswith("hint: at 648 req/s for 1 s, a run of about 648 requests")
    assert thin_runs_hint(result, 1.0).endswith("--duration 2 or more")
    assert thin_runs_hint(result, 10.0) == ""  # 6,480 requests a run: the p99 has 64 above it
    passed = find_capacity(straddling(600.0, 800.0), Slo(500.0), 100.0, trials=4, log=quiet)
    assert passed.status is ExitStatus.OK and thin_runs_hint(passed, 1.0) == ""


# --- the round after the verdict -------------------------------------------------------------------


class Drifting(Curve):
    """The recorded curve, whose p99 is ``factor`` times higher from the ``after``-th run on: a server that
    slowed down (another tenant arrived) during the run."""

    def __init__(self, after: int, factor: float, **kwargs):
        super().__init__(**kwargs)
        self.after, self.factor = after, factor

    def p99(self, rate: float) -> float:
        return super().p99(rate) * (self.factor if len(self.rates) > self.after else 1.0)


def test_a_late_round_on_a_steady_server_joins_the_interval_and_rarely_says_the_rate_moved():
    results = [find_capacity(Curve(seed=s), BUDGET, 20.0, trials=3, log=quiet, late_round=True) for s in range(40)]
    assert all(r.status is ExitStatus.OK and len(r.knee.rounds) == 4 for r in results)
    assert sum(r.capacity.low <= TRUE_KNEE <= r.capacity.high for r in results) >= 34
    # a 95% prediction interval: about 2 of 40 by chance; the mean's own interval would say so about 7 times
    assert sum(r.moved is not None for r in results) <= 5


def test_a_server_that_slowed_during_the_run_is_said_to_have_moved_and_the_interval_covers_both_rates():
    plain = find_capacity(Curve(), BUDGET, 20.0, trials=3, log=quiet)
    runs = 1 + len(plain.probes) + 3 * 3  # the warm-up, the search, the rounds: then the late round slows down
    lines: list[str] = []
    result = find_capacity(Drifting(runs, 1.6), BUDGET, 20.0, trials=3, log=lines.append, late_round=True)
    assert result.status is ExitStatus.OK and result.moved is not None
    assert result.moved.after < result.moved.expected.low < result.moved.before
    assert result.capacity.low <= result.moved.after and result.capacity.high >= plain.capacity.estimate
    assert result.plan_rate <= result.capacity.low
    assert "the rate moved from" in result.sentence() and "the server's rate moved during the run" in "\n".join(lines)
    assert result.to_dict()["rate_moved"]["after"] == pytest.approx(result.moved.after)


def test_without_a_late_round_the_knee_has_the_rounds_alone():
    result = find_capacity(Curve(), BUDGET, 20.0, trials=3, log=quiet)
    assert len(result.knee.rounds) == 3 and result.moved is None and result.to_dict()["rate_moved"] is None


def test_the_late_rounds_runs_are_kept_with_the_searchs():
    result = find_capacity(Curve(), BUDGET, 20.0, trials=3, log=quiet, late_round=True)
    late = [p for p in result.probes if p.phase == "late"]
    assert [p.rate for p in late] == result.knee.rates and all(p.to_dict()["phase"] == "late" for p in late)
