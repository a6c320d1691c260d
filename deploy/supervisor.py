"""Recovery from a crashed Python-backend stub, and the client-side retry policy that rides it out.

Triton 2.51 does not restart a Python-backend stub that dies: the model stays READY, and every request
routed to the dead instance fails with HTTP 500 / gRPC INTERNAL ``Stub process '<instance>' is not
healthy.`` until the model is loaded again. Loading it again *unchanged* does nothing (Triton sees the same
files), so the :class:`Supervisor` reloads it with the config it serves now, passed to model control's
``load``: Triton builds new instances (new stubs, warmup included) while the old ones keep answering, then
swaps them in. The server must run in explicit model-control mode.

Detection watches the server's children with psutil, every ``interval_s``:

- each stub's command line names its model file (``<repo>/<model>/<version>/model.*``) and its instance
  (``<model>_<group>_<index>``), read while the stub is alive (a dead one's command line is gone);
- a stub that Triton stops on purpose (unload, reload) is reaped at once; a stub that *crashed* stays a
  zombie, because the server does not wait for it. A known stub seen as a zombie for ``confirm_s`` is dead,
  unless a newer live stub has the same instance name (its model was reloaded already) or its model is
  no longer READY (it was unloaded);
- the dead stubs of one model found in one poll cost one reload. A reload that fails is tried again with
  exponential backoff, ``max_attempts`` times; every outcome is a :class:`RecoveryEvent`.

Everything is bounded: each HTTP call has a timeout, :meth:`Supervisor.stop` joins with a timeout, and the
thread is a daemon.

The second half of the module is what a client does meanwhile (:class:`RetryPolicy`, :func:`retryable`,
:func:`call_with_retry`); it lives here, free of Locust and gevent, so that test threads and the Locust
users (``loadtest/users.py``) share it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import random
import re
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable, Iterable

import psutil

LOG = logging.getLogger("tritonkit.supervisor")
STUB_BINARY = "triton_python_backend_stub"
RELOAD_PARAMETER = "TRITONKIT_RELOAD"
"""Config parameter that makes each reload's config differ from the served one (see ModelControl.reload)."""
_INSTANCE_SUFFIX = re.compile(r"(_\d+){1,2}$")


# -- detection ----------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class StubInfo:
    """One stub process as a poll saw it."""

    pid: int
    status: str
    """psutil status: ``sleeping``, ``running``, ``zombie``, ... or ``gone``."""
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
        dead = []
        for pid, known in list(self.known.items()):
            info = seen.get(pid)
            if info is None or info.status == "gone":
                del self.known[pid]  # reaped: Triton stopped it on purpose
                continue
            if info.status != "zombie":
                known.last_alive, known.zombie_since = now, None
                continue
            if known.zombie_since is None:
                known.zombie_since = now
            if now - known.zombie_since < self.confirm_s:
                continue
            del self.known[pid]
            self.handled.add(pid)
            replaced = any(k.instance == known.instance and k.create_time > known.create_time
                           for k in self.known.values())
            if not replaced:
                dead.append(DeadStub(pid, known.model, known.instance, known.last_alive, now, known.create_time))
        return dead


def snapshot(server_pid: int) -> list[StubInfo]:
    """The stub processes under ``server_pid`` now (command lines only of live ones)."""
    try:
        children = psutil.Process(server_pid).children(recursive=True)
    except psutil.Error:
        return []
    out = []
    for child in children:
        try:
            status = child.status()
            cmdline = () if status == psutil.STATUS_ZOMBIE else tuple(child.cmdline())
            if status != psutil.STATUS_ZOMBIE and not (cmdline and cmdline[0].endswith(STUB_BINARY)):
                continue
            out.append(StubInfo(child.pid, status, child.create_time(), cmdline))
        except psutil.NoSuchProcess:
            continue
        except psutil.Error:
            continue
    return out


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
        return (f"dead stub of {who}: reloaded in {self.recovery_s:.2f} s after detection "
                f"(outage at most {self.downtime_s:.2f} s, {self.attempts} attempt(s))")


class ModelControl:
    """The three model-control calls the supervisor needs, over plain HTTP with timeouts."""

    def __init__(self, http_url: str, timeout_s: float = 10.0, load_timeout_s: float = 300.0,
                 headers: dict[str, str] | None = None):
        self.base = f"http://{http_url}"
        self.timeout_s, self.load_timeout_s = timeout_s, load_timeout_s
        self.headers = {"Content-Type": "application/json", **(headers or {})}  # the admin key, if restricted

    def _call(self, path: str, body: dict | None, timeout: float):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, method="GET" if data is None else "POST",
                                         headers=self.headers)
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                text = response.read().decode()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")
            raise RuntimeError(f"HTTP {exc.code} from {path}: {detail[:300]}") from None
        return json.loads(text) if text else None

    def ready_models(self) -> set[str]:
        index = self._call("/v2/repository/index", {"ready": True}, self.timeout_s) or []
        return {m["name"] for m in index if m.get("state", "READY") == "READY"}

    def reload(self, model: str) -> None:
        """Load ``model`` again with the config it serves now: new instances, then the swap.

        Triton skips a load whose config equals the one served, so the config carries one more parameter,
        ``TRITONKIT_RELOAD`` (a fresh value each time; backends ignore it).
        """
        config = self._call(f"/v2/models/{model}/config", None, self.timeout_s)
        config.setdefault("parameters", {})[RELOAD_PARAMETER] = {"string_value": str(time.time_ns())}
        self._call(f"/v2/repository/models/{model}/load", {"parameters": {"config": json.dumps(config)}},
                   self.load_timeout_s)


class Supervisor(threading.Thread):
    """Watches one tritonserver's stubs and reloads the model of any that dies. ``start()``, ``stop()``."""

    def __init__(self, server_pid: int, http_url: str, interval_s: float = 0.25, confirm_s: float = 0.2,
                 max_attempts: int = 3, backoff_s: float = 1.0, load_timeout_s: float = 300.0,
                 on_event: Callable[[RecoveryEvent], None] | None = None, headers: dict[str, str] | None = None):
        super().__init__(name="tritonkit-supervisor", daemon=True)
        self.server_pid, self.interval_s = server_pid, interval_s
        self.max_attempts, self.backoff_s = max_attempts, backoff_s
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

    def wait_for_events(self, count: int = 1, timeout_s: float = 60.0) -> list[RecoveryEvent]:
        """Block until ``count`` events are recorded (or the timeout); the events so far."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and len(self.events) < count:
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
        dead = self.watch.observe(snapshot(self.server_pid), time.time())
        by_model: dict[str, list[DeadStub]] = {}
        for stub in dead:
            by_model.setdefault(stub.model, []).append(stub)
        done = []
        for model, stubs in sorted(by_model.items()):
            if self._halt.is_set():
                break
            event = RecoveryEvent(model, [s.instance for s in stubs], [s.pid for s in stubs],
                                  min(s.last_alive for s in stubs), min(s.detected_at for s in stubs))
            self._recover(event, stubs)
            with self._lock:
                self.events.append(event)
            done.append(event)
            (LOG.warning if event.ok or event.skipped else LOG.error)("%s", event.describe())
            if self.on_event:
                self.on_event(event)
        return done

    def _replaced(self, stubs: list[DeadStub]) -> bool:
        """Whether every dead stub's instance has a newer live stub (the reload really made new ones)."""
        live = [s for s in snapshot(self.server_pid) if s.status not in ("zombie", "gone")]
        fresh = {parse_stub(s.cmdline)[1] for s in live if parse_stub(s.cmdline)
                 and any(s.create_time > d.create_time for d in stubs)}
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


# -- the client's side: retry with backoff ------------------------------------------------------
RETRYABLE_HTTP = frozenset({429, 502, 503, 504})
RETRYABLE_GRPC = frozenset({"StatusCode.UNAVAILABLE", "StatusCode.RESOURCE_EXHAUSTED"})
RETRYABLE_TEXT = re.compile(r"stub process .* is not healthy|is not ready|not at ready state|unavailable",
                            re.IGNORECASE)


_HTTP_TEXT = re.compile(r"^HTTP (\d{3})\b")


def _status(exc: BaseException) -> str:
    """``"503"``, ``"StatusCode.UNAVAILABLE"`` (tritonclient's ``status()``), an ``HTTP 503: ...`` message's
    code (the project's own senders), or ``""``."""
    status = getattr(exc, "status", None)
    try:
        value = status() if callable(status) else status
    except Exception:  # noqa: BLE001
        value = None
    if value is None and (match := _HTTP_TEXT.match(str(exc))):
        value = match.group(1)
    return "" if value is None else str(value)


def retryable(exc: BaseException) -> bool:
    """Whether a failed request is worth sending again: the server could not take it *now*.

    Yes: HTTP 429/502/503/504, gRPC UNAVAILABLE or RESOURCE_EXHAUSTED, a refused or reset connection,
    and Triton's texts for a dead stub or a model between versions (``Stub process '...' is not healthy``,
    ``... is not ready``, ``unavailable``, whatever their status). No: every other 4xx (the input is
    wrong and stays wrong), other 5xx, and timeouts (the server may still be working on it).
    """
    status = _status(exc)
    if RETRYABLE_TEXT.search(str(exc)):
        return True
    if status.isdigit():
        return int(status) in RETRYABLE_HTTP
    if status in RETRYABLE_GRPC:
        return True
    return isinstance(exc, (ConnectionRefusedError, ConnectionResetError, BrokenPipeError))


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """``{"attempts": N, "backoff_ms": B}`` (and optionally ``max_backoff_ms``, default 2000).

    ``attempts`` is the most times one request is sent, the first included (1: no retry). Before retry k
    (k = 1, 2, ...) the client waits ``min(max_backoff, backoff * 2**(k-1))`` with equal jitter: half of it
    fixed, half uniformly random, so clients that failed together do not come back together.
    """

    attempts: int = 1
    backoff_ms: float = 50.0
    max_backoff_ms: float = 2000.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"retry attempts={self.attempts} must be >= 1")
        if self.backoff_ms < 0 or self.max_backoff_ms < 0:
            raise ValueError("retry backoff_ms and max_backoff_ms must be >= 0")

    @classmethod
    def from_settings(cls, settings: dict | None) -> "RetryPolicy | None":
        """The policy of ``settings["retry"]``; None when absent (the default: no retry)."""
        raw = (settings or {}).get("retry")
        if not raw:
            return None
        unknown = set(raw) - {"attempts", "backoff_ms", "max_backoff_ms"}
        if unknown:
            raise ValueError(f"unknown retry keys {sorted(unknown)}")
        return cls(**{k: type(getattr(cls, k))(v) for k, v in raw.items()})

    def delay_s(self, retry: int, rng: random.Random | None = None) -> float:
        """Seconds to wait before retry number ``retry`` (1-based)."""
        full = min(self.max_backoff_ms, self.backoff_ms * 2 ** (retry - 1)) / 1000
        return full / 2 + (rng or random).uniform(0, full / 2)


def call_with_retry(send: Callable[[], object], policy: RetryPolicy | None,
                    sleep: Callable[[float], None] | None = None, rng: random.Random | None = None,
                    on_retry: Callable[[BaseException], None] | None = None):
    """``send()`` until it succeeds, fails for good (not :func:`retryable`) or runs out of attempts;
    returns ``(result, retries)``; the last error propagates. ``on_retry`` sees each error retried."""
    retries = 0
    while True:
        try:
            return send(), retries
        except Exception as exc:
            if policy is None or retries + 1 >= policy.attempts or not retryable(exc):
                raise
            retries += 1
            if on_retry:
                on_retry(exc)
            (sleep or time.sleep)(policy.delay_s(retries, rng))  # looked up now: gevent may have patched it
