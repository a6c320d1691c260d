"""The [tune] step of a campaign: the tuner's search on each named model at its first scenario's load,
with the campaign's hand-written variants measured beside it as compared points (the same generator, the
same load), the pick written (or diffed) like ``tritonkit tune``, and Model Analyzer's pick when asked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from loadtest.campaign.file import Campaign
from loadtest.core.measurement import Load
from loadtest.core.results import CampaignResult
from loadtest.core.spec import Scenario
from loadtest.errors import CampaignError
from loadtest.target import apply
from loadtest.tune import compare, writer
from loadtest.tune import report as tune_report
from loadtest.tune.tuner import TuneError, TuneOptions
from loadtest.tune.tuner import tune as search


def load_of(scenario: Scenario) -> Load:
    """The load the search runs at: the scenario's users (its peak for step and spike shapes) or its rate."""
    shape = scenario.shape
    if shape["kind"] == "open":
        if "rate" not in shape:  # a replayed schedule sets its own pace
            raise CampaignError(
                f"scenario {scenario.name!r}: [tune] needs a rate to search at; a replay without rate = ... has none"
            )
        return Load(rate=float(shape["rate"]))
    return Load(users=int(scenario.peak_users))


def tune(
    campaign: Campaign,
    result: CampaignResult,
    model: str,
    endpoints,
    repository: Path,
    out_dir: Path,
    *,
    dry_run: bool,
    log=print,
) -> dict[str, Any]:
    entry: dict[str, Any] = {}
    result.tuning[model] = entry
    scenario = next(s for s in campaign.scenarios if s.model == model)
    options = TuneOptions(
        model=model,
        slo=campaign.slo,
        load=load_of(scenario),
        repository=Path(repository),
        budget_s=campaign.tune_budget_s,
        protocol=scenario.protocol,
        work=out_dir / "tune" / model / "runs",
        **{
            name: value
            for name, value in (
                ("leaders", campaign.tune_leaders),
                ("trials", campaign.tune_trials),
                ("measurement_ms", campaign.tune_measurement_ms),
            )
            if value is not None
        },
    )
    compared = {v.name: v for v in campaign.variants if v.applies_to(model)}
    try:
        outcome = search(options, endpoints, log=log, compare=compared)
    except TuneError as exc:
        entry.update(pick="none", reason=str(exc))
        log(f"tune {model}: {exc}")
        return entry
    sections: list[str] = []
    best = outcome.best
    entry.update(
        load=options.load.text(),
        generator=outcome.generator,
        strategy=outcome.result.strategy,
        measurements=outcome.result.measurements,
        grid_size=outcome.result.grid_size,
        candidates=[_row(t, options, name) for t, name in _named(outcome)],
    )
    decision = outcome.decision
    entry["decision"] = decision.to_dict()
    sections.append(tune_report.decision_markdown(decision))
    if best is None:
        entry.update(pick="none", reason=" ".join(filter(None, (decision.reason, decision.meets_at))))
        log(f"tune {model}: {entry['reason']}")
    else:
        name = next((n for n, t in outcome.compared if t is best), None)
        entry.update(
            pick=name or best.point.label(),
            throughput=round(best.throughput, 1),
            p99_ms=round(best.p99_ms, 3),
            reason=decision.reason,
        )
        written = writer.write_pick(outcome, dry_run=dry_run, reload=lambda served: _reload(endpoints, served))
        entry.update(written=not dry_run, config_diff=written.diff or "(no change)", files=written.files)
        sections.append(written.markdown())
        log(
            f"tune {model}: pick {entry['pick']} ({best.throughput:.0f} infer/s, p99 {best.p99_ms:.3f} ms); "
            + ("config diff (dry run, nothing written):" if dry_run else "written and re-exported:")
        )
        log(written.diff or "  (the repository already has these settings)")
    if campaign.analyzer:
        side = compare.with_analyzer(outcome, endpoints, out_dir / "analyzer" / model, log=log)
        entry["analyzer"] = side.to_dict()
        sections.append(side.markdown())
        log(side.text())
    tune_report.write(outcome, out_dir / "tune" / model, sections=sections)
    return entry


def _named(outcome):
    names = {id(t): n for n, t in outcome.compared}
    trials, _ = tune_report.all_trials(outcome)
    return [(t, names.get(id(t), "")) for t in trials]


def _row(trial, options: TuneOptions, name: str) -> dict[str, Any]:
    return {
        "#": trial.order,
        "config": trial.point.label(),
        "variant": name,
        "throughput": round(trial.throughput, 1),
        "p99_ms": round(trial.p99_ms, 3) if trial.p99_ms == trial.p99_ms else None,
        "meets_slo": trial.meets(options.slo),
        "why not": "; ".join(trial.violations(options.slo)),
    }


def _reload(endpoints, served: str) -> None:
    apply.load(endpoints.http, served)
