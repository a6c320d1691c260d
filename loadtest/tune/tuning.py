"""The [tune] step of a campaign: our pick, written (or diffed), and Triton Model Analyzer's pick run under
the same Locust load so the two can be compared on equal terms."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

from loadtest.campaign import Campaign, Variant
from loadtest.drive import apply
from loadtest.measure.results import CampaignResult
from loadtest.measure.run import run_scenario
from loadtest.tune import analyzer, autotune


def tune(campaign: Campaign, result: CampaignResult, model: str, endpoints, repository: Path, out_dir: Path, *,
         dry_run: bool, log=print) -> dict:
    entry: dict = {}
    result.tuning[model] = entry
    try:
        choice = autotune.choose(result, model, campaign.slo)
    except autotune.TuneError as exc:
        entry["pick"] = "none"
        entry["reason"] = str(exc)
        log(f"tune {model}: {exc}")
        if campaign.analyzer:  # its pick under the same load still tells what the budget would need
            entry["analyzer"] = compare_with_analyzer(campaign, result, model, endpoints, repository, out_dir, log=log)
        return entry
    variant = next(v for v in campaign.variants if v.name == choice.variant)
    entry.update(pick=choice.variant, throughput_rps=choice.throughput_rps, p99_ms=round(choice.p99_ms, 3),
                 reason=f"highest throughput of the {sum(r['meets_slo'] for r in choice.ranking)} variants "
                        f"meeting p99 ≤ {campaign.slo.p99_ms:g} ms", ranking=choice.ranking)
    if variant.served_model(model) != model:
        entry["note"] = (f"the pick serves {variant.served_model(model)}: its batching and instance settings are "
                         f"written for every format of {model}; clients call {variant.served_model(model)}")
    note = (f"campaign {campaign.name!r}: {choice.variant} served {choice.throughput_rps:.0f} req/s "
            f"at p99 {choice.p99_ms:.3f} ms (budget {campaign.slo.p99_ms:g} ms)"
            + (f"; clients call {variant.served_model(model)}" if variant.served_model(model) != model else ""))
    diff = autotune.write(choice, variant, repository, note, dry_run=dry_run)
    entry["config_diff"] = diff or "(no change)"
    entry["written"] = not dry_run
    log(f"tune {model}: pick {choice.variant} ({choice.throughput_rps:.0f} req/s, p99 {choice.p99_ms:.3f} ms); "
        + ("config diff (--dry-run, nothing written):" if dry_run else "written to export/tuned.toml and re-exported:"))
    log(diff or "  (the repository config already has these settings)")
    if not dry_run:
        apply.load(endpoints.http, model)  # serve what was just written
    if campaign.analyzer:
        entry["analyzer"] = compare_with_analyzer(campaign, result, model, endpoints, repository, out_dir, log=log)
    return entry


def compare_with_analyzer(campaign: Campaign, result: CampaignResult, model: str, endpoints, repository: Path,
                          out_dir: Path, log=print) -> dict:
    """Model Analyzer's pick for the same model and budget, then that config under the campaign's load."""
    log(f"tune {model}: running Triton Model Analyzer (local launch mode, budget p99 <= {campaign.slo.p99_ms:g} ms)")
    try:
        pick = analyzer.profile(model, repository, campaign.slo.p99_ms, out_dir / "analyzer" / model)
    except analyzer.AnalyzerError as exc:
        log(f"tune {model}: Model Analyzer gave no pick: {str(exc).splitlines()[0]}")
        return {"error": str(exc).splitlines()[0]}
    outcome = {key: value for key, value in dataclasses.asdict(pick).items() if not isinstance(value, (list, dict))}
    outcome["dynamic_batching"] = pick.dynamic_batching
    label = Variant("model-analyzer")
    original = apply.served_config(endpoints.http, model)
    apply.load(endpoints.http, model, pick.apply_to(original))
    try:
        for scenario in (s for s in campaign.scenarios if s.model == model):
            run = run_scenario(scenario, label, model, endpoints, out_dir / "runs", campaign.slo, log)
            result.runs.append(run)
            outcome.setdefault("under_locust", []).append({
                "scenario": scenario.name, "throughput_rps": round(run.client.throughput_rps, 1),
                "p99_ms": round(run.client.latency_ms.get("p99", math.nan), 3), "meets_slo": run.passed})
    finally:
        apply.restore(endpoints.http, {model: original})
    return outcome
