"""Writing the tuner's pick through the one config generator (``export/config.py``), or, in a dry run,
printing the diff of what would be written and writing nothing.

- A model of export/models.toml: its settings go into ``export/tuned.toml`` (which overrides models.toml),
  then the model is exported again, so every format's config.pbtxt and manifest agree with it.
- Any other model (a ``--model-file`` export, a hand-written one): each of its formats' config.pbtxt is
  read back into a ``ModelSpec`` (``export.config.read``), changed and written again; a ``--model-file``
  export's manifest records the new settings (``export.user.recorded``), so ``tritonkit export`` keeps them.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable
from datetime import date
from pathlib import Path
from typing import Any

from export import catalog
from export import config as config_io
from export.errors import ExportError
from export.user import recorded
from loadtest.errors import TuneError
from loadtest.tune import autotune
from loadtest.tune.space import Point, formats_in
from loadtest.tune.tuner import Outcome


class WriteError(TuneError):
    """The pick could not be written (a re-export failed, a config did not read back)."""


@dataclasses.dataclass
class Written:
    model: str
    kind: str
    """``catalog`` (export/tuned.toml + re-export) or ``model folder`` (the model's config.pbtxt)."""
    files: list[str]
    """Files written (in a dry run: that would be)."""
    diff: str
    dry_run: bool
    note: str
    clients_call: str
    """The served model that won (clients call it: ``digits_onnx`` when ONNX won)."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def text(self) -> str:
        head = (
            "dry run: nothing written; the diff of what would be:"
            if self.dry_run
            else f"written ({self.kind}): " + ", ".join(self.files)
        )
        lines = [head, self.diff or "  (the repository already has these settings)"]
        if self.clients_call != self.model:
            lines.append(
                f"note: the pick serves {self.clients_call}; clients call {self.clients_call} "
                f"(its batching and instance settings are written for every format of {self.model})"
            )
        return "\n".join(lines)

    def markdown(self) -> str:
        title = "## Written" if not self.dry_run else "## Not written (dry run)"
        files = "\n".join(f"- `{f}`" for f in self.files) or "- nothing changes"
        return f"{title}\n\n{files}\n\n```diff\n{self.diff or '(no change)'}\n```"


def note_for(outcome: Outcome) -> str:
    o, best = outcome.options, outcome.best
    kept = outcome.decision is not None and outcome.decision.kept_served
    trials = f" (over {len(best.confirmed)} interleaved trials)" if best.confirmed else ""
    # the p99 its SLO verdict judged (the geometric mean of the trials' p99s), not their arithmetic mean
    p99 = best.intervals()["p99_ms"].estimate
    return (
        f"tritonkit tune {date.today().isoformat()}: {'kept the served config: ' if kept else ''}"
        f"{best.point.label().split()[0]} "
        f"{'no batcher' if best.point.batcher is None else f'delay {best.point.batcher} us'}, "
        f"{best.point.instances} instances served {best.throughput:.0f} infer/s at p99 {p99:.3f} ms{trials} "
        f"(budget {o.slo.p99_ms:g} ms) at {o.load.text()} by {outcome.generator}"
    )


def _diff(old: str, new: str, path: Path) -> str:
    return "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), str(path), f"{path} (tuned)"))


def write_pick(
    outcome: Outcome,
    *,
    dry_run: bool,
    reload: Callable[[str], None] = lambda name: None,
    tuned_path: Path = catalog.TUNED,
    catalog_path: Path = catalog.CATALOG,
) -> Written:
    """Write ``outcome.best`` (see the module docstring); ``reload(model)`` serves a written config."""
    if outcome.best is None:
        raise WriteError(f"model {outcome.options.model!r}: nothing to write, no candidate met the SLO")
    model = outcome.options.model
    if model in catalog.load(catalog_path, None):
        return write_catalog(outcome, dry_run=dry_run, reload=reload, tuned_path=tuned_path, catalog_path=catalog_path)
    return write_model_folder(outcome, dry_run=dry_run, reload=reload)


def write_catalog(
    outcome: Outcome, *, dry_run: bool, reload: Callable[[str], None], tuned_path: Path, catalog_path: Path
) -> Written:
    model, point = outcome.options.model, outcome.best.point
    note = note_for(outcome)
    clients_call = point.served_model(model)
    if clients_call != model:
        note += f"; clients call {clients_call}"
    old_tuned = tuned_path.read_text() if tuned_path.is_file() else ""
    try:
        new_tuned, entry, diff = autotune.plan(
            model,
            point.changes(),
            note,
            outcome.options.repository,
            serves=clients_call,
            tuned_path=tuned_path,
            catalog_path=catalog_path,
        )
    except ExportError as exc:
        raise WriteError(f"model {model!r}: the tuned settings do not make a valid config: {exc}") from None
    diff = _diff(old_tuned, new_tuned, tuned_path) + diff
    files = [
        str(tuned_path),
        *(str(outcome.options.repository / v.model_name(model) / "config.pbtxt") for v in entry.variants["cpu"]),
    ]
    written = Written(model, "catalog", files, diff, dry_run, note, clients_call)
    if dry_run:
        return written
    tuned_path.write_text(new_tuned)
    from export.pipeline import export_entry  # torch

    for done in export_entry(entry, outcome.options.repository):
        if not done.result.ok:
            raise WriteError(f"re-export of {done.spec.name} with the tuned settings failed: {done.result.summary()}")
        reload(done.spec.name)
    return written


def write_model_folder(outcome: Outcome, *, dry_run: bool, reload: Callable[[str], None]) -> Written:
    """Each format folder of the model: config.pbtxt read back, the pick's settings applied, written again."""
    model, point = outcome.options.model, outcome.best.point
    repository = outcome.options.repository
    note = note_for(outcome)
    diffs, files, plans = [], [], []
    for fmt in formats_in(repository, model) or ["torchscript/fp32"]:
        name = Point(fmt, None, (), 1, 0).served_model(model)
        folder = repository / name
        try:
            spec = config_io.read(folder)
            tuned = point.changes().apply(spec)
        except ExportError as exc:
            raise WriteError(f"{folder / 'config.pbtxt'}: cannot apply the pick: {exc}") from None
        old, new = (folder / "config.pbtxt").read_text(), config_io.render(tuned)
        if old != new:
            diffs.append(_diff(old, new, folder / "config.pbtxt"))
            files.append(str(folder / "config.pbtxt"))
        manifests = recorded.manifest_changes(folder, tuned, note)
        for path, (old_text, new_text) in manifests.items():
            diffs.append(_diff(old_text, new_text, path))
            files.append(str(path))
        plans.append((folder, name, tuned, old != new))
    written = Written(model, "model folder", files, "".join(diffs), dry_run, note, point.served_model(model))
    if dry_run:
        return written
    for folder, name, tuned, changed in plans:
        if changed:
            config_io.write(tuned, repository)
        recorded.update_settings(folder, tuned, note)
        reload(name)
    return written
