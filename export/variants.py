"""A variant is one exported file served as one Triton model: a format at a precision for a target.

Variants are written ``FORMAT/PRECISION`` (``torchscript/fp16``). The served model name is the base
name for TorchScript FP32 and gets suffixes otherwise: ``digits_fp16``, ``digits_onnx``,
``efficientnet_lite0_trt_fp16``.
"""

from __future__ import annotations

import dataclasses

from export import formats
from export.errors import SpecError
from export.formats.registry import TARGETS
from export.spec import PRECISIONS

__all__ = ["FORMATS", "REQUIRED_FORMATS", "TARGETS", "Variant", "base_model"]

FORMATS = formats.names()
"""The registered formats (export/formats/), the default first."""
REQUIRED_FORMATS = {t: frozenset(f.name for f in formats.entries() if t in f.required_on) for t in TARGETS}
"""Per target, the formats whose variants an export must deliver (each format's ``required_on``); the other
variants are optional.

cpu: TorchScript and ONNX Runtime are pinned pip packages, so a missing toolchain is a broken install
and fails the run. gpu: only TorchScript on CUDA is sure in the NGC PyTorch image; Torch-TensorRT and
ONNX Runtime's CUDA and TensorRT providers depend on how the image was built. An optional variant that
is skipped (toolchain missing) or fails is reported on its own line and does not fail the run, so the
containers' ``service_completed_successfully`` and the Kubernetes Job still see success; a variant
named with ``--format``, or any variant under ``--require-all``, is required."""


@dataclasses.dataclass(frozen=True)
class Variant:
    format: str
    """A registered format's name (``export.formats.names()``): ``torchscript``, ``torch-tensorrt``, ``onnx``."""
    precision: str = "fp32"
    """``fp32`` | ``fp16`` | ``bf16``; I/O stays FP32 with casts inside the model."""

    def __post_init__(self) -> None:
        fmt = formats.get(self.format)
        if self.precision not in PRECISIONS:
            raise SpecError(f"precision {self.precision!r} is not one of {PRECISIONS}")
        if self.precision not in fmt.offered:
            raise SpecError(f"{self} is not offered: use {' or '.join(fmt.offered)}")

    @property
    def fmt(self) -> formats.Format:
        """The format's registered facts."""
        return formats.get(self.format)

    def check_target(self, target: str) -> None:
        """Refuse, before any work, a variant that cannot exist on ``target``."""
        if target not in TARGETS:
            raise SpecError(f"target {target!r} is not one of {TARGETS}")
        fmt = self.fmt
        if self.precision not in fmt.precisions.get(target, ()):
            where = " or ".join(f"--target {t}" for t in fmt.targets if self.precision in fmt.precisions[t])
            subject = str(self) if fmt.precisions.get(target) else self.format  # the format is not there at all
            raise SpecError(f"{subject} {fmt.target_reason}: use {where}")

    def required_on(self, target: str) -> bool:
        """Whether ``target``'s export fails when this variant cannot be exported (``REQUIRED_FORMATS``)."""
        return self.format in REQUIRED_FORMATS.get(target, ())

    @classmethod
    def parse(cls, text: str) -> Variant:
        fmt, _, precision = text.partition("/")
        return cls(fmt, precision or "fp32")

    def model_name(self, base: str) -> str:
        parts = [base, self.fmt.suffix, "" if self.precision == "fp32" else self.precision]
        return "_".join(p for p in parts if p)

    @property
    def platform(self) -> str:
        return self.fmt.platform

    @property
    def filename(self) -> str:
        return self.fmt.filename

    def __str__(self) -> str:
        return f"{self.format}/{self.precision}"


def base_model(served: str) -> str:
    """The model a served variant was exported from (``minilm_onnx`` -> ``minilm``); a base name is its own."""
    suffixes = {Variant(fmt.name, p).model_name("_")[1:] for fmt in formats.entries() for p in fmt.offered}
    for suffix in sorted(suffixes - {""}, key=len, reverse=True):  # _trt_fp16 before _fp16
        if served.endswith(suffix) and len(served) > len(suffix):
            return served[: -len(suffix)]
    return served
