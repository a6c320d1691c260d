"""``python -m loadtest.generators.perf_analyzer --model digits --url 127.0.0.1:8001 [--concurrency 1:8:1]``: one
perf_analyzer run of a served model, with the payload flags of ``tritonkit loadtest --model``, as a table (or
``--json``)."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from loadtest.cli import flags
from loadtest.errors import LoadTestError
from loadtest.generators.payloads import default_options, payloads
from loadtest.generators.perf_analyzer.perf import PerfAnalyzerError, run, write_input_data
from loadtest.target import apply


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m loadtest.generators.perf_analyzer", description="one perf_analyzer run of a served model"
    )
    parser.add_argument("--model", required=True)
    parser.add_argument("--url", required=True, help="host:port of the gRPC (or HTTP) endpoint")
    flags.add_protocol_flag(parser)
    parser.add_argument("--concurrency", default="1", help="a level or a range a:b:step")
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--measurement-ms", type=int, default=3000)
    parser.add_argument(
        "--timeout-s",
        type=float,
        default=None,
        help="end perf_analyzer as hung after this long (default: from its windows)",
    )
    parser.add_argument("--stability-percentage", type=float, default=20.0)
    parser.add_argument("--json", action="store_true")
    flags.add_payload_flags(parser)
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="perf-data-") as tmp:
        try:
            config = (
                apply.served_config_grpc(args.url, args.model)
                if args.protocol == "grpc"
                else apply.served_config(args.url, args.model)
            )
            options = default_options(args.model, flags.payload_options(args))
            input_data = write_input_data(Path(tmp) / "input.json", payloads(config, options), config)
            result = run(
                args.model,
                args.url,
                args.protocol,
                args.concurrency,
                args.batch_size,
                input_data,
                measurement_ms=args.measurement_ms,
                timeout_s=args.timeout_s,
                stability_percentage=args.stability_percentage,
            )
        except LoadTestError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        except PerfAnalyzerError as exc:
            print(exc, file=sys.stderr)
            return 1
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
        return 0
    print(
        f"{args.model} via perf_analyzer ({args.protocol}, batch {args.batch_size}, "
        f"{options.samples or options.input_data or 'random data from the config'})"
    )
    print("| concurrency | infer/s | p50 ms | p90 ms | p99 ms | queue ms | compute ms |\n|---|---|---|---|---|---|---|")
    for r in result.rows:
        compute = sum(
            x or 0 for x in (r.server_compute_input_ms, r.server_compute_infer_ms, r.server_compute_output_ms)
        )
        print(
            f"| {r.concurrency} | {r.throughput:.1f} | {_f(r.p50_ms)} | {_f(r.p90_ms)} | {_f(r.p99_ms)} | "
            f"{_f(r.server_queue_ms)} | {compute:.3f} |"
        )
    return 0


def _f(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"
