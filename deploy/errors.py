"""Errors of deploy/ (the local server), each carrying what a user needs to fix the cause."""

from tritonkit_errors import TritonkitError


class DeployError(TritonkitError):
    """Base of every deploy/ error."""


class ServerError(DeployError, RuntimeError):
    """The local server could not do what was asked."""


class ServerStartError(ServerError):
    """The server exited or never became ready; carries the relevant lines of its log."""

    def __init__(self, message: str, log_excerpt: str = ""):
        self.log_excerpt = log_excerpt
        text = message if not log_excerpt else f"{message}\n--- tritonserver log ---\n{log_excerpt}"
        super().__init__(text)


class ServerStopRequested(ServerError):
    """A stop was asked for (a signal) while the server was starting; it was stopped."""
