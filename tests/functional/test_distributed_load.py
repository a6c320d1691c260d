"""Load from other hosts through the same command: ``tritonkit loadtest --master`` and two ``--worker`` processes
on this host, three processes started from the command line as docker-compose.yml starts them (its commands, with
this server's addresses and a short run), against the real server. The merged result counts what Triton counts
and carries the exact percentiles of every request's latency; a worker stops cleanly on SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import psutil
import pytest
import yaml
from hdrh.histogram import HdrHistogram

from deploy.server import PROJECT_ROOT, free_ports
from loadtest.core.client_stats import PERCENTILES, percentile_key
from loadtest.core.latency import value_at
from loadtest.core.results import CampaignResult
from tests.deploy_tools import compose

WORKERS = 2


def compose_commands() -> tuple[list[str], list[str]]:
    result = compose("config")
    assert result.returncode == 0, result.stderr
    services = yaml.safe_load(result.stdout)["services"]
    return services["locust-master"]["command"], services["locust-worker"]["command"]


def local(command: list[str], swap: dict[str, str], extra: list[str]) -> list[str]:
    """A compose command on this host: ``tritonkit`` is this interpreter's, the services' names and the run's
    settings as ``swap`` says, ``extra`` flags after."""
    assert command[0] == "tritonkit"
    return [sys.executable, "-m", "tritonkit_cli", *(swap.get(part, part) for part in command[1:]), *extra]


def replace_flag(command: list[str], flag: str, value: str) -> list[str]:
    out = list(command)
    out[out.index(flag) + 1] = value
    return out


@pytest.fixture(scope="module")
def distributed(server, tmp_path_factory):
    """The master's campaign (4 users, 3 s) with its load from two workers; the workers are then stopped by SIGTERM.
    Returns (master's exit, its output, the result, the workers' exits, the Locust processes left)."""
    out = tmp_path_factory.mktemp("distributed")
    master_cmd, worker_cmd = compose_commands()
    c = server.config
    (port,) = free_ports(1)
    swap = {
        "triton:8000": c.http_url,
        "triton:8001": c.grpc_url,
        "http://triton:8002/metrics": c.metrics_url,
        "locust-master": "127.0.0.1",
    }
    master_cmd = local(master_cmd, swap, ["--master-bind-host", "127.0.0.1", "--master-bind-port", str(port)])
    for flag, value in (("--expect-workers", str(WORKERS)), ("--users", "4"), ("--duration", "3"), ("--out", str(out))):
        master_cmd = replace_flag(master_cmd, flag, value)
    worker_cmd = local(worker_cmd, swap, ["--master-port", str(port)])
    env = {k: v for k, v in os.environ.items() if k != "TRITONKIT_LOAD"}
    logs = [out / f"worker{i}.log" for i in range(WORKERS)]
    workers = [
        subprocess.Popen(worker_cmd, cwd=PROJECT_ROOT, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)
        for log in logs
    ]
    try:
        master = subprocess.run(
            [*master_cmd, "--warmup-s", "0.5"], cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=180
        )
        locusts = {p.pid for w in workers for p in psutil.Process(w.pid).children(recursive=True)}
        for w in workers:
            w.send_signal(signal.SIGTERM)
        codes = [w.wait(timeout=30) for w in workers]
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
                w.wait()
    left = [pid for pid in locusts if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
    result = out / "digits" / "results.json"
    master.stdout += "".join(f"\n--- {log.name}:\n{log.read_text()[-1500:]}" for log in logs)
    return master, CampaignResult.load(result) if result.exists() else None, codes, left


def test_master_and_two_workers_count_what_triton_counts(distributed):
    master, result, _, _ = distributed
    assert master.returncode == 0, master.stdout[-2000:] + master.stderr[-2000:]
    (run,) = result.runs
    c, s = run.client, run.server
    assert c.failures == 0 and c.requests > 0
    # Every request both workers sent (warm-up included) reached the server once, and nothing else did.
    assert c.requests + c.warmup_requests == s.requests + s.failures


def test_the_merged_result_has_the_exact_percentiles_of_every_request(distributed):
    _, result, _, _ = distributed
    (run,) = result.runs
    # The workers' latency histograms (µs, exact below 16 ms) added on the master: the result's percentiles are
    # the nearest ranks of that histogram, over exactly the successful requests.
    hist = HdrHistogram.decode(run.client.hdr)
    assert hist.get_total_count() == run.client.requests - run.client.failures
    ranked = value_at(hist, PERCENTILES)
    assert {percentile_key(p): v / 1000 for p, v in zip(PERCENTILES, ranked, strict=True)} == {
        percentile_key(p): run.client.latency_ms[percentile_key(p)] for p in PERCENTILES
    }


def test_a_worker_stops_on_sigterm_and_leaves_no_locust_behind(distributed):
    _, _, codes, left = distributed
    assert codes == [128 + signal.SIGTERM] * WORKERS
    assert not left, f"Locust processes left running: {left}"
