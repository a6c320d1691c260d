"""The ceiling: the TorchScript module called in-process, no server, at its best batch size.

:func:`limit` calls the module directly (``torch.inference_mode``, after warmup) for a few seconds
per batch size and reports items/s and the median latency per call, so ``make bench`` can put the
served numbers next to what the hardware gives without any serving layer.

Threads: unless ``threads`` is given, torch runs with the thread count the local server's runtime
gives ONE instance (``backends/batching.py`` ``BatchingModel.instance_threads``: the cores this
process may use divided by the instance count, here by 1, i.e. all of them) and one inter-op thread
(``backends/pytorch/model.py``). The previous thread count is restored afterwards.

It computes on :func:`loadtest.drive.payloads.real_batch`: the load test's own payloads stacked into batches.
Also here: :func:`model_spec`, the TorchScript file and tensors of a served model, read from its config.

Run: ``python -m loadtest.measure.inprocess --model digits [--seconds 2] [--seq-len 32]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from deploy.server import DEFAULT_REPOSITORY
from export.config import parse
from loadtest.drive.payloads import real_batch

DEFAULT_BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64)
WARMUP_CALLS = 3
NUMPY_DTYPES = {
    "TYPE_BOOL": np.bool_, "TYPE_UINT8": np.uint8, "TYPE_INT8": np.int8, "TYPE_INT16": np.int16,
    "TYPE_INT32": np.int32, "TYPE_INT64": np.int64, "TYPE_FP16": np.float16, "TYPE_FP32": np.float32,
    "TYPE_FP64": np.float64,
}


@dataclasses.dataclass
class SizeResult:
    batch: int
    calls: int
    seconds: float
    items_per_s: float
    median_ms: float
    """Median latency of one call at this batch size."""
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


def default_threads() -> int:
    """What the local server's TorchScript runtime gives one instance (all usable cores)."""
    return max(1, len(os.sched_getaffinity(0)) // 1)


def optimized_execution(model_path: Path) -> bool:
    """False when the model's config sets ``DISABLE_OPTIMIZED_EXECUTION`` (as Triton's libtorch backend
    reads it): the in-process and FastAPI rows then run the module the way the server does."""
    config = model_path.parent.parent / "config.pbtxt"
    if not config.is_file():
        return True
    value = parse(config).parameters.get("DISABLE_OPTIMIZED_EXECUTION")
    return not (value is not None and value.string_value.lower() in ("true", "1", "yes", "on"))


def limit(model_path: Path, make_batch: Callable[[int], dict[str, np.ndarray]],
          batch_sizes: tuple[int, ...] = DEFAULT_BATCH_SIZES, seconds_per_size: float = 2.0,
          threads: int | None = None, max_batch: int | None = None) -> InProcessLimit:
    """Items/s and per-call median latency of the module at each batch size (up to ``max_batch``)."""
    sizes = sorted({int(b) for b in batch_sizes if b >= 1 and (max_batch is None or b <= max_batch)})
    if not sizes:
        raise ValueError(f"no batch size left in {batch_sizes} with max_batch={max_batch}")
    module = torch.jit.load(str(model_path), map_location="cpu").eval()
    optimized = optimized_execution(model_path)
    forward_args = [a.name for a in module.forward.schema.arguments][1:]
    previous = torch.get_num_threads()
    used = int(threads or default_threads())
    torch.set_num_threads(used)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # only settable before the first parallel work of the process
        pass
    table = []
    try:
        for batch in sizes:
            args = _arguments(make_batch(batch), forward_args, batch)
            with torch.inference_mode(), torch.jit.optimized_execution(optimized):
                for _ in range(WARMUP_CALLS):  # the profiling executor optimises over the first calls
                    module(*args)
                times = []
                start = time.perf_counter()
                deadline = start + seconds_per_size
                while True:
                    t0 = time.perf_counter()
                    module(*args)
                    t1 = time.perf_counter()
                    times.append(t1 - t0)
                    if t1 >= deadline and len(times) >= 3:
                        break
                elapsed = time.perf_counter() - start
            ordered = sorted(times)
            table.append(SizeResult(
                batch=batch, calls=len(times), seconds=round(elapsed, 3),
                items_per_s=batch * len(times) / elapsed,
                median_ms=statistics.median(times) * 1000,
                p90_ms=ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))] * 1000,
                items_per_s_at_median=batch / max(statistics.median(times), 1e-12),
            ))
    finally:
        torch.set_num_threads(previous)
    best = max(table, key=lambda r: r.items_per_s)  # wall clock: what a caller would actually get
    batch1 = next((r.median_ms for r in table if r.batch == 1), None)
    return InProcessLimit(best.batch, best.items_per_s, batch1, used, table)


def _arguments(arrays: dict[str, np.ndarray], forward_args: list[str], batch: int) -> list[torch.Tensor]:
    for name, array in arrays.items():
        if array.shape[0] != batch:
            raise ValueError(f"make_batch({batch}) gave {name!r} with shape {array.shape}")
    names = list(arrays)
    if len(names) != len(forward_args):
        raise ValueError(f"the module takes {forward_args}, make_batch gave {names}")
    if set(names) == set(forward_args):  # by name, like the libtorch backend
        names = forward_args
    return [torch.from_numpy(np.ascontiguousarray(arrays[n])) for n in names]


# -- reading the Triton config --------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class ModelSpec:
    model_path: Path
    input_names: list[str]
    output_names: list[str]
    input_dtypes: dict[str, Any]
    max_batch_size: int


def model_spec(model: str, repository: Path = DEFAULT_REPOSITORY) -> ModelSpec:
    """Names, dtypes and file of ``<repository>/<model>`` from its ``config.pbtxt``."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    folder = Path(repository) / model
    config = text_format.Parse((folder / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())
    versions = sorted((int(p.name) for p in folder.iterdir() if p.is_dir() and p.name.isdigit()))
    filename = config.default_model_filename or "model.pt"
    if not versions or not (folder / str(versions[-1]) / filename).is_file():
        raise FileNotFoundError(f"no {filename} under {folder}/<version>/: run `make export`")
    dtypes = {}
    for tensor in config.input:
        type_name = model_config_pb2.DataType.Name(tensor.data_type)
        if type_name not in NUMPY_DTYPES:
            raise ValueError(f"{model}: input {tensor.name} has {type_name}, not supported by the baseline")
        dtypes[tensor.name] = NUMPY_DTYPES[type_name]
    return ModelSpec(folder / str(versions[-1]) / filename, [t.name for t in config.input],
                     [t.name for t in config.output], dtypes, int(config.max_batch_size))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtest.measure.inprocess", description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help="digits or minilm (real payloads)")
    parser.add_argument("--repository", type=Path, default=DEFAULT_REPOSITORY)
    parser.add_argument("--seconds", type=float, default=2.0, help="per batch size")
    parser.add_argument("--seq-len", type=int, default=32, help="minilm sequence length")
    parser.add_argument("--batch-sizes", default=",".join(map(str, DEFAULT_BATCH_SIZES)))
    parser.add_argument("--max-batch", type=int, default=None, help="default: the config's max_batch_size")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)

    spec = model_spec(args.model, args.repository)
    result = limit(spec.model_path, lambda n: real_batch(args.model, n, args.seq_len),
                   tuple(int(b) for b in args.batch_sizes.split(",")), args.seconds, args.threads,
                   args.max_batch or spec.max_batch_size or None)
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
        return 0
    print(f"{args.model}: in-process TorchScript, {result.threads} threads, {args.seconds:g} s per batch size")
    print("| batch | calls | items/s | median ms | p90 ms |\n|---|---|---|---|---|")
    for r in result.table:
        print(f"| {r.batch} | {r.calls} | {r.items_per_s:.0f} | {r.median_ms:.3f} | {r.p90_ms:.3f} |")
    batch1 = "not measured" if result.batch1_median_ms is None else f"{result.batch1_median_ms:.3f} ms"
    print(f"best: batch {result.best_batch}, {result.best_items_per_s:.0f} items/s; batch 1 median {batch1}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
