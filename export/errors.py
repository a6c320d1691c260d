"""Errors of the export step; each names the value or model at fault."""

from tritonkit_errors import TritonkitError


class ExportError(TritonkitError):
    """Base class: an export could not be done as asked."""


class SpecError(ExportError, ValueError):
    """A model specification or a command-line setting is invalid."""


class ConfigError(ExportError, ValueError):
    """A model config (config.pbtxt, a ``ModelConfig`` or the server's JSON) does not parse, or holds a field
    that ``ModelSpec`` cannot represent; ``field`` is its path, e.g. ``input[0].reshape``."""

    def __init__(self, message: str, field: str = ""):
        self.field = field
        super().__init__(message)


class ParityError(ExportError):
    """An exported model does not compute what the eager model computes."""


class UnknownModelError(ExportError, KeyError):
    """A model name that neither the zoo nor export/models.toml knows."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class FormatUnavailable(ExportError):
    """The toolchain of one export format is missing here (no CUDA, no torch_tensorrt); other formats go on."""


class UserModelError(ExportError):
    """A user's model file or factory failed: import error, factory raised, wrong return type."""


class RepositoryNotWritable(ExportError):
    """The model repository cannot be written by this user (a volume owned by someone else, a read-only mount)."""
