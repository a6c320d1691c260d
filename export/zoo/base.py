"""What a zoo builder returns, and the cache that keeps trained weights between runs."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from export.spec import TensorSpec

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def cache_dir() -> Path:
    """Where trained weights and converted tokenizers are kept between runs.

    ``$TRITONKIT_CACHE`` when set; else the checkout's ``.cache`` when it can be written; else the user's
    cache folder (``$XDG_CACHE_HOME/tritonkit`` or ``~/.cache/tritonkit``), then the temp folder. An image
    keeps the project read-only under /opt/tritonkit and runs it as uid 1000 with ``HOME=/tmp``: its cache
    lands in /tmp/.cache/tritonkit, the writable emptyDir of the Kubernetes Job.
    """
    if os.environ.get("TRITONKIT_CACHE"):
        return Path(os.environ["TRITONKIT_CACHE"])
    xdg = os.environ.get("XDG_CACHE_HOME")
    candidates = [
        PROJECT_ROOT / ".cache",
        Path(xdg) / "tritonkit" if xdg else None,
        Path(os.path.expanduser("~")) / ".cache" / "tritonkit",
        Path(tempfile.gettempdir()) / f"tritonkit-cache-{os.getuid()}",
    ]
    for candidate in candidates:
        if candidate is not None and candidate.is_absolute() and _writable(candidate):
            return candidate
    return candidates[-1]


def _writable(path: Path) -> bool:
    """``path`` is, or could be created as, a folder this process may write (a read-only mount says no)."""
    for folder in (path, *path.parents):
        if folder.exists():
            return folder.is_dir() and os.access(folder, os.W_OK | os.X_OK)
    return False


@dataclasses.dataclass(frozen=True)
class Tolerance:
    """How far an export may be from eager FP32 and still pass."""

    atol: float
    """Absolute part: |export - eager| <= atol + rtol * |eager|, element-wise (numpy.allclose)."""
    rtol: float = 0.0
    """Relative part of the same bound."""
    min_agreement: float = 1.0
    """Real data: least top-1 agreement (``top1`` check) or least cosine similarity (``cosine`` check)."""


@dataclasses.dataclass
class ZooModel:
    """An eager model ready to export, with the data that proves an export right."""

    name: str
    module: nn.Module
    """The eager FP32 model in eval mode; the reference every export is checked against."""
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    example_inputs: tuple[torch.Tensor, ...]
    """Small batch used for tracing and ONNX export."""
    random_inputs: Callable[[int, int | None, torch.Generator], tuple[torch.Tensor, ...]]
    """``random_inputs(batch, seq_len, generator)``: fresh valid inputs; ``seq_len`` is None unless text."""
    reference_inputs: tuple[torch.Tensor, ...]
    """Real data for the parity check (a different batch size from the example, to catch baked shapes)."""
    tolerances: dict[str, Tolerance]
    """Per precision (``fp32``, ``fp16``, ``bf16``); a precision missing here is not offered."""
    real_data_check: str | None = None
    """``top1`` (classifier: argmax agreement) or ``cosine`` (embedding) on the reference data."""
    seq_lengths: tuple[int, ...] = ()
    """Text models: sequence lengths the random parity check covers."""
    labels: tuple[str, ...] = ()
    """Classifiers: class names, index = class id."""
    description: str = ""
    """One line for README and manifest; says so when weights are random."""


def cached_state_dict(name: str, recipe: dict, train: Callable[[], dict]) -> dict:
    """Train once per recipe; later calls (the export, the tests) load the same weights."""
    key = hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:12]
    path = cache_dir() / "zoo" / f"{name}-{key}.pt"
    if path.exists():
        return torch.load(path, weights_only=True)
    state = train()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        torch.save(state, tmp)
        tmp.replace(path)
    except OSError as exc:  # a cache is a shortcut: the weights are right, only the next run repeats the work
        warnings.warn(f"{name}: weights not cached ({exc}); set TRITONKIT_CACHE to a writable folder", stacklevel=2)
    return state


def random_images(batch: int, generator: torch.Generator, size: int = 224) -> torch.Tensor:
    """Random RGB pixels 0..255 as FP32 [batch, 3, size, size], before any model-specific scaling."""
    return torch.randint(0, 256, (batch, 3, size, size), generator=generator).float()
