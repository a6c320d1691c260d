"""SIGINT and SIGTERM for the commands that hold a local server (``tritonkit serve``, and every other command
through :mod:`deploy.lifecycle`).

A Python signal handler runs in the main thread between two of its bytecodes, and that can be inside a lock
the main thread holds: ``threading.Event.wait`` holds its condition's lock on the way in and out of the wait.
A handler that takes a lock (``Event.set``) then waits for itself for ever, and a burst of signals (Docker,
Kubernetes and ``timeout`` send more than one, and so does a person pressing Ctrl-C twice) nests handlers
inside handlers, which makes that likely. So the handler here only stores the signal's number: no lock, no
I/O. The main loop polls it.

A raise from the handler must not land inside an import either: an extension module being initialised
(torch's C++ part imports Python submodules) turns an exception crossing it into ``std::terminate``, and the
process dies by SIGABRT with no ``finally`` run, its server left behind. While an import is on the stack the
handler defers the raise: SIGALRM asks again 50 ms later.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
RETRY_S = 0.05
"""How soon a raise deferred by an import is tried again."""


def in_import(frame) -> bool:
    """Whether ``frame`` runs inside an import (importlib's frozen bootstrap is on its stack)."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


class StopRequest:
    """Records SIGINT/SIGTERM while installed (a ``with`` block); true once one has arrived.

    Leaving the block restores the previous handlers, unless a stop was asked for: then both signals stay
    ignored (the process is stopping anyway).

    ``unwind=True`` is for work that polls nothing (a Locust run): the first signal also raises
    ``SystemExit(128 + signum)`` in the main thread so that the work's ``finally`` stops the server. Call
    :meth:`cleaning_up` first thing in that ``finally``: from then on signals are only recorded, so the burst
    that follows the first one cannot cut the cleanup short and leave the server running; :meth:`held` keeps the
    first one from raising inside a block that must not be cut (the server's start).

    Installed from a thread other than the main one it installs nothing: Python runs handlers in the main thread
    only, and only the main thread may set them.
    """

    def __init__(self, unwind: bool = False):
        self.unwind = unwind
        self.signum = 0
        """The first stop signal received, 0 while none has."""
        self._raised = False
        self._held = False
        self._previous: dict[int, Callable | int | None] = {}

    def _handle(self, signum, frame) -> None:
        if not self.signum:
            self.signum = signum
        self._raise_unless_cut(frame)

    def _retry(self, _signum, frame) -> None:
        self._raise_unless_cut(frame)

    def _raise_unless_cut(self, frame) -> None:
        if not self.unwind or self._raised or self._held or not self.signum:
            return
        if in_import(frame):  # an exception there may cross C++ and abort the process: ask again soon
            if signal.SIGALRM not in self._previous:
                self._previous[signal.SIGALRM] = signal.signal(signal.SIGALRM, self._retry)
            signal.setitimer(signal.ITIMER_REAL, RETRY_S)
            return
        self._raised = True
        raise SystemExit(128 + self.signum)

    def cleaning_up(self) -> None:
        """Signals from now on are recorded, never raised."""
        self._raised = True

    @contextlib.contextmanager
    def held(self) -> Iterator[StopRequest]:
        """Signals in this block are only recorded (poll ``self``); with ``unwind``, one that arrived raises its
        ``SystemExit`` as the block ends normally. For a step that a raise must not cut in two, such as
        starting a process and keeping its handle."""
        outer, self._held = self._held, True
        try:
            yield self
        finally:
            self._held = outer
        if self.unwind and self.signum and not self._raised and not outer:
            self._raised = True
            raise SystemExit(128 + self.signum)

    def __bool__(self) -> bool:
        return self.signum != 0

    def __call__(self) -> bool:
        """``stop()``: whether a stop was asked for (a ``should_stop`` callback)."""
        return self.signum != 0

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():
            self._previous = {sig: signal.signal(sig, self._handle) for sig in STOP_SIGNALS}
        return self

    def __exit__(self, *exc) -> None:
        # Once a stop was asked for, the process is on its way out with its server stopped: the rest of the
        # burst is ignored rather than handed back to the default handlers, which would end the process by
        # the signal (or a KeyboardInterrupt) after the clean stop. SIG_IGN also outlives the interpreter's
        # own reset of Python-level handlers at exit.
        if signal.SIGALRM in self._previous:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self._previous.pop(signal.SIGALRM))
        for sig, handler in self._previous.items():
            signal.signal(sig, signal.SIG_IGN if self.signum else handler)
