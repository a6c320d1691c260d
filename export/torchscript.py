"""Eager model -> TorchScript ``model.pt``, checked against the eager model on real data."""

from __future__ import annotations

import time
from pathlib import Path

import torch

from export.result import ConversionResult
from export.zoo.base import ZooModel


def trace(zoo: ZooModel, freeze: bool = True) -> torch.jit.ScriptModule:
    """Trace with the example batch; freezing inlines weights and folds constants for the runtime."""
    with torch.inference_mode(False), torch.no_grad():
        traced = torch.jit.trace(zoo.module, zoo.example_inputs, check_trace=True)
    return torch.jit.freeze(traced.eval()) if freeze else traced


def export(zoo: ZooModel, target: Path, freeze: bool = True) -> ConversionResult:
    """Write ``target`` (a ``model.pt``) and check it; the result says how far it is from eager."""
    started = time.perf_counter()
    try:
        module = trace(zoo, freeze=freeze)
        target.parent.mkdir(parents=True, exist_ok=True)
        module.save(str(target))
        error = max_abs_error(zoo, torch.jit.load(str(target)))
    except Exception as exc:  # noqa: BLE001 - any failure is reported as this conversion's status
        return ConversionResult("torchscript", "fp32", "failed", str(target), message=f"{type(exc).__name__}: {exc}",
                                seconds=time.perf_counter() - started)
    status = "ok" if error <= zoo.atol else "mismatch"
    return ConversionResult("torchscript", "fp32", status, str(target), max_abs_error=error, atol=zoo.atol,
                            seconds=time.perf_counter() - started)


def max_abs_error(zoo: ZooModel, exported) -> float:
    """Largest absolute difference between eager and exported outputs on the reference data."""
    with torch.no_grad():
        expected = _as_tuple(zoo.module(*zoo.reference_inputs))
        actual = _as_tuple(exported(*zoo.reference_inputs))
    return max(float((e.float() - a.float()).abs().max()) for e, a in zip(expected, actual))


def _as_tuple(result) -> tuple[torch.Tensor, ...]:
    return (result,) if isinstance(result, torch.Tensor) else tuple(result)
