"""The error a Python-backend model sends a client: one line, short enough for any protocol.

gRPC sends the error in the response's metadata and refuses metadata past 8 KiB (past its 8 KiB soft limit it
refuses at random, so the same bad request fails one way or the other). A TorchScript error carries the
whole TorchScript traceback, with the export's file paths: 8,103 bytes for minilm on an empty sequence, which
gRPC clients saw as RESOURCE_EXHAUSTED now and then instead of INVALID_ARGUMENT. The client gets the error's
own line (the last line of such a traceback), named for the model.
"""

from __future__ import annotations

MAX_CHARS = 1000
"""The longest error sent: well inside gRPC's 8 KiB of metadata, with room for the server's own prefix."""


def client_message(exc: BaseException, model: str = "") -> str:
    """``model: the error's last non-empty line`` (its type's name when it has no text), at most
    ``MAX_CHARS``."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = lines[-1] if lines else type(exc).__name__
    if model and not text.startswith(f"{model}:"):
        text = f"{model}: {text}"
    return text if len(text) <= MAX_CHARS else text[: MAX_CHARS - 3] + "..."
