"""The facts about each export format, in one place: every module in export/formats/ registers one ``Format``.

Everything else reads them from here: ``Variant`` (which names, precisions and targets exist, the served
model name, the file and platform), the config writer (Triton's default backend and file of a platform,
whether the TensorRT accelerator applies), ``ModelSpec``'s platform check, the export command's ``--format``
choices, the pipeline's conversion and parity check and ``tritonkit bench-export`` (both through the
format's one runner, ``Format.load``).

The format modules are found by listing export/formats/, and imported on the first lookup: a new format
is one new module there, nothing else. Each stays light to import (torch and its toolchain are imported
inside ``convert`` and ``load``), so the command line's ``--help`` and the load tests can read the facts.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
import re
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType, ModuleType

from export.errors import SpecError

TARGETS = ("cpu", "gpu")
"""Where an export runs: the local CPU server, or the NGC container on a GPU (``--target``)."""
PRECISIONS = ("fp32", "fp16", "bf16")
"""Compute precisions an export can have; I/O stays FP32 (the casts are inside the model)."""
NON_FORMAT_PLATFORMS = ("python", "ensemble")
"""Platforms a served model may have that no export writes: Python models and ensembles."""
_NAME = re.compile(r"^[a-z][a-z0-9-]*$")
_HERE = Path(__file__).parent


@dataclasses.dataclass(frozen=True)
class Format:
    """One export format: what it writes, what serves it, where and at which precisions it is offered."""

    name: str
    """What ``FORMAT/PRECISION`` and ``--format`` call it: ``onnx``."""
    filename: str
    """The exported file in ``<model>/<version>/``: ``model.onnx``; Triton's default file for ``platform``."""
    platform: str
    """Triton's ``platform`` in config.pbtxt: ``onnxruntime_onnx``."""
    backend: str
    """The Triton backend that serves ``platform`` (``libtriton_<backend>.so``): ``onnxruntime``."""
    runtime: str
    """What runs the exported file in the parity check and in ``tritonkit bench-export`` (``load``)."""
    precisions: Mapping[str, tuple[str, ...]]
    """Target -> the precisions the format is exported at there; a target left out is not offered."""
    module: str
    """The module with ``convert(zoo, variant, target, device, max_batch_size)`` and ``load(path, device,
    variant)``: the registering module's ``__name__``."""
    suffix: str = ""
    """Added to the served model's name (``digits_onnx``); "" for the default format (``digits``)."""
    target_reason: str = ""
    """Why a precision offered on one target is not on another, for that error: ``runs through the
    TensorRT accelerator on a GPU``."""
    required_on: frozenset[str] = frozenset()
    """Targets whose export fails when this format cannot be exported; elsewhere it is optional (skipped
    with its reason when its toolchain is missing)."""
    accelerator: str = ""
    """The execution accelerator the config asks Triton's backend for (``tensorrt``), if any ..."""
    accelerated_precisions: tuple[str, ...] = ()
    """... at these precisions (ONNX at FP16: ONNX Runtime hands the graph to TensorRT in FP16)."""
    rank: int = 100
    """Place in lists (``--help``, tables); the lowest is the default format."""

    def __post_init__(self) -> None:
        where = f"format {self.name!r}"
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise SpecError(f"{where}: the name must match {_NAME.pattern}")
        if not self.filename or "/" in self.filename or self.filename.startswith("."):
            raise SpecError(f"{where}: filename {self.filename!r} must be a file name")
        if not self.platform or self.platform in NON_FORMAT_PLATFORMS:
            raise SpecError(f"{where}: platform {self.platform!r} is not a platform an export writes")
        for field in ("backend", "runtime", "module"):
            if not getattr(self, field):
                raise SpecError(f"{where}: {field} is empty")
        precisions = {t: tuple(p) for t, p in dict(self.precisions).items()}
        object.__setattr__(self, "precisions", MappingProxyType(precisions))  # read-only, as the rest is
        object.__setattr__(self, "required_on", frozenset(self.required_on))
        object.__setattr__(self, "accelerated_precisions", tuple(self.accelerated_precisions))
        unknown = sorted(set(self.precisions) - set(TARGETS))
        if unknown or not any(self.precisions.values()):
            raise SpecError(f"{where}: precisions {dict(self.precisions)} must map targets {TARGETS} to precisions")
        bad = sorted({p for ps in self.precisions.values() for p in ps} - set(PRECISIONS))
        if bad:
            raise SpecError(f"{where}: precisions {bad} are not among {PRECISIONS}")
        if not self.required_on <= set(self.targets):
            raise SpecError(f"{where}: required_on {sorted(self.required_on)} names a target it is not offered on")
        if not set(self.accelerated_precisions) <= set(self.offered) or (
            bool(self.accelerated_precisions) != bool(self.accelerator)
        ):
            raise SpecError(
                f"{where}: accelerated_precisions {list(self.accelerated_precisions)} need an accelerator and "
                f"must be among the offered {list(self.offered)}"
            )
        if not self.target_reason and any(set(self.offered) - set(self.precisions.get(t, ())) for t in TARGETS):
            raise SpecError(f"{where}: target_reason is empty, yet some precision is not offered on every target")

    def __hash__(self) -> int:
        return hash(self.name)

    @property
    def targets(self) -> tuple[str, ...]:
        return tuple(t for t in TARGETS if self.precisions.get(t))

    @property
    def offered(self) -> tuple[str, ...]:
        """Every precision it is exported at on some target, in the order given."""
        return tuple(dict.fromkeys(p for t in TARGETS for p in self.precisions.get(t, ())))

    @property
    def needs_gpu(self) -> bool:
        return "cpu" not in self.targets

    def converter(self) -> ModuleType:
        return importlib.import_module(self.module)

    def convert(self, *args, **kwargs) -> None:
        """Write the exported file (the module's ``convert``, looked up at call time)."""
        return self.converter().convert(*args, **kwargs)

    def load(self, *args, **kwargs):
        """The exported file as a callable of torch tensors: the one runner the parity check and
        ``tritonkit bench-export`` both call."""
        return self.converter().load(*args, **kwargs)


_REGISTRY: dict[str, Format] = {}
_discovered = False


def register(fmt: Format) -> Format:
    """Add ``fmt``; a name taken by another module, or a platform that another format serves from a
    different file or backend, is refused."""
    known = _REGISTRY.get(fmt.name)
    if known is not None and known.module != fmt.module:
        raise SpecError(f"format {fmt.name!r} is registered twice: by {known.module} and by {fmt.module}")
    for other in _REGISTRY.values():
        if other.name != fmt.name and other.platform == fmt.platform:
            if (other.filename, other.backend) != (fmt.filename, fmt.backend):
                raise SpecError(
                    f"format {fmt.name!r}: platform {fmt.platform!r} is served from {other.filename} by backend "
                    f"{other.backend!r} (format {other.name!r}), not {fmt.filename} by {fmt.backend!r}"
                )
    _REGISTRY[fmt.name] = fmt
    return fmt


def _discover() -> None:
    """Import every module of export/formats/ once; each registers its format as it is imported."""
    global _discovered
    if _discovered:
        return
    _discovered = True
    for info in pkgutil.iter_modules([str(_HERE)]):
        if info.name != "registry" and not info.name.startswith("_"):
            importlib.import_module(f"{__package__}.{info.name}")


def entries() -> tuple[Format, ...]:
    """Every registered format, the default first."""
    _discover()
    return tuple(sorted(_REGISTRY.values(), key=lambda f: (f.rank, f.name)))


def names() -> tuple[str, ...]:
    return tuple(f.name for f in entries())


def get(name: str) -> Format:
    """The format called ``name``; an unknown name is a ``SpecError`` (an ``ExportError``) naming the known ones."""
    _discover()
    if name not in _REGISTRY:
        raise SpecError(f"format {name!r} is not one of {', '.join(names())}")
    return _REGISTRY[name]


def default() -> Format:
    """The format a plain model name serves (no suffix): TorchScript."""
    return entries()[0]


def platforms() -> tuple[str, ...]:
    """The platforms the formats write, in the formats' order."""
    return tuple(dict.fromkeys(f.platform for f in entries()))


def of_platform(platform: str) -> Format | None:
    """The first format written for ``platform`` (its Triton default backend and file), or None."""
    return next((f for f in entries() if f.platform == platform), None)
