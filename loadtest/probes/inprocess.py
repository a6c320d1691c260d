"""The ceiling: the exported file (TorchScript ``model.pt`` or ONNX ``model.onnx``) called in-process, no server,
at its best batch size.

:func:`limit` calls the model directly (TorchScript under ``torch.inference_mode``, ONNX through an
onnxruntime session, after warmup) for a few seconds per batch size and reports items/s and the median
latency per call, so ``make bench`` can put the served numbers next to what the hardware gives without
any serving layer.

Cores and threads: ``cpus`` pins this process to the cores the server gets (``make bench`` gives the server
and the load generator cores of their own), and the model runs with as many intra-op threads as those
cores (the server's instances share them: ``backends/batching.py`` gives each ``cores / instances``) and
one inter-op thread (``backends/pytorch/model.py``), so the row measures what the server's cores can do.
Without ``cpus``, the cores this process may use. Affinity and thread count are restored afterwards.

It computes on the load test's own payloads stacked into batches (``loadtest.generators.payloads.stack``).
Also here: :func:`model_file`, the exported file and tensors of a served model, read from its config, and
:func:`load_exported`, the file as a callable (the FastAPI baseline serves it with the same code).

Run: ``python -m loadtest.probes --model digits [--seconds 2] [--cpus 1]`` with the payload flags
of ``tritonkit loadtest --model``.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from deploy.server import DEFAULT_REPOSITORY
from export import formats
from export.config import parse
from loadtest.core.client_stats import percentiles
from loadtest.generators.input_data import NUMPY_DTYPES

DEFAULT_BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64)
WARMUP_CALLS = 3
FILENAMES = {p: formats.of_platform(p).filename for p in ("pytorch_libtorch", "onnxruntime_onnx")}
"""The exported file of each platform the in-process row and the FastAPI baseline can load."""


@dataclasses.dataclass
class SizeResult:
    batch: int
    calls: int
    seconds: float
    items_per_s: float
    median_ms: float
    """Median latency of one call at this batch size: its nearest-rank p50, as every p50 of the project."""
    p90_ms: float
    items_per_s_at_median: float
    """batch / median call time: less sensitive than ``items_per_s`` to stalls from other work."""


@dataclasses.dataclass
class InProcessLimit:
    best_batch: int
    best_items_per_s: float
    batch1_median_ms: float | None
    """Median latency of one call at batch 1 (None when batch 1 was not measured)."""
    threads: int
    table: list[SizeResult]

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def default_threads(cpus: frozenset[int] | None = None) -> int:
    """One intra-op thread per core the model runs on (``cpus``, else the cores this process may use)."""
    return max(1, len(cpus or os.sched_getaffinity(0)))


def optimized_execution(model_path: Path) -> bool:
    """False when the model's config sets ``DISABLE_OPTIMIZED_EXECUTION`` (as Triton's libtorch backend
    reads it): the in-process and FastAPI rows then run the module the way the server does."""
    config = model_path.parent.parent / "config.pbtxt"
    if not config.is_file():
        return True
    value = parse(config).parameters.get("DISABLE_OPTIMIZED_EXECUTION")
    return not (value is not None and value.string_value.lower() in ("true", "1", "yes", "on"))


class ExportedModel:
    """The exported file as a callable, numpy arrays by input name in, outputs in the config's order out:
    TorchScript (``torch.jit.load``; by argument name when the names match, else in order, like the libtorch
    backend) or ONNX (an onnxruntime session, by input name)."""

    def __init__(self, model_path: Path, input_names: list[str], output_names: list[str], threads: int | None = None):
        self.path, self.input_names, self.output_names = Path(model_path), list(input_names), list(output_names)
        self.threads = threads
        if self.path.suffix == ".onnx":
            import onnxruntime

            options = onnxruntime.SessionOptions()
            if threads:
                options.intra_op_num_threads = int(threads)
            options.inter_op_num_threads = 1
            self.session = onnxruntime.InferenceSession(str(self.path), options, providers=["CPUExecutionProvider"])
            self.module = None
            return
        import torch

        if threads:
            torch.set_num_threads(int(threads))
        try:
            torch.set_num_interop_threads(1)
        except RuntimeError:  # only settable before the first parallel work of the process
            pass
        self.session = None
        self.module = torch.jit.load(str(self.path), map_location="cpu").eval()
        self.optimized = optimized_execution(self.path)
        forward_args = [a.name for a in self.module.forward.schema.arguments][1:]
        if len(forward_args) != len(self.input_names):
            raise ValueError(f"{self.path}: forward takes {forward_args}, the config lists {self.input_names}")
        self.order = forward_args if set(self.input_names) == set(forward_args) else self.input_names

    def __call__(self, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.session is not None:
            out = self.session.run(self.output_names, {n: np.ascontiguousarray(arrays[n]) for n in self.input_names})
            return dict(zip(self.output_names, out, strict=True))
        import torch

        args = [torch.from_numpy(np.ascontiguousarray(arrays[name])) for name in self.order]
        with torch.inference_mode(), torch.jit.optimized_execution(self.optimized):
            result = self.module(*args)
        if isinstance(result, torch.Tensor):
            result = (result,)
        elif isinstance(result, dict):
            result = tuple(result.values())
        if len(result) != len(self.output_names):
            raise RuntimeError(f"model returned {len(result)} outputs, expected {self.output_names}")
        return {name: t.numpy() for name, t in zip(self.output_names, result, strict=True)}


def load_exported(spec: ModelFile, threads: int | None = None) -> ExportedModel:
    return ExportedModel(spec.model_path, spec.input_names, spec.output_names, threads)


def limit(
    spec: ModelFile,
    make_batch: Callable[[int], dict[str, np.ndarray]],
    batch_sizes: tuple[int, ...] = DEFAULT_BATCH_SIZES,
    seconds_per_size: float = 2.0,
    threads: int | None = None,
    max_batch: int | None = None,
    cpus: frozenset[int] | None = None,
) -> InProcessLimit:
    """Items/s and per-call median latency of the exported model at each batch size (up to ``max_batch``), on
    ``cpus`` (default: the cores this process may use) with ``threads`` intra-op threads (default: one per
    core)."""
    sizes = sorted({int(b) for b in batch_sizes if b >= 1 and (max_batch is None or b <= max_batch)})
    if not sizes:
        raise ValueError(f"no batch size left in {batch_sizes} with max_batch={max_batch}")
    affinity = os.sched_getaffinity(0)
    used = int(threads or default_threads(cpus))
    previous = _torch_threads()
    table = []
    try:
        if cpus:
            os.sched_setaffinity(0, cpus)
        model = load_exported(spec, used)
        for batch in sizes:
            arrays = make_batch(batch)
            _check_batch(arrays, spec.input_names, batch)
            for _ in range(WARMUP_CALLS):  # the profiling executor optimises over the first calls
                model(arrays)
            times = []
            start = time.perf_counter()
            deadline = start + seconds_per_size
            while True:
                t0 = time.perf_counter()
                model(arrays)
                t1 = time.perf_counter()
                times.append(t1 - t0)
                if t1 >= deadline and len(times) >= 3:
                    break
            elapsed = time.perf_counter() - start
            median, p90 = percentiles(times, (50.0, 90.0))
            table.append(
                SizeResult(
                    batch=batch,
                    calls=len(times),
                    seconds=round(elapsed, 3),
                    items_per_s=batch * len(times) / elapsed,
                    median_ms=median * 1000,
                    p90_ms=p90 * 1000,
                    items_per_s_at_median=batch / max(median, 1e-12),
                )
            )
    finally:
        os.sched_setaffinity(0, affinity)
        if previous is not None:
            import torch

            torch.set_num_threads(previous)
    best = max(table, key=lambda r: r.items_per_s)  # wall clock: what a caller would actually get
    batch1 = next((r.median_ms for r in table if r.batch == 1), None)
    return InProcessLimit(best.batch, best.items_per_s, batch1, used, table)


def _torch_threads() -> int | None:
    torch = sys.modules.get("torch")  # only when torch is in use already
    return torch.get_num_threads() if torch is not None else None


def _check_batch(arrays: dict[str, np.ndarray], input_names: list[str], batch: int) -> None:
    for name, array in arrays.items():
        if array.shape[0] != batch:
            raise ValueError(f"make_batch({batch}) gave {name!r} with shape {array.shape}")
    if sorted(arrays) != sorted(input_names):
        raise ValueError(f"the model takes {input_names}, make_batch gave {list(arrays)}")


# -- reading the Triton config --------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class ModelFile:
    """A served model's exported file and its tensors, as the in-process row and the FastAPI baseline load it
    (the config itself is ``export.spec.ModelSpec``'s business; this holds only what running the file needs)."""

    model_path: Path
    input_names: list[str]
    output_names: list[str]
    input_dtypes: dict[str, Any]
    max_batch_size: int
    config: dict[str, Any] = dataclasses.field(default_factory=dict, compare=False)
    """The config as Triton's JSON (what the payloads are made from)."""


def model_file(model: str, repository: Path = DEFAULT_REPOSITORY) -> ModelFile:
    """Names, dtypes and exported file (TorchScript or ONNX) of ``<repository>/<model>`` from its ``config.pbtxt``."""
    from google.protobuf import json_format

    folder = Path(repository) / model
    if not (folder / "config.pbtxt").is_file():
        raise FileNotFoundError(f"no model {model!r} in {repository} (no {folder / 'config.pbtxt'})")
    config = parse(folder / "config.pbtxt")
    filename = config.default_model_filename or FILENAMES.get(config.platform or config.backend)
    if filename is None:
        raise ValueError(
            f"{model}: platform {config.platform or config.backend!r} is neither TorchScript nor ONNX; "
            f"the in-process row and the FastAPI baseline load {sorted(FILENAMES)} models"
        )
    versions = sorted(int(p.name) for p in folder.iterdir() if p.is_dir() and p.name.isdigit())
    if not versions or not (folder / str(versions[-1]) / filename).is_file():
        raise FileNotFoundError(f"no {filename} under {folder}/<version>/: export the model first (make export)")
    as_json = json_format.MessageToDict(config, preserving_proto_field_name=True)
    dtypes = {}
    for tensor in as_json.get("input", []):
        name = str(tensor.get("data_type", "")).removeprefix("TYPE_")
        if name not in NUMPY_DTYPES or name == "BYTES":
            raise ValueError(f"{model}: input {tensor['name']} has {name}, not supported by the baseline")
        dtypes[tensor["name"]] = NUMPY_DTYPES[name]
    return ModelFile(
        folder / str(versions[-1]) / filename,
        [t.name for t in config.input],
        [t.name for t in config.output],
        dtypes,
        int(config.max_batch_size),
        as_json,
    )
