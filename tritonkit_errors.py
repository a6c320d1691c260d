"""The project's exception root. Each folder has one subclass (export/errors.py: ``ExportError``,
deploy/errors.py: ``DeployError``, loadtest/errors.py: ``LoadTestError``) and its own errors below it.

``tritonkit`` turns any ``TritonkitError`` that reaches it into one line on stderr and exit status 2.
This module imports nothing of the project, so every package can import it without a cycle.
"""

import enum


class TritonkitError(Exception):
    """Base of every error the project raises on purpose; the message names the bad value and what was expected."""


class ExitStatus(enum.IntEnum):
    """The exit statuses of every command (``tritonkit --help`` prints their table, tritonkit_cli.EXIT_STATUS)."""

    OK = 0
    FAILED = 1
    """A check failed: the SLO, a parity check, compare found B worse."""
    USAGE = 2
    """Bad arguments, settings or input: one line on stderr naming the bad value."""
    BROKEN = 3
    """The server, Locust or perf_analyzer failed (export: a format's toolchain is missing)."""
    INCONCLUSIVE = 4
    """The interval straddles a limit or the minimum effect: more trials would be needed to decide."""
