"""``custom_op_mlp``: the digits MLP with a custom-op activation, trained at export time on scikit-learn's digits.

The activation is ``tritonkit::hardswish_clamp`` from ``backends/custom_ops.py`` (a ``torch.library`` op),
so the TorchScript file records that op by name: neither TensorRT nor Triton's native libtorch backend
can run it, and the Python backend ``backends/pytorch`` loads it only with the config parameter
``TORCH_OPS_MODULES: "backends.custom_ops"``.

Public interface, as ``digits``: ``PIXELS`` FP32 [64], raw pixel values 0..16; ``PROBABILITIES`` FP32
[10], softmax over the digits 0-9. Trained (full batch, seeded, a few seconds) on the same 80% split
as ``digits``, through the op's own gradient; the 20% held out are the parity check's real data.
"""

from __future__ import annotations

import torch
from torch import nn

import backends.custom_ops  # noqa: F401 - registers torch.ops.tritonkit.*
from export.zoo.base import Tolerance, ZooModel, cached_state_dict
from export.zoo.digits import train_full_batch, zoo_model

TRAINING = {"hidden": (64, 32), "clamp": (-0.25, 4.0), "epochs": 200, "lr": 1e-2, "weight_decay": 1e-4, "seed": 0}
TORCH_OPS_MODULES = "backends.custom_ops"
"""The value of the config parameter ``TORCH_OPS_MODULES`` this model needs."""


class HardSwishClamp(nn.Module):
    def __init__(self, lo: float, hi: float):
        super().__init__()
        self.lo, self.hi = float(lo), float(hi)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.tritonkit.hardswish_clamp(x, self.lo, self.hi)


class CustomOpMLP(nn.Module):
    def __init__(self, hidden: tuple[int, ...] = TRAINING["hidden"], clamp: tuple[float, float] = TRAINING["clamp"]):
        super().__init__()
        layers, width = [], 64
        for size in hidden:
            layers += [nn.Linear(width, size), HardSwishClamp(*clamp)]
            width = size
        self.body = nn.Sequential(*layers, nn.Linear(width, 10))

    def forward(self, PIXELS: torch.Tensor) -> torch.Tensor:  # noqa: N803 - forward names are the public names
        return torch.softmax(self.body(PIXELS / 16.0), dim=-1)


def train() -> dict[str, torch.Tensor]:
    torch.manual_seed(TRAINING["seed"])
    return train_full_batch(CustomOpMLP(), TRAINING)


def build() -> ZooModel:
    model = CustomOpMLP()
    model.load_state_dict(cached_state_dict("custom_op_mlp", TRAINING, train))
    return zoo_model(
        "custom_op_mlp",
        model,
        {"fp32": Tolerance(atol=1e-5)},
        "digits MLP whose activation is the custom op tritonkit::hardswish_clamp; "
        "trained on scikit-learn's digits (seeded), 20% held out; needs TORCH_OPS_MODULES",
    )
