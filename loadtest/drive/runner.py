"""Run one scenario's load with Locust (a subprocess): the client side of a run.

Locust runs headless through ``loadtest.drive.locust_main`` (gRPC readied for gevent), loads
``loadtest/drive/locustfile.py`` and writes the merged client result as JSON when it quits. A run that
cannot finish (Locust hangs, the server dies) is killed after its duration plus a margin and reported as
an error, never waited on forever. Triton's counters around the run: ``loadtest.measure.run``.
"""

from __future__ import annotations

import json
import os
import pickle
import secrets
import signal
import subprocess
import sys
import threading
from pathlib import Path

from deploy import security
from loadtest.campaign import Scenario
from loadtest.drive.arrivals import from_shape
from loadtest.drive.client_stats import ClientStats, TimelinePoint
from loadtest.drive.payloads import PayloadOptions, default_options, payloads
from loadtest.errors import RunError

LOCUSTFILE = Path(__file__).with_name("locustfile.py")
PROGRESS_PREFIX = "  ... "
MARGIN_S = 90.0
"""How long past its duration a run may take (start-up, stopping users) before it is killed."""


USER_CLASS = "TritonUser"
"""The locustfile's one user class: model, protocol and payloads come from the settings."""


def locust_command(scenario: Scenario, url: str) -> list[str]:
    users = scenario.peak_users
    cmd = [
        sys.executable,
        "-m",
        "loadtest.drive.locust_main",
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
        f"{scenario.duration_s:g}s",
        "--only-summary",
        "--loglevel",
        "WARNING",
        "--stop-timeout",
        "10",
        "--exit-code-on-error",
        "0",
    ]
    if scenario.processes > 1:
        cmd += ["--processes", str(scenario.processes)]
    return cmd


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
    shape = {**scenario.shape, "duration_s": scenario.duration_s, "generators": scenario.processes}
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
        # Every Locust process draws the same open-loop schedule and sends its share (loadtest/drive/arrivals.py);
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
    try:
        process.wait(timeout=scenario.duration_s + MARGIN_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        raise RunError(
            f"scenario {scenario.name!r}: Locust did not finish within "
            f"{scenario.duration_s + MARGIN_S:.0f} s; log: {log}"
        ) from None
    except BaseException:
        # Interrupted (Ctrl-C, SIGTERM): Locust runs in its own session and would outlive this process.
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        raise
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
