"""Library noise to a log file, for a command that prints only its own lines: ``noise_to(log)``.

Inside the block, what libraries write (Python warnings, logging records, tqdm bars, their ``print`` calls) and
every write to file descriptors 1 and 2 (torch's C++ side, child processes) goes to ``log``; the project's own
``print`` calls, to stdout or stderr, still reach the terminal (or whatever ``sys.stdout`` / ``sys.stderr`` were).
Nothing is silenced globally: a command's path opts in, a library user of the project sees every warning.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

PROJECT = frozenset(
    {"backends", "deploy", "export", "loadtest", "tritonkit", "tritonkit_cli", "tritonkit_command", "tritonkit_errors"}
)
"""The top-level modules whose writes are the command's own lines."""


class _Router(io.TextIOBase):
    """A text stream that sends a write made by a project module to ``own`` and any other module's to ``log``
    (``print`` runs no Python frame: the frame above ``write`` is its caller's; a logging handler's, tqdm's and
    the warnings module's writes come from their own modules)."""

    def __init__(self, own, log, packages: frozenset[str]) -> None:
        self.own, self.log, self.packages = own, log, packages

    def write(self, text: str) -> int:
        caller = sys._getframe(1).f_globals.get("__name__", "")
        return (self.own if caller.partition(".")[0] in self.packages else self.log).write(text)

    def flush(self) -> None:
        self.own.flush()
        self.log.flush()

    def fileno(self) -> int:  # a library handing it to a child process: the child's output is noise too
        return self.log.fileno()

    def isatty(self) -> bool:
        return False  # no colours nor redrawn bars in the log

    def writable(self) -> bool:
        return True

    @property
    def encoding(self) -> str:
        return self.log.encoding

    @property
    def buffer(self):  # bytes written past the text layer come from libraries
        return self.log.buffer


def _own_stream(stream, fd: int, saved: int):
    """Where the project's lines go: ``stream`` itself unless it writes to ``fd``, which the block redirects; then a
    stream on ``saved``, the terminal's copy of ``fd``."""
    try:
        redirected = stream.fileno() == fd
    except (AttributeError, OSError, ValueError):  # a captured stream (pytest's capsys): no descriptor
        redirected = False
    if not redirected:
        return stream
    return open(saved, "w", buffering=1, encoding=stream.encoding, errors="replace", closefd=False)


@contextlib.contextmanager
def noise_to(log: Path, own: frozenset[str] = PROJECT) -> Iterator[TextIO]:
    """Within the block, library output and writes to fds 1 and 2 go to ``log`` (a fresh one); the lines of the
    modules under ``own`` do not. Yields the log's stream, for what the caller writes there on purpose (an error's
    details)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("")
    sys.stdout.flush()
    sys.stderr.flush()
    old = sys.stdout, sys.stderr
    saved = {fd: os.dup(fd) for fd in (1, 2)}
    # Appending: the log's Python writes and the descriptors' writes (C++, children) never overwrite each other.
    sink = open(log, "a", buffering=1, encoding="utf-8", errors="replace")
    terminal = [_own_stream(stream, fd, saved[fd]) for stream, fd in zip(old, (1, 2), strict=True)]
    try:
        for fd in (1, 2):
            os.dup2(sink.fileno(), fd)
        sys.stdout, sys.stderr = (_Router(stream, sink, own) for stream in terminal)
        yield sink
    finally:
        for stream in (*terminal, sink):
            stream.flush()
        sys.stdout, sys.stderr = old
        for fd, copy in saved.items():
            os.dup2(copy, fd)
            os.close(copy)
        for stream in terminal:
            if stream not in old:
                stream.close()  # closefd=False: the terminal's descriptor stays open
        sink.close()
