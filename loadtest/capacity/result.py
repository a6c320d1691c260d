"""The capacity search's answer (``loadtest.capacity.search.find_capacity``): the outcome each run is judged to,
each run (``Probe``), the trials and the SLO verdict at one rate (``Confirmation``), and the whole result
(``CapacityResult``): the capacity interval, the rate a replica plan counts on, the one sentence of the answer and
its results.json form.

The capacity is the knee's interval when the rounds located the knee (some crossed the budget and the verdict
passed at one of their rates), else the throughput sustained where the verdict passed; a replica plan counts on
the lower of that interval's lower bound and that throughput (``plan_rate``). A search that ended at the
generator's limit, not the server's, gives a lower bound (``lower_bound_only``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

from loadtest.capacity.knee import KneeEstimate, Moved
from loadtest.core.evidence import Interval, SloVerdict, Verdict
from loadtest.core.measurement import Measurement
from loadtest.core.metrics import STREAM_FIGURES
from loadtest.core.spec import Slo
from loadtest.core.trials import ArmResult
from tritonkit_errors import ExitStatus

PASS, ERRORS, BEHIND, GENERATOR, FAILED = (
    "pass",
    "errors over limit",
    "server fell behind",
    "generator could not offer the rate",
    "measurement failed",
)
"""The outcomes of one run against the budget (``capacity.run_outcome``), besides ``over``."""
OVER_BUDGET = " over budget"


def over(missed: Sequence[str]) -> str:
    """The outcome of a run that missed these latency budgets (``capacity.BUDGETS``' names): ``p99 over
    budget``, ``p99 TTFT over budget``, ``p99 and p99 ITL over budget``."""
    return " and ".join(missed) + OVER_BUDGET


OVER = over(["p99"])


def is_over(outcome: str) -> bool:
    """The run missed one latency budget or more (its figures say where the budgets fall)."""
    return outcome.endswith(OVER_BUDGET)


def budget_text(budget: Slo) -> str:
    """The latency budgets as the answer states them: ``p99 <= 50 ms``, then the stream budgets that are set in
    GenAI-Perf's terms (``p99 TTFT <= 300 ms, p99 ITL <= 40 ms``)."""
    limits = [("p99", budget.p99_ms), ("p99 TTFT", budget.ttft_ms), ("p99 ITL", budget.itl_ms)]
    return ", ".join(f"{name} <= {value:g} ms" for name, value in limits if value is not None)


def stream_text(intervals: dict[str, Interval], with_interval: bool = False) -> str:
    """The stream figures among ``intervals`` (``STREAM_FIGURES``' labels), "" when the trials did not stream."""
    parts = []
    for metric, (name, fmt, unit) in STREAM_FIGURES.items():
        iv = intervals.get(metric)
        if iv is not None and not math.isnan(iv.estimate):
            span = f" ({fmt.format(iv.low)}-{fmt.format(iv.high)})" if with_interval and iv.has_interval else ""
            parts.append(f"{name} {fmt.format(iv.estimate)}{unit}{span}")
    return ", ".join(parts)


@dataclasses.dataclass
class Probe:
    """One run of the search at one offered rate, and what it showed."""

    rate: float
    measurement: Measurement
    phase: str
    """``bracket``, ``narrow``, ``trial`` or ``late`` (the knee's round after the verdict)."""
    outcome: str

    @property
    def passed(self) -> bool:
        return self.outcome == PASS

    def to_dict(self) -> dict[str, Any]:
        return {"rate": self.rate, "phase": self.phase, "outcome": self.outcome, **self.measurement.to_dict()}


@dataclasses.dataclass
class Confirmation:
    """The trials at one rate and the SLO verdict over them."""

    rate: float
    result: ArmResult
    verdict: SloVerdict

    @property
    def throughput(self) -> Interval:
        return self.result.intervals()["throughput"]

    def to_dict(self) -> dict[str, Any]:
        return {"rate": self.rate, "verdict": self.verdict.to_dict(), **self.result.to_dict()}


@dataclasses.dataclass
class CapacityResult:
    """One search's answer: its runs, its trials with their verdicts, the knee and the status."""

    budget: Slo
    status: ExitStatus
    probes: list[Probe] = dataclasses.field(default_factory=list)
    """The search's runs in order (bracket, then narrow), then the round after the verdict's (late)."""
    confirmations: list[Confirmation] = dataclasses.field(default_factory=list)
    """The trials with their verdicts, highest rate first (the knee's rounds, then each step down)."""
    first_fail: Probe | None = None
    """The lowest failing rate of the search (None: none failed up to ``max_rate``)."""
    below_start: bool = False
    """The lowest rate probed failed its trials too: the capacity, if any, lies below the start rate."""
    knee: KneeEstimate | None = None
    """The rate at which p99 (the tightest of the budgets set) reaches its budget, per round, with its interval."""
    moved: Moved | None = None
    """The round after the verdict put the knee outside where the rounds before it predicted."""
    notes: list[str] = dataclasses.field(default_factory=list)

    @property
    def confirmed(self) -> Confirmation | None:
        """The highest rate whose trials' verdict passed."""
        return next((c for c in self.confirmations if c.verdict.verdict is Verdict.PASS), None)

    @property
    def rate(self) -> float | None:
        return self.confirmed.rate if self.confirmed else None

    @property
    def throughput(self) -> Interval | None:
        return self.confirmed.throughput if self.confirmed else None

    @property
    def capacity(self) -> Interval | None:
        """The answer: the knee's interval, or (no knee: the search ended at the generator's limit) the
        throughput sustained where the verdict passed."""
        if self.confirmed is None:
            return None
        return self.knee.interval if self.knee_applies else self.throughput

    @property
    def knee_applies(self) -> bool:
        """The rounds located the knee: some crossed the budget within their rates, or some crossed below them
        and others not by the top (the budget sits where the p99 wanders across it), and the verdict passed at one
        of their rates (after a step down below them, the knee lies between that rate and the rounds')."""
        k, confirmed = self.knee, self.confirmed
        if k is None or confirmed is None or not k.interval.trials or confirmed.rate < k.rates[0]:
            return False
        return not self.knee_above

    @property
    def knee_above(self) -> bool:
        """The knee's rounds ran and none crossed the budget, and the verdict passed at their rates: the capacity
        lies above them (a lower bound), whatever the throughput's interval at the rate confirmed."""
        k, confirmed = self.knee, self.confirmed
        if k is None or confirmed is None or not k.rounds or confirmed.rate < k.rates[0]:
            return False
        return all(r.censored == "above" for r in k.rounds)

    def _why_no_knee(self) -> str:
        rates = "/".join(f"{r:.0f}" for r in self.knee.rates)
        if self.confirmed is not None and self.confirmed.rate < self.knee.rates[0]:
            return f"the verdict passed only below the knee's rounds at {rates} req/s"
        return f"no round at {rates} req/s crossed the budget: the knee lies above"

    @property
    def plan_rate(self) -> float | None:
        """What one replica may be counted on for: the capacity interval's lower bound, no more than the
        throughput sustained where the verdict passed."""
        if self.confirmed is None or self.capacity is None:
            return None
        return min(self.capacity.low, self.confirmed.throughput.estimate)

    @property
    def lower_bound_only(self) -> bool:
        """The search stopped at the generator's limit, not the server's: the capacity is at least this."""
        return self.first_fail is None or self.first_fail.outcome == GENERATOR

    def sentence(self, arrivals: str = "Poisson arrivals") -> str:
        """The one line of the answer."""
        b = budget_text(self.budget)
        if self.status is ExitStatus.OK and self.capacity is not None:
            iv, confirmed = self.capacity, self.confirmed
            head = "at least " if self.lower_bound_only or self.knee_above else ""
            if not self.knee_applies:
                span = f"95% CI {iv.low:.1f}-{iv.high:.1f}" if iv.has_interval else "1 trial, no interval"
                # The interval of the throughput sustained at one offered rate (how steady it was), not of the
                # capacity: the knee lies above the rounds, so the answer is a lower bound.
                what = "the throughput of " if self.knee_above else ""
                where = f"{what}{iv.trials} trials at {confirmed.rate:g} req/s offered"
                if self.knee is not None:
                    where += f"; {self._why_no_knee()}"
                if self.first_fail is not None and self.first_fail.outcome == GENERATOR:
                    # Said in the answer itself: "at least" alone reads as the server's limit.
                    where += f"; the generator could not offer {self.first_fail.rate:g} req/s, the server may hold more"
            else:
                span = f"95% CI {iv.low:.1f}-{iv.high:.1f}" if iv.has_interval else "1 round, no interval"
                rates = "/".join(f"{r:.0f}" for r in self.knee.rates)
                where = f"the knee of {iv.trials} rounds at {rates} req/s; verdict pass at {confirmed.rate:g} req/s"
                below = sum(1 for r in self.knee.rounds if r.censored == "below")
                above = sum(1 for r in self.knee.rounds if r.censored == "above")
                if below:
                    where += f"; {_rounds(below)} crossed the budget below {self.knee.rates[0]:g} req/s"
                if above:
                    where += f"; {_rounds(above)} did not cross it by {self.knee.rates[-1]:g} req/s"
                if self.moved is not None:
                    where += (
                        f"; the rate moved from {self.moved.before:.1f} to {self.moved.after:.1f} req/s during the run"
                    )
            holds = f"{b} holds up to {head}{iv.estimate:.1f} req/s"
            streams = self.stream_text()
            at = f"; at {confirmed.rate:g} req/s: {streams}" if streams else ""
            return f"{holds} ({span}, {where}) on this server, for {arrivals}{at}"
        low = min(self.probes, key=lambda p: p.rate) if self.probes else None
        if self.status is ExitStatus.FAILED and low is not None and not self.confirmations:
            m = low.measurement
            figures = ", ".join(
                f"{name} {value:.3f} ms"
                for name, value in (("p99", m.p99_ms), ("p99 TTFT", m.ttft_p99_ms), ("p99 ITL", m.itl_p99_ms))
                if name == "p99" or m.streamed
            )
            return (
                f"no rate meets {b}: the lowest probed, {low.rate:g} req/s, had {figures} ({low.outcome}); "
                "a lower --start-rate may"
            )
        if self.status is ExitStatus.FAILED and low is not None and self.confirmations[-1].rate <= low.rate:
            intervals = self.confirmations[-1].result.intervals()
            figures = ", ".join(
                f"{name} {intervals[key].text('{:.3f}', ' ms')}"
                for name, key in (("p99", "p99_ms"), ("p99 TTFT", "ttft_p99_ms"), ("p99 ITL", "itl_p99_ms"))
                if key in intervals
            )
            return f"no rate meets {b}: the lowest probed, {low.rate:g} req/s, had {figures}; a lower --start-rate may"
        if self.confirmations:
            last = self.confirmations[-1]
            return f"{b} not confirmed down to {last.rate:g} req/s: {last.verdict.text()}"
        return "; ".join(self.notes) or "the search failed"

    def stream_text(self, with_interval: bool = False) -> str:
        """p99 TTFT, p99 ITL and tokens/s over the trials where the verdict passed; "" for a model that does not
        stream, or no verdict passed."""
        return stream_text(self.confirmed.result.intervals(), with_interval) if self.confirmed else ""

    def streams(self) -> dict[str, Any] | None:
        """results.json's stream figures at the capacity (intervals over the trials where the verdict passed);
        None for a model that does not stream."""
        if self.confirmed is None:
            return None
        intervals = self.confirmed.result.intervals()
        figures = {metric: intervals[metric].to_dict() for metric in STREAM_FIGURES if metric in intervals}
        return {"rate": self.confirmed.rate, **figures} if figures else None

    def to_dict(self) -> dict[str, Any]:
        iv, cap = self.throughput, self.capacity
        return {
            "status": int(self.status),
            "budget": dataclasses.asdict(self.budget),
            "rate": self.rate,
            "capacity": cap.to_dict() if cap else None,
            "plan_rate": self.plan_rate,
            "throughput": iv.to_dict() if iv else None,
            "knee": self.knee.to_dict() if self.knee else None,
            "rate_moved": self.moved.to_dict() if self.moved else None,
            "lower_bound_only": self.lower_bound_only,
            "first_fail": self.first_fail.to_dict() if self.first_fail else None,
            "probes": [p.to_dict() for p in self.probes],
            "confirmations": [c.to_dict() for c in self.confirmations],
            "notes": list(self.notes),
            **({"streams": streams} if (streams := self.streams()) else {}),  # streamed models only
        }


def _rounds(n: int) -> str:
    return f"{n} round" if n == 1 else f"{n} rounds"
