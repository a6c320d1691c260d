"""``tritonkit analyzer MODEL --budget-ms B``: Triton Model Analyzer on the local server, profiling one model under a
p99 budget and printing its pick (``profile``); ``python -m loadtest.tune.analyzer`` is the same command."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time

from deploy.lifecycle import local_server
from deploy.server import PROJECT_ROOT
from loadtest.cli import flags
from loadtest.target import endpoints as target
from loadtest.tune.analyzer import profile as analyzer
from loadtest.tune.analyzer.profile import AnalyzerError, NoConfigMeetsBudget, profile
from tritonkit_command import Command
from tritonkit_errors import ExitStatus, alias_parser

HELP = "Triton Model Analyzer on a local server: profile one model under a p99 budget, print its pick"
DESCRIPTION = analyzer.__doc__


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", metavar="MODEL", help="a model of the repository")
    parser.add_argument("--budget-ms", type=float, required=True, help="p99 latency budget (ms)")
    # Model Analyzer starts the server itself (local launch mode): the repository only
    flags.add_server_flags(parser, urls=False, cpus=False)
    flags.add_out_flag(parser, None, "Model Analyzer's work folder (default reports/analyzer/MODEL)")
    parser.add_argument("--max-instances", type=int, default=2, help="instance counts profiled: 1 to this (default 2)")
    parser.add_argument("--max-batch-size", type=int, help="profile this max_batch_size only")
    parser.add_argument(
        "--timeout-s", type=float, default=600, help="stop Model Analyzer after this long (default 600)"
    )
    parser.set_defaults(handler=run_command)


def main(argv: list[str] | None = None) -> int:
    """``python -m loadtest.tune.analyzer``: the same command as ``tritonkit analyzer``."""
    return run_command(
        alias_parser(Command("analyzer", __name__).register, "python -m loadtest.tune.analyzer").parse_args(argv)
    )


def run_command(args: argparse.Namespace) -> int:
    if missing := target.missing_model(args.repository, args.model):
        print(f"analyzer: error: {missing}", file=sys.stderr)
        return ExitStatus.USAGE
    out = args.out or PROJECT_ROOT / "reports" / "analyzer" / args.model
    started = time.monotonic()
    try:
        # Model Analyzer starts its own server; SIGINT/SIGTERM unwind the run once (128 + signum), and the
        # unwinding ends Model Analyzer's family (`profile`), as for a command that holds a local server.
        with local_server(None):
            pick = profile(
                args.model,
                args.repository,
                args.budget_ms,
                out,
                max_instances=args.max_instances,
                max_batch_size=args.max_batch_size,
                timeout_s=args.timeout_s,
            )
    except NoConfigMeetsBudget as exc:
        print(f"analyzer: {type(exc).__name__}: {exc}", file=sys.stderr)
        return ExitStatus.FAILED
    except AnalyzerError as exc:  # Model Analyzer missing, failed or timed out; no checkpoint to read
        print(f"analyzer: {type(exc).__name__}: {exc}", file=sys.stderr)
        return ExitStatus.BROKEN
    print(
        f"{pick.config_name}: {pick.throughput_infer_s:.1f} infer/s, p99 {pick.p99_ms:.2f} ms "
        f"at concurrency {pick.concurrency} (budget {args.budget_ms} ms; MA ran {time.monotonic() - started:.0f} s)"
    )
    print(json.dumps({k: v for k, v in dataclasses.asdict(pick.changes()).items() if v is not None}, indent=2))
    return ExitStatus.OK
