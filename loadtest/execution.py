"""A campaign end to end: every scenario under every variant (``run_campaign``), then the [tune] step, the
report and the SLO gate (``execute``). The top of the package: it uses every layer below
(``loadtest.tune``, ``loadtest.measure``, ``loadtest.drive``)."""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from loadtest.campaign import Campaign
from loadtest.drive import apply
from loadtest.drive.runner import check_payloads
from loadtest.drive.target import Endpoints
from loadtest.measure import report, slo
from loadtest.measure.results import CampaignResult
from loadtest.measure.run import run_scenario
from loadtest.tune.tuning import tune


def run_campaign(campaign: Campaign, endpoints: Endpoints, out_dir: Path, log=print) -> CampaignResult:
    """Every scenario under every variant that applies to it; the served configs are restored after."""
    work = out_dir / "runs"
    work.mkdir(parents=True, exist_ok=True)
    pairs = [
        (v, s)
        for v in campaign.variants
        for s in campaign.scenarios
        if v.applies_to(s.model) or v.name == "as-deployed"
    ]
    result = CampaignResult(
        campaign.name, datetime.now(UTC).isoformat(timespec="seconds"), dataclasses.asdict(campaign.slo), []
    )
    check_campaign_payloads(pairs, endpoints, log)
    serving: dict[str, str] = {}  # model -> the variant whose config it serves now (absent: the original)
    originals: dict[str, dict] = {}  # model -> its config before the campaign changed it
    started = time.monotonic()
    try:
        for index, (variant, scenario) in enumerate(pairs, 1):
            served = variant.served_model(scenario.model)
            wanted = variant.name if variant.changes_config and variant.applies_to(scenario.model) else None
            if serving.get(served) != wanted:
                if wanted is None:
                    apply.restore(endpoints.http, {served: originals[served]})
                    serving.pop(served)
                else:
                    if served not in originals:
                        originals[served] = apply.served_config(endpoints.http, served)
                    apply.apply(endpoints.http, variant, scenario.model, originals[served])
                    serving[served] = wanted
            else:
                apply.served_config(endpoints.http, served)  # fails early, naming the model, if it is not served
            log(
                f"[{index}/{len(pairs)}] {scenario.name} x {variant.name}: {served} over {scenario.protocol}, "
                f"{scenario.shape['kind']} {_shape_text(scenario.shape)}, {scenario.duration_s:g} s "
                f"(elapsed {time.monotonic() - started:.0f} s)"
            )
            run = run_scenario(scenario, variant, served, endpoints, work, campaign.slo, log)
            c = run.client
            log(
                f"      {c.throughput_rps:8.1f} req/s  p50 {c.latency_ms['p50']:.3f} ms  p99 "
                f"{c.latency_ms['p99']:.3f} ms  errors {c.error_rate:.2%}  batch {run.server.avg_batch:.2f}  "
                f"{'ok' if run.passed else 'SLO: ' + '; '.join(run.slo_violations)}"
            )
            result.runs.append(run)
    finally:
        apply.restore(endpoints.http, {model: originals[model] for model in serving})
    return result


def check_campaign_payloads(pairs, endpoints: Endpoints, log=print) -> None:
    """Every run's payloads made against its served config before the first run: a missing ``--shape``, BYTES
    without data or a bad data file stops the campaign (``PayloadError``) before any load."""
    checked = set()
    for variant, scenario in pairs:
        served = variant.served_model(scenario.model)
        if (served, scenario.name) in checked:
            continue
        checked.add((served, scenario.name))
        count = len(check_payloads(scenario, served, apply.served_config(endpoints.http, served)))
        log(f"payloads: {scenario.name} on {served}: {count} distinct requests")


def _shape_text(shape: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in shape.items() if k != "kind")


def execute(campaign, endpoints, repository: Path, out_dir: Path, *, dry_run: bool) -> int:
    """Run, tune, report, gate. Returns the exit status."""
    result = run_campaign(campaign, endpoints, out_dir)
    for model in campaign.tune_models:
        tune(campaign, result, model, endpoints, repository, out_dir, dry_run=dry_run)
    report.write_report(result, out_dir)
    print(f"report: {out_dir / 'index.html'} (summary: {out_dir / 'summary.md'})")
    failures = slo.gate(result, campaign.slo)
    p99 = f"p99 <= {campaign.slo.p99_ms:g} ms" if math.isfinite(campaign.slo.p99_ms) else "no p99 budget"
    if failures:
        print(
            f"SLO gate FAILED ({p99}, error rate <= {campaign.slo.max_error_rate:.3%}, gate {campaign.slo.gate}):",
            file=sys.stderr,
        )
        for line in failures:
            print(f"  {line}", file=sys.stderr)
        return 1
    print(f"SLO gate passed: {p99}, error rate <= {campaign.slo.max_error_rate:.3%} ({campaign.slo.gate})")
    return 0
