"""Custom TorchScript operators of the project, defined with ``torch.library`` under ``tritonkit::``.

A TorchScript file that calls one of these ops records it by name (``tritonkit::hardswish_clamp``);
loading that file needs the op registered first, or ``torch.jit.load`` fails with
``Unknown builtin op: tritonkit::hardswish_clamp``. Neither TensorRT nor Triton's native libtorch
backend knows these ops, so a model using them is served by the Python backend ``backends/pytorch``
with the config parameter ``TORCH_OPS_MODULES: "backends.custom_ops"``, which imports this module
before loading the model.

Ops:

* ``tritonkit::hardswish_clamp(Tensor x, float lo, float hi) -> Tensor``: a fused activation,
  ``clamp(hardswish(x), lo, hi)`` with ``hardswish(x) = x * relu6(x + 3) / 6``; one pass over ``x``,
  differentiable (so a model using it can be trained), with a fake (meta) implementation for tracing
  and ``torch.compile``.
"""

from __future__ import annotations

import torch

NAMESPACE = "tritonkit"
OPS = ("hardswish_clamp",)


@torch.library.custom_op(f"{NAMESPACE}::hardswish_clamp", mutates_args=(), device_types=("cpu", "cuda"))
def hardswish_clamp(x: torch.Tensor, lo: float, hi: float) -> torch.Tensor:
    """``clamp(x * relu6(x + 3) / 6, lo, hi)``, element-wise, in ``x``'s dtype."""
    if lo > hi:
        raise ValueError(f"tritonkit::hardswish_clamp: lo={lo} is above hi={hi}")
    out = torch.empty_like(x)
    torch.add(x, 3.0, out=out)
    out.clamp_(0.0, 6.0).mul_(x).div_(6.0)
    return out.clamp_(lo, hi)


@hardswish_clamp.register_fake
def _(x: torch.Tensor, lo: float, hi: float) -> torch.Tensor:
    return torch.empty_like(x)


def _setup_context(ctx, inputs, output) -> None:
    x, lo, hi = inputs
    ctx.save_for_backward(x)
    ctx.lo, ctx.hi = lo, hi


def _backward(ctx, grad):
    (x,) = ctx.saved_tensors
    # d hardswish / dx: 0 below -3, 1 above 3, (2x + 3) / 6 between; clamp passes the gradient
    # where the hard-swish value lies within [lo, hi], as torch.clamp does.
    slope = torch.where(x < -3.0, 0.0, torch.where(x > 3.0, 1.0, (2.0 * x + 3.0) / 6.0))
    hs = x * (x + 3.0).clamp(0.0, 6.0) / 6.0
    inside = (hs >= ctx.lo) & (hs <= ctx.hi)
    return grad * slope * inside, None, None


hardswish_clamp.register_autograd(_backward, setup_context=_setup_context)
