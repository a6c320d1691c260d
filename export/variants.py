"""A variant is one exported file served as one Triton model: a format at a precision for a target.

Variants are written ``FORMAT/PRECISION`` (``torchscript/fp16``). The served model name is the base
name for TorchScript FP32 and gets suffixes otherwise: ``digits_fp16``, ``digits_onnx``,
``efficientnet_lite0_trt_fp16``.
"""

from __future__ import annotations

import dataclasses

from export.errors import SpecError
from export.spec import PRECISIONS

FORMATS = ("torchscript", "torch-tensorrt", "onnx")
TARGETS = ("cpu", "gpu")
PLATFORM = {"torchscript": "pytorch_libtorch", "torch-tensorrt": "pytorch_libtorch", "onnx": "onnxruntime_onnx"}
FILENAME = {"torchscript": "model.pt", "torch-tensorrt": "model.pt", "onnx": "model.onnx"}
_SUFFIX = {"torchscript": "", "torch-tensorrt": "trt", "onnx": "onnx"}
REQUIRED_FORMATS = {"cpu": frozenset({"torchscript", "onnx"}), "gpu": frozenset({"torchscript"})}
"""Per target, the formats whose variants an export must deliver; the other variants are optional.

cpu: TorchScript and ONNX Runtime are pinned pip packages, so a missing toolchain is a broken install
and fails the run. gpu: only TorchScript on CUDA is sure in the NGC PyTorch image; Torch-TensorRT and
ONNX Runtime's CUDA and TensorRT providers depend on how the image was built. An optional variant that
is skipped (toolchain missing) or fails is reported on its own line and does not fail the run, so the
containers' ``service_completed_successfully`` and the Kubernetes Job still see success; a variant
named with ``--format``, or any variant under ``--require-all``, is required."""


@dataclasses.dataclass(frozen=True)
class Variant:
    format: str
    """``torchscript`` | ``torch-tensorrt`` | ``onnx``."""
    precision: str = "fp32"
    """``fp32`` | ``fp16`` | ``bf16``; I/O stays FP32 with casts inside the model."""

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise SpecError(f"format {self.format!r} is not one of {FORMATS}")
        if self.precision not in PRECISIONS:
            raise SpecError(f"precision {self.precision!r} is not one of {PRECISIONS}")
        if self.format == "torch-tensorrt" and self.precision == "bf16":
            raise SpecError("torch-tensorrt/bf16 is not offered: use fp16 or fp32")

    def check_target(self, target: str) -> None:
        """Refuse, before any work, a variant that cannot exist on ``target``."""
        if target not in TARGETS:
            raise SpecError(f"target {target!r} is not one of {TARGETS}")
        if target == "cpu" and self.format == "torch-tensorrt":
            raise SpecError("torch-tensorrt builds TensorRT engines for a GPU: use --target gpu")
        if target == "cpu" and self.format == "onnx" and self.precision != "fp32":
            raise SpecError(f"onnx/{self.precision} runs through the TensorRT accelerator on a GPU: use --target gpu")

    def required_on(self, target: str) -> bool:
        """Whether ``target``'s export fails when this variant cannot be exported (``REQUIRED_FORMATS``)."""
        return self.format in REQUIRED_FORMATS[target]

    @classmethod
    def parse(cls, text: str) -> Variant:
        fmt, _, precision = text.partition("/")
        return cls(fmt, precision or "fp32")

    def model_name(self, base: str) -> str:
        parts = [base, _SUFFIX[self.format], "" if self.precision == "fp32" else self.precision]
        return "_".join(p for p in parts if p)

    @property
    def platform(self) -> str:
        return PLATFORM[self.format]

    @property
    def filename(self) -> str:
        return FILENAME[self.format]

    def __str__(self) -> str:
        return f"{self.format}/{self.precision}"


def base_model(served: str) -> str:
    """The model a served variant was exported from (``minilm_onnx`` -> ``minilm``); a base name is its own."""
    suffixes = set()
    for fmt in FORMATS:
        for precision in PRECISIONS:
            try:
                suffixes.add(Variant(fmt, precision).model_name("_")[1:])
            except SpecError:
                continue
    for suffix in sorted(suffixes - {""}, key=len, reverse=True):  # _trt_fp16 before _fp16
        if served.endswith(suffix) and len(served) > len(suffix):
            return served[: -len(suffix)]
    return served
