"""The status of one conversion, as recorded in the model's manifest.json."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class ConversionResult:
    format: str
    """``torchscript`` | ``torch-tensorrt`` | ``onnx``."""
    precision: str
    """``fp32`` | ``fp16`` | ``bf16``."""
    status: str
    """``ok``, ``mismatch`` (exported but outside tolerance), ``failed`` or ``skipped``."""
    path: str = ""
    max_abs_error: float | None = None
    atol: float | None = None
    seconds: float = 0.0
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def summary(self) -> str:
        error = "" if self.max_abs_error is None else f" max|eager-export|={self.max_abs_error:.2e} (atol {self.atol:.0e})"
        note = f" {self.message}" if self.message else ""
        return f"{self.format}/{self.precision}: {self.status}{error} in {self.seconds:.1f}s{note}"
