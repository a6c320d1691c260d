"""export/models.toml -> ``ModelSpec`` objects, with command-line overrides applied and validated."""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path
from typing import Any

from export.errors import SpecError, UnknownModelError
from export.spec import DynamicBatching, InstanceGroup, ModelSpec
from export.zoo.base import ZooModel

CATALOG = Path(__file__).with_name("models.toml")
FORMATS = ("torchscript",)  # Torch-TensorRT and ONNX arrive with their converters
_ENTRY_KEYS = {"builder", "formats"}
_SPEC_KEYS = {f.name for f in dataclasses.fields(ModelSpec)} - {"name", "inputs", "outputs"}


@dataclasses.dataclass(frozen=True)
class CatalogEntry:
    name: str
    builder: str
    """Zoo builder that makes the eager model (export/zoo)."""
    formats: tuple[str, ...]
    """Export formats, each one of ``FORMATS``."""
    settings: dict[str, Any]
    """ModelSpec fields as written in the file."""

    def spec(self, zoo: ZooModel, **overrides: Any) -> ModelSpec:
        values = {**self.settings, **overrides}
        unknown = set(values) - _SPEC_KEYS
        if unknown:
            raise SpecError(f"model {self.name!r}: unknown settings {sorted(unknown)}; known: {sorted(_SPEC_KEYS)}")
        if isinstance(values.get("dynamic_batching"), dict):
            values["dynamic_batching"] = DynamicBatching(**values["dynamic_batching"])
        if "instance_groups" in values:
            values["instance_groups"] = tuple(
                g if isinstance(g, InstanceGroup) else InstanceGroup(**g) for g in values["instance_groups"]
            )
        if isinstance(values.get("parameters"), dict):
            values["parameters"] = tuple(values["parameters"].items())
        values.setdefault("description", zoo.description)
        try:
            return ModelSpec(name=self.name, inputs=zoo.inputs, outputs=zoo.outputs, **values)
        except TypeError as exc:
            raise SpecError(f"model {self.name!r}: {exc}") from None


def load(path: Path = CATALOG) -> dict[str, CatalogEntry]:
    with open(path, "rb") as handle:
        raw = tomllib.load(handle)
    entries = {}
    for name, table in raw.items():
        formats = tuple(table.get("formats", ("torchscript",)))
        bad = [f for f in formats if f not in FORMATS]
        if bad:
            raise SpecError(f"{path}: model {name!r}: formats {bad} are not among {FORMATS}")
        settings = {k: v for k, v in table.items() if k not in _ENTRY_KEYS}
        entries[name] = CatalogEntry(name, table.get("builder", name), formats, settings)
    return entries


def entry(name: str, path: Path = CATALOG) -> CatalogEntry:
    entries = load(path)
    if name not in entries:
        raise UnknownModelError(f"model {name!r} is not in {path}; listed: {sorted(entries)}")
    return entries[name]
