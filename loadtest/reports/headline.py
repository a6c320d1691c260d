"""A report's first line, read at a glance: the campaign's verdict, what decided it, the variant that did best in
each scenario with two or more, and the tuner's pick. The verdict is ``slo.judged_gate``'s, the one the command's
exit status follows, so the page and the exit status never disagree."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from loadtest.core import slo as slo_rule
from loadtest.core.evidence import Verdict
from loadtest.core.results import CampaignResult, RunResult
from loadtest.core.spec import Slo
from loadtest.errors import CampaignError

SLO_FIELDS = frozenset(f.name for f in dataclasses.fields(Slo))


@dataclasses.dataclass(frozen=True)
class Headline:
    verdict: str
    """``PASS``, ``FAIL``, ``INCONCLUSIVE``, or ``NOT JUDGED`` (no runs, no SLO recorded, or the load generator
    was the limit where the server's figures would decide)."""
    text: str
    """What decided it, then the best variants and the tuner's pick, as one sentence each."""

    def __str__(self) -> str:
        return f"{self.verdict}: {self.text}"


def slo_of(result: CampaignResult) -> Slo | None:
    """The SLO the campaign ran under, from its record; None when the record has none (an older or partial one)."""
    fields = {k: v for k, v in result.slo.items() if k in SLO_FIELDS}
    fields.setdefault("p99_ms", math.inf)
    try:
        return Slo(**fields)
    except (CampaignError, TypeError):
        return None


def _run_text(run: RunResult) -> str:
    c = run.client
    p99 = c.latency_ms.get("p99", math.nan)
    return f"{run.variant} ({c.throughput_rps:,.1f} req/s, p99 {p99:.3f} ms)"


def best_variants(result: CampaignResult) -> list[str]:
    """Per scenario of two or more variants: the passing variant of the highest throughput, else none passed."""
    by_scenario: dict[str, list[RunResult]] = {}
    for run in result.runs:
        by_scenario.setdefault(run.scenario, []).append(run)
    out = []
    for scenario, runs in by_scenario.items():
        if len({r.variant for r in runs}) < 2:
            continue
        passing = [r for r in runs if r.outcome == "PASS"]
        if passing:
            out.append(f"{scenario}: {_run_text(max(passing, key=lambda r: r.client.throughput_rps))}")
        else:
            out.append(f"{scenario}: no variant passed")
    return out


def _tuning_picks(tuning: dict[str, Any]) -> list[str]:
    return [
        f"tune {model}: pick {entry['pick']}"
        for model, entry in tuning.items()
        if isinstance(entry, dict) and entry.get("pick")
    ]


def campaign_headline(result: CampaignResult) -> Headline:
    slo = slo_of(result)
    if not result.runs or slo is None:
        why = "no runs" if not result.runs else "the record holds no SLO to judge against"
        return Headline("NOT JUDGED", why)
    gate, limited = slo_rule.judged_gate(result, slo)
    if gate is None:
        runs = "; ".join(f"{r.scenario} / {r.variant}" for r in limited)
        return Headline("NOT JUDGED", f"the load generator, not the server, was the limit in {runs}")
    if gate.verdict is Verdict.PASS:
        rule = "every run" if slo.gate == "every-run" else "each scenario has a variant that"
        decided = f"{rule} met the SLO ({slo.gate})"
    else:
        more = f" (and {len(gate.lines) - 1} more below)" if len(gate.lines) > 1 else ""
        decided = f"{gate.lines[0]}{more}"
    parts = [decided]
    if best := best_variants(result):
        parts.append("best: " + "; ".join(best))
    parts += _tuning_picks(result.tuning)
    return Headline(gate.verdict.value.upper(), ". ".join(parts))
