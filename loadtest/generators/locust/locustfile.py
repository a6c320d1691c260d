"""The project's locustfile: one user class (``TritonUser``) for any model and protocol, the campaign's load
shape, and exact latencies merged over every Locust process.

Run by the campaign runner (``tritonkit loadtest``: ``loadtest/generators/locust/runner.py``), which starts it through
the launcher that readies gRPC for gevent first, with its settings in ``TRITONKIT_LOAD`` (JSON; the runner's own channel
to its Locust process, not a user's interface). On other hosts ``tritonkit loadtest --worker`` starts it as a worker
with no settings: it asks the master for the run's settings (Locust's custom messages ``tritonkit_hello`` /
``tritonkit_settings``) and makes its payloads from them (the served config travels with them, so a worker needs no
admin key, and no file the master made).

The settings: ``model`` (the served model, or the
public name a scenario reports under with ``served_model`` the variant served, e.g. ``digits_onnx``),
``protocol`` (``http``, ``grpc`` or ``fastapi``), ``payload`` (the payload options as a campaign's ``payload``
table: ``shape``, ``int_range``, ``input_data``, ``samples``; default: the catalog model's samples, else
random values from the served config), ``url`` (or ``http_url`` and ``grpc_url``, one per protocol; else
``--host``), ``config`` (the served config, when the runner has it or
the server is not Triton's), ``decoupled`` (true for a streaming model on a server that restricts its config
API: its metadata, read instead, does not say), ``payload_file`` (the payloads the runner made and checked
already, for the processes on its host), ``shape`` (``{"kind": "users"|"step"|"spike"|"open", ...}``),
``max_inflight`` and ``out`` (where the master writes the merged result as JSON when Locust quits). Each process
reads the served config and makes its payloads once, before its users start; a bad setting stops it with one
line and status 2.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from pathlib import Path

import gevent
import gevent.event
from locust import LoadTestShape, events
from locust.runners import MasterRunner, WorkerRunner

from loadtest.core.latency import Merger
from loadtest.errors import LoadTestError
from loadtest.generators.locust.users import RECORDER, RUN_START, SETTINGS_READY, TritonUser, process_target

SETTINGS: dict = json.loads(os.environ.get("TRITONKIT_LOAD", "{}"))
SHAPE: dict = SETTINGS.get("shape", {"kind": "users"})
TritonUser.settings = SETTINGS
__all__ = ["TritonUser"]
LOCAL_ONLY = ("payload_file", "out")
"""Settings that name files on the master's host: a remote worker makes its payloads from the rest."""
ASK_EVERY_S, ASK_TIMES = 5.0, 24

if SHAPE["kind"] == "step":

    class StepShape(LoadTestShape):
        """``start`` users, ``step`` more every ``every_s`` seconds up to ``max``, for ``duration_s``."""

        def tick(self):
            t = self.get_run_time()
            if t > SHAPE["duration_s"]:
                return None
            users = min(SHAPE["max"], SHAPE["start"] + SHAPE["step"] * int(t // SHAPE["every_s"]))
            return users, max(users, 1)

elif SHAPE["kind"] == "spike":

    class SpikeShape(LoadTestShape):
        """``base`` users; ``peak`` users from ``at_s`` for ``hold_s`` seconds; ``duration_s`` in all."""

        def tick(self):
            t = self.get_run_time()
            if t > SHAPE["duration_s"]:
                return None
            in_spike = SHAPE["at_s"] <= t < SHAPE["at_s"] + SHAPE["hold_s"]
            return (SHAPE["peak"], SHAPE["peak"]) if in_spike else (SHAPE["base"], SHAPE["peak"])


class _Run:
    environment = None
    merger = Merger()
    started: float | None = None
    stopped: float | None = None
    last_progress = 0.0


@events.init.add_listener
def _on_init(environment, **_kwargs) -> None:
    _Run.environment = environment
    runner = environment.runner
    if isinstance(runner, MasterRunner):  # a worker from another host asks for the run's settings
        remote = {k: v for k, v in SETTINGS.items() if k not in LOCAL_ONLY}
        runner.register_message(
            "tritonkit_hello",
            lambda environment, msg, **_kw: environment.runner.send_message(
                "tritonkit_settings", remote, client_id=msg.node_id
            ),
        )
    elif isinstance(runner, WorkerRunner) and not SETTINGS:
        SETTINGS.update(_settings_from_master(runner))
    if not isinstance(runner, MasterRunner):  # a master sends nothing: only the processes with users
        host = (environment.parsed_options.host if environment.parsed_options else None) or environment.host or ""
        try:
            process_target(SETTINGS, host)  # the config and the payloads now, not in the first users' time
        except (LoadTestError, ValueError, OSError) as exc:
            print(f"error: {exc}", file=sys.stderr, flush=True)
            sys.exit(2)
        except Exception as exc:  # noqa: BLE001 - e.g. the server refused the config request: one line, not a trace
            print(
                f"error: reading the served config of {SETTINGS.get('served_model') or SETTINGS.get('model')!r}: "
                f"{type(exc).__name__}: {exc}",
                file=sys.stderr,
                flush=True,
            )
            sys.exit(2)
        SETTINGS_READY.set()
    if isinstance(runner, WorkerRunner):

        @events.report_to_master.add_listener
        def _ship(client_id, data, **_kw):
            data["tritonkit"] = RECORDER.drain()

        @events.test_stopping.add_listener
        def _ship_on_stop(environment, **_kw):
            # A headless master waits 0.5 s for each worker's final report after "quit", and a worker stopping
            # its users on a loaded machine can take longer: the samples since the last 3 s report would be lost
            # (seen: 84 of 319 requests). Ship them as the stop begins; only requests still in flight remain.
            environment.runner._send_stats()
    elif isinstance(runner, MasterRunner):

        @events.worker_report.add_listener
        def _merge(client_id, data, **_kw):
            if "tritonkit" in data:
                _Run.merger.add(data["tritonkit"])
            _progress()


def _settings_from_master(runner) -> dict:
    """The run's settings from the master (``tritonkit loadtest --worker``), asked again every few seconds in case
    the first question came before the master listened; one line and status 2 when none come."""
    answer = gevent.event.AsyncResult()
    runner.register_message("tritonkit_settings", lambda environment, msg, **_kw: answer.set(msg.data))
    for _ in range(ASK_TIMES):
        runner.send_message("tritonkit_hello")
        try:
            return dict(answer.get(timeout=ASK_EVERY_S))
        except gevent.Timeout:
            continue
    print(
        f"error: the master at {runner.master_host}:{runner.master_port} sent no settings in "
        f"{ASK_EVERY_S * ASK_TIMES:.0f} s: is it `tritonkit loadtest --master`?",
        file=sys.stderr,
        flush=True,
    )
    sys.exit(2)


@events.test_start.add_listener
def _on_test_start(environment, **_kwargs) -> None:
    RUN_START[0] = time.monotonic()
    _Run.started = _Run.last_progress = time.time()


@events.test_stop.add_listener
def _on_test_stop(environment, **_kwargs) -> None:
    _Run.stopped = time.time()


@events.request.add_listener
def _on_request(**_kwargs) -> None:
    _progress()


def _progress() -> None:
    """One line every 5 s on stdout (master or local process): requests, rate, failures so far."""
    now = time.time()
    if _Run.started is None or now - _Run.last_progress < 5:
        return
    _Run.last_progress = now
    environment = _Run.environment
    if environment is None or isinstance(environment.runner, WorkerRunner):
        return
    total = environment.stats.total
    print(
        f"  ... {now - _Run.started:5.0f} s: {total.num_requests} requests, {total.current_rps:.0f}/s, "
        f"{total.num_failures} failed",
        flush=True,
    )


@events.quitting.add_listener
def _on_quitting(environment, **_kwargs) -> None:
    if isinstance(environment.runner, WorkerRunner) or not SETTINGS.get("out"):
        return
    _Run.merger.add(RECORDER.drain())  # the local runner's own samples (nothing on a pure master)
    started = _Run.started or time.time()
    # The load window: Locust's stop (users finishing, the open loop's last answers) is not load time.
    elapsed = min((_Run.stopped or time.time()) - started, float(SHAPE.get("duration_s", float("inf"))))
    duration = elapsed - float(SETTINGS.get("warmup_s", 0))
    stats = _Run.merger.stats(duration)
    out = Path(SETTINGS["out"])
    out.write_text(json.dumps({"client": dataclasses.asdict(stats), "reports": _Run.merger.reports}))
