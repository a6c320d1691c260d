"""Eager -> TorchScript ``model.pt`` (trace, then freeze), at FP32 or at reduced precision.

Reduced precision keeps FP32 I/O: the saved module casts floating inputs down and outputs back up,
so clients send the same tensors to every variant. The wrapper keeps ``forward``'s argument names,
which is how Triton's libtorch backend (and backends/pytorch locally) matches inputs.
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import TYPE_CHECKING

from export.formats.registry import PRECISIONS, Format, register

if TYPE_CHECKING:  # torch is imported where it runs, so the registry's readers stay light
    import torch
    from torch import nn

    from export.variants import Variant
    from export.zoo.base import ZooModel

FORMAT = register(
    Format(
        name="torchscript",
        filename="model.pt",
        platform="pytorch_libtorch",
        backend="pytorch",
        runtime="TorchScript (torch.jit.load)",
        precisions={"cpu": PRECISIONS, "gpu": PRECISIONS},
        module=__name__,
        required_on=frozenset({"cpu", "gpu"}),
        rank=0,
    )
)


def dtype(precision: str) -> torch.dtype:
    import torch

    return {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[precision]


@functools.cache
def _cast_wrapper() -> type:
    """The base of the reduced-precision wrapper (a class here: ``nn.Module`` needs torch)."""
    import torch
    from torch import nn

    class CastWrapper(nn.Module):
        def __init__(self, module: nn.Module, dtype: torch.dtype):
            super().__init__()
            self.inner = copy.deepcopy(module).to(dtype).eval()
            self.dtype = dtype

        def _run(self, *inputs):
            result = self.inner(*[x.to(self.dtype) if x.is_floating_point() else x for x in inputs])
            if isinstance(result, torch.Tensor):
                return result.float() if result.is_floating_point() else result
            return tuple(r.float() if r.is_floating_point() else r for r in result)

    return CastWrapper


def at_precision(zoo: ZooModel, precision: str) -> nn.Module:
    """The eager module itself at FP32, else a copy at ``precision`` with FP32 I/O and the same argument names."""
    if precision == "fp32":
        return zoo.module
    names = ", ".join(t.name for t in zoo.inputs)
    namespace: dict = {}
    exec(f"def forward(self, {names}):\n    return self._run({names})\n", namespace)  # noqa: S102 - names are validated identifiers
    wrapper_type = type("ReducedPrecision", (_cast_wrapper(),), {"forward": namespace["forward"]})
    return wrapper_type(zoo.module, dtype(precision))


def trace(module: nn.Module, example: tuple[torch.Tensor, ...], freeze: bool = True) -> torch.jit.ScriptModule:
    import torch

    with torch.no_grad():
        traced = torch.jit.trace(module.eval(), example, check_trace=False)
    # Freezing inlines the weights and folds constants, which the runtime would otherwise redo per call.
    return torch.jit.freeze(traced.eval()) if freeze else traced


def convert(zoo: ZooModel, variant: Variant, target: Path, device: str = "cpu", max_batch_size: int = 0) -> None:
    module = at_precision(zoo, variant.precision).to(device)
    example = tuple(x.to(device) for x in zoo.example_inputs)
    # Freezing folds BatchNorm into the convolutions; done in FP16 that folding loses precision
    # (EfficientNet-Lite0: max error 0.31 frozen vs 0.077 unfrozen at batch 16), so only FP32 freezes.
    trace(module, example, freeze=variant.precision == "fp32").save(str(target))


def load(path: Path, device: str = "cpu", variant: Variant | None = None):
    import torch

    module = torch.jit.load(str(path), map_location=device).eval()

    def run(*inputs: torch.Tensor):
        with torch.no_grad():
            return module(*[x.to(device) for x in inputs])

    return run
