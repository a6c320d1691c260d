"""Wake a greenlet at a ``time.monotonic()`` instant within tens of microseconds, without holding the process.

gevent's own timers (libev on epoll) wake in whole milliseconds, up to about 1.3 ms after they fell due. An
open-loop request counts from when it fell due, so a late wake is latency the server never caused. The open loop
used to wait out its last 2 ms in a loop that yielded to gevent's hub (other requests in flight) or blocked the
whole process in a kernel sleep (none): the yield loop held the interpreter lock, and gRPC's answers, read on
gevent's thread pool, waited for it. At 1,000 req/s on digits over gRPC that cost 0.6-0.7 ms of every request's
median (the generator's floor 1.28-1.31 ms against 0.67-0.75 ms with this module; 2026-12-05, one Locust process
on its own core, ``tritonkit loadtest --rate 1000``).

On Linux a ``timerfd`` (a high-resolution kernel timer read as a file) set to the instant is waited on like a
socket: gevent's hub sleeps in epoll until it fires, answers in flight are read meanwhile, and nothing spins.
Python has ``os.timerfd_create`` from 3.13; this project runs on 3.11, so libc is called through ctypes. Where
there is no ``timerfd`` (macOS), the wait yields to the hub until the instant: never early, a little CPU.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import math
import os
import time

import gevent
import gevent.socket

_CLOCK_MONOTONIC = 1  # the clock time.monotonic() reads on Linux
_TFD_NONBLOCK, _TFD_CLOEXEC = 0o4000, 0o2000000
_TFD_TIMER_ABSTIME = 1


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


def _libc_timerfd():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        create, settime = libc.timerfd_create, libc.timerfd_settime
    except (OSError, AttributeError):
        return None
    create.argtypes, create.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    settime.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.POINTER(_Itimerspec), ctypes.c_void_p]
    settime.restype = ctypes.c_int
    return create, settime


_TIMERFD = _libc_timerfd()
KERNEL_TIMER = _TIMERFD is not None
"""Whether ``wait_until`` sleeps on a kernel timer here (Linux), rather than yielding until the instant."""


def _timerfd_wait(due: float) -> None:
    """Sleep in gevent's hub until ``due`` on a timerfd; at once when the kernel would not give one."""
    create, settime = _TIMERFD
    fd = create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC)
    if fd < 0:
        return  # out of descriptors, say: the caller's yield loop waits instead
    try:
        seconds, nanoseconds = divmod(math.ceil(due * 1e9), 1_000_000_000)  # rounded up: never early
        when = _Itimerspec(_Timespec(0, 0), _Timespec(seconds, nanoseconds))
        if settime(fd, _TFD_TIMER_ABSTIME, ctypes.byref(when), None) == 0:
            gevent.socket.wait_read(fd)
    finally:
        os.close(fd)


def wait_until(due: float) -> None:
    """Return at ``due`` (``time.monotonic()``), never before it, letting the process's other greenlets run."""
    if KERNEL_TIMER and due > time.monotonic():
        _timerfd_wait(due)
    while due > time.monotonic():
        gevent.sleep(0)
