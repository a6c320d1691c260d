"""The SLO gate: which runs missed the latency budget or the error limit, and by how much."""

from __future__ import annotations

import math

from loadtest.campaign import Slo
from loadtest.measure.results import CampaignResult, RunResult


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
