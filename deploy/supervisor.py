"""Recovery from a crashed Python-backend stub, and the client-side retry policy that rides it out.

Triton 2.51 does not restart a Python-backend stub that dies: the model stays READY, and every request
routed to the dead instance fails with HTTP 500 / gRPC INTERNAL ``Stub process '<instance>' is not
healthy.`` until the model is loaded again. Loading it again *unchanged* does nothing (Triton sees the same
files), so the :class:`Supervisor` reloads it with the config it serves now, passed to model control's
``load`` (:class:`deploy.client.ModelControl`, the project's one client of that API): Triton builds new
instances (new stubs, warmup included) while the old ones keep answering, then swaps them in. The server
must run in explicit model-control mode.

Detection watches the server's children with psutil, every ``interval_s``:

- each stub's command line names its model file (``<repo>/<model>/<version>/model.*``) and its instance
  (``<model>_<group>_<index>``), read while the stub is alive (a dead one's command line is gone);
- a stub that Triton stops on purpose (unload, reload) is reaped at once; a stub that *crashed* stays a
  zombie, because the server does not wait for it. A stub caught while it exits (alive, but its command
  line already gone) is neither: the next poll decides. A known stub seen as a zombie for ``confirm_s`` is dead,
  unless a newer live stub has the same instance name (its model was reloaded already) or its model is
  no longer READY (it was unloaded);
- the dead stubs of one model found in one poll cost one reload. A reload that fails is tried again with
  exponential backoff, ``max_attempts`` times; every outcome is a :class:`RecoveryEvent`.

Everything is bounded: each HTTP call has a timeout, :meth:`Supervisor.stop` joins with a timeout, and the
thread is a daemon.

What a client does meanwhile (retry with backoff) is :mod:`deploy.retry`.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import re
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import psutil

from deploy.client import ModelControl
from deploy.errors import ServerError

LOG = logging.getLogger("tritonkit.supervisor")
STUB_BINARY = "triton_python_backend_stub"
_INSTANCE_SUFFIX = re.compile(r"(_\d+){1,2}$")
ORPHAN_GRACE_ENV = "TRITONKIT_ORPHAN_GRACE_S"
DEFAULT_ORPHAN_GRACE_S = 30.0


def orphan_grace_from_env(environ=os.environ) -> float:
    """Seconds a reload's replaced instances get to stop before :meth:`Supervisor.settle` ends them:
    ``TRITONKIT_ORPHAN_GRACE_S``, else 30 (Triton stops them within seconds; the tests set a few)."""
    value = environ.get(ORPHAN_GRACE_ENV, "").strip()
    if not value:
        return DEFAULT_ORPHAN_GRACE_S
    try:
        grace = float(value)
    except ValueError:
        grace = math.nan
    if not 0 < grace < math.inf:
        raise ServerError(f"{ORPHAN_GRACE_ENV}={value!r} is not a number of seconds above 0; unset it for 30")
    return grace


# -- detection ----------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class StubInfo:
    """One stub process as a poll saw it."""

    pid: int
    status: str
    """psutil status (``sleeping``, ``running``, ``zombie``, ...), ``exiting`` (alive but its command line is
    gone: caught while it dies), ``unknown`` (unreadable) or ``gone``."""
    create_time: float
    cmdline: tuple[str, ...] = ()
    """Empty for a zombie (Linux drops a dead process's command line)."""


def parse_stub(cmdline: Iterable[str]) -> tuple[str, str] | None:
    """``(model, instance)`` named by a Python-backend stub's command line; None for any other process.

    The 2.51 stub gets: binary, model file, shm region, shm sizes (2), parent pid, backend folder, IPC
    handle, instance name, runtime folder. The model is the folder above the version folder of the model
    file; the instance name starts with it (``digits_0_1``). Where the two disagree (a model loaded from
    files passed to model control lives elsewhere), the instance name wins, less its ``_<group>_<index>``.
    """
    args = list(cmdline)
    if not args or not args[0].endswith(STUB_BINARY) or len(args) < 2:
        return None
    path = Path(args[1])
    model = path.parent.parent.name if len(path.parts) >= 3 else ""
    instance = args[8] if len(args) > 8 else ""
    if model and instance.startswith(f"{model}_"):
        return model, instance
    named = [a for a in args[2:] if model and a.startswith(f"{model}_")]
    if named:
        return model, named[0]
    if instance:
        return _INSTANCE_SUFFIX.sub("", instance) or instance, instance
    return (model, model) if model else None


@dataclasses.dataclass
class _Known:
    model: str
    instance: str
    create_time: float
    last_alive: float
    zombie_since: float | None = None


@dataclasses.dataclass(frozen=True)
class DeadStub:
    pid: int
    model: str
    instance: str
    last_alive: float
    """Wall time of the last poll that saw it alive: it died after this."""
    detected_at: float
    create_time: float = 0.0


class StubWatch:
    """Pure bookkeeping over successive polls (no I/O, unit-testable): which known stubs crashed."""

    def __init__(self, confirm_s: float = 0.2):
        self.confirm_s = confirm_s
        self.known: dict[int, _Known] = {}
        self.handled: set[int] = set()

    def observe(self, stubs: Iterable[StubInfo], now: float) -> list[DeadStub]:
        seen = {s.pid: s for s in stubs}
        for pid, info in seen.items():
            if pid in self.handled or info.status in ("zombie", "gone") or pid in self.known:
                continue
            parsed = parse_stub(info.cmdline)
            if parsed:
                self.known[pid] = _Known(*parsed, create_time=info.create_time, last_alive=now)
                LOG.debug("stub %s (pid %d) of %s is watched", parsed[1], pid, parsed[0])
        dead = []
        for pid, known in list(self.known.items()):
            info = seen.get(pid)
            if info is None or info.status == "gone" or (info.create_time and info.create_time != known.create_time):
                del self.known[pid]  # reaped (a new process may reuse its pid): Triton stopped it on purpose
                LOG.debug("stub %s (pid %d) is gone: stopped on purpose", known.instance, pid)
                continue
            if info.status in ("exiting", "unknown"):
                continue  # dying or unreadable now: reaped (on purpose) or a zombie (a crash) on a later poll
            if info.status != "zombie":
                known.last_alive, known.zombie_since = now, None
                continue
            if known.zombie_since is None:
                known.zombie_since = now
                LOG.debug("stub %s (pid %d) is a zombie", known.instance, pid)
            if now - known.zombie_since < self.confirm_s:
                continue
            del self.known[pid]
            self.handled.add(pid)
            replaced = any(
                k.instance == known.instance and k.create_time > known.create_time for k in self.known.values()
            )
            if replaced:
                LOG.debug("stub %s (pid %d) died after a newer one replaced it", known.instance, pid)
            else:
                dead.append(DeadStub(pid, known.model, known.instance, known.last_alive, now, known.create_time))
        return dead


def snapshot(server_pid: int) -> list[StubInfo]:
    """The stub processes under ``server_pid`` now (command lines only of live ones).

    A child that is neither a zombie nor readable as a stub stays in the list as ``exiting`` (a SIGKILLed
    stub loses its command line before it turns zombie) or ``unknown``, so that a poll landing in that
    instant does not take a crash for a stop on purpose. Children that are plainly something else are left out.
    """
    try:
        children = psutil.Process(server_pid).children(recursive=True)
    except psutil.Error:
        return []
    out = []
    for child in children:
        try:
            status, created = child.status(), child.create_time()
        except psutil.NoSuchProcess:
            continue  # reaped
        except psutil.Error:
            out.append(StubInfo(child.pid, "unknown", 0.0))
            continue
        if status == psutil.STATUS_ZOMBIE:
            out.append(StubInfo(child.pid, status, created))
            continue
        try:
            cmdline = tuple(child.cmdline())
        except psutil.NoSuchProcess:
            continue
        except psutil.Error:
            cmdline = ()
        if not cmdline:
            out.append(StubInfo(child.pid, "exiting", created))
        elif cmdline[0].endswith(STUB_BINARY):
            out.append(StubInfo(child.pid, status, created, cmdline))
    return out


def kept_stubs(model: str, dead: list[DeadStub], stubs: list[StubInfo]) -> list[StubInfo]:
    """The live stubs of ``model``'s crashed generation that newer stubs of the same instance name replaced,
    when Triton kept that generation (a dead stub of it is still an unreaped zombie); else none."""
    by_pid = {s.pid: s for s in stubs}
    if not any(
        d.pid in by_pid and by_pid[d.pid].status == "zombie" and by_pid[d.pid].create_time == d.create_time
        for d in dead
    ):
        return []
    live = [(s, parsed) for s in stubs if s.cmdline and (parsed := parse_stub(s.cmdline))]
    generation = max(d.create_time for d in dead) + 1.0  # its instances start within a second
    return [
        s
        for s, (m, i) in live
        if m == model
        and s.create_time <= generation
        and any((m2, i2) == (m, i) and other.create_time > s.create_time for other, (m2, i2) in live)
    ]


# -- reload -------------------------------------------------------------------------------------
@dataclasses.dataclass
class RecoveryEvent:
    """One model's recovery from dead stubs."""

    model: str
    instances: list[str]
    pids: list[int]
    last_alive_at: float
    """Wall time the dead stubs were last seen alive (they died between this and ``detected_at``)."""
    detected_at: float
    reloaded_at: float | None = None
    """Wall time the reload returned with the model READY; None when every attempt failed or was skipped."""
    attempts: int = 0
    error: str = ""
    skipped: str = ""
    """Why no reload was tried (the model was no longer READY: unloaded on purpose)."""
    orphans: list[int] = dataclasses.field(default_factory=list)
    """Stubs of the replaced instances that outlived the grace period and were ended (see
    :meth:`Supervisor.settle`)."""
    settled_at: float | None = None
    """Wall time the supervisor last looked after this event (the replaced instances checked, or nothing to
    check); None while it waits."""

    @property
    def ok(self) -> bool:
        return self.reloaded_at is not None

    @property
    def recovery_s(self) -> float | None:
        """Detection to ready again."""
        return None if self.reloaded_at is None else self.reloaded_at - self.detected_at

    @property
    def downtime_s(self) -> float | None:
        """Upper bound of the instance's outage: last seen alive to ready again."""
        return None if self.reloaded_at is None else self.reloaded_at - self.last_alive_at

    def describe(self) -> str:
        who = f"{self.model} (stub {', '.join(self.instances)}, pid {', '.join(map(str, self.pids))})"
        if self.skipped:
            return f"dead stub of {who}: not reloaded, {self.skipped}"
        if not self.ok:
            return f"dead stub of {who}: reload failed after {self.attempts} attempt(s): {self.error}"
        text = (
            f"dead stub of {who}: reloaded in {self.recovery_s:.2f} s after detection "
            f"(outage at most {self.downtime_s:.2f} s, {self.attempts} attempt(s))"
        )
        if self.orphans:
            text += (
                f"; ended {len(self.orphans)} orphaned stub(s) of the replaced instances (pid "
                f"{', '.join(map(str, self.orphans))})"
            )
        return text


class Supervisor(threading.Thread):
    """Watches one tritonserver's stubs and reloads the model of any that dies. ``start()``, ``stop()``."""

    def __init__(
        self,
        server_pid: int,
        http_url: str,
        interval_s: float = 0.25,
        confirm_s: float = 0.2,
        max_attempts: int = 3,
        backoff_s: float = 1.0,
        load_timeout_s: float = 300.0,
        on_event: Callable[[RecoveryEvent], None] | None = None,
        headers: dict[str, str] | None = None,
        orphan_grace_s: float | None = None,
    ):
        super().__init__(name="tritonkit-supervisor", daemon=True)
        self.server_pid, self.interval_s = server_pid, interval_s
        self.max_attempts, self.backoff_s = max_attempts, backoff_s
        self.orphan_grace_s = orphan_grace_s if orphan_grace_s is not None else orphan_grace_from_env()
        """How long after a reload the replaced instances may take to stop before :meth:`settle` looks
        (default: :func:`orphan_grace_from_env`)."""
        self._unsettled: list[tuple[RecoveryEvent, list[DeadStub]]] = []
        self.watch = StubWatch(confirm_s)
        self.control = ModelControl(http_url, load_timeout_s=load_timeout_s, headers=headers)
        self.on_event = on_event
        self.events: list[RecoveryEvent] = []
        self._halt = threading.Event()
        self._lock = threading.Lock()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._halt.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout_s)

    def wait_for_events(self, count: int = 1, timeout_s: float = 60.0, settled: bool = False) -> list[RecoveryEvent]:
        """Block until ``count`` events are recorded (and, with ``settled``, looked after) or the timeout;
        the events so far."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and (
            len(self.events) < count or (settled and any(e.settled_at is None for e in self.events))
        ):
            time.sleep(0.05)
        return list(self.events)

    def run(self) -> None:
        while not self._halt.is_set():
            try:
                self.poll()
            except Exception:  # noqa: BLE001 - the watcher must outlive any one bad poll
                LOG.exception("supervisor poll failed")
            self._halt.wait(self.interval_s)

    def poll(self) -> list[RecoveryEvent]:
        self.settle(time.time())
        dead = self.watch.observe(snapshot(self.server_pid), time.time())
        by_model: dict[str, list[DeadStub]] = {}
        for stub in dead:
            by_model.setdefault(stub.model, []).append(stub)
        done = []
        for model, stubs in sorted(by_model.items()):
            if self._halt.is_set():
                break
            event = RecoveryEvent(
                model,
                [s.instance for s in stubs],
                [s.pid for s in stubs],
                min(s.last_alive for s in stubs),
                min(s.detected_at for s in stubs),
            )
            self._recover(event, stubs)
            if event.ok:
                self._unsettled.append((event, stubs))
            else:
                event.settled_at = time.time()  # no replaced instances to look after
            with self._lock:
                self.events.append(event)
            done.append(event)
            (LOG.warning if event.ok or event.skipped else LOG.error)("%s", event.describe())
            if self.on_event:
                self.on_event(event)
        return done

    def settle(self, now: float) -> list[int]:
        """Ends the stubs that a reload replaced but Triton kept: the pids ended.

        Triton 2.51 stops the replaced instances of a reload within seconds, and reaps the dead stub's
        zombie as it does (``make test``, ``test_stub_crash.py``). After requests failed on the dead stub,
        though, it never releases them: the healthy stubs of the old instances live on, idle, holding their
        model's memory, one set per crash. So, ``orphan_grace_s`` after a reload, if the dead stub is still
        an unreaped zombie, every live stub of that model's generation that a newer stub of the same
        instance name replaced is ended with SIGKILL. Nothing routes requests to them any more.
        """
        due = [(e, d) for e, d in self._unsettled if now >= e.reloaded_at + self.orphan_grace_s]
        if not due:
            return []
        stubs = snapshot(self.server_pid)
        ended = []
        for event, dead in due:
            self._unsettled.remove((event, dead))
            for stub in kept_stubs(event.model, dead, stubs):
                try:
                    proc = psutil.Process(stub.pid)
                    if proc.create_time() != stub.create_time:
                        continue  # the pid belongs to another process now
                    proc.kill()
                except psutil.Error:
                    continue
                event.orphans.append(stub.pid)
            event.settled_at = time.time()
            if event.orphans:
                LOG.warning(
                    "%s: Triton kept the replaced instances; ended %d orphaned stub(s) (pid %s)",
                    event.model,
                    len(event.orphans),
                    ", ".join(map(str, event.orphans)),
                )
            ended += event.orphans
        return ended

    def _replaced(self, stubs: list[DeadStub]) -> bool:
        """Whether every dead stub's instance has a newer live stub (the reload really made new ones)."""
        live = [s for s in snapshot(self.server_pid) if s.status not in ("zombie", "gone")]
        fresh = {
            parse_stub(s.cmdline)[1]
            for s in live
            if parse_stub(s.cmdline) and any(s.create_time > d.create_time for d in stubs)
        }
        return all(d.instance in fresh for d in stubs)

    def _recover(self, event: RecoveryEvent, stubs: list[DeadStub]) -> None:
        try:
            if event.model not in self.control.ready_models():
                event.skipped = "the model is not READY (unloaded)"
                return
        except Exception as exc:  # noqa: BLE001 - cannot ask: try the reload anyway
            LOG.warning("repository index unavailable (%s); reloading %s anyway", exc, event.model)
        delay = self.backoff_s
        while event.attempts < self.max_attempts and not self._halt.is_set():
            event.attempts += 1
            try:
                self.control.reload(event.model)
                if self._replaced(stubs):
                    event.reloaded_at, event.error = time.time(), ""
                    return
                event.error = "the load returned but the dead instances were not replaced"
            except Exception as exc:  # noqa: BLE001 - recorded on the event, tried again
                event.error = f"{type(exc).__name__}: {exc}"
            if self._halt.wait(delay):
                return
            delay *= 2
