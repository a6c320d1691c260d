"""One model from the catalog to the repository: version folder, parity check, config.pbtxt, manifest."""

from __future__ import annotations

import hashlib
import inspect
import json
import platform
from pathlib import Path
from typing import Any

import torch

from export import config as config_io
from export import torchscript, zoo
from export.catalog import CatalogEntry
from export.errors import ParityError
from export.spec import ModelSpec


def fingerprint(spec: ModelSpec, builder: str) -> str:
    """Changes when the config, the builder's code, the exporter or torch changes."""
    parts = [config_io.render(spec), inspect.getsource(torchscript), torch.__version__,
             Path(inspect.getfile(zoo.import_builder(builder))).read_text()]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def manifest_path(repository: Path, name: str) -> Path:
    return Path(repository) / name / "manifest.json"


def export_entry(entry: CatalogEntry, repository: Path, force: bool = False, **overrides: Any) -> dict:
    """Export one catalog entry; returns its manifest. Raises ParityError when an export disagrees with eager."""
    model = zoo.build(entry.builder)
    spec = entry.spec(model, **overrides)
    version_dir = Path(repository) / spec.name / str(spec.version)
    key = fingerprint(spec, entry.builder)
    previous = _read_manifest(manifest_path(repository, spec.name))
    if not force and previous.get("fingerprint") == key and all(
        (Path(repository) / spec.name / r["path"]).exists() for r in previous.get("conversions", [])
    ):
        previous["up_to_date"] = True
        return previous

    results = [torchscript.export(model, version_dir / "model.pt") for fmt in entry.formats if fmt == "torchscript"]
    for result in results:  # recorded relative to the model folder, so the repository can move
        result.path = str(Path(result.path).relative_to(Path(repository) / spec.name))
    config_io.write(spec, repository)
    manifest = {
        "model": spec.name,
        "version": spec.version,
        "description": spec.description,
        "fingerprint": key,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "conversions": [r.__dict__ for r in results],
    }
    manifest_path(repository, spec.name).write_text(json.dumps(manifest, indent=2) + "\n")
    failed = [r for r in results if not r.ok]
    if failed:
        raise ParityError(f"model {spec.name!r}: " + "; ".join(r.summary() for r in failed))
    return manifest


def _read_manifest(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
