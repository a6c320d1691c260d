"""The knee's interval: the rate at which p99 reaches the budget, estimated once per round of runs around it.

One round is a run at each of a few rates around the knee (``sweep_rates``: the highest passing rate of the
search, one ``spread`` below and one above), interleaved with the other rounds (A B C, C B A, ...) so drift
over the minutes of the trials spreads over every rate alike. Each round gives its own knee
(``round_knee``): where the line through its p99s, on the log scale, meets the budget between the last run
that passed and the first that failed. The interval is Student's t over the rounds' knees
(``evidence.interval``).

Why not the throughput at one confirmed rate: that is the offered rate give or take Poisson noise, a narrow
interval around whichever rate the search happened to land on, while the rate at which p99 reaches the budget
moves with the p99 of every run. Two searches minutes apart land on different rates, so the throughput
intervals need not overlap; the knee's interval carries the p99's noise and so says how far the answer can be
trusted.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

from loadtest.core import evidence
from loadtest.core.evidence import Interval

SPREAD = 0.1
"""The runs of a round are at ``rate * (1 - SPREAD)``, ``rate`` and ``rate * (1 + SPREAD)``."""


@dataclasses.dataclass(frozen=True)
class Point:
    """One run of a round: its offered rate, its p99 (NaN when it has none) and whether it met the budget. Any
    figure that rises with load works the same on the log scale: capacity gives each run's worst share of its
    budgets (``capacity.worst_share``: p99, p99 TTFT, p99 ITL) with the budget 1."""

    rate: float
    p99_ms: float
    passed: bool


@dataclasses.dataclass(frozen=True)
class RoundKnee:
    rate: float
    censored: str = ""
    """"" when the budget was crossed inside the round; "above" (every run passed: the knee is at least the
    highest rate) or "below" (every run failed: at most the lowest)."""


@dataclasses.dataclass
class KneeEstimate:
    """The knee of every round and their interval."""

    rates: list[float]
    rounds: list[RoundKnee]
    interval: Interval

    @property
    def censored(self) -> int:
        return sum(1 for r in self.rounds if r.censored)

    def to_dict(self) -> dict[str, Any]:
        return {
            "rates": list(self.rates),
            "rounds": [dataclasses.asdict(r) for r in self.rounds],
            "interval": self.interval.to_dict(),
        }


def sweep_rates(rate: float, spread: float = SPREAD) -> list[float]:
    """The rates of one round around ``rate`` (ascending)."""
    if not 0 < spread < 1:
        raise ValueError(f"spread {spread!r} must be in (0, 1)")
    return [rate * (1 - spread), rate, rate * (1 + spread)]


def _crossing(a: Point, b: Point, budget_ms: float) -> float | None:
    """Where the line through ``a`` and ``b`` (log p99 against rate) meets the budget; None when their p99s
    say nothing of it (one missing, or not rising)."""
    if not (a.p99_ms > 0 and b.p99_ms > 0 and math.isfinite(a.p99_ms) and math.isfinite(b.p99_ms)):
        return None
    ya, yb = math.log(a.p99_ms), math.log(b.p99_ms)
    if not yb > ya:
        return None
    return a.rate + (math.log(budget_ms) - ya) / (yb - ya) * (b.rate - a.rate)


def round_knee(points: Sequence[Point], budget_ms: float, spread: float = SPREAD) -> RoundKnee:
    """The knee of one round. Between the last passing and the first failing run: the crossing of the budget
    on the line through their p99s, kept between them (their geometric middle when the failing run has no
    p99 that rises). Every run passing: the line through the top two runs carried up, at most one
    ``spread`` above the top (the top itself when it does not rise): censored "above". Every run failing:
    the same carried down from the bottom two, at least one ``spread`` below the bottom: censored "below"."""
    runs = sorted(points, key=lambda p: p.rate)
    if not runs:
        raise ValueError("a round needs at least one run")
    first_fail = next((i for i, p in enumerate(runs) if not p.passed), None)
    if first_fail is None:
        top = runs[-1]
        guess = _crossing(runs[-2], top, budget_ms) if len(runs) > 1 else None
        knee = top.rate if guess is None else min(max(guess, top.rate), top.rate * (1 + spread))
        return RoundKnee(knee, "above")
    if first_fail == 0:
        bottom = runs[0]
        guess = _crossing(bottom, runs[1], budget_ms) if len(runs) > 1 else None
        floor = bottom.rate * (1 - spread)
        knee = floor if guess is None else max(min(guess, bottom.rate), floor)
        return RoundKnee(knee, "below")
    low, high = runs[first_fail - 1], runs[first_fail]
    guess = _crossing(low, high, budget_ms)
    if guess is None:
        return RoundKnee(math.sqrt(low.rate * high.rate))
    return RoundKnee(min(max(guess, low.rate), high.rate))


def estimate(
    rates: Sequence[float], rounds: Sequence[Sequence[Point]], budget_ms: float, spread: float = SPREAD
) -> KneeEstimate:
    """The knee of each round (a round with no usable run left out) and the t interval over them; ``spread``:
    the one ``sweep_rates`` spaced the rounds' rates by."""
    return over_rounds(rates, [round_knee(points, budget_ms, spread) for points in rounds if points])


def over_rounds(rates: Sequence[float], knees: Sequence[RoundKnee]) -> KneeEstimate:
    """The rounds' knees and the t interval over them."""
    return KneeEstimate(list(rates), list(knees), evidence.interval([k.rate for k in knees], lower_bound=0.0))


@dataclasses.dataclass(frozen=True)
class Moved:
    """The round after the verdict put the knee where the rounds before it did not predict: the server's rate
    moved during the run."""

    before: float
    """The mean of the earlier rounds' knees, req/s."""
    expected: Interval
    """Where one more round's knee was to fall (``evidence.prediction_interval`` of the earlier rounds')."""
    after: float
    """The knee of the round after the verdict, req/s."""
    censored: str = ""
    """The late round's own censoring ("above": the knee is at least ``after``; "below": at most)."""

    def text(self) -> str:
        bound = {"above": "at least ", "below": "at most "}.get(self.censored, "")
        return (
            f"the server's rate moved during the run: the rounds' knee {self.before:.1f} req/s, then "
            f"{bound}{self.after:.1f} req/s after the verdict (one more round was expected within "
            f"{self.expected.low:.1f}-{self.expected.high:.1f}): the interval is over every round"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "before": self.before,
            "expected": self.expected.to_dict(),
            "after": self.after,
            "censored": self.censored,
        }


def moved(earlier: Sequence[RoundKnee], late: RoundKnee) -> Moved | None:
    """``Moved`` when the late round's knee falls outside the prediction interval of the earlier rounds' knees
    that crossed the budget within their rates (a censored knee is a bound, not a value); None otherwise, or
    with fewer than 2 such rounds."""
    values = [k.rate for k in earlier if not k.censored]
    expected = evidence.prediction_interval(values)
    if len(values) < 2 or expected.low <= late.rate <= expected.high:
        return None
    return Moved(expected.estimate, expected, late.rate, late.censored)
