"""The tuner's search: which configs to measure, in what order, and which ones lead.

A search walks a :class:`~loadtest.tune.space.SearchSpace` through a ``measure(point) -> Measurement``
callable and keeps every :class:`Trial`. ``coordinate_descent`` (the default) starts at the served config
and changes one setting at a time, keeping the best value of each before moving to the next, in passes,
until a pass changes nothing or the budget runs out, then walks once more from the best point it has not
walked from; it needs about the sum of the settings' value counts per pass where the grid needs their
product. ``grid`` measures every point (for comparison and for recording the data the unit tests replay).
Both stop before a measurement that would run past the budget.

The search screens: one probe per candidate, ranked by :func:`score`. One probe is no evidence on a shared
machine, so the search only names the leaders; ``loadtest.tune.decide`` measures them again interleaved and
decides. "Meets the SLO" is ``loadtest.core.slo.verdict`` over a trial's measurements (one probe: pass or
fail on its value; several: on their interval), by a generator that was not itself the bottleneck (a
saturated run is kept in the report and never ranked).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from collections.abc import Callable, Iterable

from loadtest.core import slo as slo_rule
from loadtest.core import trials as trials_io
from loadtest.core.evidence import Interval, SloVerdict, Verdict
from loadtest.core.measurement import Measurement
from loadtest.core.spec import Slo
from loadtest.tune.space import Point, SearchSpace

STRATEGIES = ("descent", "grid")


@dataclasses.dataclass
class Trial:
    """One point: its screening probe, and for a leader the interleaved trials that decide (``confirmed``)."""

    point: Point
    measurements: list[Measurement]
    """The screening probe (one measurement a point)."""
    seconds: float = 0.0
    """Wall time spent on it (applying the config and measuring)."""
    order: int = 0
    """When it was first measured (1 = first)."""
    confirmed: list[Measurement] = dataclasses.field(default_factory=list)
    """The leaders' interleaved trials (``loadtest.core.trials.run_trials``); when there are any, the
    trial's figures and its SLO verdict come from them alone."""

    @property
    def evidence(self) -> list[Measurement]:
        return self.confirmed or self.measurements

    @property
    def usable(self) -> bool:
        """Measured without an error and by a generator that kept up: it may be ranked."""
        return bool(self.evidence) and all(m.usable for m in self.evidence)

    def samples(self) -> dict[str, list[float]]:
        return trials_io.samples([m for m in self.evidence if m.usable])

    def intervals(self) -> dict[str, Interval]:
        return trials_io.summarize([m for m in self.evidence if m.usable])

    @property
    def throughput(self) -> float:
        """The mean over the evidence (the estimate its interval is about)."""
        return statistics.fmean(m.throughput for m in self.evidence) if self.evidence else 0.0

    @property
    def p99_ms(self) -> float:
        values = [m.p99_ms for m in self.evidence if not math.isnan(m.p99_ms)]
        return statistics.fmean(values) if values else math.nan

    @property
    def error_rate(self) -> float:
        return max((m.error_rate for m in self.evidence), default=0.0)

    def verdict(self, slo: Slo) -> SloVerdict:
        """The one SLO rule (``slo.verdict``) over the usable measurements."""
        return slo_rule.verdict(self.samples(), slo)

    def violations(self, slo: Slo) -> list[str]:
        """Why this trial does not meet ``slo`` (empty when it does)."""
        reasons = [m.not_usable_reason for m in self.evidence if not m.usable]
        if reasons or not self.evidence:
            return reasons or ["not measured"]
        verdict = self.verdict(slo)
        if verdict.verdict is Verdict.PASS:
            return []
        return [f"{verdict.verdict.value}: " + "; ".join(verdict.reasons)]

    def meets(self, slo: Slo) -> bool:
        return not self.violations(slo)


def score(trial: Trial, slo: Slo) -> tuple:
    """Ordering key, larger is better: a trial meeting the SLO beats one that does not, then higher throughput.
    A trial over its p99 budget counts its throughput scaled by (budget / p99)^2, so the search can walk from
    a config that misses the budget towards one that meets it without giving up throughput for nothing.
    Unusable trials (failed, generator saturated) rank last."""
    if not trial.usable:
        return (0, 0.0)
    if trial.meets(slo):
        return (2, trial.throughput)
    p99 = trial.p99_ms if not math.isnan(trial.p99_ms) else math.inf
    over = min(1.0, slo.p99_ms / p99) ** 2 if p99 > slo.p99_ms else 1.0
    return (1, trial.throughput * over * (1.0 - trial.error_rate))


@dataclasses.dataclass
class Budget:
    """Wall-clock budget of a search; it refuses a measurement expected to run past the end."""

    seconds: float
    clock: Callable[[], float] = time.monotonic
    started: float = dataclasses.field(default=math.nan)
    costs: list[float] = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.seconds > 0:
            raise ValueError(f"budget {self.seconds!r} s must be > 0")
        if math.isnan(self.started):
            self.started = self.clock()

    @property
    def elapsed(self) -> float:
        return self.clock() - self.started

    def allows_another(self) -> bool:
        """The first measurement always runs; later ones only when the mean cost so far still fits."""
        if not self.costs:
            return True
        return self.elapsed + statistics.fmean(self.costs) <= self.seconds


@dataclasses.dataclass
class SearchResult:
    trials: list[Trial]
    """Every point tried, in the order first measured."""
    best: Trial | None
    """The highest-scoring trial meeting the SLO on its screening probe; None when none does (the tuner's
    pick is ``loadtest.tune.decide``'s, from the leaders' interleaved trials)."""
    start: Trial
    """The served config as it was (the search's first point)."""
    strategy: str
    grid_size: int
    stopped: str
    """Why the search ended: ``converged``, ``grid done`` or ``budget``."""
    measurements: int
    """Screening measurements made."""


class Search:
    """The bookkeeping both strategies share: one trial per point and the budget."""

    def __init__(
        self,
        space: SearchSpace,
        measure: Callable[[Point], Measurement],
        slo: Slo,
        budget: Budget,
        log: Callable[[str], None] = lambda line: None,
    ):
        self.space, self.measure, self.slo, self.budget, self.log = space, measure, slo, budget, log
        self.trials: dict[Point, Trial] = {}
        self.count = 0
        self.out_of_budget = False

    def trial(self, point: Point) -> Trial | None:
        """The point's trial, measuring it first if it is new; None when the budget forbids that."""
        if point in self.trials:
            return self.trials[point]
        if not self.budget.allows_another():
            self.out_of_budget = True
            return None
        trial = Trial(point, [self._measure(point)], order=len(self.trials) + 1)
        trial.seconds = self.budget.costs[-1]
        self.trials[point] = trial
        self.log(_line(trial, self.slo, len(self.trials)))
        return trial

    def _measure(self, point: Point) -> Measurement:
        started = self.budget.clock()
        try:
            return self.measure(point)
        finally:
            self.budget.costs.append(self.budget.clock() - started)
            self.count += 1

    def best(self, trials: Iterable[Trial] | None = None) -> Trial | None:
        pool = list(self.trials.values() if trials is None else trials)
        if not pool:
            return None
        return max(pool, key=lambda t: (score(t, self.slo), -t.order))

    def result(self, start: Trial, strategy: str, stopped: str) -> SearchResult:
        trials = sorted(self.trials.values(), key=lambda t: t.order)
        best = self.best()
        return SearchResult(
            trials,
            best if best is not None and best.meets(self.slo) else None,
            start,
            strategy,
            self.space.grid_size(),
            "budget" if self.out_of_budget else stopped,
            self.count,
        )


def coordinate_descent(
    space: SearchSpace,
    start: Point,
    measure: Callable[[Point], Measurement],
    slo: Slo,
    budget: Budget,
    *,
    restarts: int = 1,
    max_passes: int = 6,
    log: Callable[[str], None] = lambda line: None,
) -> SearchResult:
    """Change one setting at a time from ``start``: along each axis in turn measure every value with the
    others held at the best point so far, move to the best, and repeat the pass until it moves nothing.
    Then, ``restarts`` times, walk again from the best measured point that has a line not walked yet (on a
    shared machine one noisy window can make a good neighbour look bad)."""
    search = Search(space, measure, slo, budget, log)
    first = search.trial(start)
    walked: set[tuple[Point, str]] = set()
    current = start
    stopped = "converged"
    for attempt in range(restarts + 1):
        for _ in range(max_passes):
            moved = False
            for axis in space.axes:
                walked.add((current, axis))
                line = [search.trials[current]]
                for value in space.values[axis]:
                    point = space.normalise(dataclasses.replace(current, **{axis: value}))
                    if point is None:
                        continue
                    trial = search.trial(point)
                    if trial is None:
                        break
                    line.append(trial)
                best = search.best(line)
                if best.point != current:
                    current, moved = best.point, True
                if search.out_of_budget:
                    break
            if search.out_of_budget or not moved:
                break
        if search.out_of_budget:
            break
        ranked = sorted(search.trials.values(), key=lambda t: score(t, slo), reverse=True)
        fresh = next(
            (t.point for t in ranked if t.usable and any((t.point, a) not in walked for a in space.axes)), None
        )
        if fresh is None or attempt == restarts:
            break
        current = fresh
    return search.result(first, "descent", stopped)


def grid(
    space: SearchSpace,
    start: Point,
    measure: Callable[[Point], Measurement],
    slo: Slo,
    budget: Budget,
    *,
    log: Callable[[str], None] = lambda line: None,
) -> SearchResult:
    """Every point of the space (the served config first)."""
    search = Search(space, measure, slo, budget, log)
    first = search.trial(start)
    for point in space.points():
        if search.trial(point) is None:
            break
    return search.result(first, "grid", "grid done")


def run(strategy: str, *args, **kwargs) -> SearchResult:
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy {strategy!r} is not one of {STRATEGIES}")
    return (coordinate_descent if strategy == "descent" else grid)(*args, **kwargs)


def _line(trial: Trial, slo: Slo, index: int) -> str:
    m = trial.measurements[-1]
    verdict = "ok" if trial.meets(slo) else "; ".join(trial.violations(slo))
    return f"  [{index:>2}] {trial.point.label():<52} {m.throughput:9.1f} infer/s  p99 {m.p99_ms:7.3f} ms  {verdict}"
