"""The Locust master and worker commands of docker-compose.yml, run as they are (plus headless flags and
local addresses) against the real server: the distributed set-up the stack ships really sends load."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml

from deploy.server import PROJECT_ROOT, free_ports


def compose_services() -> dict:
    tool = shutil.which("docker-compose")
    if tool is None:
        pytest.fail("docker-compose is missing: run `make setup`")
    env = {**os.environ, "GRAFANA_ADMIN_PASSWORD": "not-a-real-password", "TRITON_ADMIN_KEY": "not-a-real-admin-key"}
    result = subprocess.run([tool, "config"], cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return yaml.safe_load(result.stdout)["services"]


def local(command: list[str]) -> list[str]:
    """The container's ``python`` is this interpreter; the master is on this host."""
    command = [sys.executable if part == "python" else part for part in command]
    return ["127.0.0.1" if part == "locust-master" else part for part in command]


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_master_and_worker_from_compose_send_load(server, protocol, tmp_path):
    services = compose_services()
    master, worker = services["locust-master"], services["locust-worker"]
    settings = json.loads(master["environment"]["TRITONKIT_LOAD"])
    assert set(settings) == {"model", "protocol", "http_url", "grpc_url"}
    # The compose file's settings, with this server's addresses and the protocol under test.
    settings.update(http_url=server.config.http_url, grpc_url=server.config.grpc_url, protocol=protocol)
    env = {**os.environ, "TRITONKIT_LOAD": json.dumps(settings)}
    (port,) = free_ports(1)
    worker_cmd = local(worker["command"]) + ["--master-port", str(port)]
    master_cmd = local(master["command"]) + [
        "--headless",
        "-u",
        "4",
        "-r",
        "4",
        "-t",
        "6s",
        "--expect-workers",
        "1",
        "--expect-workers-max-wait",
        "60",
        "--master-bind-port",
        str(port),
        "--json-file",
        str(tmp_path / "stats"),
        "--only-summary",
        "--loglevel",
        "WARNING",
        "TritonUser",
    ]
    master_proc = subprocess.Popen(
        master_cmd, cwd=PROJECT_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    worker_proc = subprocess.Popen(
        worker_cmd, cwd=PROJECT_ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    try:
        out, err = master_proc.communicate(timeout=120)
    finally:
        for proc in (master_proc, worker_proc):
            if proc.poll() is None:
                proc.terminate()
        _, worker_err = worker_proc.communicate(timeout=30)
    assert master_proc.returncode == 0, f"master: {err[-2000:]}\nworker: {worker_err[-2000:]}"
    stats = json.loads(next(tmp_path.glob("stats*")).read_text())
    assert stats and sum(s["num_requests"] for s in stats) > 0, out
    assert sum(s["num_failures"] for s in stats) == 0, out
