"""A campaign end to end: every scenario under every variant, in as many trials as the scenario asks
(``run_campaign``), then the [tune] step, the report and the SLO gate (``execute``; its verdict and exit
status: ``gate_status``). The top of the package: it uses every layer below (``loadtest.tune``,
``loadtest.core``, ``loadtest.generators``)."""

from __future__ import annotations

import dataclasses
import math
import resource
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from loadtest.campaign.file import Campaign
from loadtest.campaign.tuning import tune
from loadtest.core import evidence, slo
from loadtest.core.client_stats import ClientStats
from loadtest.core.evidence import Verdict
from loadtest.core.measurement import Load
from loadtest.core.metrics import FIGURES, STREAM_FIGURES
from loadtest.core.results import CampaignResult, RunResult, Trial
from loadtest.core.spec import Candidate, Scenario, Slo
from loadtest.generators import probe
from loadtest.generators.locust import runner
from loadtest.generators.locust.run import run_result, trial_floor, trial_of
from loadtest.generators.locust.runner import check_payloads
from loadtest.generators.seam import Locust
from loadtest.reports import campaign as report
from loadtest.target import apply, server_trace
from loadtest.target.endpoints import Endpoints
from tritonkit_errors import ExitStatus

Pair = tuple[Candidate, Scenario]


def pairs_of(campaign: Campaign) -> list[Pair]:
    """Every scenario under every variant that applies to it, in the order the results list them."""
    return [
        (v, s)
        for v in campaign.variants
        for s in campaign.scenarios
        if v.applies_to(s.model) or v.name == "as-deployed"
    ]


def schedule(pairs: list[Pair]) -> list[tuple[Candidate, Scenario, int]]:
    """The order of the trials, ``(variant, scenario, trial index)``. All at one trial: the pairs' order
    (variant by variant, so each config is applied once). Else scenario by scenario, its variants interleaved
    round by round (A B, B A, ...: ``evidence.interleaved``), so the machine's drift falls on every variant alike."""
    if all(s.trials == 1 for _, s in pairs):
        return [(v, s, 0) for v, s in pairs]
    order = []
    scenarios = {s.name: s for _, s in pairs}  # in the pairs' order
    for scenario in scenarios.values():
        variants = {v.name: v for v, s in pairs if s.name == scenario.name}
        order += [(variants[n], scenario, r) for r, n in evidence.interleaved(list(variants), scenario.trials)]
    return order


def run_campaign(campaign: Campaign, endpoints: Endpoints, out_dir: Path, log=print) -> CampaignResult:
    """Every trial of every pair (``schedule``); the served configs are restored after (``apply.ServedConfigs``)."""
    work = out_dir / "runs"
    work.mkdir(parents=True, exist_ok=True)
    pairs = pairs_of(campaign)
    result = CampaignResult(
        campaign.name, datetime.now(UTC).isoformat(timespec="seconds"), dataclasses.asdict(campaign.slo), []
    )
    check_campaign_payloads(pairs, endpoints, log)
    serving: dict[str, str] = {}  # model -> the variant whose config it serves now (absent: the original)
    trials: dict[tuple[str, str], list[Trial]] = {}
    runs: dict[tuple[str, str], RunResult] = {}
    limits: dict[tuple[str, str], str] = {}  # the first trial's generator limit, where one fell behind
    order = schedule(pairs)
    locust = Locust(endpoints, work, log=log)  # each run's protocol, shape and duration are its scenario's
    started = time.monotonic()
    with apply.ServedConfigs(endpoints.http) as configs:
        for index, (variant, scenario, trial) in enumerate(order, 1):
            served = variant.served_model(scenario.model)
            wanted = variant.name if variant.changes_config and variant.applies_to(scenario.model) else None
            if serving.get(served) != wanted:
                if wanted is None:
                    configs.reset(served)
                    serving.pop(served)
                else:
                    configs.apply(variant, scenario.model)
                    serving[served] = wanted
            else:
                apply.served_config(endpoints.http, served)  # fails early, naming the model, if it is not served
            many = scenario.trials > 1
            log(
                f"[{index}/{len(order)}] {scenario.name} x {variant.name}"
                f"{f' trial {trial + 1}/{scenario.trials}' if many else ''}: {served} over {scenario.protocol}, "
                f"{scenario.shape['kind']} {_shape_text(scenario.shape)}, {scenario.duration_s:g} s "
                f"(elapsed {time.monotonic() - started:.0f} s)"
            )
            label = f"{scenario.name}--{variant.name}" + (f"--{trial + 1}" if many else "")
            usage, wall = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
            record = locust.run_scenario(scenario, served, label=label)
            measured = trial_of(record.client, record.server, campaign.slo)
            if limit := generator_limit(scenario, measured.client, _cpu_share(scenario, usage, wall)):
                log(f"      {limit}")
                limits.setdefault((variant.name, scenario.name), limit)
            done = trials.setdefault((variant.name, scenario.name), [])
            done.append(measured)
            if len(done) < scenario.trials:
                log(f"      {trial_line(measured)}")
            else:
                run = runs[(variant.name, scenario.name)] = run_result(scenario, variant, served, done, campaign.slo)
                run.generator_limit = limits.get((variant.name, scenario.name), "")
                log(f"      {trial_line(measured)}  {_verdict_text(run)}")
            if floor := floor_line(measured):
                log(f"      {floor}")
                if warning := server_trace.floor_warning(trial_floor(measured), campaign.slo.p99_ms):
                    log(f"      note: {warning}")
            if len(done) < scenario.trials:
                continue
            if many:
                log(f"      over {len(done)} trials: {interval_line(run)}")
    result.runs = [runs[(v.name, s.name)] for v, s in pairs]
    return result


def _cpu_share(scenario: Scenario, before: resource.struct_rusage, started: float) -> float:
    """The CPU the run's Locust used / (its wall time x the cores its processes could use); NaN when its workers
    ran on other hosts (``--master``)."""
    wall = time.monotonic() - started
    if runner.master() is not None or wall <= 0:
        return math.nan
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    # Each Locust process is one Python thread of work: it saturates at one core.
    return cpu_s / wall / max(1, min(scenario.processes, len(probe.client_cpus())))


def generator_limit(scenario: Scenario, client: ClientStats, cpu_share: float) -> str:
    """A sentence when the generator, not the server, limited the run ("" when it kept up): the generators' own
    check (``probe.saturation``: their CPU, the rate sent, requests sent late), a Poisson count's chance
    shortfall forgiven (``saturation.keeps_up``)."""
    shape = scenario.shape
    rate = float(shape["rate"]) if shape["kind"] == "open" and shape.get("rate") else None
    load = Load(rate=rate) if rate else Load(users=max(1, scenario.peak_users))
    sent = client.requests / client.duration_s if rate and client.duration_s > 0 else None
    late_of = (client.late, client.scheduled)
    why = probe.saturation(cpu_share, load, sent, client.late_percent, late_of, client.duration_s, client.dropped)
    if not why:
        return ""
    return (
        f"the generator, not the server, was the limit ({why}): add --processes or a worker host "
        "(tritonkit loadtest --master/--worker, docs/load-testing.md#more-processes-and-hosts)"
    )


def trial_line(t: Trial) -> str:
    """One trial's figures on the console, goodput among them."""
    c = t.client
    batch = f"  batch {t.server.avg_batch:.2f}" if t.server else ""
    # Open loop: a share sent late means the generator's lag is inside these latencies.
    late = f"  sent late {c.late_percent:.1f}%" if c.scheduled else ""
    return (
        f"{c.throughput_rps:8.1f} req/s  p50 {c.latency_ms['p50']:.3f} ms  p99 {c.latency_ms['p99']:.3f} ms  "
        f"errors {c.error_rate:.2%}  goodput {t.goodput_share:.2%} ({t.goodput_rps:.1f}/s){batch}{late}"
        + (f"  {stream}" if (stream := report.stream_text(c)) else "")
    )


def floor_line(t: Trial) -> str:
    """The generator's own time in the trial's latencies (``run.trial_floor``) on one line; "" when unknown."""
    return server_trace.floor_text(trial_floor(t), t.server.trace if t.server else None)


def interval_line(run: RunResult) -> str:
    """A pair's figures with their intervals over its trials (a streamed pair's p99 TTFT, ITL and tokens/s too)."""
    parts = []
    for metric, (name, fmt, unit) in (FIGURES | STREAM_FIGURES).items():
        iv = run.interval(metric)
        if iv is not None:
            parts.append(f"{name} {iv.text(fmt, unit)}")
    return "; ".join(parts)


def _verdict_text(run: RunResult) -> str:
    if run.passed:
        return "ok"
    head = "SLO: " if run.verdict != "inconclusive" else "SLO inconclusive: "
    return head + "; ".join(run.slo_violations) + (f"; {run.settle}" if run.settle else "")


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
    return gate_status(result, campaign.slo)


def gate_status(result: CampaignResult, budget: Slo) -> ExitStatus:
    """The campaign's SLO verdict (``slo.campaign_verdict``) printed, as the exit status: OK when it passed,
    FAILED naming each failing scenario (and by how much), INCONCLUSIVE naming each scenario that straddles
    a limit and how many more trials would likely settle it."""
    p99 = f"p99 <= {budget.p99_ms:g} ms" if math.isfinite(budget.p99_ms) else "no p99 budget"
    limits = f"{p99}, error rate <= {budget.max_error_rate:.3%}"
    limits += "".join(f", p99 {n} <= {v:g} ms" for n, v in (("TTFT", budget.ttft_ms), ("ITL", budget.itl_ms)) if v)
    if budget.min_goodput is not None:
        limits += f", goodput >= {budget.min_goodput:.2%}"
    verdict, limited = slo.judged_gate(result, budget)
    if verdict is None:
        print(f"SLO gate not judged ({limits}): the load generator, not the server, was the limit in:", file=sys.stderr)
        for run in limited:
            print(f"  {run.scenario} / {run.variant}: {run.generator_limit}", file=sys.stderr)
        return ExitStatus.BROKEN
    if verdict.verdict is Verdict.PASS:
        print(f"SLO gate passed: {limits} ({budget.gate})")
        for run in limited:  # passed even so: the server did at least as well as these figures say
            print(f"  note: {run.scenario} / {run.variant}: {run.generator_limit}", file=sys.stderr)
        _floor_notes(result, budget)
        return ExitStatus.OK
    if verdict.verdict is Verdict.FAIL:
        print(f"SLO gate FAILED ({limits}, gate {budget.gate}):", file=sys.stderr)
        status = ExitStatus.FAILED
    else:
        print(f"SLO gate INCONCLUSIVE ({limits}, gate {budget.gate}): more trials needed:", file=sys.stderr)
        status = ExitStatus.INCONCLUSIVE
    for line in verdict.lines:
        print(f"  {line}", file=sys.stderr)
    _floor_notes(result, budget)
    return status


def _floor_notes(result: CampaignResult, budget: Slo) -> None:
    """A line per judged run whose generator's own time took much of the budget (``server_trace.floor_warning``)."""
    for run in result.runs:
        if warning := server_trace.floor_warning(run.generator_floor_ms, budget.p99_ms):
            print(f"  note: {run.scenario} / {run.variant}: {warning}", file=sys.stderr)
