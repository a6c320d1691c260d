"""``tritonkit first-request``: first-request latency after the server reports ready, against the steady median, with
and without the configs' warmup (the measurement: ``loadtest.probes.first_request``)."""

from __future__ import annotations

import argparse
import json
import sys

from deploy.errors import DeployError
from loadtest.cli import flags
from loadtest.errors import PayloadError
from loadtest.probes import first_request
from loadtest.probes.first_request import FirstRequest, measure, payload_for
from tritonkit_command import Command
from tritonkit_errors import ExitStatus, alias_parser

HELP = "first-request latency after the server reports ready, against the steady median: what warmup buys"
DESCRIPTION = first_request.__doc__.split("\n")[0]
EPILOG = (
    "examples:\n  tritonkit first-request --model digits\n"
    "  tritonkit first-request --model image_classifier text_embedder\n"
    "  tritonkit first-request --model text_embedder --model-warmup off\n"
    "  tritonkit first-request --model mine --repository DIR --input-data request.json"
)


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        required=True,
        nargs="+",
        metavar="MODEL",
        help="any served model or ensemble (an ensemble's members are served with it); "
        "several: one after another, a server of its own each",
    )
    # the measurement starts its own server each time: the repository, no URL, no CPU split
    flags.add_server_flags(parser, urls=False, cpus=False)
    modes = ("on", "off", "both")
    parser.add_argument(
        "--model-warmup",
        choices=modes,
        default="both",
        help="serve with the configs' model_warmup entries (on), without them (off) or each in turn (both, default)",
    )
    flags.deprecated_alias(parser, "--warmup", "--model-warmup", "model_warmup", choices=modes)
    parser.add_argument("--steady", type=int, default=200, help="sequential requests for the steady median")
    flags.add_protocol_flag(parser)
    flags.add_payload_flags(parser)  # the first sample is the request
    parser.add_argument("--json", action="store_true")
    parser.set_defaults(handler=run_command)


def main(argv: list[str] | None = None) -> int:
    """``python -m loadtest.studies.first_request``: the same command as ``tritonkit first-request``."""
    parser = alias_parser(Command("first-request", __name__).register, "python -m loadtest.studies.first_request")
    return run_command(parser.parse_args(argv))


def run_command(args: argparse.Namespace) -> int:
    if args.steady < 1:
        print(f"error: --steady must be at least 1, got {args.steady}", file=sys.stderr)
        return ExitStatus.USAGE
    try:  # every payload first: a model without one stops the run before any server starts
        options = flags.payload_options(args)
        requests = {m: payload_for(args.repository, m, options) for m in args.model}
    except (FileNotFoundError, PayloadError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return ExitStatus.USAGE

    modes = {"on": [True], "off": [False], "both": [True, False]}[args.model_warmup]
    everything = []
    try:
        for model, payload in requests.items():
            results = [measure(args.repository, model, payload, w, args.steady, args.protocol) for w in modes]
            everything.extend(results)
            if not args.json:
                print(table(results, args.protocol, args.steady), flush=True)
    except (DeployError, RuntimeError) as exc:  # the server failed, or left something behind
        print(f"error: {exc}", file=sys.stderr)
        return ExitStatus.BROKEN
    if args.json:
        print(json.dumps([r.to_dict() for r in everything], indent=2))
    return ExitStatus.OK


def table(results: list[FirstRequest], protocol: str, steady: int) -> str:
    served = results[0].served
    members_note = f", served with {', '.join(list(served)[1:])}" if len(served) > 1 else ""
    lines = [
        f"{results[0].model}: first request after ready vs steady median ({protocol}, batch 1, "
        f"{steady} sequential requests{members_note})",
        "| warmup | ready s | first ms | steady p50 ms | first / p50 |",
        "|---|---|---|---|---|",
    ]
    for r in results:
        label = "off"
        if r.warmup:
            per_model = ", ".join(f"{name} {n}" for name, n in r.served.items() if n) or "none configured"
            label = (
                f"on ({r.warmup_entries} entries: {per_model})"
                if len(r.served) > 1
                else f"on ({r.warmup_entries} entries)"
            )
        lines.append(f"| {label} | {r.ready_s:.1f} | {r.first_ms:.2f} | {r.steady_p50_ms:.2f} | {r.ratio:.1f}x |")
    return "\n".join(lines) + "\n"
