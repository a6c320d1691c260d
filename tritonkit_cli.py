"""tritonkit: PyTorch models to Triton Inference Server, checked against eager PyTorch and proven under load.

Every job is a subcommand: `export` and `bench-export` (export/), `serve` (deploy/), `loadtest`, `tune`,
`analyzer`, `capacity`, `compare`, the studies (`bench`, `overload`, `soak`, `bench-generation`, `genai-perf`),
`first-request` and `report` (loadtest/), `demo` (the main job). Run `tritonkit COMMAND --help` for each.
"""

from __future__ import annotations

import argparse
import sys
import textwrap

from tritonkit_errors import EXIT_MEANINGS, ExitStatus, TritonkitError, one_line_usage_errors

MAKE_TARGETS = (
    ("help", "grep -E '^[a-z-]+:.*## '", "list the make targets (their `## ` lines)"),
    ("setup", "bash deploy/setup.sh", ".venv with the pinned dependencies (idempotent)"),
    ("export", "python -m export", "= tritonkit export: the built-in models into model_repository/"),
    ("serve", "tritonkit serve", "the local tritonserver on 8000/8001/8002 until Ctrl-C"),
    ("demo", "tritonkit demo", "export, serve, real requests, metrics, a short load campaign, stop"),
    (
        "test",
        "ruff check ., ruff format --check ., python -m pytest",
        "lint and format check, then the test suite against a real tritonserver on free ports",
    ),
    ("loadtest", "tritonkit loadtest $(CAMPAIGN)", "a campaign (default loadtest/campaigns/smoke.toml)"),
    ("overload", "tritonkit overload --model $(MODEL)", "queue policy at 1x/1.5x/2x saturation"),
    ("soak", "tritonkit soak --model $(MODEL)", "10 min at 70% of saturation: errors, p99 drift, memory"),
    ("bench", "tritonkit bench", "in-process vs Triton plain/tuned vs FastAPI, in interleaved trials"),
    ("bench-export", "tritonkit bench-export", "eager vs TorchScript vs ONNX Runtime vs FP16 latency"),
    ("bench-generation", "tritonkit bench-generation", "text_generator TTFT and tokens/s"),
    ("genai-perf", "tritonkit genai-perf", "NVIDIA GenAI-Perf against text_generator: TTFT, ITL, tokens/s"),
    (
        "check-deploy",
        "docker-compose config -q, promtool check, kubectl kustomize, kubernetes-validate",
        "compose, Prometheus and the k8s overlays validated offline",
    ),
    (
        "lock",
        "python3.11 -m venv, pip install -q -e ., pip freeze --exclude-editable",
        "rewrite requirements.lock from pyproject.toml's pins",
    ),
)
"""Each Makefile target with a ``## `` help line: the command its recipe runs (comma-separated parts, each
found in the recipe; tests/unit/test_cli.py checks them against the Makefile) and what it is for."""


def exit_status_table() -> str:
    """``EXIT_MEANINGS`` (tritonkit_errors.py) as the table ``tritonkit --help`` ends with."""
    lines = ["exit status:"]
    for status, meaning in EXIT_MEANINGS.items():
        wrapped = textwrap.wrap(meaning, width=110, initial_indent=f"  {status:d}  ", subsequent_indent="     ")
        lines.extend(wrapped)
    return "\n".join(lines) + "\n"


EXIT_STATUS = exit_status_table()


def epilog() -> str:
    width = max(len(target) for target, _, _ in MAKE_TARGETS) + len("make ")
    lines = ["make targets (each sets itself up first; MODEL=, CAMPAIGN=, ARGS= as in the Makefile):"]
    for target, command, purpose in MAKE_TARGETS:
        lines.append(f"  {'make ' + target:<{width}}  {command}")
        lines.append(f"  {'':<{width}}    {purpose}")
    return EXIT_STATUS + "\n" + "\n".join(lines) + "\n"


class CommandListFormatter(argparse.RawDescriptionHelpFormatter):
    """``tritonkit --help``: one line per subcommand, as wide as the project's lines (120), never wrapped."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, width=HELP_WIDTH, max_help_position=HELP_COLUMN)

    def add_argument(self, action: argparse.Action) -> None:
        super().add_argument(action)
        # argparse measures the subcommands one indent short: the longest name would go on a line of its own
        self._action_max_length = max(self._action_max_length, HELP_COLUMN - 2)

    def _split_lines(self, text: str, width: int) -> list[str]:
        return [" ".join(text.split())]


HELP_WIDTH = 120
HELP_COLUMN = len("    bench-generation  ")
"""Where each subcommand's one line of help starts in ``tritonkit --help``."""


def build_parser() -> argparse.ArgumentParser:
    from deploy import cli as deploy_cli
    from export import bench as export_bench
    from export import cli as export_cli
    from loadtest.campaign import command as loadtest_cli
    from loadtest.capacity import command as capacity_cli
    from loadtest.reports import command as report
    from loadtest.studies.bench import command as bench
    from loadtest.studies.compare import command as compare_cli
    from loadtest.studies.first_request import command as first_request
    from loadtest.studies.floor import command as floor
    from loadtest.studies.genai_perf import command as genai_perf
    from loadtest.studies.generation import command as generation
    from loadtest.studies.overload import command as overload
    from loadtest.studies.soak import command as soak
    from loadtest.tune import analyzer
    from loadtest.tune import command as tune_cli
    from tritonkit import demo
    from tritonkit.gpu import cli as gpu_check_cli

    parser = argparse.ArgumentParser(
        prog="tritonkit", description=__doc__, epilog=epilog(), formatter_class=CommandListFormatter
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    export_cli.register(subparsers)
    deploy_cli.register(subparsers)
    loadtest_cli.register(subparsers)
    tune_cli.register(subparsers)
    compare_cli.register(subparsers)
    capacity_cli.register(subparsers)
    analyzer.register(subparsers)
    bench.register(subparsers)
    overload.register(subparsers)
    soak.register(subparsers)
    floor.register(subparsers)
    generation.register(subparsers)
    genai_perf.register(subparsers)
    export_bench.register(subparsers)
    first_request.register(subparsers)
    report.register(subparsers)
    demo.register(subparsers)
    gpu_check_cli.register(subparsers)
    one_line_usage_errors(parser)
    for subparser in subparsers.choices.values():
        if "error" not in vars(subparser):  # loadtest words its own
            one_line_usage_errors(subparser)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except TritonkitError as exc:
        # Commands report their own failures with their exit codes; anything that still reaches here is
        # named on one line (the first of a long message, e.g. a server's log excerpt follows it).
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        print(f"tritonkit {args.command}: error: {first}", file=sys.stderr)
        return ExitStatus.USAGE


if __name__ == "__main__":
    sys.exit(main())
