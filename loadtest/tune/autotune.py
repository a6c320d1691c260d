"""A built-in model's tuned serving settings in ``export/tuned.toml``, which overrides ``export/models.toml``:
the settings a pick changes (``tuned_settings``), the file's text (``render_tuned``), and what writing them
does to every format's ``config.pbtxt`` (``plan``, ``config_diff``), computed without writing anything.
``loadtest.tune.writer`` writes the file and re-exports the model.
"""

from __future__ import annotations

import difflib
import tempfile
import tomllib
from pathlib import Path
from typing import Any

from export import catalog
from export import config as config_io
from export.changes import BATCHER_FIELDS, ServingChanges
from export.spec import QUEUE_POLICY_FIELDS
from loadtest.errors import TuneError


def tuned_settings(changes: ServingChanges, entry: catalog.CatalogEntry) -> dict[str, Any]:
    """The catalog settings of ``entry`` that ``changes`` changes, in models.toml's terms."""
    settings: dict[str, Any] = {}
    if changes.max_batch_size is not None:
        settings["max_batch_size"] = changes.max_batch_size
    if changes.dynamic_batching is False:
        settings["dynamic_batching"] = False
    elif changes.dynamic_batching or any(getattr(changes, f) is not None for f in BATCHER_FIELDS):
        batching = dict(entry.settings.get("dynamic_batching") or {})  # keeps the catalog's queue policy
        if changes.max_queue_delay_us is not None:
            batching["max_queue_delay_us"] = changes.max_queue_delay_us
        if changes.preferred_batch_sizes is not None:
            batching["preferred_batch_sizes"] = list(changes.preferred_batch_sizes)
        for field in QUEUE_POLICY_FIELDS:  # the changes' queue policy, where they set one
            if getattr(changes, field) is not None:
                batching[field] = getattr(changes, field)
        settings["dynamic_batching"] = batching
    if changes.instances is not None or changes.instance_kind is not None:
        groups = entry.settings.get("instance_groups") or [{"kind": "KIND_CPU"}]
        first = dict(groups[0])
        if changes.instances is not None:
            first["count"] = changes.instances
        if changes.instance_kind is not None:
            first["kind"] = changes.instance_kind
        settings["instance_groups"] = [first]
    if changes.warmup is not None:
        settings["warmup"] = changes.warmup
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
    lines = [
        "# Written by `tritonkit tune` and campaigns' [tune]: serving settings that override export/models.toml.",
        "# Delete a table to go back to the catalog's settings, then run `make export`.",
        "",
    ]
    for model in sorted(tuned):
        lines.append(f"[{model}]")
        lines += [f"{key} = {_toml_value(value)}" for key, value in tuned[model].items()]
        lines.append("")
    return "\n".join(lines)


def config_diff(entry: catalog.CatalogEntry, repository: Path) -> str:
    """Unified diff of each cpu variant's ``config.pbtxt``: in the repository -> as ``entry`` says."""
    from export import zoo  # torch

    model = zoo.build(entry.builder)
    diffs = []
    for variant in entry.variants["cpu"]:
        spec = entry.spec(model, variant, "cpu")
        path = repository / spec.name / "config.pbtxt"
        old = path.read_text() if path.exists() else ""
        diffs.append(
            "".join(
                difflib.unified_diff(
                    old.splitlines(True), config_io.render(spec).splitlines(True), str(path), f"{path} (tuned)"
                )
            )
        )
    return "".join(diffs)


def plan(
    model: str,
    changes: ServingChanges,
    note: str,
    repository: Path,
    *,
    serves: str | None = None,
    tuned_path: Path = catalog.TUNED,
    catalog_path: Path = catalog.CATALOG,
) -> tuple[str, catalog.CatalogEntry, str]:
    """(the new tuned.toml text, the model's catalog entry read back from it, the config.pbtxt diff): what
    writing ``changes`` for ``model`` does, computed without writing anything. ``serves``: the served model the
    tune picked when it is another format of ``model`` (``minilm_onnx``; ``catalog.served_pick``)."""
    tuned: dict[str, dict[str, Any]] = {}
    if tuned_path.is_file():
        tuned = tomllib.loads(tuned_path.read_text())
    base = catalog.load(catalog_path, None)[model]
    tuned[model] = {"note": note, **({"serves": serves} if serves and serves != model else {})}
    tuned[model].update(tuned_settings(changes, base))
    text = render_tuned(tuned)
    # Read back the way export will read it, so the diff is exactly what export writes.
    with tempfile.TemporaryDirectory(prefix="tuned-") as tmp:
        candidate = Path(tmp) / tuned_path.name
        candidate.write_text(text)
        entry = catalog.load(catalog_path, candidate)[model]
    return text, entry, config_diff(entry, repository)
