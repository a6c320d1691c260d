"""The status of one conversion, as recorded in the variant's manifest.json."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class ConversionResult:
    format: str
    """``torchscript`` | ``torch-tensorrt`` | ``onnx``."""
    precision: str
    """``fp32`` | ``fp16`` | ``bf16``."""
    status: str
    """``ok``, ``mismatch`` (exported but outside tolerance), ``failed`` or ``skipped`` (toolchain missing)."""
    path: str = ""
    """The model file, relative to the model folder."""
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    atol: float | None = None
    real_data: dict | None = None
    """Top-1 agreement or least cosine similarity on real data, with its minimum."""
    seconds: float = 0.0
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def summary(self) -> str:
        return f"{self.format}/{self.precision}: {self.status}" + (f", {self.details()}" if self.details() else "")

    def details(self) -> str:
        parts = []
        if self.max_abs_error is not None:
            parts.append(
                f"max abs error {self.max_abs_error:.2e} (atol {self.atol:.2g}), max rel error {self.max_rel_error:.2e}"
            )
        if self.real_data:
            parts.append(
                f"{self.real_data['check']} {self.real_data['value']:.4f} on "
                f"{self.real_data['samples']} real samples (min {self.real_data['minimum']})"
            )
        if self.message:
            parts.append(self.message)
        return ", ".join(parts)
