"""The project's exception root. Each folder has one subclass (export/errors.py: ``ExportError``,
deploy/errors.py: ``DeployError``, loadtest/errors.py: ``LoadTestError``) and its own errors below it.

``tritonkit`` turns any ``TritonkitError`` that reaches it into one line on stderr and exit status 2.
``ExitStatus`` is the one table of exit statuses every command returns; ``one_line_usage_errors`` and
``alias_parser`` make every command, and its ``python -m`` alias, refuse a bad flag the same way.
This module imports nothing of the project, so every package can import it without a cycle.
"""

import argparse
import enum
import sys


class TritonkitError(Exception):
    """Base of every error the project raises on purpose; the message names the bad value and what was expected."""


class ExitStatus(enum.IntEnum):
    """The exit statuses of every command; ``EXIT_MEANINGS`` says what each means, command by command where that
    differs (``tritonkit --help`` prints it as its exit-status table)."""

    OK = 0
    FAILED = 1
    USAGE = 2
    BROKEN = 3
    INCONCLUSIVE = 4


EXIT_MEANINGS: dict[ExitStatus, str] = {
    ExitStatus.OK: "done: the SLO holds (its interval is within every limit); compare: no regression; overload: "
    "the queue policy kept every load within budget; soak: every check passed",
    ExitStatus.FAILED: "a check failed: export (a conversion or parity check), loadtest (the SLO gate, each failing "
    "scenario named), tune (no candidate met the SLO), capacity (no rate met the budget), compare (B is worse than "
    "A beyond the minimum effect), overload (a load with the queue policy missed the budget), soak (errors, p99 "
    "drift or memory growth), analyzer (no config met the budget), aiperf (an answer of another length than "
    "asked), serve, demo and bench (the server failed or left a process or /dev/shm region behind)",
    ExitStatus.USAGE: "bad arguments, settings or input, or any other tritonkit error: one line on stderr naming "
    "the bad value",
    ExitStatus.BROKEN: "a tool failed or is missing: the server, Locust, perf_analyzer, Model Analyzer or AIPerf "
    "(loadtest, tune, capacity, compare, overload, soak, bench-generation, first-request, analyzer, aiperf), or "
    "the load generator was the limit of a run (loadtest, capacity); export: a format's toolchain is missing here "
    "(the other formats were exported)",
    ExitStatus.INCONCLUSIVE: "inconclusive: the interval straddles a limit (loadtest, capacity, overload) or the "
    "minimum effect (compare); a line says how many more trials would likely settle it",
}
"""One line per status; a command not named in a line does not return that status."""


def one_line_usage_errors(parser) -> None:
    """Make ``parser`` (an ``argparse.ArgumentParser``) refuse a bad flag in one line on stderr, naming it and
    where help is, with exit status USAGE (argparse prints the usage block first)."""

    def error(message: str):
        print(f"{parser.prog}: error: {message} ({parser.prog} --help)", file=sys.stderr)
        raise SystemExit(ExitStatus.USAGE)

    parser.error = error


def alias_parser(register, prog: str):
    """The parser ``register(subparsers)`` adds as a ``tritonkit`` subcommand, on its own under ``prog``: what a
    ``python -m`` alias parses, so the alias and the subcommand cannot drift apart."""
    subparsers = argparse.ArgumentParser().add_subparsers()
    register(subparsers)
    [parser] = subparsers.choices.values()
    parser.prog = prog
    one_line_usage_errors(parser)
    return parser
