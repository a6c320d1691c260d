"""One lifecycle for a local ``tritonserver``: every command that starts one goes through :func:`local_server`.

``LocalServer`` starts ``tritonserver`` in a session of its own (a Ctrl-C in the terminal reaches this process,
not the server), so a command that dies by a signal without stopping it leaves the server and its
Python-backend stubs running. Here, for the whole ``with`` block:

- SIGINT and SIGTERM unwind the block once, as ``SystemExit(128 + signum)`` (``deploy/signals.py``,
  ``unwind=True``); the burst that often follows the first signal is only recorded, so it cannot cut the
  cleanup short; the process then exits with ``128 + signum`` (143 for SIGTERM);
- a signal while the server loads stops the start (the start polls it; no raise can fall between starting
  the process and keeping its handle);
- however the block ends (a signal, an exception, its end), the server is stopped: the process, its stubs
  and the ``/dev/shm`` regions they mapped (``LocalServer.stop``); ``server.left_behind`` says what could
  not be removed, and is printed when the block did not end normally;
- should a raise still slip past the stop (a signal inside the interpreter's own ``with`` machinery), an
  ``atexit`` hook stops the server as the process exits.

``tritonkit serve`` polls its signals instead (it exits 0 on a stop): it passes its own ``StopRequest`` and gets
the same start and cleanup without the unwinding.
"""

from __future__ import annotations

import atexit
import sys
from pathlib import Path

from deploy.server import LocalServer, ServerConfig
from deploy.signals import StopRequest

_live: set[LocalServer] = set()
"""Servers started here and not yet stopped: the ``atexit`` hook's list."""


def local_server(
    config: ServerConfig | None, *, workdir: Path | None = None, signals: StopRequest | None = None
) -> Lifecycle:
    """``with local_server(config) as server``: a started :class:`LocalServer` for the block, stopped when it ends.

    ``config=None`` attaches to a server given by URL: nothing is started or stopped, the signals are handled the
    same way (the work unwinds and the process exits with ``128 + signum``) and the block gets ``None``.
    ``signals``: a ``StopRequest`` the caller installed and polls (``tritonkit serve``); the signals are then the
    caller's to act on, and nothing here raises ``SystemExit``.
    """
    return Lifecycle(LocalServer(config, workdir) if config is not None else None, signals)


class Lifecycle:
    """The ``with`` block of :func:`local_server`."""

    def __init__(self, server: LocalServer | None, signals: StopRequest | None = None) -> None:
        self.server = server
        self._own_signals = signals is None
        self.signals = StopRequest(unwind=True) if signals is None else signals

    def __enter__(self) -> LocalServer | None:
        try:
            if self._own_signals:
                self.signals.__enter__()
            if self.server is not None:
                _live.add(self.server)
                with self.signals.held():  # a signal now ends the start through its poll, never mid-Popen
                    self.server.start(should_stop=self.signals)
        except BaseException:
            self.__exit__(*sys.exc_info())  # the cleanup; after a signal it raises SystemExit(128 + signum)
            raise
        return self.server

    def __exit__(self, exc_type, exc, tb) -> None:
        # Unwinding raises once at most (deploy/signals.py): if it lands in this `try`, the `finally` still runs,
        # with signals only recorded from then on.
        try:
            self.signals.cleaning_up()
        finally:
            self.signals.cleaning_up()
            try:
                if self.server is not None:
                    left = _stop(self.server)
                    if left and self._own_signals and (exc_type is not None or self.signals):  # else the caller's
                        print(f"error: stopping tritonserver left behind: {left}", file=sys.stderr, flush=True)
            finally:
                if self._own_signals:  # SIG_IGN for the rest of a burst, else the handlers from before
                    self.signals.__exit__(exc_type, exc, tb)
        if self._own_signals and self.signals:
            raise SystemExit(128 + self.signals.signum)


def _stop(server: LocalServer) -> list[str]:
    try:
        server.stop()
    finally:
        _live.discard(server)
    return server.left_behind


@atexit.register
def _stop_the_rest() -> None:
    for server in list(_live):
        _stop(server)
