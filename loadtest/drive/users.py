"""Locust users that call a served model through ``tritonclient`` (HTTP or gRPC) or the FastAPI baseline.

Two ways to load a server:
- closed loop (``users``, ``step``, ``spike`` shapes): each user sends a request, waits for the answer,
  sends the next. Simple, but a slow server slows the clients down, so queueing delay never shows
  (coordinated omission).
- open loop (``open`` shape): each user draws Poisson arrivals at its share of the target rate and sends
  each in its own greenlet, whether or not earlier ones have returned; latency counts from the moment the
  request was due, so time spent waiting for a free connection is charged to the server, as a real
  client would experience it. Arrivals beyond ``max_inflight`` outstanding requests are dropped and
  counted as failures: the client is saturated and the figure says so.

Retry is opt-in: ``settings["retry"] = {"attempts": N, "backoff_ms": B}`` (optional ``max_backoff_ms``) sends
a request that failed with a retryable status again, up to N attempts in all, with exponential backoff and
jitter (:class:`deploy.retry.RetryPolicy`, :func:`deploy.retry.retryable`). A request that succeeds
after retries is one success, timed from its first send; each retry is counted in ``ClientStats.retries``.
Without the key nothing is retried: overload measurements must see the refusals.

Every latency goes to the process's :class:`loadtest.drive.latency.Recorder` (µs resolution) and to Locust's
own statistics (its web UI and CSVs keep working).
"""

from __future__ import annotations

import json
import random
import time

import gevent
import gevent.event
import gevent.pool
import numpy as np
from locust import User, constant, task
from locust.user.users import LOCUST_STATE_STOPPING

from deploy.retry import RetryPolicy, call_with_retry
from loadtest.drive.latency import Recorder
from loadtest.drive.payloads import is_streaming, samples, user_class_name

RECORDER = Recorder()
"""This process's recorder; the locustfile ships it to the master."""
RUN_START = [time.monotonic()]
"""Reset at test start; the timeline's second 0."""


def _second() -> int:
    return int(time.monotonic() - RUN_START[0])


class Sender:
    """Prepared requests for one model and a client to send them with; ``send(i)`` raises on failure."""

    def __init__(self, url: str, model: str, payloads: list[dict[str, np.ndarray]], pool: int):
        self.url, self.model, self.payloads, self.pool = url, model, payloads, pool

    def send(self, index: int) -> None:
        raise NotImplementedError

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

    def close(self) -> None:
        self.client.close()


def _json_scalars(payload: dict[str, np.ndarray]) -> dict:
    return {k: (v.flat[0].decode() if v.dtype == object else v.flat[0].item()) for k, v in payload.items()}


class HttpStreamSender(Sender):
    """Decoupled model over HTTP: ``generate_stream`` (server-sent events), timed to the last event."""

    def __init__(self, url: str, model: str, payloads, pool: int):
        super().__init__(url, model, payloads, pool)
        from geventhttpclient import HTTPClient

        self.client = HTTPClient.from_url(f"http://{url}", concurrency=pool, network_timeout=120.0)
        self.bodies = [json.dumps(_json_scalars(p)).encode() for p in payloads]

    def send(self, index: int) -> None:
        response = self.client.post(f"/v2/models/{self.model}/generate_stream", self.bodies[index % len(self.bodies)],
                                    headers={"Content-Type": "application/json"})
        body = response.read()
        if response.status_code != 200 or b'"error"' in body:
            raise RuntimeError(f"HTTP {response.status_code}: {body[:200].decode(errors='replace')}")

    def close(self) -> None:
        self.client.close()


class GrpcStreamSender(TritonSender):
    """Decoupled model over one gRPC stream per sender; a request ends with its empty final response."""

    def __init__(self, url: str, model: str, payloads, pool: int):
        super().__init__(url, model, payloads, pool, "grpc")
        self.pending: dict[str, gevent.event.AsyncResult] = {}
        self.counter = 0
        self.client.start_stream(callback=self._on_response)

    def _on_response(self, result, error) -> None:
        if error is not None:
            # Triton 2.51 puts no request id on stream errors: fail the oldest pending request.
            if self.pending:
                self.pending.pop(next(iter(self.pending))).set_exception(RuntimeError(str(error)))
            return
        response = result.get_response()
        final = response.parameters.get("triton_final_response")
        if final is not None and final.bool_param and response.id in self.pending:
            self.pending.pop(response.id).set(True)

    def send(self, index: int) -> None:
        self.counter += 1
        request_id = str(self.counter)
        waiter = self.pending[request_id] = gevent.event.AsyncResult()
        self.client.async_stream_infer(self.model, self.requests[index % len(self.requests)], request_id=request_id,
                                       enable_empty_final_response=True)
        waiter.get(timeout=120)

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
        response = self.client.post("/infer", self.bodies[index % len(self.bodies)],
                                    headers={"Content-Type": "application/json"})
        body = response.read()
        if response.status_code != 200:
            raise RuntimeError(f"HTTP {response.status_code}: {body[:200].decode(errors='replace')}")

    def close(self) -> None:
        self.client.close()


def make_sender(protocol: str, url: str, model: str, served_model: str, pool: int) -> Sender:
    payloads = samples(model)
    if protocol == "fastapi":
        return FastAPISender(url, served_model, payloads, pool)
    if is_streaming(model):
        cls = GrpcStreamSender if protocol == "grpc" else HttpStreamSender
        return cls(url, served_model, payloads, pool)
    return TritonSender(url, served_model, payloads, pool, protocol)


class TritonUser(User):
    """Base of the generated per-model users; ``settings`` come from the locustfile."""

    abstract = True
    wait_time = constant(0)
    model = ""
    protocol = "http"
    settings: dict = {}

    def on_start(self) -> None:
        shape = self.settings.get("shape", {"kind": "users"})
        self.open_loop = shape["kind"] == "open"
        pool = int(self.settings.get("max_inflight", 256)) if self.open_loop else 1
        # A campaign passes one url; a standing deployment passes http_url and grpc_url (docker-compose, k8s).
        url = (self.settings.get("url") or self.settings.get(f"{self.protocol}_url")
               or (self.host or "").split("://")[-1])
        served = self.settings.get("served_model") or self.model
        self.sender = make_sender(self.protocol, url, self.model, served, pool)
        self.index = random.randrange(len(self.sender.payloads))
        self.inflight = gevent.pool.Group()
        self.rate = float(shape.get("rate", 0)) / max(1, int(shape.get("generators", 1)))
        self.retry = RetryPolicy.from_settings(self.settings)

    def on_stop(self) -> None:
        self.inflight.kill(block=True, timeout=5)
        self.sender.close()

    def _timed(self, started: float) -> None:
        second = int(started - RUN_START[0])
        warming = started - RUN_START[0] < float(self.settings.get("warmup_s", 0))
        self.index += 1
        name = f"{self.protocol}:{self.model}"
        index = self.index
        try:
            # Opt-in retry of retryable failures; the latency stays that of the whole request (first send on).
            call_with_retry(lambda: self.sender.send(index), self.retry, sleep=gevent.sleep,
                            on_retry=lambda _exc: RECORDER.retry(_second()))
        except Exception as exc:  # noqa: BLE001 - every failure is counted, whatever raised it
            elapsed = time.monotonic() - started
            RECORDER.failure(second, f"{type(exc).__name__}: {exc}", elapsed)
            self.environment.events.request.fire(request_type=self.protocol, name=name, response_time=elapsed * 1000,
                                                 response_length=0, exception=exc, context={})
            return
        elapsed = time.monotonic() - started
        if warming:
            RECORDER.warmup(second, elapsed)
        else:
            RECORDER.success(second, elapsed)
        self.environment.events.request.fire(request_type=self.protocol, name=name, response_time=elapsed * 1000,
                                             response_length=0, exception=None, context={})

    @task
    def load(self) -> None:
        if not self.open_loop:
            self._timed(time.monotonic())
            return
        due = time.monotonic()
        end = RUN_START[0] + float(self.settings.get("shape", {}).get("duration_s", float("inf")))
        while self._state != LOCUST_STATE_STOPPING:
            due += random.expovariate(self.rate)
            if due >= end:  # the run is over: let the answers in, then idle until Locust stops the user
                self.inflight.join(timeout=30)
                gevent.sleep(max(0.0, end - time.monotonic()) + 1.0)
                return
            delay = due - time.monotonic()
            if delay > 0:
                gevent.sleep(delay)
            if len(self.inflight) >= self.sender.pool:
                RECORDER.drop(_second())
                continue
            self.inflight.spawn(self._timed, due)
        self.inflight.join(timeout=10)


def user_class(model: str, protocol: str, settings: dict) -> type[TritonUser]:
    """``DigitsGrpcUser`` and friends: one Locust user class per model and protocol."""
    return type(user_class_name(model, protocol), (TritonUser,), {"model": model, "protocol": protocol, "settings": settings, "abstract": False,
                                      "__module__": __name__})
