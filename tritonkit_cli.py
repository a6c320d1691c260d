"""tritonkit: PyTorch models to Triton Inference Server, checked against eager PyTorch and proven under load.

Every job is a subcommand: `export` and `bench-export` (export/), `serve` (deploy/), `loadtest`, `tune`,
`analyzer`, `capacity`, `compare`, the studies (`bench`, `overload`, `soak`, `bench-generation`, `genai-perf`,
`aiperf`), `first-request` and `report` (loadtest/), `demo` (the main job). Run `tritonkit COMMAND --help` for
each.
"""

from __future__ import annotations

import argparse
import sys
import textwrap

from tritonkit_command import Command
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
    ("aiperf", "tritonkit aiperf", "NVIDIA AIPerf over HTTP against text_generator or text_embedder: TTFT, ITL"),
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


COMMANDS = (
    Command("export", "export.cli"),
    Command("serve", "deploy.cli"),
    Command("loadtest", "loadtest.campaign.command"),
    Command("tune", "loadtest.tune.command", alias="loadtest.tune"),
    Command("compare", "loadtest.studies.compare.command"),
    Command("capacity", "loadtest.capacity.command"),
    Command("analyzer", "loadtest.tune.analyzer.command", alias="loadtest.tune.analyzer"),
    Command("bench", "loadtest.studies.bench.command", alias="loadtest.studies.bench"),
    Command("overload", "loadtest.studies.overload.command", alias="loadtest.studies.overload"),
    Command("soak", "loadtest.studies.soak.command", alias="loadtest.studies.soak"),
    Command("floor", "loadtest.studies.floor.command", alias="loadtest.studies.floor"),
    Command("bench-generation", "loadtest.studies.generation.command", alias="loadtest.studies.generation"),
    Command("genai-perf", "loadtest.studies.genai_perf.command"),
    Command("aiperf", "loadtest.studies.aiperf.command"),
    Command("bench-export", "export.bench", alias="export.bench"),
    Command("first-request", "loadtest.studies.first_request.command", alias="loadtest.studies.first_request"),
    Command("report", "loadtest.reports.command", alias="loadtest.reports"),
    Command("demo", "tritonkit.demo"),
    Command("gpu-check", "tritonkit.gpu.cli"),
)
"""Every ``tritonkit`` subcommand, in ``tritonkit --help``'s order (tritonkit_command.py: the shape)."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tritonkit", description=__doc__, epilog=epilog(), formatter_class=CommandListFormatter
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.register(subparsers)
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
