"""``tritonkit bench-export``: in-process latency of each built-in model, eager vs its exports, in one run.

For every model in export/models.toml: eager PyTorch FP32, TorchScript FP32, ONNX Runtime FP32 and
TorchScript FP16 (FP32 I/O), at batch 1, 8 and 32 (text at sequence length 128). Each cell is the
median of repeated calls after warm-up; the ratio column is eager / variant, so above 1 is faster.
All variants run with the same number of threads. Figures come from this machine at this moment:
compare ratios within one run, not absolute times across runs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from export import catalog
from export.variants import Variant
from tritonkit_command import Command
from tritonkit_errors import ExitStatus, alias_parser

BATCHES = (1, 8, 32)
SEQ_LEN = 128
VARIANTS = (Variant("torchscript"), Variant("onnx"), Variant("torchscript", "fp16"))


def median_ms(run, inputs, min_calls: int = 5, budget_s: float = 1.0) -> float:
    run(*inputs)  # warm-up: first calls compile and allocate
    run(*inputs)
    times, started = [], time.perf_counter()
    while len(times) < min_calls or (time.perf_counter() - started < budget_s and len(times) < 200):
        t0 = time.perf_counter()
        run(*inputs)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def bench_model(name: str, workdir: Path, batches=BATCHES) -> list[dict]:
    import torch  # deferred: `tritonkit --help` does not load torch

    from export import zoo

    entry = catalog.entry(name)
    model = zoo.build(entry.builder)

    def eager(*inputs):
        with torch.no_grad():
            return model.module(*inputs)

    runners = {"eager fp32": eager}
    for variant in VARIANTS:
        if variant.precision not in model.tolerances:
            continue
        path = workdir / f"{name}-{variant.format}-{variant.precision}" / variant.filename
        path.parent.mkdir(parents=True)
        variant.fmt.convert(model, variant, path)
        runners[str(variant)] = variant.fmt.load(path, variant=variant)  # the runner the parity check uses
    rows = []
    generator = torch.Generator().manual_seed(0)
    for batch in batches:
        if entry.settings.get("max_batch_size", 0) and batch > entry.settings["max_batch_size"]:
            continue
        inputs = model.random_inputs(batch, SEQ_LEN if model.seq_lengths else None, generator)
        base = None
        for label, run in runners.items():
            ms = median_ms(run, inputs)
            base = base or ms
            rows.append({"model": name, "batch": batch, "variant": label, "ms": ms, "speedup": base / ms})
    return rows


HELP = "in-process latency of eager PyTorch vs TorchScript vs ONNX Runtime vs FP16, batch 1/8/32"


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("models", nargs="*", help="models from export/models.toml (default: all)")
    parser.set_defaults(handler=run_command)


def main(argv: list[str] | None = None) -> int:
    """``python -m export.bench``: the same command as ``tritonkit bench-export``."""
    return run_command(
        alias_parser(Command("bench-export", __name__).register, "python -m export.bench").parse_args(argv)
    )


def run_command(args: argparse.Namespace) -> int:
    import torch

    known = catalog.load()
    unknown = [name for name in args.models if name not in known]
    if unknown:
        print(
            f"error: {', '.join(unknown)} not in export/models.toml; models there: {', '.join(known)}", file=sys.stderr
        )
        return ExitStatus.USAGE
    names = args.models or list(known)
    threads = torch.get_num_threads()
    import onnxruntime  # the ONNX runner reads this default when it builds sessions

    onnxruntime.set_default_logger_severity(3)
    print(f"torch {torch.__version__}, onnxruntime {onnxruntime.__version__}, {threads} threads\n")
    print("| model | batch | variant | median ms | eager / variant |\n|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as workdir:
        for name in names:
            for row in bench_model(name, Path(workdir)):
                print(
                    f"| {row['model']} | {row['batch']} | {row['variant']} | {row['ms']:.3f} | {row['speedup']:.2f}x |",
                    flush=True,
                )
    return ExitStatus.OK


if __name__ == "__main__":
    sys.exit(main())
