"""Capacity: the highest open-loop rate whose p99 meets a budget, with its interval, from few runs; for a
streamed model, whose p99 TTFT and p99 ITL meet theirs too (``budget_shares``).

``find_capacity(measure_at, budget, start_rate, trials=N)`` knows nothing of servers or generators: the
caller gives a function that measures one offered rate (``probe.with_locust``, ``probe.with_perf_analyzer``
or a recorded curve in the tests). The search:

1. Bracket: one run at ``start_rate``, then each rate ``growth`` times the last, until a run *fails*: its
   p99 (or p99 TTFT, p99 ITL) is over its budget, its error rate over the limit, or the server fell behind the
   offered rate (``saturation.keeps_up``: completions short of the arrivals by more than Poisson noise). A run
   whose generator could not offer the rate (``probe.saturation``, recorded on the run) also ends the bracket,
   and makes the result a lower bound. A first run that fails is measured again with ``trials`` runs: no rate
   meets the budget only when their verdict fails; a pass or an inconclusive verdict carries the bracket on
   (said in the notes).
2. Narrow: between the last passing and the first failing rate, the next rate is where a straight line
   through their p99s meets the budget (kept inside the middle of the bracket), or the geometric middle
   when the failing run has no usable p99, until the two are within ``tolerance`` (5%) of each other. With
   stream budgets, "p99" here and in 3 is each run's ``worst_share`` of its budgets, which meets 1.
3. The knee: ``trials`` rounds of runs at the highest passing rate, one ``knee.SPREAD`` below and one above,
   interleaved (``trials.run_trials``). Each round gives the rate at which its p99 reaches the budget
   (``knee.round_knee``); the capacity is their mean with its t interval (``knee.estimate``).
4. Confirm: the three-way SLO verdict (``slo.verdict``) over the trials at the highest passing rate; when it
   is not PASS, over the trials one spread below (already measured), then ``step_down`` of that rate with
   new trials, at most ``max_step_downs`` steps in all, each step said.
5. Late round (``late_round``, the capacity command's): once the verdict passed at the knee's rates, one more
   round there. Its knee joins the interval, which so covers the run's minutes; when it falls outside the
   earlier rounds' 95% prediction interval (``knee.moved``), the answer says the server's rate moved from
   one to the other during the run. A drift slower than one run is in no interval: only a second run shows it.

A replica plan counts on the lower of the knee interval's lower bound and the throughput sustained where the
verdict passed (``plan_rate``). When the search ended at the generator's limit, not the server's, there is no
knee to estimate: the trials run at the highest rate only and the answer is a lower bound.

The answer's types (``Probe``, ``Confirmation``, ``CapacityResult``, the outcomes of one run), its sentence and
its results.json form are in ``loadtest.capacity.result``; they are importable from here too.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

import numpy as np

from loadtest.capacity import knee
from loadtest.capacity.result import (
    BEHIND,
    ERRORS,
    FAILED,
    GENERATOR,
    OVER,  # noqa: F401 (importable from here, as the module says)
    PASS,
    CapacityResult,
    Confirmation,
    Probe,
    is_over,
    over,
)
from loadtest.core import evidence, slo
from loadtest.core.evidence import Verdict
from loadtest.core.measurement import Measurement, samples
from loadtest.core.metrics import LATENCY_LIMITS
from loadtest.core.spec import Slo
from loadtest.core.trials import Arm, ArmResult, line, run_trials
from loadtest.errors import LoadTestError
from loadtest.generators.saturation import keeps_up
from tritonkit_errors import ExitStatus

Log = Callable[[str], None]
GROWTH = 2.0
TOLERANCE = 0.05
STEP_DOWN = 0.9
MAX_STEP_DOWNS = 2
MAX_PROBES = 16


class CapacityError(LoadTestError):
    """A capacity search was asked something it cannot do (a bad start rate, growth or tolerance)."""


def describe(m: Measurement) -> str:
    """One run on one line: its figures, or why it failed, and why its generator fell behind if it did."""
    if m.error:
        return f"failed: {m.error}"
    figures = line(dataclasses.replace(m, saturated=""))
    return f"{figures}  (generator: {m.saturated})" if m.saturated else figures


BUDGETS = LATENCY_LIMITS
"""The latency budgets a run is judged on: name (``slo.STREAM_LIMITS`` for streams) -> (the ``Measurement``'s
figure, the ``Slo``'s budget); a stream budget counts when it is set."""


def budget_shares(m: Measurement, budget: Slo) -> dict[str, float]:
    """Each latency budget set -> the run's figure over it (1.0: exactly on it; NaN: the run has no figure)."""
    return {
        name: getattr(m, figure) / limit
        for name, (figure, field) in BUDGETS.items()
        if (limit := getattr(budget, field)) is not None
    }


def worst_share(m: Measurement, budget: Slo) -> float:
    """The largest of the run's ``budget_shares``: the one figure the narrowing and the knee follow, crossing
    its budget at 1.0. NaN when a budgeted figure is missing (nothing then says where that budget falls).

    Why one figure, not a knee per budget and their minimum: every budget must hold, so the rate the SLO holds
    up to is where the first of them is crossed, which is where the worst share reaches 1: the same rate per
    round as the lowest of the per-budget knees, from one line per round (no rule for rounds in which one
    budget crosses and another is censored), and with the p99 budget alone it is the p99 search exactly (p99/B
    reaches 1 where p99 reaches B, on the same log scale)."""
    shares = budget_shares(m, budget).values()
    return math.nan if any(math.isnan(v) for v in shares) else max(shares)


def run_outcome(m: Measurement, rate: float, budget: Slo) -> str:
    """One run's outcome against the budget (``PASS`` or why not; ``over`` names the latency budgets missed): the
    SLO's own verdict on one trial (``slo.verdict``), after the checks that the run measured the server at
    ``rate``: it did not fail, its generator kept up (``probe.saturation``, recorded on the run) and so did the
    server (``saturation.keeps_up``: its completions against the offered rate)."""
    if m.error:
        return FAILED
    if m.saturated:
        return GENERATOR
    missed = {lim.name for lim in slo.verdict(samples([m]), budget).limits if lim.verdict is not Verdict.PASS}
    if "error rate" in missed:
        return ERRORS
    if not keeps_up(m.throughput, rate, m.measured_s):
        return BEHIND
    latency = [name for name in BUDGETS if name in missed]
    return over(latency) if latency else PASS


def next_rate(low: Probe, high: Probe, budget: Slo) -> float:
    """The next rate to try between a passing ``low`` and a failing ``high``: where the line through their
    p99s (on log rate; with stream budgets, their ``worst_share``) meets the budget, kept within the middle 60%
    of the bracket; the geometric middle when the failing run has no figure that says where the budget falls
    (it fell behind, erred, or has none)."""
    a, b = math.log(low.rate), math.log(high.rate)
    mid = (a + b) / 2
    y0, y1 = worst_share(low.measurement, budget), worst_share(high.measurement, budget)
    if is_over(high.outcome) and math.isfinite(y0) and math.isfinite(y1) and y1 > y0:
        guess = a + (1.0 - y0) / (y1 - y0) * (b - a)
        return math.exp(float(np.clip(guess, a + 0.2 * (b - a), b - 0.2 * (b - a))))
    return math.exp(mid)


@dataclasses.dataclass(frozen=True)
class _Settings:
    """What the trials after the bracket share: how one rate is measured (its generator saturation already
    judged by ``probe.saturation``), the trials per rate, the log and the step down."""

    measure_at: Callable[[float], Measurement]
    trials: int
    log: Log
    step_down: float
    late_round: bool = False

    def trials_at(self, rate: float) -> ArmResult:
        """``trials`` runs at one rate (one arm of ``run_trials``)."""
        name = f"{rate:g} req/s"
        return run_trials([Arm(name, lambda: self.measure_at(rate))], self.trials, log=self.log)[name]


def find_capacity(
    measure_at: Callable[[float], Measurement],
    budget: Slo,
    start_rate: float,
    *,
    trials: int,
    log: Log = print,
    growth: float = GROWTH,
    tolerance: float = TOLERANCE,
    max_rate: float = math.inf,
    max_probes: int = MAX_PROBES,
    step_down: float = STEP_DOWN,
    max_step_downs: int = MAX_STEP_DOWNS,
    warmup_runs: int = 1,
    late_round: bool = False,
) -> CapacityResult:
    """The highest rate at which ``measure_at(rate)`` meets ``budget``, confirmed by ``trials`` runs (module
    docstring). Each run says how long its counts cover (``Measurement.measured_s``), for the Poisson-aware
    keep-up checks; ``warmup_runs``: runs at ``start_rate`` first, left out. ``late_round``: one more round of
    the knee after the verdict (``_late_round``), so the interval covers the run's minutes, and a rate that
    moved is said.
    ``status``: OK found; FAILED no rate met it (or the trials failed at every step down); INCONCLUSIVE the
    verdict stayed inconclusive; BROKEN a run failed, or the generator could not offer the lowest rate."""
    evidence.require_trials(trials)
    if not (math.isfinite(start_rate) and start_rate > 0):
        raise CapacityError(f"start rate {start_rate!r} must be > 0 requests/s")
    if not growth > 1 or not 0 < tolerance < growth - 1 or not 0 < step_down < 1:
        raise CapacityError(f"growth {growth} must be > 1, tolerance {tolerance} in (0, growth - 1), step down < 1")
    result = CapacityResult(budget, ExitStatus.OK)
    settings = _Settings(measure_at, trials, log, step_down, late_round)

    def run(rate: float, phase: str) -> Probe:
        m = measure_at(rate)
        p = Probe(rate, m, phase, run_outcome(m, rate, budget))
        result.probes.append(p)
        log(f"  {phase:8s} {rate:10.1f} req/s offered: {describe(m)}  -> {p.outcome}")
        return p

    for _ in range(warmup_runs):  # a cold server (first connections, lazy JIT) is slow for its first seconds
        log(f"  warm-up  {start_rate:10.1f} req/s offered: {describe(measure_at(start_rate))} (left out)")

    best: Probe | None = None
    rate = start_rate
    while len(result.probes) < max_probes and rate <= max_rate:
        p = run(rate, "bracket")
        if p.outcome == FAILED:
            return _broken(result, f"the run at {rate:g} req/s failed: {p.measurement.error}")
        if not p.passed and best is None and p.outcome != GENERATOR:
            # One run at the lowest rate is not evidence that no rate meets the budget (a single hiccup is
            # the p99 of a few hundred requests): its trials and the three-way verdict decide.
            verdict = _lowest_rate_verdict(result, settings, p)
            if verdict is Verdict.FAIL:
                result.status, result.below_start = ExitStatus.FAILED, True
                return result
            if verdict is Verdict.INCONCLUSIVE:
                # The p99 of a few hundred requests at a low rate is noisy; higher rates measure it on more
                # requests. Only a passing verdict (at the knee or a step down) gives the answer.
                result.notes.append(
                    f"the verdict at the start rate {rate:g} req/s was inconclusive: the search carried on"
                )
                log(f"  {result.notes[-1]}")
            p = dataclasses.replace(p, outcome=PASS)
        if not p.passed:
            result.first_fail = p
            break
        best, rate = p, rate * growth
    if best is None:
        if result.first_fail is not None and result.first_fail.outcome == GENERATOR:
            m = result.first_fail.measurement
            return _broken(result, f"the generator could not offer {rate:g} req/s: {m.saturated}")
        result.status = ExitStatus.FAILED
        return result
    while result.first_fail is not None and len(result.probes) < max_probes:
        if result.first_fail.rate <= best.rate * (1 + tolerance):
            break
        p = run(next_rate(best, result.first_fail, budget), "narrow")
        if p.outcome == FAILED:
            return _broken(result, f"the run at {p.rate:g} req/s failed: {p.measurement.error}")
        if p.passed:
            best = p
        else:
            result.first_fail = p
    if result.first_fail is None:
        result.notes.append(f"every rate up to {best.rate:g} req/s met the budget (--max-rate or the probe limit)")
    if result.lower_bound_only:
        return _confirm(result, settings, best.rate, max_step_downs)
    return _knee_then_confirm(result, settings, best.rate, max_step_downs)


def _knee_then_confirm(result: CapacityResult, settings: _Settings, rate: float, max_step_downs: int) -> CapacityResult:
    """The knee's rounds around ``rate``, the verdict at ``rate`` and one spread below, then step downs."""
    trials, log = settings.trials, settings.log
    rates = knee.sweep_rates(rate, knee.SPREAD)
    log(f"  the knee: {trials} rounds at {', '.join(f'{r:g}' for r in rates)} req/s, interleaved")
    arms = run_trials([Arm(f"{r:g} req/s", lambda r=r: settings.measure_at(r)) for r in rates], trials, log=log)
    by_rate = {r: arms[f"{r:g} req/s"] for r in rates}
    rounds = []
    for i in range(trials):
        points = []
        for r in rates:
            m = by_rate[r].trials[i]
            outcome = run_outcome(m, r, result.budget)
            if outcome not in (FAILED, GENERATOR):
                share = worst_share(m, result.budget) if outcome != ERRORS else math.nan
                points.append(knee.Point(r, share, outcome == PASS))
        rounds.append(points)
    result.knee = knee.estimate(rates, rounds, 1.0, knee.SPREAD)  # each run's worst share of its budgets
    log(f"  the knee: {result.knee.interval.text('{:.1f}', ' req/s')}")
    for r in reversed(rates):  # the verdict where each rate's trials stand, highest first
        if len(by_rate[r].usable) >= 2:
            result.confirmations.append(_judged(result, r, by_rate[r], log))
    if result.confirmed is not None and result.confirmed.rate >= rates[0]:
        result.status = ExitStatus.OK
        if settings.late_round:
            _late_round(result, settings, rates)
        return result
    if max_step_downs < 2:
        return _unconfirmed(result)
    lower = rates[0] * settings.step_down
    result.notes.append(f"no verdict passed at {rates[0]:g}-{rates[1]:g} req/s: stepped down to {lower:g}")
    log(f"  {result.notes[-1]}")
    return _confirm(result, settings, lower, max_step_downs - 2)


def _late_round(result: CapacityResult, settings: _Settings, rates: Sequence[float]) -> None:
    """One more round at the knee's rates after the verdict, minutes after the first rounds began: its knee joins
    the interval (which so covers the run's minutes, not only the rounds' own spread), and when it falls outside
    the earlier rounds' prediction interval (``knee.moved``) the answer says the server's rate moved."""
    settings.log(f"  the knee again, after the verdict: {', '.join(f'{r:g}' for r in rates)} req/s")
    points = []
    for r in rates:
        m = settings.measure_at(r)
        outcome = run_outcome(m, r, result.budget)
        result.probes.append(Probe(r, m, "late", outcome))
        settings.log(f"  late     {r:10.1f} req/s offered: {describe(m)}  -> {outcome}")
        if outcome not in (FAILED, GENERATOR):
            share = worst_share(m, result.budget) if outcome != ERRORS else math.nan
            points.append(knee.Point(r, share, outcome == PASS))
    if not points:
        result.notes.append("the round after the verdict had no usable run: the interval is the rounds' before it")
        settings.log(f"  {result.notes[-1]}")
        return
    late = knee.round_knee(points, 1.0, knee.SPREAD)
    result.moved = knee.moved(result.knee.rounds, late)
    result.knee = knee.over_rounds(result.knee.rates, [*result.knee.rounds, late])
    settings.log(f"  the knee over every round: {result.knee.interval.text('{:.1f}', ' req/s')}")
    if result.moved is not None:
        result.notes.append(result.moved.text())
        settings.log(f"  {result.notes[-1]}")


def _confirm(result: CapacityResult, settings: _Settings, rate: float, max_step_downs: int) -> CapacityResult:
    """Trials at ``rate`` and their verdict; when it is not PASS, ``step_down`` of the rate, at most
    ``max_step_downs`` times."""
    for step in range(max_step_downs + 1):
        settings.log(f"  trials at {rate:g} req/s ({settings.trials}):")
        arm = settings.trials_at(rate)
        if len(arm.usable) < 2:
            reasons = "; ".join(sorted({m.not_usable_reason for m in arm.trials if not m.usable}))
            return _broken(result, f"fewer than 2 usable trials at {rate:g} req/s: {reasons}")
        confirmation = _judged(result, rate, arm, settings.log)
        result.confirmations.append(confirmation)
        verdict = confirmation.verdict
        if verdict.verdict is Verdict.PASS:
            result.status = ExitStatus.OK
            return result
        if step < max_step_downs:
            lower = rate * settings.step_down
            result.notes.append(f"verdict at {rate:g} req/s was {verdict.verdict.value}: stepped down to {lower:g}")
            settings.log(f"  {result.notes[-1]}")
            rate = lower
    return _unconfirmed(result)


def _judged(result: CapacityResult, rate: float, arm: ArmResult, log: Log) -> Confirmation:
    """The SLO verdict over ``arm``'s usable trials at ``rate``, said."""
    confirmation = Confirmation(rate, arm, slo.verdict(arm.samples(), result.budget, arm.error_counts()))
    log(f"  verdict at {rate:g} req/s: {confirmation.verdict.text()}")
    return confirmation


def _unconfirmed(result: CapacityResult) -> CapacityResult:
    """No verdict passed: status 4 when the last one was inconclusive, else 1."""
    last = result.confirmations[-1].verdict.verdict if result.confirmations else Verdict.FAIL
    result.status = ExitStatus.INCONCLUSIVE if last is Verdict.INCONCLUSIVE else ExitStatus.FAILED
    return result


def _lowest_rate_verdict(result: CapacityResult, settings: _Settings, probe_: Probe) -> Verdict:
    """The verdict of ``trials`` runs at the lowest rate, which missed the budget once (kept in ``result``)."""
    rate = probe_.rate
    settings.log(f"  trials at {rate:g} req/s ({settings.trials}): the lowest rate missed once ({probe_.outcome})")
    arm = settings.trials_at(rate)
    if len(arm.usable) < 2:
        return Verdict.FAIL
    confirmation = _judged(result, rate, arm, settings.log)
    if confirmation.verdict.verdict is not Verdict.PASS:
        result.confirmations.append(confirmation)
    return confirmation.verdict.verdict


def _broken(result: CapacityResult, why: str) -> CapacityResult:
    result.status = ExitStatus.BROKEN
    result.notes.append(why)
    return result
