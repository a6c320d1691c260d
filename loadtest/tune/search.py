"""The tuner's search: which configs to measure, in what order, and which one wins.

A search walks a :class:`~loadtest.tune.space.SearchSpace` through a ``measure(point) -> Measurement``
callable and keeps every :class:`Trial`. ``coordinate_descent`` (the default) starts at the served config
and changes one setting at a time, keeping the best value of each before moving to the next, in passes,
until a pass changes nothing or the budget runs out, then walks once more from the best point it has not
walked from; it needs about the sum of the settings' value counts per pass where the grid needs their
product. ``grid`` measures every point (for comparison and for
recording the data the unit tests replay). Both stop before a measurement that would run past the budget,
then re-measure the leaders (``confirm``) so one lucky window does not decide.

The winner is the highest throughput among trials that meet the SLO: p99 and error rate within it at the
given load, measured by a generator that was not itself the bottleneck (a saturated run is kept in the
report and never ranked).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from collections.abc import Callable, Iterable

from loadtest.campaign import Slo
from loadtest.measure.probe import Measurement
from loadtest.tune.space import Point, SearchSpace

STRATEGIES = ("descent", "grid")


@dataclasses.dataclass
class Trial:
    """One point measured once or more (confirmation re-measures a point; its figures are the median)."""

    point: Point
    measurements: list[Measurement]
    seconds: float = 0.0
    """Wall time spent on it (applying the config and measuring)."""
    order: int = 0
    """When it was first measured (1 = first)."""

    @property
    def usable(self) -> bool:
        """Measured without an error and by a generator that kept up: it may be ranked."""
        return all(m.usable for m in self.measurements)

    @property
    def throughput(self) -> float:
        return statistics.median(m.throughput for m in self.measurements)

    @property
    def p99_ms(self) -> float:
        values = [m.p99_ms for m in self.measurements if not math.isnan(m.p99_ms)]
        return max(values) if values else math.nan

    @property
    def error_rate(self) -> float:
        return max(m.error_rate for m in self.measurements)

    def violations(self, slo: Slo) -> list[str]:
        """Why this trial does not meet ``slo`` (empty when it does)."""
        reasons = [m.not_usable_reason for m in self.measurements if not m.usable]
        if reasons:
            return reasons
        out = []
        if math.isnan(self.p99_ms) or self.p99_ms > slo.p99_ms:
            out.append(f"p99 {self.p99_ms:.3f} ms > {slo.p99_ms:g} ms")
        if self.error_rate > slo.max_error_rate:
            out.append(f"error rate {self.error_rate:.3%} > {slo.max_error_rate:.3%}")
        return out

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
    """The highest-throughput trial meeting the SLO; None when none does."""
    start: Trial
    """The served config as it was (the search's first point)."""
    strategy: str
    grid_size: int
    stopped: str
    """Why the search ended: ``converged``, ``grid done`` or ``budget``."""
    measurements: int
    """Measurements made (confirmations included)."""


class Search:
    """The bookkeeping both strategies share: one trial per point, the budget, the confirmation step."""

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

    def confirm(self, leaders: int) -> None:
        """Measure the ``leaders`` best trials meeting the SLO once more, while the budget allows."""
        ranked = sorted(
            (t for t in self.trials.values() if t.meets(self.slo)), key=lambda t: score(t, self.slo), reverse=True
        )[:leaders]
        if len(ranked) < 2:
            return
        for trial in ranked:
            if not self.budget.allows_another():
                self.out_of_budget = True
                return
            trial.measurements.append(self._measure(trial.point))
            trial.seconds += self.budget.costs[-1]
            self.log(_line(trial, self.slo, trial.order) + " (confirmed)")

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
    confirm: int = 2,
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
    search.confirm(confirm)
    return search.result(first, "descent", stopped)


def grid(
    space: SearchSpace,
    start: Point,
    measure: Callable[[Point], Measurement],
    slo: Slo,
    budget: Budget,
    *,
    confirm: int = 2,
    log: Callable[[str], None] = lambda line: None,
) -> SearchResult:
    """Every point of the space (the served config first)."""
    search = Search(space, measure, slo, budget, log)
    first = search.trial(start)
    for point in space.points():
        if search.trial(point) is None:
            break
    search.confirm(confirm)
    return search.result(first, "grid", "grid done")


def run(strategy: str, *args, **kwargs) -> SearchResult:
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy {strategy!r} is not one of {STRATEGIES}")
    return (coordinate_descent if strategy == "descent" else grid)(*args, **kwargs)


def _line(trial: Trial, slo: Slo, index: int) -> str:
    m = trial.measurements[-1]
    verdict = "ok" if trial.meets(slo) else "; ".join(trial.violations(slo))
    return f"  [{index:>2}] {trial.point.label():<52} {m.throughput:9.1f} infer/s  p99 {m.p99_ms:7.3f} ms  {verdict}"
