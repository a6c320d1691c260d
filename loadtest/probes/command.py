"""``python -m loadtest.probes --model digits [--seconds 2] [--cpus 1]``: the in-process ceiling of one exported model
(``loadtest.probes.inprocess``) as a table, with the payload flags of ``tritonkit loadtest --model``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from deploy.server import DEFAULT_REPOSITORY
from loadtest.cli import flags
from loadtest.generators.payloads import default_options, payloads, stack
from loadtest.probes.inprocess import DEFAULT_BATCH_SIZES, limit, model_file
from loadtest.target.endpoints import parse_cpus


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m loadtest.probes", description="the in-process ceiling of one exported model"
    )
    parser.add_argument("--model", required=True, help="a TorchScript or ONNX model of the repository")
    parser.add_argument("--repository", type=Path, default=DEFAULT_REPOSITORY)
    parser.add_argument("--seconds", type=float, default=2.0, help="per batch size")
    parser.add_argument("--batch-sizes", default=",".join(map(str, DEFAULT_BATCH_SIZES)))
    parser.add_argument("--max-batch", type=int, default=None, help="default: the config's max_batch_size")
    parser.add_argument("--threads", type=int, default=None, help="default: one per core")
    parser.add_argument(
        "--cpus", type=flags.argument_type(parse_cpus), default=None, help="run on these cores (e.g. 1 or 2-7)"
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    flags.add_payload_flags(parser)
    args = parser.parse_args(argv)

    spec = model_file(args.model, args.repository)
    samples = payloads(spec.config, default_options(args.model, flags.payload_options(args)))
    result = limit(
        spec,
        lambda n: stack(samples, n),
        tuple(int(b) for b in args.batch_sizes.split(",")),
        args.seconds,
        args.threads,
        args.max_batch or spec.max_batch_size or None,
        args.cpus,
    )
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
        return 0
    print(
        f"{args.model}: in-process {spec.model_path.name}, {result.threads} threads, {args.seconds:g} s per batch size"
    )
    print("| batch | calls | items/s | median ms | p90 ms |\n|---|---|---|---|---|")
    for r in result.table:
        print(f"| {r.batch} | {r.calls} | {r.items_per_s:.0f} | {r.median_ms:.3f} | {r.p90_ms:.3f} |")
    batch1 = "not measured" if result.batch1_median_ms is None else f"{result.batch1_median_ms:.3f} ms"
    print(f"best: batch {result.best_batch}, {result.best_items_per_s:.0f} items/s; batch 1 median {batch1}")
    return 0
