"""Seed an empty model repository (a container volume) with the committed parts of ``model_repository/``.

The committed parts are the Python models, the ensembles and their configs. Models that ``export``
writes (every variant of export/models.toml, for every target) are left to the export that follows,
so a GPU export never starts from CPU configs or from weights that another torch version built.
"""

from __future__ import annotations

import fnmatch
import json
import shutil
import time
from pathlib import Path

from export import catalog
from export.errors import ExportError

# Written last by a seeded export that passed: what a server waits for before it reads the repository
# (Triton looks only at folders, so the file does not disturb it).
COMPLETE_MARKER = ".export-complete"
# Build outputs inside a model's folder; .gitignore lists the same ones.
IGNORED = ("__pycache__", "*.pyc", "*.pt", "*.onnx", "*.plan", "manifest.json", ".[0-9]*.incoming", ".[0-9]*.outgoing")


def exported_names(entries: dict[str, catalog.CatalogEntry] | None = None) -> set[str]:
    """Every model folder that ``export`` writes, over all targets."""
    entries = catalog.load() if entries is None else entries
    return {
        variant.model_name(entry.name)
        for entry in entries.values()
        for variants in entry.variants.values()
        for variant in variants
    }


def seed(source: Path, target: Path, entries: dict[str, catalog.CatalogEntry] | None = None) -> list[str]:
    """Copy ``source``'s committed models into ``target`` (overwriting them); the names copied."""
    source, target = Path(source), Path(target)
    if not source.is_dir():
        raise ExportError(f"--seed-from {source}: not a directory")
    if source.resolve() == target.resolve():
        return []
    skip = exported_names(entries)
    copied = []
    for model in sorted(p for p in source.iterdir() if p.is_dir() and (p / "config.pbtxt").is_file()):
        if model.name in skip:
            continue
        shutil.copytree(
            model,
            target / model.name,
            dirs_exist_ok=True,
            ignore=lambda _dir, names: [n for n in names if any(fnmatch.fnmatch(n, p) for p in IGNORED)],
        )
        copied.append(model.name)
    return copied


def mark_complete(
    repository: Path, target: str, statuses: list[str], not_exported: list[str] = (), optional: list[str] = ()
) -> Path:
    """Record that every required export into ``repository`` passed; servers and init containers wait for it.

    ``not_exported`` names the optional variants that were skipped or failed, ``optional`` those exported,
    which ``export.serving_check`` loads in the serving image before the server starts. ``gpu`` is the device
    the exports ran on: TensorRT engines run only on the GPU product that built them."""
    import torch

    gpu = torch.cuda.get_device_name(0) if target == "gpu" and torch.cuda.is_available() else None
    marker = Path(repository) / COMPLETE_MARKER
    marker.write_text(
        json.dumps(
            {
                "target": target,
                "torch": torch.__version__,
                "gpu": gpu,
                "exports": len(statuses),
                "not_exported": list(not_exported),
                "optional": sorted(optional),
                "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
        )
        + "\n"
    )
    return marker
