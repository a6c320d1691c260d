"""Run one scenario's load with Locust (a subprocess): the client side of a run.

Locust runs headless through ``loadtest.drive.locust_main`` (gRPC readied for gevent), loads
``loadtest/drive/locustfile.py`` and writes the merged client result as JSON when it quits. A run that
cannot finish (Locust hangs, the server dies) is killed after its duration plus a margin and reported as
an error, never waited on forever. Triton's counters around the run: ``loadtest.measure.run``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

from loadtest.campaign import Scenario
from loadtest.drive.client_stats import ClientStats, TimelinePoint
from loadtest.drive.payloads import user_class_name
from loadtest.errors import RunError

LOCUSTFILE = Path(__file__).with_name("locustfile.py")
PROGRESS_PREFIX = "  ... "
MARGIN_S = 90.0
"""How long past its duration a run may take (start-up, stopping users) before it is killed."""


def locust_command(scenario: Scenario, user_class: str, url: str) -> list[str]:
    users = scenario.peak_users
    cmd = [sys.executable, "-m", "loadtest.drive.locust_main", "-f", str(LOCUSTFILE), user_class, "--headless",
           "--host", url, "-u", str(users), "-r", str(users), "-t", f"{scenario.duration_s:g}s",
           "--only-summary", "--loglevel", "WARNING", "--stop-timeout", "10", "--exit-code-on-error", "0"]
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


def load_settings(scenario: Scenario, served_model: str, url: str, out_json: Path) -> dict:
    """What the locustfile reads from ``TRITONKIT_LOAD`` for ``scenario``."""
    shape = {**scenario.shape, "duration_s": scenario.duration_s, "generators": scenario.processes}
    settings = {"model": scenario.model, "served_model": served_model, "url": url, "shape": shape,
                "max_inflight": scenario.shape.get("max_inflight", 256), "warmup_s": scenario.warmup_s,
                "out": str(out_json)}
    if scenario.retry is not None:  # the users retry refusals (503 / UNAVAILABLE) with it
        settings["retry"] = {"attempts": scenario.retry["attempts"], "backoff_ms": scenario.retry["backoff_ms"]}
    return settings


def run_locust(scenario: Scenario, served_model: str, url: str, out_json: Path, log: Path,
               progress=print, extra_settings: dict | None = None) -> ClientStats:
    """Locust against ``url`` for ``scenario``; the client side of the run. ``extra_settings`` join the load
    settings (e.g. ``window_s``: the length of ``ClientStats.windows``)."""
    settings = {**load_settings(scenario, served_model, url, out_json), **(extra_settings or {})}
    name = user_class_name(scenario.model, scenario.protocol)
    out_json.unlink(missing_ok=True)
    env = {**os.environ, "TRITONKIT_LOAD": json.dumps(settings)}
    process = subprocess.Popen(locust_command(scenario, name, url), env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    copier = threading.Thread(target=_copy_output, args=(process.stdout, log, progress), daemon=True)
    copier.start()
    try:
        process.wait(timeout=scenario.duration_s + MARGIN_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        raise RunError(f"scenario {scenario.name!r}: Locust did not finish within "
                       f"{scenario.duration_s + MARGIN_S:.0f} s; log: {log}") from None
    except BaseException:
        # Interrupted (Ctrl-C, SIGTERM): Locust runs in its own session and would outlive this process.
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        raise
    finally:
        copier.join(timeout=10)
    if process.returncode != 0 or not out_json.exists():
        tail = log.read_text()[-2000:]
        raise RunError(f"scenario {scenario.name!r}: Locust exited with {process.returncode} and no result; "
                       f"log {log}:\n{tail}")
    raw = json.loads(out_json.read_text())["client"]
    raw["timeline"] = [TimelinePoint(**p) for p in raw["timeline"]]
    return ClientStats(**raw)
