"""The project's exception root. Each folder has one subclass (export/errors.py: ``ExportError``,
deploy/errors.py: ``DeployError``, loadtest/errors.py: ``LoadTestError``) and its own errors below it.

``tritonkit`` turns any ``TritonkitError`` that reaches it into one line on stderr and exit status 2.
This module imports nothing of the project, so every package can import it without a cycle.
"""


class TritonkitError(Exception):
    """Base of every error the project raises on purpose; the message names the bad value and what was expected."""
