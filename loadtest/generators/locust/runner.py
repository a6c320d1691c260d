"""Run one scenario's load with Locust (a subprocess): the client side of a run.

Locust runs headless through ``loadtest.generators.locust.main`` (gRPC readied for gevent), loads
``loadtest/generators/locust/locustfile.py`` and writes the merged client result as JSON when it quits. A run that
cannot finish (Locust hangs, the server dies) is killed after its duration plus a margin and reported as
an error, never waited on forever. Triton's counters around the run: ``loadtest.generators.locust.run``.

Inside ``with as_master(Master(...))`` (``tritonkit loadtest --master``) every run's Locust is a master that waits
for that many worker processes from other hosts (``tritonkit loadtest --worker``: ``run_worker``) instead of
forking its own; the workers take the run's settings from it (``loadtest/generators/locust/locustfile.py``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pickle
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from deploy import security
from deploy.signals import StopRequest
from loadtest.core.client_stats import ClientStats, TimelinePoint
from loadtest.core.spec import Scenario
from loadtest.errors import RunError
from loadtest.generators.arrivals import from_shape
from loadtest.generators.payloads import PayloadOptions, default_options, payloads

LOCUSTFILE = Path(__file__).with_name("locustfile.py")
LAUNCHER = "loadtest.generators.locust.main"
"""The module every Locust process runs as (``python -m``): gRPC made gevent-friendly before Locust loads."""
PROGRESS_PREFIX = "  ... "
MARGIN_S = 90.0
"""How long past its duration a run may take (start-up, stopping users) before it is killed."""
OPEN_LOOP_STOP_S = 1.0
"""How long after its duration Locust stops an open-loop run. Locust's clock starts before the run's (its users'
set-up comes between, about 0.4 s here): stopped at the duration, it cut the schedule's last moments off and its
stop's work landed on the requests in flight. The open loop's users stop themselves once the schedule's answers
are in."""


USER_CLASS = "TritonUser"
"""The locustfile's one user class: model, protocol and payloads come from the settings."""


@dataclasses.dataclass(frozen=True)
class Master:
    """Every run a Locust master for ``workers`` worker processes on other hosts (``tritonkit loadtest --master``)."""

    workers: int
    bind_host: str = "*"
    bind_port: int = 5557
    wait_s: float = 300.0
    """How long a run waits for its workers (pods pulling images, a worker's Locust restarting between runs)."""


_MASTER: list[Master] = []


@contextlib.contextmanager
def as_master(master: Master) -> Iterator[Master]:
    """Every run in the block is a master for ``master.workers`` remote worker processes."""
    _MASTER.append(master)
    try:
        yield master
    finally:
        _MASTER.remove(master)


def master() -> Master | None:
    """The ``as_master`` block's master, None outside one."""
    return _MASTER[-1] if _MASTER else None


def generators(scenario: Scenario) -> int:
    """The Locust processes that send a run's load: the remote workers under ``as_master``, else its own."""
    return _MASTER[-1].workers if _MASTER else scenario.processes


def locust_command(scenario: Scenario, url: str) -> list[str]:
    # The open loop runs one user per generating process (each sends its share of the one schedule).
    open_loop = scenario.shape["kind"] == "open"
    users = generators(scenario) if open_loop else scenario.peak_users
    cmd = [
        sys.executable,
        "-m",
        LAUNCHER,
        "-f",
        str(LOCUSTFILE),
        USER_CLASS,
        "--headless",
        "--host",
        url,
        "-u",
        str(users),
        "-r",
        str(users),
        "-t",
        f"{scenario.duration_s + (OPEN_LOOP_STOP_S if open_loop else 0):g}s",
        "--only-summary",
        "--loglevel",
        "WARNING",
        "--stop-timeout",
        "10",
        "--exit-code-on-error",
        "0",
    ]
    if _MASTER:
        m = _MASTER[-1]
        cmd += ["--master", "--expect-workers", str(m.workers), "--expect-workers-max-wait", f"{m.wait_s:g}"]
        cmd += ["--master-bind-host", m.bind_host, "--master-bind-port", str(m.bind_port)]
    elif scenario.processes > 1:
        cmd += ["--processes", str(scenario.processes)]
    return cmd


def worker_command(master_host: str, master_port: int, processes: int) -> list[str]:
    """One Locust worker (``processes`` of them forked) for the next run of the master at ``master_host``."""
    cmd = [sys.executable, "-m", LAUNCHER, "-f", str(LOCUSTFILE), USER_CLASS, "--worker"]
    cmd += ["--master-host", master_host, "--master-port", str(master_port), "--loglevel", "WARNING"]
    return cmd + (["--processes", str(processes)] if processes > 1 else [])


QUICK_EXIT_S, QUICK_EXITS = 10.0, 5
"""A worker whose Locust fails this many times in a row, each within this long, stops (it would only spin)."""


def run_worker(master_host: str, master_port: int, processes: int, say=print) -> int:
    """``tritonkit loadtest --worker``: serve the master's runs one after another (the master starts a Locust master
    per run, and a Locust worker ends with the run it served), until stopped: SIGINT/SIGTERM stop the worker's
    Locust and end with ``128 + signum``. 2 when a run's settings are bad here (the worker printed why: a payload
    file missing on this host, say); 3 when Locust keeps failing at once."""
    # The settings come from the master: one left in the environment must not override them.
    env = {k: v for k, v in os.environ.items() if k not in (security.KEY_ENV, "TRITONKIT_LOAD")}
    say(f"worker: {processes} Locust process(es) for the master at {master_host}:{master_port}; Ctrl-C stops")
    quick = 0
    with StopRequest(unwind=True) as stop:
        while True:
            started = time.monotonic()
            with stop.held():  # a signal now waits until the handle is kept
                process = subprocess.Popen(
                    worker_command(master_host, master_port, processes), env=env, start_new_session=True
                )
            try:
                code = process.wait()
            except BaseException:
                stop.cleaning_up()
                stop_group(process)
                raise
            end_stragglers(process.pid)
            if code == 2:
                return 2
            quick = quick + 1 if code != 0 and time.monotonic() - started < QUICK_EXIT_S else 0
            if quick >= QUICK_EXITS:
                say(f"error: the worker's Locust failed {quick} times in a row at once (last status {code})")
                return 3
            say(
                "worker: run over; waiting for the master's next run"
                if code == 0
                else f"worker: Locust ended with status {code}; connecting again"
            )
            time.sleep(1.0)


def stop_group(process: subprocess.Popen) -> None:
    """End ``process``'s group (it was started with ``start_new_session``): SIGTERM (a Locust worker then tells its
    master it quit), SIGKILL after 10 s."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    except ProcessLookupError:
        process.wait()


STRAGGLER_GRACE_S = 1.0
"""How long what is left of a finished tool's process group may take to exit by itself before it is killed."""


def end_stragglers(group: int, grace_s: float = STRAGGLER_GRACE_S) -> None:
    """Kill what is left of process group ``group`` once its leader has exited. Locust's ``--processes`` parent
    can quit while a worker still hangs at exit (its ``kill_workers`` takes ``waitpid(WNOHANG)``'s ``(0, 0)`` for an
    exited child; seen: a worker blocked in ZeroMQ's context termination, orphaned for good and holding the
    output pipe open)."""
    deadline = time.monotonic() + grace_s
    try:
        while time.monotonic() < deadline:
            os.killpg(group, 0)  # ProcessLookupError once every member is gone
            time.sleep(0.05)
        os.killpg(group, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run_in_group(cmd: list[str], **popen) -> int:
    """``cmd``'s exit status, run in a process group of its own (a tool with workers or a perf_analyzer of its
    own): a stop signal here (SystemExit, deploy/lifecycle.py) or any error ends the whole group, so nothing of it
    is left sending to a server that is stopping."""
    process = subprocess.Popen(cmd, start_new_session=True, **popen)
    try:
        code = process.wait()
    except BaseException:
        stop_group(process)
        raise
    end_stragglers(process.pid)
    return code


def _copy_output(stream, log: Path, progress) -> None:
    """Locust's output into the run's log; its progress lines (from the locustfile) to ``progress`` too."""
    with open(log, "w") as handle:
        for line in stream:
            handle.write(line)
            if line.startswith(PROGRESS_PREFIX):
                progress(line.rstrip())


def payload_options(scenario: Scenario, served_model: str) -> PayloadOptions:
    """The scenario's ``payload`` table as options, the catalog model's samples when it names no data."""
    return default_options(
        served_model, PayloadOptions.from_table(scenario.payload, f"scenario {scenario.name!r}: payload")
    )


def check_payloads(scenario: Scenario, served_model: str, config: dict) -> list[dict]:
    """Make the scenario's payloads against the served ``config`` here, before any load: a bad option or data
    file stops the run with a ``PayloadError`` naming it. Returns them (batch-1 samples). An open shape's
    arrival pattern is read here too, so a replay's schedule file that does not parse stops it as early
    (``ArrivalError``, a ``CampaignError``)."""
    if scenario.shape.get("kind") == "open":
        from_shape(scenario.shape, f"scenario {scenario.name!r}: shape")
    return payloads(config, payload_options(scenario, served_model))


def write_payload_file(path: Path, samples: list[dict]) -> Path:
    """The payloads as a pickle (numpy arrays, BYTES as object arrays), read by ``users.resolve``."""
    with open(path, "wb") as handle:
        pickle.dump(samples, handle, protocol=pickle.HIGHEST_PROTOCOL)
    return path


def load_settings(scenario: Scenario, served_model: str, url: str, out_json: Path, config: dict | None = None) -> dict:
    """What the locustfile reads from ``TRITONKIT_LOAD`` for ``scenario``; ``config``: the served config, for a
    server that cannot give it (the FastAPI baseline)."""
    shape = {**scenario.shape, "duration_s": scenario.duration_s, "generators": generators(scenario)}
    settings = {
        "model": scenario.model,
        "served_model": served_model,
        "protocol": scenario.protocol,
        "url": url,
        "payload": payload_options(scenario, served_model).to_table(),
        "shape": shape,
        "max_inflight": scenario.shape.get("max_inflight", 256),
        "warmup_s": scenario.warmup_s,
        "out": str(out_json),
        # Every Locust process draws the same open-loop schedule and sends its share (loadtest/generators/arrivals.py);
        # a fresh seed per run keeps repeated runs independent.
        "arrival_seed": secrets.randbits(32),
    }
    if config is not None:
        settings["config"] = config
    if scenario.retry is not None:  # the users retry refusals (503 / UNAVAILABLE) with it
        settings["retry"] = {"attempts": scenario.retry["attempts"], "backoff_ms": scenario.retry["backoff_ms"]}
    return settings


def run_locust(
    scenario: Scenario,
    served_model: str,
    url: str,
    out_json: Path,
    log: Path,
    progress=print,
    extra_settings: dict | None = None,
    config: dict | None = None,
    samples: list[dict] | None = None,
) -> ClientStats:
    """Locust against ``url`` for ``scenario``; the client side of the run. ``extra_settings`` join the load
    settings (e.g. ``window_s``: the length of ``ClientStats.windows``); ``config``: see :func:`load_settings`;
    ``samples``: the payloads made already (:func:`check_payloads`), handed to every Locust process in a file
    beside ``out_json`` so that none imports the data's libraries or calls the samples function again."""
    settings = {**load_settings(scenario, served_model, url, out_json, config), **(extra_settings or {})}
    if samples is not None:
        settings["payload_file"] = str(write_payload_file(out_json.with_suffix(".payloads.pkl"), samples))
    out_json.unlink(missing_ok=True)
    # The load generators never need the admin key (the config travels in the settings): they do not inherit it.
    env = {**{k: v for k, v in os.environ.items() if k != security.KEY_ENV}, "TRITONKIT_LOAD": json.dumps(settings)}
    process = subprocess.Popen(
        locust_command(scenario, url),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    copier = threading.Thread(target=_copy_output, args=(process.stdout, log, progress), daemon=True)
    copier.start()
    limit_s = scenario.duration_s + MARGIN_S + (_MASTER[-1].wait_s if _MASTER else 0.0)
    try:
        process.wait(timeout=limit_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        raise RunError(
            f"scenario {scenario.name!r}: Locust did not finish within {limit_s:.0f} s; log: {log}"
        ) from None
    except BaseException:
        # Interrupted (Ctrl-C, SIGTERM): Locust runs in its own session and would outlive this process.
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        raise
    else:
        end_stragglers(process.pid)  # a hung worker would also keep the output pipe, and the copier, open
    finally:
        copier.join(timeout=10)
    if process.returncode != 0 or not out_json.exists():
        tail = log.read_text()[-2000:]
        raise RunError(
            f"scenario {scenario.name!r}: Locust exited with {process.returncode} and no result; log {log}:\n{tail}"
        )
    raw = json.loads(out_json.read_text())["client"]
    raw["timeline"] = [TimelinePoint(**p) for p in raw["timeline"]]
    return ClientStats(**raw)
