"""Shared fixtures: the real tritonserver, started once per session on free ports.

The server serves model_repository/ after the built-in models are exported into it (an export
that is up to date is skipped). If the server does not come up within its ready timeout the
session fails with the server's log instead of hanging.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from deploy.client import connect
from deploy.errors import ServerStartError
from deploy.server import DEFAULT_REPOSITORY, PROJECT_ROOT, LocalServer, ServerConfig, free_ports
from deploy.supervisor import ORPHAN_GRACE_ENV
from tests.user_models import scorer_export_args

READY_TIMEOUT_S = 420
# A reload's replaced instances stop within seconds when Triton stops them at all (test_stub_crash.py):
# 30 s of grace in production, 5 s here, for every server the tests start (tritonkit serve's too).
os.environ.setdefault(ORPHAN_GRACE_ENV, "5")


def server_config(repository: Path, **kwargs) -> ServerConfig:
    http, grpc, metrics = free_ports()
    return ServerConfig(
        model_repository=repository,
        http_port=http,
        grpc_port=grpc,
        metrics_port=metrics,
        ready_timeout_s=READY_TIMEOUT_S,
        exit_timeout_s=10,
        **kwargs,
    )


def start_or_fail(config: ServerConfig) -> LocalServer:
    server = LocalServer(config)
    try:
        return server.start()
    except ServerStartError as exc:
        pytest.fail(f"tritonserver did not start: {exc}", pytrace=False)


def read_until(proc: subprocess.Popen, marker: str, timeout_s: float) -> list[str]:
    """``proc``'s output lines up to the first holding ``marker``, its end, or ``timeout_s``; never empty."""
    lines = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        lines.append(line)
        if marker in line or not line:
            break
    return lines or [""]


def start_serve_command(
    repository: Path, *extra: str, timeout_s: float = 180
) -> tuple[subprocess.Popen, list[str], tuple[int, int, int]]:
    """``tritonkit serve`` as a user runs it, on free ports, read until it prints "serve: ready": the process,
    its output lines so far and its (http, grpc, metrics) ports. The caller stops the process; if the
    command never gets ready it is killed and the test fails with its output."""
    ports = free_ports()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tritonkit_cli",
            "serve",
            "--repository",
            str(repository),
            "--http-port",
            str(ports[0]),
            "--grpc-port",
            str(ports[1]),
            "--metrics-port",
            str(ports[2]),
            *extra,
        ],
        cwd=PROJECT_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines = read_until(proc, "serve: ready", timeout_s)
    if "serve: ready" not in lines[-1]:
        proc.kill()
        pytest.fail("tritonkit serve did not get ready:\n" + "".join(lines), pytrace=False)
    return proc, lines, ports


def infer_concurrently(
    url: str, model: str, payloads: list[dict], output: str, timeout: float = 120, protocol: str = "http"
) -> list:
    """Send each payload from its own thread and connection at once; per payload, the output or the error."""
    import threading

    from tritonclient.utils import InferenceServerException

    from deploy.client import infer

    results = [None] * len(payloads)

    def send(i):
        client = connect(protocol, url)
        try:
            results[i] = infer(client, model, payloads[i])[output]
        except InferenceServerException as exc:
            results[i] = exc
        finally:
            client.close()

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(payloads))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=timeout)
    return results


@pytest.fixture(scope="session")
def repository() -> Path:
    from export import catalog
    from export.pipeline import export_entry

    for entry in catalog.load().values():
        for done in export_entry(entry, DEFAULT_REPOSITORY):
            assert done.result.ok, done.result.summary()
    return DEFAULT_REPOSITORY


@pytest.fixture(scope="session")
def server(repository):
    server = start_or_fail(server_config(repository))
    yield server
    left = server.stop()
    assert not left, f"the session server left behind: {left}"


@dataclasses.dataclass(frozen=True)
class ScorerExport:
    """The tests' user model exported once per session as a user exports it (``python -m export``)."""

    repository: Path
    run: subprocess.CompletedProcess

    def copy_to(self, repository: Path) -> Path:
        """A copy of the exported ``scorer`` folder in ``repository`` (made if missing), for a test that
        changes it (tune writes its pick, a re-export): the session's own stays as exported."""
        repository.mkdir(parents=True, exist_ok=True)
        shutil.copytree(self.repository / "scorer", repository / "scorer")
        return repository


@pytest.fixture(scope="session")
def scorer_export(tmp_path_factory) -> ScorerExport:
    repository = tmp_path_factory.mktemp("scorer_export")
    run = subprocess.run(
        [sys.executable, "-m", "export", *scorer_export_args(repository)],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return ScorerExport(repository, run)


@pytest.fixture(params=["http", "grpc"])
def protocol(request) -> str:
    return request.param


@pytest.fixture
def client(server, protocol):
    url = server.config.http_url if protocol == "http" else server.config.grpc_url
    client = connect(protocol, url)
    yield client
    client.close()
