"""One module per export format: each registers its facts (``registry.Format``) and has two functions,
``convert(zoo, variant, target, device, max_batch_size)`` and ``load(path, device, variant)``, so callers
never special-case a format.

Each converter raises ``FormatUnavailable`` when its toolchain is missing here (say, Torch-TensorRT
without CUDA), which the pipeline records as ``skipped`` with that one-line reason. A new format is one
new module here (see docs/architecture.md, "Adding an export format").
"""

from __future__ import annotations

from types import ModuleType

from export.formats.registry import Format, default, entries, get, names, of_platform, platforms, register

__all__ = ["Format", "converter", "default", "entries", "get", "names", "of_platform", "platforms", "register"]


def converter(fmt: str) -> ModuleType:
    """The module that converts to and runs format ``fmt`` (an unknown name is a ``SpecError``)."""
    return get(fmt).converter()
