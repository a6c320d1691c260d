"""The Locust user that calls any served model through ``tritonclient`` (HTTP or gRPC) or the FastAPI baseline.

One class, :class:`TritonUser`, for every model and protocol: what it sends where comes from the settings
(``TRITONKIT_LOAD``, see ``loadtest/generators/locust/locustfile.py``), resolved once per Locust process
(:func:`resolve`): the served model, the protocol, the payloads (``loadtest.generators.payloads``, from the served
config read off the server unless the settings carry it) and whether the model is decoupled, in which case
it is driven as a stream (gRPC stream, HTTP ``generate_stream``).

Two ways to load a server:
- closed loop (``users``, ``step``, ``spike`` shapes): each user sends a request, waits for the answer,
  sends the next. Simple, but a slow server slows the clients down, so queueing delay never shows
  (coordinated omission).
- open loop (``open`` shape): arrivals at the target rate, Poisson unless the shape's ``arrival`` names
  another pattern (gamma, ramp, replay of a recorded schedule: ``loadtest/generators/arrivals.py``). Each
  Locust process (one user each) draws the run's one schedule from the shared ``arrival_seed`` and sends
  every N-th arrival (N = ``generators``, its share), each in its own greenlet, whether or not earlier ones
  have returned; latency counts from the moment the request was due, so time spent waiting for a free
  connection is charged to the server, as a real client would experience it. Arrivals beyond
  ``max_inflight`` outstanding requests are dropped and counted as failures: the client is saturated and
  the figure says so.

Retry is opt-in: ``settings["retry"] = {"attempts": N, "backoff_ms": B}`` (optional ``max_backoff_ms``) sends
a request that failed with a retryable status again, up to N attempts in all, with exponential backoff and
jitter (:class:`deploy.retry.RetryPolicy`, :func:`deploy.retry.retryable`). A request that succeeds
after retries is one success, timed from its first send; each retry is counted in ``ClientStats.retries``.
Without the key nothing is retried: overload measurements must see the refusals.

Every latency goes to the process's :class:`loadtest.core.latency.Recorder` (µs resolution) and to Locust's
own statistics (its web UI and CSVs keep working). A streamed request also gives the times its text responses
came (whatever its output is named), from which the recorder keeps its time to first token, inter-token
latency and tokens (``loadtest.core.streams``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import pickle
import random
import time
from collections.abc import Iterator
from typing import Any

import gevent
import gevent.event
import gevent.pool
import numpy as np
from locust import User, constant, task
from locust.exception import StopUser
from locust.user.users import LOCUST_STATE_STOPPING

from deploy.retry import RetryPolicy, call_with_retry
from loadtest.core.latency import Recorder
from loadtest.core.streams import carries_text, stream_figures
from loadtest.generators.arrivals import Arrival, Due, from_shape
from loadtest.generators.locust import wake
from loadtest.generators.payloads import PayloadOptions, default_options, payloads, served_model
from loadtest.target import apply

RECORDER = Recorder()
"""This process's recorder; the locustfile ships it to the master."""
RUN_START = [time.monotonic()]
"""Reset at test start; the timeline's second 0."""
SETTINGS_READY = gevent.event.Event()
"""Set once this process's target is resolved (the locustfile's init: a remote worker's settings come from its
master, and its users may be spawned before they do)."""
SETTINGS_WAIT_S = 150.0
TIMER_SLACK_S = 0.002
"""How early the open loop wakes on gevent's timer before a request falls due. gevent's timers (libev, epoll) wake
in whole milliseconds, up to about 1.3 ms after they fell due (seen: 0.7 ms at the median at 20 req/s), and a
greenlet spawned then starts one turn of gevent's hub later (0.13-0.18 ms at the median at 20 req/s, measured in
the run's Locust process, 2026-12-05): a request timed from when it fell due carried both as latency. So the loop
spawns each request's greenlet this long before it falls due, and the greenlet waits out the rest on a kernel
timer (``wake.wait_until``) and sends at once."""


def _second() -> int:
    return int(time.monotonic() - RUN_START[0])


class Sender:
    """Prepared requests for one model and a client to send them with; ``send(i)`` raises on failure. A stream
    sender's ``send`` returns when each response carrying text came (``time.monotonic()``); the others None."""

    def __init__(self, url: str, model: str, payloads: list[dict[str, np.ndarray]], pool: int):
        self.url, self.model, self.payloads, self.pool = url, model, payloads, pool

    def send(self, index: int) -> list[float] | None:
        raise NotImplementedError

    def connect(self) -> None:
        """Open the connection before the run: its set-up (6-7 ms for gRPC here) is not the server's latency."""

    def close(self) -> None:
        pass


class TritonSender(Sender):
    def __init__(self, url: str, model: str, payloads, pool: int, protocol: str):
        super().__init__(url, model, payloads, pool)
        if protocol == "grpc":
            import tritonclient.grpc as module

            self.client = module.InferenceServerClient(url)
        else:
            import tritonclient.http as module

            self.client = module.InferenceServerClient(url, concurrency=pool, network_timeout=120.0)
        from tritonclient.utils import np_to_triton_dtype

        self.requests = []
        for payload in payloads:
            inputs = []
            for name, array in payload.items():
                tensor = module.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
                tensor.set_data_from_numpy(array)
                inputs.append(tensor)
            self.requests.append(inputs)

    def send(self, index: int) -> None:
        self.client.infer(self.model, self.requests[index % len(self.requests)])

    def connect(self) -> None:
        # A server that does not answer now fails the run's requests, each counted; not the user's start.
        with contextlib.suppress(Exception):
            self.client.is_server_live()

    def close(self) -> None:
        self.client.close()


def _json_value(array: np.ndarray):
    values = [v.decode() if isinstance(v, bytes) else v.item() if hasattr(v, "item") else v for v in array.reshape(-1)]
    return values[0] if len(values) == 1 else values


def _json_inputs(payload: dict[str, np.ndarray]) -> dict:
    """The generate extension's JSON: each input by name, a one-element tensor as a scalar."""
    return {k: _json_value(v) for k, v in payload.items()}


class HttpStreamSender(Sender):
    """Decoupled model over HTTP: ``generate_stream`` (server-sent events), read event by event as they come,
    timed to the last one."""

    def __init__(self, url: str, model: str, payloads, pool: int):
        super().__init__(url, model, payloads, pool)
        from geventhttpclient import HTTPClient

        self.client = HTTPClient.from_url(f"http://{url}", concurrency=pool, network_timeout=120.0)
        self.bodies = [json.dumps(_json_inputs(p)).encode() for p in payloads]

    def send(self, index: int) -> list[float]:
        response = self.client.post(
            f"/v2/models/{self.model}/generate_stream",
            self.bodies[index % len(self.bodies)],
            headers={"Content-Type": "application/json"},
        )
        if response.status_code != 200:
            body = response.read()
            raise RuntimeError(f"HTTP {response.status_code}: {body[:200].decode(errors='replace')}")
        times = []
        while line := response.readline(b"\n"):
            if not line.startswith(b"data:"):
                continue  # the blank line between events
            now = time.monotonic()
            event = json.loads(line[5:])
            if "error" in event:
                response.read()  # the rest, so the connection goes back to the pool clean
                raise RuntimeError(f"HTTP {response.status_code}: {line[:200].decode(errors='replace').strip()}")
            if carries_text(event):
                times.append(now)
        return times

    def close(self) -> None:
        self.client.close()


class GrpcStreamSender(TritonSender):
    """Decoupled model over one gRPC stream per sender; a request ends with its empty final response."""

    def __init__(self, url: str, model: str, payloads, pool: int):
        super().__init__(url, model, payloads, pool, "grpc")
        # request id -> (its waiter, when each of its responses carrying text came)
        self.pending: dict[str, tuple[gevent.event.AsyncResult, list[float]]] = {}
        self.counter = 0
        self.client.start_stream(callback=self._on_response)

    def _on_response(self, result, error) -> None:
        if error is not None:
            # Triton 2.51 puts no request id on stream errors: fail the oldest pending request.
            if self.pending:
                self.pending.pop(next(iter(self.pending)))[0].set_exception(RuntimeError(str(error)))
            return
        now = time.monotonic()
        response = result.get_response()
        entry = self.pending.get(response.id)
        if entry is None:
            return
        # A BYTES output, whatever its name (TEXT, text_output), is text; the empty final response has none.
        if any(output.datatype == "BYTES" for output in response.outputs):
            entry[1].append(now)
        final = response.parameters.get("triton_final_response")
        if final is not None and final.bool_param:
            del self.pending[response.id]
            entry[0].set(entry[1])

    def send(self, index: int) -> list[float]:
        self.counter += 1
        request_id = str(self.counter)
        waiter = gevent.event.AsyncResult()
        self.pending[request_id] = (waiter, [])
        self.client.async_stream_infer(
            self.model,
            self.requests[index % len(self.requests)],
            request_id=request_id,
            enable_empty_final_response=True,
        )
        return waiter.get(timeout=120)

    def close(self) -> None:
        self.client.stop_stream()
        super().close()


class FastAPISender(Sender):
    """The hand-written alternative: JSON ``{"inputs": {name: nested list}}`` POSTed to ``/infer``."""

    def __init__(self, url: str, model: str, payloads, pool: int):
        super().__init__(url, model, payloads, pool)
        from geventhttpclient import HTTPClient

        self.client = HTTPClient.from_url(f"http://{url}", concurrency=pool, network_timeout=120.0)
        self.bodies = [json.dumps({"inputs": {k: v.tolist() for k, v in p.items()}}).encode() for p in payloads]

    def send(self, index: int) -> None:
        response = self.client.post(
            "/infer", self.bodies[index % len(self.bodies)], headers={"Content-Type": "application/json"}
        )
        body = response.read()
        if response.status_code != 200:
            raise RuntimeError(f"HTTP {response.status_code}: {body[:200].decode(errors='replace')}")

    def close(self) -> None:
        self.client.close()


PROTOCOLS = ("http", "grpc", "fastapi")


@dataclasses.dataclass(frozen=True)
class LoadTarget:
    """What this process's users send, and where: resolved once from the settings."""

    model: str
    """The name requests are reported under (the public model of a campaign scenario)."""
    served_model: str
    protocol: str
    url: str
    payloads: list[dict[str, np.ndarray]]
    decoupled: bool
    arrival: Arrival | None = None
    """The open loop's arrival pattern (None: a closed-loop shape)."""


def resolve(settings: dict[str, Any], host: str = "") -> LoadTarget:
    """The settings' model, protocol and payload options made concrete: the served config is read off the
    server (unless ``settings["config"]`` carries it: the FastAPI baseline has none to give) and turned
    into payloads. Raises ``PayloadError`` (bad options) or ``ValueError`` (no model or URL named, a bad
    arrival pattern or schedule)."""
    protocol = settings.get("protocol", "grpc")
    shape = settings.get("shape", {"kind": "users"})
    arrival = from_shape(shape, "TRITONKIT_LOAD shape") if shape.get("kind") == "open" else None
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol {protocol!r} is not one of {PROTOCOLS}")
    served = settings.get("served_model") or settings.get("model")
    if not served:
        raise ValueError('TRITONKIT_LOAD names no model: set "model" (and "protocol")')
    # A campaign passes one url; a standing deployment passes http_url and grpc_url (docker-compose, k8s).
    url = settings.get("url") or settings.get(f"{protocol}_url") or host.split("://")[-1]
    if not url:
        raise ValueError(f'TRITONKIT_LOAD names no URL for {protocol}: set "url" or "{protocol}_url", or --host')
    config = settings.get("config") or fetch_config(settings, protocol, url, served)
    if settings.get("payload_file"):  # made and checked by the runner already
        with open(settings["payload_file"], "rb") as handle:
            samples = pickle.load(handle)
    else:
        options = default_options(served, PayloadOptions.from_table(settings.get("payload"), "TRITONKIT_LOAD payload"))
        samples = payloads(config, options)
    decoupled = served_model(config).decoupled
    return LoadTarget(settings.get("model") or served, served, protocol, url, samples, decoupled, arrival)


def fetch_config(settings: dict[str, Any], protocol: str, url: str, model: str) -> dict:
    """The served config, as Triton's JSON, over HTTP when an HTTP URL is known, else over gRPC; from the model's
    metadata when the server restricts its config API, decoupled as ``settings["decoupled"]`` says."""
    http = settings.get("http_url") or (url if protocol == "http" else None)
    decoupled = bool(settings.get("decoupled", False))
    if http:
        return apply.served_config(http, model, decoupled=decoupled)
    return apply.served_config_grpc(url, model, decoupled=decoupled)


_TARGET: list[LoadTarget] = []
"""This process's resolved target (the locustfile resolves it at start, the first user otherwise)."""


def process_target(settings: dict[str, Any], host: str = "") -> LoadTarget:
    if not _TARGET:
        _TARGET.append(resolve(settings, host))
    return _TARGET[0]


def make_sender(target: LoadTarget, pool: int) -> Sender:
    if target.protocol == "fastapi":
        return FastAPISender(target.url, target.served_model, target.payloads, pool)
    if target.decoupled:
        cls = GrpcStreamSender if target.protocol == "grpc" else HttpStreamSender
        return cls(target.url, target.served_model, target.payloads, pool)
    return TritonSender(target.url, target.served_model, target.payloads, pool, target.protocol)


class TritonUser(User):
    """Any served model over any protocol: model, protocol and payload options from ``settings``
    (``TRITONKIT_LOAD``, set by the locustfile)."""

    wait_time = constant(0)
    settings: dict = {}

    def on_start(self) -> None:
        SETTINGS_READY.wait(timeout=SETTINGS_WAIT_S)
        shape = self.settings.get("shape", {"kind": "users"})
        self.open_loop = shape["kind"] == "open"
        pool = int(self.settings.get("max_inflight", 256)) if self.open_loop else 1
        target = process_target(self.settings, self.host or "")
        self.model, self.protocol = target.model, target.protocol
        self.sender = make_sender(target, pool)
        self.sender.connect()
        self.index = random.randrange(len(self.sender.payloads))
        self.inflight = gevent.pool.Group()
        if self.open_loop:
            worker = max(0, getattr(self.environment.runner, "worker_index", 0))
            self.dues = open_loop_dues(target.arrival, self.settings, worker)
        self.retry = RetryPolicy.from_settings(self.settings)

    def on_stop(self) -> None:
        # Requests still in flight reached the server: let them answer so they are counted, as the server
        # counts them (a worker may be stopped before its own run end, which it counts from its test_start).
        self.inflight.join(timeout=5)
        self.inflight.kill(block=True, timeout=5)
        self.sender.close()

    def _timed(self, started: float, payload: int | None = None) -> None:
        second = int(started - RUN_START[0])
        warming = started - RUN_START[0] < float(self.settings.get("warmup_s", 0))
        if self.open_loop and not warming:  # ``started`` is when it fell due: how late is it sent?
            RECORDER.sent(second, time.monotonic() - started)
        self.index += 1
        name = f"{self.protocol}:{self.model}"
        index = self.index if payload is None else payload
        try:
            # Opt-in retry of retryable failures; the latency stays that of the whole request (first send on).
            token_times, _retries = call_with_retry(
                lambda: self.sender.send(index),
                self.retry,
                sleep=gevent.sleep,
                on_retry=lambda _exc: RECORDER.retry(_second()),
            )
        except Exception as exc:  # noqa: BLE001 - every failure is counted, whatever raised it
            elapsed = time.monotonic() - started
            RECORDER.failure(second, f"{type(exc).__name__}: {exc}", elapsed)
            self.environment.events.request.fire(
                request_type=self.protocol,
                name=name,
                response_time=elapsed * 1000,
                response_length=0,
                exception=exc,
                context={},
            )
            return
        elapsed = time.monotonic() - started
        if warming or self._state == LOCUST_STATE_STOPPING:
            RECORDER.outside(second, elapsed)
        else:
            # A stream's TTFT counts from the same moment as its latency (open loop: when it fell due).
            RECORDER.success(second, elapsed, stream_figures(started, token_times or ()))
        self.environment.events.request.fire(
            request_type=self.protocol,
            name=name,
            response_time=elapsed * 1000,
            response_length=0,
            exception=None,
            context={},
        )

    @task
    def load(self) -> None:
        if not self.open_loop:
            self._timed(time.monotonic())
            return
        # The schedule runs on the run's clock (a ramp ends at the run's end, every process keeps time
        # together); what fell due before this user was ready was never sent, not sent late in one burst.
        ready = time.monotonic()
        end = RUN_START[0] + float(self.settings.get("shape", {}).get("duration_s", float("inf")))
        for offset, payload in self.dues:
            if self._state == LOCUST_STATE_STOPPING:
                break
            due = RUN_START[0] + offset
            if due < ready:
                continue
            if due >= end:
                # The schedule is over: let the answers in, then this user is done. Locust's own stop comes
                # later (``runner.OPEN_LOOP_STOP_S``): its work would be the latency of a request still in
                # flight (seen: 20-33 ms on the last request of a 20 req/s run).
                self.inflight.join(timeout=30)
                raise StopUser()
            early = due - TIMER_SLACK_S - time.monotonic()
            if early > 0:
                gevent.sleep(early)
            if len(self.inflight) >= self.sender.pool:
                RECORDER.drop(_second())
                continue
            self.inflight.spawn(self._send_when_due, due, payload)
        self.inflight.join(timeout=10)

    def _send_when_due(self, due: float, payload: int) -> None:
        wake.wait_until(due)
        self._timed(due, payload)


def open_loop_dues(arrival: Arrival, settings: dict[str, Any], generator: int) -> Iterator[Due]:
    """This generator's share of the run's arrivals (offsets from the run's start): generator ``generator`` of the
    shape's ``generators`` sends every N-th arrival of the one schedule all draw from ``arrival_seed``."""
    shape = settings["shape"]
    count = max(1, int(shape.get("generators", 1)))
    rate = float(shape["rate"]) if "rate" in shape else None
    duration = float(shape.get("duration_s", math.inf))
    return arrival.share(rate, duration, int(settings.get("arrival_seed", 0)), generator % count, count)
