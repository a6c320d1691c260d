"""tritonkit: PyTorch models to Triton Inference Server, checked against eager PyTorch and proven under load.

Subcommands mirror the project's folders: `export` (export/), `serve` (deploy/), `loadtest` and `tune`
(loadtest/), `demo` (the main job). Run `tritonkit COMMAND --help` for each.
"""

from __future__ import annotations

import argparse
import sys

from tritonkit_errors import ExitStatus, TritonkitError

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_BROKEN, EXIT_INCONCLUSIVE = (int(s) for s in ExitStatus)
EXIT_STATUS = """\
exit status:
  0  done: the SLO holds (its interval is within every limit); compare: no regression
  1  a check failed: export (a conversion or parity check), loadtest (the SLO gate, each failing
     scenario named), tune (no candidate met the SLO), capacity (no rate met the budget), compare (B is worse
     than A beyond the minimum effect), serve and demo (the server failed or left a process or /dev/shm
     region behind)
  2  bad arguments or settings, or any other tritonkit error: one line on stderr naming the bad value
  3  export: a format's toolchain is missing here (the other formats were exported);
     loadtest, tune, capacity, compare: the server, Locust or perf_analyzer failed
  4  inconclusive: the interval straddles a limit (loadtest, capacity) or the minimum effect (compare);
     a line says how many more trials would likely settle it
"""
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
    ("overload", "python -m loadtest.studies.overload --model $(MODEL)", "queue policy at 1x/1.5x/2x saturation"),
    (
        "soak",
        "python -m loadtest.studies.soak --model $(MODEL)",
        "10 min at 70% of saturation: errors, p99 drift, memory",
    ),
    ("bench", "python -m loadtest.studies.bench", "in-process vs Triton plain/tuned vs FastAPI, one run"),
    ("bench-export", "python -m export.bench", "eager vs TorchScript vs ONNX Runtime vs FP16 latency"),
    ("bench-generation", "python -m loadtest.studies.generation", "text_generator TTFT and tokens/s"),
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


def epilog() -> str:
    width = max(len(target) for target, _, _ in MAKE_TARGETS) + len("make ")
    lines = ["make targets (each sets itself up first; MODEL=, CAMPAIGN=, ARGS= as in the Makefile):"]
    for target, command, purpose in MAKE_TARGETS:
        lines.append(f"  {'make ' + target:<{width}}  {command}")
        lines.append(f"  {'':<{width}}    {purpose}")
    return EXIT_STATUS + "\n" + "\n".join(lines) + "\n"


def build_parser() -> argparse.ArgumentParser:
    from deploy import cli as deploy_cli
    from deploy import demo
    from export import cli as export_cli
    from loadtest import capacity_cli
    from loadtest import cli as loadtest_cli
    from loadtest.studies import genai_perf
    from loadtest.studies.compare import command as compare_cli
    from loadtest.tune import command as tune_cli

    parser = argparse.ArgumentParser(
        prog="tritonkit", description=__doc__, epilog=epilog(), formatter_class=argparse.RawDescriptionHelpFormatter
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    export_cli.register(subparsers)
    deploy_cli.register(subparsers)
    loadtest_cli.register(subparsers)
    tune_cli.register(subparsers)
    compare_cli.register(subparsers)
    capacity_cli.register(subparsers)
    genai_perf.register(subparsers)
    demo.register(subparsers)
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
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
