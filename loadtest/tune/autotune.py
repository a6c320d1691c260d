"""Auto-tune: the variant with the highest throughput whose P99 and error rate meet the SLO, written into
the model's serving settings through the same catalog and config generator that ``tritonkit export`` uses.

The choice is recorded in ``export/tuned.toml`` (it overrides ``export/models.toml``), then the model is
exported again so that every variant's ``config.pbtxt`` and manifest agree with it. ``--dry-run`` prints
the ``config.pbtxt`` diff instead and writes nothing.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import tomllib
from pathlib import Path
from typing import Any

from export import catalog
from export import config as config_io
from loadtest.campaign import QUEUE_POLICY_FIELDS, Slo, Variant
from loadtest.errors import LoadTestError
from loadtest.measure.results import CampaignResult


class TuneError(LoadTestError):
    """No variant meets the SLO, or the choice cannot be written."""


@dataclasses.dataclass
class Choice:
    model: str
    variant: str
    throughput_rps: float
    """Sum over the model's scenarios of successful requests per second."""
    p99_ms: float
    """Worst p99 over the model's scenarios."""
    ranking: list[dict[str, Any]]
    """Every variant: name, throughput, worst p99, error rate, whether it met the SLO."""


def choose(result: CampaignResult, model: str, slo: Slo) -> Choice:
    """The variant whose runs of ``model`` all met the SLO with the highest total throughput."""
    by_variant: dict[str, list] = {}
    for run in result.runs:
        if run.model == model:
            by_variant.setdefault(run.variant, []).append(run)
    if not by_variant:
        raise TuneError(f"the results have no run of model {model!r}")
    ranking = []
    for name, runs in by_variant.items():
        p99s = [r.client.latency_ms.get("p99", math.nan) for r in runs]
        ranking.append({
            "variant": name,
            "throughput_rps": round(sum(r.client.throughput_rps for r in runs), 1),
            "p99_ms": max((p for p in p99s if not math.isnan(p)), default=math.nan),
            "error_rate": max(r.client.error_rate for r in runs),
            "meets_slo": all(r.passed for r in runs),
        })
    ranking.sort(key=lambda row: (not row["meets_slo"], -row["throughput_rps"]))
    best = ranking[0]
    if not best["meets_slo"]:
        closest = min(ranking, key=lambda row: row["p99_ms"] if not math.isnan(row["p99_ms"]) else math.inf)
        raise TuneError(f"model {model!r}: no variant meets p99 <= {slo.p99_ms:g} ms and error rate <= "
                        f"{slo.max_error_rate:.3%}; the lowest p99 was {closest['variant']} at {closest['p99_ms']:.3f} ms")
    return Choice(model, best["variant"], best["throughput_rps"], best["p99_ms"], ranking)


def tuned_settings(variant: Variant, entry: catalog.CatalogEntry) -> dict[str, Any]:
    """The catalog settings of ``entry`` that ``variant`` changes, in models.toml's terms."""
    settings: dict[str, Any] = {}
    if variant.max_batch_size is not None:
        settings["max_batch_size"] = variant.max_batch_size
    if variant.dynamic_batching is False:
        settings["dynamic_batching"] = False
    elif (variant.max_queue_delay_us is not None or variant.preferred_batch_sizes is not None
          or variant.dynamic_batching or any(getattr(variant, f) is not None for f in QUEUE_POLICY_FIELDS)):
        batching = dict(entry.settings.get("dynamic_batching") or {})  # keeps the catalog's queue policy
        if variant.max_queue_delay_us is not None:
            batching["max_queue_delay_us"] = variant.max_queue_delay_us
        if variant.preferred_batch_sizes is not None:
            batching["preferred_batch_sizes"] = list(variant.preferred_batch_sizes)
        for field in QUEUE_POLICY_FIELDS:  # the variant's queue policy, when it set one
            if getattr(variant, field) is not None:
                batching[field] = getattr(variant, field)
        settings["dynamic_batching"] = batching
    if variant.instances is not None:
        groups = entry.settings.get("instance_groups") or [{"kind": "KIND_CPU"}]
        settings["instance_groups"] = [{**groups[0], "count": variant.instances}]
    if variant.warmup is not None:
        settings["warmup"] = variant.warmup
    return settings


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + " }"
    raise TuneError(f"cannot write {value!r} to TOML")


def render_tuned(tuned: dict[str, dict[str, Any]]) -> str:
    lines = ["# Written by `tritonkit loadtest CAMPAIGN` ([tune]): serving settings that override export/models.toml.",
             "# Delete a table to go back to the catalog's settings, then run `make export`.", ""]
    for model in sorted(tuned):
        lines.append(f"[{model}]")
        lines += [f"{key} = {_toml_value(value)}" for key, value in tuned[model].items()]
        lines.append("")
    return "\n".join(lines)


def config_diff(entry: catalog.CatalogEntry, repository: Path) -> str:
    """Unified diff of the public variant's ``config.pbtxt``: in the repository -> as ``entry`` says."""
    from export import zoo  # torch

    variant = entry.variants["cpu"][0]
    spec = entry.spec(zoo.build(entry.builder), variant, "cpu")
    path = repository / spec.name / "config.pbtxt"
    old = path.read_text() if path.exists() else ""
    return "".join(difflib.unified_diff(old.splitlines(True), config_io.render(spec).splitlines(True),
                                        str(path), f"{path} (tuned)"))


def write(choice: Choice, variant: Variant, repository: Path, note: str, *, dry_run: bool,
          tuned_path: Path = catalog.TUNED, catalog_path: Path = catalog.CATALOG) -> str:
    """Record the choice and re-export the model (or, with ``dry_run``, only compute the diff)."""
    tuned: dict[str, dict[str, Any]] = {}
    if tuned_path.is_file():
        tuned = tomllib.loads(tuned_path.read_text())
    base = catalog.load(catalog_path, None)[choice.model]
    tuned[choice.model] = {"note": note, **tuned_settings(variant, base)}
    text = render_tuned(tuned)
    # The candidate catalog, read back the way export will read it, so the diff is exactly what export writes.
    candidate = tuned_path.with_name(f".{tuned_path.name}.candidate")
    candidate.write_text(text)
    try:
        entry = catalog.load(catalog_path, candidate)[choice.model]
    finally:
        candidate.unlink()
    diff = config_diff(entry, repository)
    if dry_run:
        return diff
    tuned_path.write_text(text)
    from export.pipeline import export_entry  # torch

    for done in export_entry(entry, repository):
        if not done.result.ok:
            raise TuneError(f"re-export of {done.spec.name} with the tuned settings failed: {done.result.summary()}")
    return diff
