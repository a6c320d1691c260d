"""What a zoo builder returns, and the cache that keeps trained weights between runs."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path
from typing import Callable

import torch
from torch import nn

from export.spec import TensorSpec

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def cache_dir() -> Path:
    return Path(os.environ.get("TRITONKIT_CACHE", PROJECT_ROOT / ".cache"))


@dataclasses.dataclass
class ZooModel:
    """An eager model ready to export, with the data that proves an export right."""

    name: str
    module: nn.Module
    """The eager model in eval mode; the reference every export is checked against."""
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    example_inputs: tuple[torch.Tensor, ...]
    """Small batch used for tracing."""
    reference_inputs: tuple[torch.Tensor, ...]
    """Real data for the parity check (a different batch size from the example, to catch baked shapes)."""
    atol: float
    """Largest absolute difference from eager accepted for an FP32 export."""
    description: str = ""


def cached_state_dict(name: str, recipe: dict, train: Callable[[], dict]) -> dict:
    """Train once per recipe; later calls (the export, the tests) load the same weights."""
    key = hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:12]
    path = cache_dir() / "zoo" / f"{name}-{key}.pt"
    if path.exists():
        return torch.load(path, weights_only=True)
    state = train()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    tmp.replace(path)
    return state
