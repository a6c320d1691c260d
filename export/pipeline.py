"""One variant of one model into the repository: convert, check parity, then publish all at once.

Each conversion is a small unit with a status (``ok``, ``mismatch``, ``failed``, ``skipped``). It
works in a staging folder under the temp directory (``$TMPDIR``, else /tmp): never beside the
repository, whose parent is ``/`` for a volume mounted at ``/models`` and not writable by the export's
user. Only an export that passes its parity check is copied into ``<repository>/<model>/<version>/``
together with its ``manifest.json`` (swapped in by renames inside the model folder), and only then
is ``config.pbtxt`` replaced. A failed or skipped export leaves the repository as it was.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from export import config as config_io
from export import parity, zoo
from export.catalog import CatalogEntry
from export.errors import FormatUnavailable
from export.result import ConversionResult
from export.spec import ModelSpec
from export.user import recorded
from export.variants import Variant
from export.zoo.base import ZooModel


@dataclasses.dataclass
class Export:
    """What one variant's export produced."""

    spec: ModelSpec
    variant: Variant
    result: ConversionResult
    manifest: dict
    up_to_date: bool = False


def export_device(target: str) -> str:
    """Where a target's exports are traced and checked: a file traced on CUDA runs only where CUDA is."""
    return "cuda" if target == "gpu" else "cpu"


def write_configs(
    entry: CatalogEntry,
    repository: Path,
    target: str = "cpu",
    variants=None,
    model: ZooModel | None = None,
    **overrides: Any,
) -> list[ModelSpec]:
    """Write the configs ``export_entry`` would write for ``target``, and no model file: to review them where
    the target cannot run (a GPU target's configs on a CPU machine)."""
    variants = variants or entry.variants[target]
    for variant in variants:
        variant.check_target(target)
    model = model or zoo.build(entry.builder)
    specs = [entry.spec(model, variant, target, **overrides) for variant in variants]
    for spec in specs:
        config_io.write(spec, Path(repository))
    return specs


def fingerprint(spec: ModelSpec, variant: Variant, target: str, source: str) -> str:
    """Changes when the config, the model's code, the converter, the parity check or torch changes."""
    parts = [
        config_io.render(spec),
        str(variant),
        target,
        source,
        torch.__version__,
        inspect.getsource(variant.fmt.converter()),
        inspect.getsource(parity),
    ]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def builder_source(builder: str) -> str:
    """The builder module's code and that of the project modules it uses (export.zoo.*, backends.*)."""
    module = zoo.import_builder(builder)
    names = {module.__name__}
    for value in vars(module).values():
        owner = value.__name__ if inspect.ismodule(value) else getattr(value, "__module__", None)
        if isinstance(owner, str) and owner.startswith(("export.zoo", "backends")):
            names.add(owner)
    return "\0".join(Path(inspect.getfile(sys.modules[name])).read_text() for name in sorted(names))


def export_entry(
    entry: CatalogEntry,
    repository: Path,
    target: str = "cpu",
    variants=None,
    force: bool = False,
    model: ZooModel | None = None,
    record: dict | None = None,
    **overrides: Any,
) -> list[Export]:
    """Export the entry's variants for ``target`` (or the ``variants`` given); one ``Export`` each.
    ``record``: a ``--model-file`` export's arguments, kept in each manifest as ``export_args`` with the
    serving settings it was exported with (``export.user.recorded``)."""
    variants = variants or entry.variants[target]
    for variant in variants:
        variant.check_target(target)
    model = model or zoo.build(entry.builder)
    source = builder_source(entry.builder) if entry.builder in zoo.BUILDERS else entry.builder
    return [
        export_variant(
            model,
            entry.spec(model, variant, target, **overrides),
            variant,
            Path(repository),
            target,
            source,
            force,
            record,
        )
        for variant in variants
    ]


def export_variant(
    model: ZooModel,
    spec: ModelSpec,
    variant: Variant,
    repository: Path,
    target: str = "cpu",
    source: str = "",
    force: bool = False,
    record: dict | None = None,
) -> Export:
    version_dir = repository / spec.name / str(spec.version)
    manifest_file = version_dir / "manifest.json"
    key = fingerprint(spec, variant, target, source)
    previous = _read_json(manifest_file)
    if (
        not force
        and previous.get("fingerprint") == key
        and (version_dir / variant.filename).exists()
        and (repository / spec.name / "config.pbtxt").exists()
    ):
        if record is not None and previous.get("export_args") != {**record, "settings": recorded.settings_of(spec)}:
            previous["export_args"] = {**record, "settings": recorded.settings_of(spec)}
            manifest_file.write_text(json.dumps(previous, indent=2) + "\n")
        return Export(spec, variant, ConversionResult(**previous["result"]), previous, up_to_date=True)

    if variant.precision not in model.tolerances:
        result = ConversionResult(
            variant.format,
            variant.precision,
            "failed",
            message=f"{model.name} declares no tolerance for {variant.precision}",
        )
        return Export(spec, variant, result, {})
    device = export_device(target)
    repository.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f"tritonkit-export-{spec.name}-"))
    # mkdtemp makes it 0700, and the published version folder keeps the mode: a server running as another
    # user of the volume's group (fsGroup) could not read it.
    staging.chmod(0o755)
    started = time.perf_counter()
    try:
        result, manifest = _convert_and_check(model, spec, variant, staging, device)
        result.seconds = round(time.perf_counter() - started, 2)
        manifest.update(
            fingerprint=key,
            source=source.splitlines()[0] if source else "",
            target=target,
            result=dataclasses.asdict(result),
        )
        if record is not None:
            manifest["export_args"] = {**record, "settings": recorded.settings_of(spec)}
        if result.ok:
            (staging / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
            _publish(staging, version_dir)
            config_io.write(spec, repository)
        return Export(spec, variant, result, manifest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _convert_and_check(model: ZooModel, spec: ModelSpec, variant: Variant, staging: Path, device: str):
    fmt = variant.fmt
    target_file = staging / variant.filename
    base = {"format": variant.format, "precision": variant.precision, "path": f"{spec.version}/{variant.filename}"}
    manifest = {
        "model": spec.name,
        "version": spec.version,
        "variant": str(variant),
        "description": spec.description,
        "platform": spec.platform,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "inputs": [dataclasses.asdict(t) for t in spec.inputs],
        "outputs": [dataclasses.asdict(t) for t in spec.outputs],
        "max_batch_size": spec.max_batch_size,
    }
    try:
        if device == "cuda" and not torch.cuda.is_available():
            raise FormatUnavailable("--target gpu needs a CUDA device and torch sees none")
        fmt.convert(model, variant, target_file, device=device, max_batch_size=spec.max_batch_size)
        loaded = fmt.load(target_file, device=device, variant=variant)  # the runner bench-export times too
        report = parity.check(model, loaded, variant.precision, spec.max_batch_size)
    except FormatUnavailable as exc:
        return ConversionResult(**base, status="skipped", message=str(exc)), manifest
    except Exception as exc:  # noqa: BLE001 - a conversion's failure is its status, with the reason
        message = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
        return ConversionResult(**base, status="failed", message=message), manifest
    manifest["files"] = {p.name: _sha256(p) for p in sorted(staging.iterdir()) if p.is_file()}
    manifest["parity"] = dataclasses.asdict(report)
    status = "ok" if report.ok else "mismatch"
    result = ConversionResult(
        **base,
        status=status,
        max_abs_error=report.max_abs_error,
        max_rel_error=report.max_rel_error,
        atol=report.tolerance["atol"],
        real_data=report.real_data,
        message=report.message,
    )
    return result, manifest


def _publish(staging: Path, version_dir: Path) -> None:
    """Swap the new version folder in with renames, so a reader never sees half of it."""
    version_dir.parent.mkdir(parents=True, exist_ok=True)
    incoming = version_dir.with_name(f".{version_dir.name}.incoming")
    outgoing = version_dir.with_name(f".{version_dir.name}.outgoing")
    shutil.rmtree(incoming, ignore_errors=True)
    shutil.rmtree(outgoing, ignore_errors=True)
    shutil.copytree(staging, incoming)
    if version_dir.exists():
        version_dir.rename(outgoing)
    incoming.rename(version_dir)
    shutil.rmtree(outgoing, ignore_errors=True)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
