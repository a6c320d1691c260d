"""One converter per export format: ``convert`` writes the file, ``load`` returns a callable for parity.

Every converter has the same two functions, so callers never special-case a format:
``convert(zoo, variant, target, device, max_batch_size)`` and ``load(path, device, variant)``.

Each converter raises ``FormatUnavailable`` when its toolchain is missing here (say, Torch-TensorRT
without CUDA), which the pipeline records as ``skipped`` with that one-line reason.
"""

from __future__ import annotations

import importlib

MODULES = {
    "torchscript": "export.formats.torchscript",
    "onnx": "export.formats.onnx",
    "torch-tensorrt": "export.formats.tensorrt",
}


def converter(fmt: str):
    return importlib.import_module(MODULES[fmt])
