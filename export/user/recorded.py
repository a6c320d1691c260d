"""What a ``--model-file`` export records about itself in its manifest, so the model can be exported again
(``tritonkit export NAME``) and a re-export keeps serving settings chosen later (``tritonkit tune``).

The manifest's ``export_args`` holds the model file, name, input specs and output names, and ``settings``:
the serving settings in export/models.toml's terms (``max_batch_size``, ``dynamic_batching``,
``instance_groups``, ``warmup``), the form a catalog entry takes. ``tritonkit tune`` rewrites ``settings``
(and ``tuned``, a note saying what it measured) when it writes a user model's config.pbtxt.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from export.spec import ModelSpec

DEFAULT_SETTINGS = {"max_batch_size": 8, "dynamic_batching": {"max_queue_delay_us": 500}}
"""Serving settings of a first ``--model-file`` export that gives no serving flags."""


def settings_of(spec: ModelSpec) -> dict[str, Any]:
    """The serving settings of ``spec`` in models.toml's terms (``CatalogEntry.settings`` takes them back)."""
    settings: dict[str, Any] = {"max_batch_size": spec.max_batch_size, "warmup": spec.warmup}
    batching = spec.dynamic_batching
    if batching is not None:
        table: dict[str, Any] = {
            "max_queue_delay_us": batching.max_queue_delay_us,
            "preferred_batch_sizes": list(batching.preferred_batch_sizes),
        }
        if batching.preserve_ordering:
            table["preserve_ordering"] = True
        if batching.queue_policy is not None:
            table.update(dataclasses.asdict(batching.queue_policy))
        settings["dynamic_batching"] = table
    settings["instance_groups"] = [dataclasses.asdict(g) for g in spec.instance_groups]
    return settings


def export_args(model_file: str, name: str, inputs: list[str], outputs: list[str], spec: ModelSpec) -> dict[str, Any]:
    """The manifest's ``export_args`` of a ``--model-file`` export that produced ``spec``."""
    return {
        "model_file": model_file,
        "name": name,
        "inputs": list(inputs),
        "outputs": list(outputs),
        "settings": settings_of(spec),
    }


def manifests(folder: Path) -> list[Path]:
    """The manifest.json of every version folder of a model folder, newest last."""
    versions = sorted((p for p in Path(folder).iterdir() if p.is_dir() and p.name.isdigit()), key=lambda p: int(p.name))
    return [v / "manifest.json" for v in versions if (v / "manifest.json").is_file()]


def read(folder: Path) -> dict[str, Any] | None:
    """The newest version's ``export_args`` of a model folder, or None (a catalog model, a hand-written one)."""
    if not Path(folder).is_dir():
        return None
    for path in reversed(manifests(folder)):
        try:
            recorded = json.loads(path.read_text()).get("export_args")
        except (OSError, ValueError):
            continue
        if isinstance(recorded, dict):
            return recorded
    return None


def update_settings(folder: Path, spec: ModelSpec, note: str) -> list[Path]:
    """Record ``spec``'s serving settings (and ``note``) in the export_args of every manifest of ``folder``
    that has them; returns the manifests rewritten."""
    changes = manifest_changes(folder, spec, note)
    for path, (_, new) in changes.items():
        path.write_text(new)
    return list(changes)


def manifest_changes(folder: Path, spec: ModelSpec, note: str) -> dict[Path, tuple[str, str]]:
    """Path -> (old text, new text) of each manifest ``update_settings`` rewrites (a dry run diffs them)."""
    out = {}
    for path in manifests(folder):
        old = path.read_text()
        manifest = json.loads(old)
        if not isinstance(manifest.get("export_args"), dict):
            continue
        manifest["export_args"]["settings"] = settings_of(spec)
        manifest["export_args"]["tuned"] = note
        out[path] = (old, json.dumps(manifest, indent=2) + "\n")
    return out
