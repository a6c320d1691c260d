"""``digits``: an MLP trained at export time on scikit-learn's handwritten digits (real 8x8 scans).

Public interface: ``PIXELS`` FP32 [64], raw pixel values 0..16 as ``load_digits`` gives them;
``PROBABILITIES`` FP32 [10], softmax over the digits 0-9. The scaling to 0..1 is inside the model,
so clients send the data as it comes. 20% of the scans are held out for the accuracy check.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch
from torch import nn

from export.spec import TensorSpec
from export.zoo.base import Tolerance, ZooModel, cached_state_dict

INPUTS = (TensorSpec("PIXELS", "FP32", (64,)),)
OUTPUTS = (TensorSpec("PROBABILITIES", "FP32", (10,)),)
TRAINING = {"hidden": (128, 64), "epochs": 300, "lr": 1e-2, "weight_decay": 1e-4, "seed": 0}


class DigitsMLP(nn.Module):
    def __init__(self, hidden: tuple[int, ...] = TRAINING["hidden"]):
        super().__init__()
        layers, width = [], 64
        for size in hidden:
            layers += [nn.Linear(width, size), nn.ReLU()]
            width = size
        self.body = nn.Sequential(*layers, nn.Linear(width, 10))

    def forward(self, PIXELS: torch.Tensor) -> torch.Tensor:  # noqa: N803 - forward names are the public names
        return torch.softmax(self.body(PIXELS / 16.0), dim=-1)


@lru_cache(maxsize=1)
def split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(x_train, x_test, y_train, y_test): float32 pixels 0..16 and int64 labels, 80/20 stratified."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    data = load_digits()
    x = data.data.astype(np.float32)
    y = data.target.astype(np.int64)
    return tuple(train_test_split(x, y, test_size=0.2, random_state=0, stratify=y))


def load_samples() -> list[dict[str, np.ndarray]]:
    """The held-out scans as load-test requests, one per request: ``PIXELS`` [1, 64] (batch 1)."""
    return [{"PIXELS": row[None, :]} for row in split()[1]]


def train_full_batch(model: nn.Module, recipe: dict) -> dict[str, torch.Tensor]:
    """Adam on the whole 80% split (1437 scans) for ``recipe["epochs"]`` steps; returns the weights.

    ``model.body`` maps scaled pixels to logits. One thread: a net this small trains about 10x
    faster on one thread than on two contended cores.
    """
    x_train, _, y_train, _ = split()
    optimiser = torch.optim.Adam(model.parameters(), lr=recipe["lr"], weight_decay=recipe["weight_decay"])
    x, y = torch.from_numpy(x_train), torch.from_numpy(y_train)
    model.train()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for _ in range(recipe["epochs"]):
            optimiser.zero_grad()
            nn.functional.cross_entropy(model.body(x / 16.0), y).backward()
            optimiser.step()
    finally:
        torch.set_num_threads(threads)
    return model.state_dict()


def train() -> dict[str, torch.Tensor]:
    torch.manual_seed(TRAINING["seed"])
    return train_full_batch(DigitsMLP(), TRAINING)


def accuracy(probabilities: np.ndarray, labels: np.ndarray) -> float:
    return float((np.asarray(probabilities).argmax(axis=1) == labels).mean())


def zoo_model(name: str, module: nn.Module, tolerances: dict[str, Tolerance], description: str) -> ZooModel:
    """A trained digits-interface model with the held-out scans as its parity data."""
    _, x_test, _, _ = split()
    return ZooModel(
        name=name,
        module=module.eval(),
        inputs=INPUTS,
        outputs=OUTPUTS,
        example_inputs=(torch.from_numpy(x_test[:8]),),
        random_inputs=lambda batch, _seq, gen: (torch.randint(0, 17, (batch, 64), generator=gen).float(),),
        reference_inputs=(torch.from_numpy(x_test),),
        tolerances=tolerances,
        real_data_check="top1",
        labels=tuple(str(d) for d in range(10)),
        description=description,
    )


def build() -> ZooModel:
    model = DigitsMLP()
    model.load_state_dict(cached_state_dict("digits", TRAINING, train))
    return zoo_model(
        "digits",
        model,
        {"fp32": Tolerance(atol=1e-5), "fp16": Tolerance(atol=5e-3, min_agreement=0.99)},
        "MLP trained on scikit-learn's digits (real scans), 20% held out",
    )
