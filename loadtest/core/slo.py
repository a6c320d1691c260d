"""The SLO rule, in one place: the three-way verdict of a figure's interval against its limit (``verdict``),
a run's verdict over its trials (``run_verdict``) and the gate over a campaign's runs (``campaign_verdict``).

A limit *passes* when the interval's worst end is within it (p99: the upper bound <= the budget), *fails* when
its best end is beyond it (p99: the lower bound > the budget), and is *inconclusive* otherwise. One trial has
no interval: its value is both ends, so the verdict is pass or fail and says it rests on one trial.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from loadtest.core import evidence
from loadtest.core.evidence import Limit, SloVerdict, Verdict
from loadtest.core.metrics import STREAM_LIMITS
from loadtest.core.results import CampaignResult, RunResult
from loadtest.core.spec import Slo


def error_interval(
    samples: dict[str, Sequence[float]], errors: tuple[int, int] | None, limit: float
) -> evidence.Interval:
    """The error rate the limit judges. With ``errors`` (failed, sent: every request of every trial) it is judged on
    counts: at a ``limit`` of 0, on the count itself (any error fails and none passes: what was counted is the
    whole question); above 0, on the exact binomial interval of the count (``evidence.count_interval``). Without
    counts (figures recorded without them), on the interval of the trials' rates."""
    if errors is None:
        return evidence.figure_interval("error_rate", samples["error_rate"])
    iv = evidence.count_interval(*errors, len(samples["error_rate"]))
    if limit == 0 and not math.isnan(iv.estimate):
        return dataclasses.replace(iv, low=iv.estimate, high=iv.estimate)
    return iv


def limits(samples: dict[str, Sequence[float]], slo: Slo, errors: tuple[int, int] | None = None) -> list[Limit]:
    """The SLO's limits on the trials' values (``evidence.METRICS`` keys, ``STREAM_METRICS`` for streams): the
    p99 budget (when finite), the p99 TTFT and ITL budgets (when set; a run without the figure fails them),
    the error-rate limit (on counts where ``errors``, (failed, sent), is given: ``error_interval``), and the
    goodput floor (when set)."""
    out = []
    if math.isfinite(slo.p99_ms):
        p99 = evidence.interval(samples["p99_ms"], log=True)
        out.append(Limit("p99", p99, slo.p99_ms, " ms", log=True))
    for name, (key, field) in STREAM_LIMITS.items():
        if (budget := getattr(slo, field)) is not None:
            values = samples.get(key, [math.nan])
            out.append(Limit(name, evidence.interval(values, log=True), budget, " ms", log=True))
    errors_iv = error_interval(samples, errors, slo.max_error_rate)
    out.append(Limit("error rate", errors_iv, slo.max_error_rate, fmt="{:.3%}"))
    if slo.min_goodput is not None:
        out.append(
            Limit(
                "goodput",
                evidence.figure_interval("goodput_share", samples["goodput_share"]),
                slo.min_goodput,
                fmt="{:.2%}",
                at_least=True,
            )
        )
    return out


SAMPLE_OF = {"p99": "p99_ms", "error rate": "error_rate", "goodput": "goodput_share"} | {
    name: key for name, (key, _) in STREAM_LIMITS.items()
}


def verdict(samples: dict[str, Sequence[float]], slo: Slo, errors: tuple[int, int] | None = None) -> SloVerdict:
    """Pass, fail or inconclusive for the trials' values (the error rate on ``errors``, (failed, sent), where
    the counts are known), with how many trials would likely settle it."""
    return evidence.judge(
        limits(samples, slo, errors), {name: samples[key] for name, key in SAMPLE_OF.items() if key in samples}
    )


def run_verdict(run: RunResult, slo: Slo) -> tuple[SloVerdict, list[str]]:
    """The run's verdict from ``verdict`` over its trials' values (goodput recounted from each trial's histogram
    for ``slo``'s budget), and one sentence per limit it missed or straddles. A run without a single request
    fails whatever the limits say."""
    # Goodput recounted for this budget only when it is a limit (counting a histogram takes a while).
    floor = slo.min_goodput is not None
    c = run.client
    sent = c.requests - c.dropped  # a drop never reached the server: the generator's limit, not an error
    errors = (c.failures - c.dropped, sent) if sent > 0 else None
    judged = verdict(run.samples(slo.p99_ms if floor else None, slo.ttft_ms, slo.itl_ms), slo, errors)
    if c.requests == 0:
        return dataclasses.replace(judged, verdict=Verdict.FAIL, settle=""), ["no request completed"]
    sentences = [_sentence(limit, c) for limit in judged.limits if limit.verdict is not Verdict.PASS]
    return judged, sentences


def _sentence(limit: Limit, c) -> str:
    iv, failed = limit.interval, limit.verdict is Verdict.FAIL
    if limit.name in STREAM_LIMITS and math.isnan(iv.estimate):
        if not c.streams:
            return f"no {limit.name}: no request streamed text (not a decoupled model, or every stream failed)"
        return f"no {limit.name}: no request streamed two tokens or more"
    if limit.name == "p99" or limit.name in STREAM_LIMITS:
        if math.isnan(iv.estimate):
            return f"no request succeeded ({c.failures} failed)"
        value = f"{limit.name} {iv.estimate:.3f} ms{_span(iv, '{:.3f}')}"
        if not failed:
            return f"{value} straddles the {limit.bound:g} ms budget"
        over = iv.estimate - limit.bound
        return f"{value} exceeds the {limit.bound:g} ms budget by {over:.3f} ms ({over / limit.bound:.0%})"
    if limit.name == "error rate":
        exact = iv.low < iv.high
        span = f"{iv.confidence:.0%} CI {iv.low:.3%}-{iv.high:.3%}; " if exact else ""
        counts = f"{c.failures - c.dropped} of {c.requests - c.dropped}" + (" in all" if iv.trials > 1 else "")
        relation = "exceeds" if failed else "straddles"
        return f"error rate {iv.estimate:.3%} ({span}{counts}) {relation} the limit {limit.bound:.3%}"
    value = f"goodput {iv.estimate:.2%}{_span(iv, '{:.2%}')}"
    return f"{value} {'is below' if failed else 'straddles'} the floor {limit.bound:.2%}"


def _span(iv: evidence.Interval, fmt: str) -> str:
    """`` (95% CI low-high, N trials)`` after a value with an interval; "" for one trial."""
    if not iv.has_interval:
        return ""
    return f" ({iv.confidence:.0%} CI {fmt.format(iv.low)}-{fmt.format(iv.high)}, {iv.trials} trials)"


def violations(run: RunResult, slo: Slo) -> list[str]:
    """One sentence per limit the run missed or straddles; empty when it met the SLO."""
    return run_verdict(run, slo)[1]


def record_verdict(run: RunResult, slo: Slo) -> RunResult:
    """Record the run's verdict, its sentences and what would settle it on the run; returns it."""
    judged, sentences = run_verdict(run, slo)
    run.verdict, run.slo_violations, run.settle = judged.verdict.value, sentences, judged.settle
    return run


@dataclasses.dataclass(frozen=True)
class GateVerdict:
    """The campaign's verdict and its lines: what failed (FAIL), or what straddles and how many more trials
    would likely settle it (INCONCLUSIVE); no lines for PASS."""

    verdict: Verdict
    lines: list[str]


def campaign_verdict(result: CampaignResult, slo: Slo) -> GateVerdict:
    """``every-run``: every (scenario, variant) run passes; ``best-variant``: each scenario has a passing
    variant. It fails when one run (``every-run``) or every variant of a scenario (``best-variant``) fails;
    else it is inconclusive when one straddles; else it passes."""
    judged = {id(run): run_verdict(run, slo) for run in result.runs}
    failed, unsettled = [], []

    def describe(run: RunResult) -> str:
        verdict_, sentences = judged[id(run)]
        text = "; ".join(sentences)
        return f"{text}; {verdict_.settle}" if verdict_.settle else text

    if slo.gate == "every-run":
        for run in result.runs:
            outcome = judged[id(run)][0].verdict
            if outcome is Verdict.FAIL:
                failed.append(f"{run.scenario} / {run.variant}: {describe(run)}")
            elif outcome is Verdict.INCONCLUSIVE:
                unsettled.append(f"{run.scenario} / {run.variant}: inconclusive: {describe(run)}")
    else:
        by_scenario: dict[str, list[RunResult]] = {}
        for run in result.runs:
            by_scenario.setdefault(run.scenario, []).append(run)
        for scenario, runs in by_scenario.items():
            outcomes = [judged[id(run)][0].verdict for run in runs]
            if Verdict.PASS in outcomes:
                continue
            if Verdict.INCONCLUSIVE in outcomes:
                open_runs = [r for r, o in zip(runs, outcomes, strict=True) if o is Verdict.INCONCLUSIVE]
                unsettled.append(
                    f"{scenario}: no variant passed yet; inconclusive: "
                    + " | ".join(f"{r.variant}: {describe(r)}" for r in open_runs)
                )
                continue
            closest = min(runs, key=_p99_or_inf)
            failed.append(f"{scenario}: no variant met the SLO; closest {closest.variant}: {describe(closest)}")
    if failed:
        return GateVerdict(Verdict.FAIL, failed)
    return GateVerdict(Verdict.INCONCLUSIVE, unsettled) if unsettled else GateVerdict(Verdict.PASS, [])


def _p99_or_inf(run: RunResult) -> float:
    p99 = run.client.latency_ms.get("p99", math.nan)
    return math.inf if math.isnan(p99) else p99


def judged_gate(result: CampaignResult, slo: Slo) -> tuple[GateVerdict | None, list[RunResult]]:
    """The gate's verdict as the campaign's exit status follows it, and the runs whose load generator was the
    limit. Such a run measured the generator: a campaign that passes even so passes; one that misses is judged on
    the other runs alone, and when those do not fail either the gate is not judged (None)."""
    limited = [run for run in result.runs if run.generator_limit]
    verdict = campaign_verdict(result, slo)
    if verdict.verdict is Verdict.PASS or not limited:
        return verdict, limited
    others = campaign_verdict(dataclasses.replace(result, runs=[r for r in result.runs if r not in limited]), slo)
    return (others if others.verdict is Verdict.FAIL else None), limited


def gate(result: CampaignResult, slo: Slo) -> list[str]:
    """What keeps the campaign from passing: its failures, else its inconclusive runs or scenarios (see
    ``campaign_verdict``). Empty: the campaign passed."""
    return campaign_verdict(result, slo).lines
