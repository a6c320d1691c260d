"""Run one scenario with Locust (a subprocess) and read both sides of it; run a whole campaign.

Locust runs headless through ``loadtest.locust_main`` (gRPC readied for gevent), loads
``loadtest/locustfile.py`` and writes the merged client result as JSON when it quits. Triton's counters
are read just before and just after. A run that cannot finish (Locust hangs, the server dies) is
killed after its duration plus a margin and reported as an error, never waited on forever.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

from loadtest import apply, server_metrics, slo
from loadtest.campaign import Campaign, Scenario, Variant
from loadtest.payloads import user_class_name
from loadtest.errors import RunError
from loadtest.results import CampaignResult, ClientStats, RunResult, ServerStats, TimelinePoint

LOCUSTFILE = Path(__file__).with_name("locustfile.py")
PROGRESS_PREFIX = "  ... "
MARGIN_S = 90.0
"""How long past its duration a run may take (start-up, stopping users) before it is killed."""


@dataclasses.dataclass(frozen=True)
class Endpoints:
    http: str
    """host:port of Triton's HTTP endpoint (model control and statistics go through it)."""
    grpc: str
    metrics: str
    """Full URL of the Prometheus endpoint."""

    @classmethod
    def of(cls, server) -> "Endpoints":
        c = server.config
        return cls(c.http_url, c.grpc_url, c.metrics_url)

    def url(self, protocol: str) -> str:
        return self.grpc if protocol == "grpc" else self.http


def locust_command(scenario: Scenario, user_class: str, url: str) -> list[str]:
    users = scenario.peak_users
    cmd = [sys.executable, "-m", "loadtest.locust_main", "-f", str(LOCUSTFILE), user_class, "--headless",
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


def measure_run(scenario: Scenario, served_model: str, endpoints: Endpoints, work: Path, label: str,
            log=print, extra_settings: dict | None = None) -> tuple[ClientStats, ServerStats]:
    """Locust for ``scenario`` between two reads of Triton's counters: both sides of one run."""
    before = server_metrics.snapshot(endpoints.http, endpoints.metrics, served_model)
    client = run_locust(scenario, served_model, endpoints.url(scenario.protocol), work / f"{label}.json",
                        work / f"{label}.log", progress=log, extra_settings=extra_settings)
    after = server_metrics.snapshot(endpoints.http, endpoints.metrics, served_model)
    return client, server_metrics.delta(before, after, client.latency_ms.get("mean", float("nan")))


def run_scenario(scenario: Scenario, variant: Variant, served_model: str, endpoints: Endpoints, work: Path,
                 budget: slo.Slo, log=print) -> RunResult:
    client, server = measure_run(scenario, served_model, endpoints, work, f"{scenario.name}--{variant.name}", log)
    run = RunResult(scenario.name, variant.name, scenario.model, served_model, scenario.protocol,
                    dict(scenario.shape), client, server)
    run.slo_violations = slo.violations(run, budget)
    return run


def run_campaign(campaign: Campaign, endpoints: Endpoints, out_dir: Path, log=print) -> CampaignResult:
    """Every scenario under every variant that applies to it; the served configs are restored after."""
    work = out_dir / "runs"
    work.mkdir(parents=True, exist_ok=True)
    pairs = [(v, s) for v in campaign.variants for s in campaign.scenarios
             if v.applies_to(s.model) or v.name == "as-deployed"]
    result = CampaignResult(campaign.name, datetime.now(timezone.utc).isoformat(timespec="seconds"),
                            dataclasses.asdict(campaign.slo), [])
    serving: dict[str, str] = {}  # model -> the variant whose config it serves now (absent: the original)
    originals: dict[str, dict] = {}  # model -> its config before the campaign changed it
    started = time.monotonic()
    try:
        for index, (variant, scenario) in enumerate(pairs, 1):
            served = variant.served_model(scenario.model)
            wanted = variant.name if variant.changes_config and variant.applies_to(scenario.model) else None
            if serving.get(served) != wanted:
                if wanted is None:
                    apply.restore(endpoints.http, {served: originals[served]})
                    serving.pop(served)
                else:
                    if served not in originals:
                        originals[served] = apply.served_config(endpoints.http, served)
                    apply.apply(endpoints.http, variant, scenario.model, originals[served])
                    serving[served] = wanted
            else:
                apply.served_config(endpoints.http, served)  # fails early, naming the model, if it is not served
            log(f"[{index}/{len(pairs)}] {scenario.name} x {variant.name}: {served} over {scenario.protocol}, "
                f"{scenario.shape['kind']} {_shape_text(scenario.shape)}, {scenario.duration_s:g} s "
                f"(elapsed {time.monotonic() - started:.0f} s)")
            run = run_scenario(scenario, variant, served, endpoints, work, campaign.slo, log)
            c = run.client
            log(f"      {c.throughput_rps:8.1f} req/s  p50 {c.latency_ms['p50']:.3f} ms  p99 "
                f"{c.latency_ms['p99']:.3f} ms  errors {c.error_rate:.2%}  batch {run.server.avg_batch:.2f}  "
                f"{'ok' if run.passed else 'SLO: ' + '; '.join(run.slo_violations)}")
            result.runs.append(run)
    finally:
        apply.restore(endpoints.http, {model: originals[model] for model in serving})
    return result


def _shape_text(shape: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in shape.items() if k != "kind")
