"""A user's own model, as `tritonkit export --model-file` takes it: a factory returning an nn.Module."""

import torch
from torch import nn


class Scorer(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(16, 32), nn.LayerNorm(32), nn.GELU(), nn.Linear(32, 4))

    def forward(self, features):
        return self.body(features)


def build():
    torch.manual_seed(0)
    return Scorer()


def broken():
    raise RuntimeError("weights file missing")


class Untraceable(nn.Module):
    """Runs eagerly, but the trace records the numpy round trip as a constant."""

    def forward(self, features):
        return torch.from_numpy(features.numpy() * 2)


def untraceable():
    return Untraceable()
