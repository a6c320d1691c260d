"""The capacity search's answer (``loadtest.measure.capacity.find_capacity``): the outcome each run is judged to,
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
from typing import Any

from loadtest.campaign import Slo
from loadtest.measure.evidence import Interval, SloVerdict, Verdict
from loadtest.measure.knee import KneeEstimate
from loadtest.measure.probe import Measurement
from loadtest.measure.trials import ArmResult
from tritonkit_errors import ExitStatus

PASS, OVER, ERRORS, BEHIND, GENERATOR, FAILED = (
    "pass",
    "p99 over budget",
    "errors over limit",
    "server fell behind",
    "generator could not offer the rate",
    "measurement failed",
)
"""The outcomes of one run against the budget (``capacity.judge_run``)."""


@dataclasses.dataclass
class Probe:
    """One run of the search at one offered rate, and what it showed."""

    rate: float
    measurement: Measurement
    phase: str
    """``bracket``, ``narrow`` or ``trial``."""
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
    """The search's runs in order (bracket, then narrow)."""
    confirmations: list[Confirmation] = dataclasses.field(default_factory=list)
    """The trials with their verdicts, highest rate first (the knee's rounds, then each step down)."""
    first_fail: Probe | None = None
    """The lowest failing rate of the search (None: none failed up to ``max_rate``)."""
    below_start: bool = False
    """The lowest rate probed failed its trials too: the capacity, if any, lies below the start rate."""
    knee: KneeEstimate | None = None
    """The rate at which p99 reaches the budget, per round of trials, with its interval."""
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
        """The rounds located the knee: some crossed the budget, and the verdict passed at one of their rates
        (after a step down below them, the knee lies between that rate and the rounds')."""
        k, confirmed = self.knee, self.confirmed
        if k is None or confirmed is None or not k.interval.trials or confirmed.rate < k.rates[0]:
            return False
        return k.censored < len(k.rounds)

    def _why_no_knee(self) -> str:
        rates = "/".join(f"{r:.0f}" for r in self.knee.rates)
        if self.confirmed is not None and self.confirmed.rate < self.knee.rates[0]:
            return f"the verdict passed only below the knee's rounds at {rates} req/s"
        return f"no round at {rates} req/s crossed the budget"

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
        b = f"{self.budget.p99_ms:g} ms"
        if self.status is ExitStatus.OK and self.capacity is not None:
            iv, confirmed = self.capacity, self.confirmed
            head = "at least " if self.lower_bound_only else ""
            if not self.knee_applies:
                span = f"95% CI {iv.low:.1f}-{iv.high:.1f}" if iv.has_interval else "1 trial, no interval"
                where = f"{iv.trials} trials at {confirmed.rate:g} req/s offered"
                if self.knee is not None:
                    where += f"; {self._why_no_knee()}"
            else:
                span = f"95% CI {iv.low:.1f}-{iv.high:.1f}" if iv.has_interval else "1 round, no interval"
                rates = "/".join(f"{r:.0f}" for r in self.knee.rates)
                where = f"the knee of {iv.trials} rounds at {rates} req/s; verdict pass at {confirmed.rate:g} req/s"
                if self.knee.censored:
                    where += f"; {self.knee.censored} rounds did not cross the budget"
            holds = f"p99 <= {b} holds up to {head}{iv.estimate:.1f} req/s"
            return f"{holds} ({span}, {where}) on this server, for {arrivals}"
        low = min(self.probes, key=lambda p: p.rate) if self.probes else None
        if self.status is ExitStatus.FAILED and low is not None and not self.confirmations:
            return (
                f"no rate meets p99 <= {b}: the lowest probed, {low.rate:g} req/s, had p99 "
                f"{low.measurement.p99_ms:.3f} ms ({low.outcome}); a lower --start-rate may"
            )
        if self.status is ExitStatus.FAILED and low is not None and self.confirmations[-1].rate <= low.rate:
            p99 = self.confirmations[-1].result.intervals()["p99_ms"]
            return (
                f"no rate meets p99 <= {b}: the lowest probed, {low.rate:g} req/s, had p99 "
                f"{p99.text('{:.3f}', ' ms')}; a lower --start-rate may"
            )
        if self.confirmations:
            last = self.confirmations[-1]
            return f"p99 <= {b} not confirmed down to {last.rate:g} req/s: {last.verdict.text()}"
        return "; ".join(self.notes) or "the search failed"

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
            "lower_bound_only": self.lower_bound_only,
            "first_fail": self.first_fail.to_dict() if self.first_fail else None,
            "probes": [p.to_dict() for p in self.probes],
            "confirmations": [c.to_dict() for c in self.confirmations],
            "notes": list(self.notes),
        }
