"""Which config the tuner serves, decided on evidence instead of one probe against another.

The search screens with one probe a candidate; its leaders (the served config and the best few others) are
then measured again, interleaved (``loadtest.core.trials.run_trials``, A B C A B C ...), and judged:

- each leader's SLO verdict is ``loadtest.core.slo.verdict`` over its trials (the one SLO rule);
- a candidate replaces the served config only when its throughput is better than the served config's beyond
  the noise (``evidence.compare``, paired by round, with a minimum effect) *and* its verdict is PASS; when
  several are, the highest throughput of them;
- when the served config does not pass, the highest-throughput leader that passes replaces it;
- when no leader passes, there is no pick: with an inconclusive leader the outcome is inconclusive (more
  trials would decide), else the best leader is named (``Decision.best``) and the tuner finds the load at
  which it does meet the budget (``loadtest.capacity.search``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

from loadtest.core import evidence
from loadtest.core.evidence import Comparison, Difference, SloVerdict, Verdict
from loadtest.core.measurement import Measurement
from loadtest.core.spec import Slo
from loadtest.tune.search import Trial, score
from loadtest.tune.space import Point
from tritonkit_errors import ExitStatus

LEADERS = 2
"""Candidates measured again beside the served config."""
TRIALS = 3
MIN_EFFECT = 0.05
"""The smallest throughput change worth a config change (5%)."""
NO_BETTER = "no candidate better beyond the noise"


def leaders(trials: Sequence[Trial], start: Trial, slo: Slo, count: int = LEADERS) -> list[Trial]:
    """The served config first, then the ``count`` best other usable trials of the screening."""
    others = [t for t in trials if t is not start and t.point != start.point and t.usable]
    others.sort(key=lambda t: (score(t, slo), -t.order), reverse=True)
    return [start, *others[:count]]


def confirm(chosen: Sequence[Trial], measure_trials: Callable[[list[Point]], dict[Point, list[Measurement]]]) -> None:
    """Each chosen trial's ``confirmed`` measurements, from one interleaved run over all of them."""
    measured = measure_trials([t.point for t in chosen])
    for trial in chosen:
        trial.confirmed = list(measured[trial.point])


@dataclasses.dataclass
class Decision:
    pick: Trial | None
    """The config to serve (the served one when it stays); None when no leader meets the SLO."""
    status: ExitStatus
    """OK (a pick), FAILED (no leader meets the SLO), INCONCLUSIVE (the best leader's verdict straddles it)."""
    reason: str
    served: Trial
    leaders: list[Trial]
    verdicts: dict[int, SloVerdict]
    """Leader's order -> its SLO verdict over its trials."""
    comparisons: dict[int, Comparison]
    """Candidate's order -> its throughput against the served config's."""
    best: Trial | None = None
    """When there is no pick: the leader closest to meeting the SLO (whose capacity the tuner then finds)."""
    meets_at: str = ""
    """When there is no pick: the load at which ``best`` meets the budget, and how that was found."""

    @property
    def kept_served(self) -> bool:
        return self.pick is self.served

    def text(self) -> str:
        lines = [f"  #{t.order} {t.point.label()}: {self.verdicts[t.order].text()}" for t in self.leaders]
        lines += [
            f"  #{order} against the served #{self.served.order}: {c.text()}" for order, c in self.comparisons.items()
        ]
        lines.append(self.reason)
        if self.meets_at:
            lines.append(self.meets_at)
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status.name.lower(),
            "pick": None if self.pick is None else self.pick.order,
            "kept_served": self.kept_served,
            "reason": self.reason,
            "served": self.served.order,
            "leaders": [t.order for t in self.leaders],
            "verdicts": {str(k): v.to_dict() for k, v in self.verdicts.items()},
            "comparisons": {str(k): c.to_dict() for k, c in self.comparisons.items()},
            "best": None if self.best is None else self.best.order,
            "meets_at": self.meets_at,
        }


def _better(comparison: Comparison | None) -> bool:
    return comparison is not None and comparison.verdict is Difference.BETTER


def _values(trial: Trial) -> list[float]:
    return trial.samples()["throughput"]


def decide(chosen: Sequence[Trial], slo: Slo, min_effect: float = MIN_EFFECT) -> Decision:
    """The decision over the leaders (the served config first), from their ``confirmed`` trials."""
    served, candidates = chosen[0], list(chosen[1:])
    verdicts = {t.order: t.verdict(slo) for t in chosen}

    def passes(t: Trial) -> bool:
        return t.usable and verdicts[t.order].verdict is Verdict.PASS

    comparisons = {}
    for t in candidates:
        if served.usable and t.usable and len(_values(served)) >= 2 and len(_values(t)) >= 2:
            comparisons[t.order] = evidence.compare("throughput", _values(served), _values(t), min_effect)
    made = dict(served=served, leaders=list(chosen), verdicts=verdicts, comparisons=comparisons)

    def why_not(t: Trial) -> str:
        if not t.usable:
            return f"#{t.order}: " + "; ".join(t.violations(slo))
        if not passes(t):
            return f"#{t.order}: SLO {verdicts[t.order].verdict.value}"
        c = comparisons.get(t.order)
        return f"#{t.order}: throughput {c.verdict.value if c else 'not compared'}"

    if passes(served):
        better = [t for t in candidates if passes(t) and _better(comparisons.get(t.order))]
        if better:
            pick = max(better, key=lambda t: t.throughput)
            reason = (
                f"pick #{pick.order} {pick.point.label()}: throughput better than the served config beyond the "
                f"noise ({comparisons[pick.order].text()}) and its SLO verdict is PASS"
            )
            return Decision(pick, ExitStatus.OK, reason, **made)
        detail = "; ".join(why_not(t) for t in candidates) or "no other candidate was usable"
        reason = f"the served config #{served.order} stays: {NO_BETTER} ({detail})"
        return Decision(served, ExitStatus.OK, reason, **made)
    passing = [t for t in candidates if passes(t)]
    if passing:
        pick = max(passing, key=lambda t: t.throughput)
        reason = (
            f"pick #{pick.order} {pick.point.label()}: its SLO verdict is PASS where the served config's is "
            f"{verdicts[served.order].verdict.value}"
        )
        return Decision(pick, ExitStatus.OK, reason, **made)
    unsettled = [t for t in chosen if t.usable and verdicts[t.order].verdict is Verdict.INCONCLUSIVE]
    if unsettled:
        best = max(unsettled, key=lambda t: t.throughput)
        reason = (
            f"no pick: the leader #{best.order} {best.point.label()} stays inconclusive against the SLO "
            f"({verdicts[best.order].text()})"
        )
        return Decision(None, ExitStatus.INCONCLUSIVE, reason, best=best, **made)
    best = max(chosen, key=lambda t: (score(t, slo), -t.order))
    reason = f"no candidate met the SLO; the best, #{best.order} {best.point.label()}: {verdicts[best.order].text()}"
    return Decision(None, ExitStatus.FAILED, reason, best=best, **made)


def describe_meets_at(best: Trial, sentence: str) -> str:
    throughput = best.intervals()["throughput"]
    figure = "" if math.isnan(throughput.estimate) else f" ({throughput.text('{:.1f}', ' infer/s')} at the asked load)"
    return f"best candidate #{best.order} {best.point.label()}{figure}: {sentence}"
