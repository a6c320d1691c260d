"""The SLO rule, in one place: the three-way verdict of a figure's interval against its limit (``verdict``),
and the gate over a campaign's runs.

A limit *passes* when the interval's worst end is within it (p99: the upper bound <= the budget), *fails* when
its best end is beyond it (p99: the lower bound > the budget), and is *inconclusive* otherwise. One trial has
no interval: its value is both ends, so the verdict is pass or fail and says it rests on one trial.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from loadtest.campaign import Slo
from loadtest.measure import evidence
from loadtest.measure.evidence import Limit, SloVerdict
from loadtest.measure.results import CampaignResult, RunResult


def limits(samples: dict[str, Sequence[float]], slo: Slo) -> list[Limit]:
    """The SLO's limits on the trials' values (``evidence.METRICS`` keys): the p99 budget (when finite), the
    error-rate limit, and the goodput floor (when set)."""
    out = []
    if math.isfinite(slo.p99_ms):
        out.append(Limit("p99", evidence.interval(samples["p99_ms"], lower_bound=0.0), slo.p99_ms, " ms"))
    out.append(
        Limit(
            "error rate",
            evidence.interval(samples["error_rate"], lower_bound=0.0),
            slo.max_error_rate,
            fmt="{:.3%}",
        )
    )
    if slo.min_goodput is not None:
        out.append(
            Limit(
                "goodput",
                evidence.interval(samples["goodput_share"], lower_bound=0.0),
                slo.min_goodput,
                fmt="{:.2%}",
                at_least=True,
            )
        )
    return out


SAMPLE_OF = {"p99": "p99_ms", "error rate": "error_rate", "goodput": "goodput_share"}


def verdict(samples: dict[str, Sequence[float]], slo: Slo) -> SloVerdict:
    """Pass, fail or inconclusive for the trials' values, with how many trials would likely settle it."""
    return evidence.judge(limits(samples, slo), {name: samples[key] for name, key in SAMPLE_OF.items()})


def violations(run: RunResult, slo: Slo) -> list[str]:
    """One sentence per limit the run missed; empty when it met the SLO."""
    out = []
    c = run.client
    p99 = c.latency_ms.get("p99", math.nan)
    if c.requests == 0:
        out.append("no request completed")
    elif math.isnan(p99):
        out.append(f"no request succeeded ({c.failures} failed)")
    elif p99 > slo.p99_ms:
        over = p99 - slo.p99_ms
        out.append(f"p99 {p99:.3f} ms exceeds the {slo.p99_ms:g} ms budget by {over:.3f} ms ({over / slo.p99_ms:.0%})")
    if c.requests and c.error_rate > slo.max_error_rate:
        out.append(
            f"error rate {c.error_rate:.3%} ({c.failures} of {c.requests}) exceeds the limit {slo.max_error_rate:.3%}"
        )
    return out


def gate(result: CampaignResult, slo: Slo) -> list[str]:
    """What fails the campaign: every violating run (``every-run``), or every scenario none of whose
    variants met the SLO (``best-variant``). Empty: the campaign passed."""
    failures = []
    if slo.gate == "every-run":
        for run in result.runs:
            if run.slo_violations:
                failures.append(f"{run.scenario} / {run.variant}: {'; '.join(run.slo_violations)}")
        return failures
    by_scenario: dict[str, list[RunResult]] = {}
    for run in result.runs:
        by_scenario.setdefault(run.scenario, []).append(run)
    for scenario, runs in by_scenario.items():
        if not any(run.passed for run in runs):
            closest = min(
                runs,
                key=lambda r: (
                    r.client.latency_ms.get("p99", math.inf)
                    if not math.isnan(r.client.latency_ms.get("p99", math.nan))
                    else math.inf
                ),
            )
            failures.append(
                f"{scenario}: no variant met the SLO; closest {closest.variant}: {'; '.join(closest.slo_violations)}"
            )
    return failures
