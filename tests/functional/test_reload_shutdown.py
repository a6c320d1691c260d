"""Under load: a new model version swapped in through model control, and a SIGTERM to ``tritonkit serve``.

Each test runs its own small server (digits only) on a temporary repository.
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import psutil
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.conftest import start_serve_command
from tests.digits_server import digits_repository, scans, small_server

EXIT_TIMEOUT_S = 10


class VersionedClients:
    """Threads sending one scan at a time; each request's (sent, done, protocol, model_version, error), in the
    order answers came, and per thread the model version of each answer ("error" for a failure) in send order."""

    def __init__(
        self, http_url: str, grpc_url: str, pixels: np.ndarray, per_protocol: int = 2, timeout_s: float = 10.0
    ):
        self.urls = {"http": http_url, "grpc": grpc_url}
        self.pixels, self.timeout_s = pixels, timeout_s
        self.halt = threading.Event()
        self.lock = threading.Lock()
        self.records: list[tuple[float, float, str, str, str]] = []
        self.runs: list[list[str]] = [[] for _ in range(2 * per_protocol)]
        self.threads = [
            threading.Thread(target=self._run, args=(p, i, n), daemon=True)
            for n, (p, i) in enumerate((p, i) for p in ("http", "grpc") for i in range(per_protocol))
        ]

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.halt.set()
        for t in self.threads:
            t.join(timeout=2 * self.timeout_s + 10)
        assert not any(t.is_alive() for t in self.threads), "a client hung past its timeout"

    def _client(self, protocol: str):
        if protocol == "grpc":
            return grpcclient.InferenceServerClient(self.urls["grpc"])
        return httpclient.InferenceServerClient(
            self.urls["http"], connection_timeout=self.timeout_s, network_timeout=self.timeout_s
        )

    def wait_until(self, done: Callable[[list[list[str]]], bool], what: str, timeout_s: float = 120) -> None:
        """Until ``done(runs)`` holds (counts of answers, not a time); fails naming ``what`` after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            with self.lock:
                runs = [list(run) for run in self.runs]
            if done(runs):
                return
            if time.monotonic() > deadline:
                tails = [run[-8:] for run in runs]
                pytest.fail(f"no {what} within {timeout_s:.0f} s; each client's last answers: {tails}")
            time.sleep(0.05)

    def _run(self, protocol: str, seed: int, number: int) -> None:
        module = grpcclient if protocol == "grpc" else httpclient
        client = self._client(protocol)
        i = seed
        while not self.halt.is_set():
            i = (i + 5) % len(self.pixels)
            tensor = module.InferInput("PIXELS", [1, 64], "FP32")
            tensor.set_data_from_numpy(self.pixels[i : i + 1])
            sent = time.time()
            version, error = "", ""
            try:
                kwargs = {"client_timeout": self.timeout_s} if protocol == "grpc" else {}
                result = client.infer("digits", [tensor], **kwargs)
                response = result.get_response()
                version = response["model_version"] if protocol == "http" else response.model_version
            except Exception as exc:  # noqa: BLE001 - every outcome is recorded and judged by the test
                error = f"{type(exc).__name__}: {exc}"
                time.sleep(0.05)  # a refused server is not hammered
            with self.lock:
                self.records.append((sent, time.time(), protocol, version, error))
                self.runs[number].append("error" if error else version)
        try:
            client.close()
        except Exception:  # noqa: BLE001
            pass


def test_new_version_under_load_is_swapped_in_with_no_failed_request(tmp_path, capsys):
    """Judged by order and counts, never by time windows (shared cores stretch every step): each client sees
    version 1, then version 2, never 1 again, and no request fails; version 1 answers while 2 loads."""
    repo = digits_repository(tmp_path)
    assert "num_versions: 1" in (repo / "digits" / "config.pbtxt").read_text()  # the committed policy: latest 1
    server = small_server(repo)
    try:
        control = httpclient.InferenceServerClient(server.config.http_url, network_timeout=300)
        with VersionedClients(server.config.http_url, server.config.grpc_url, scans()) as clients:
            clients.wait_until(lambda runs: all(run.count("1") >= 5 for run in runs), "5 answers of version 1 each")
            shutil.copytree(repo / "digits" / "1", repo / "digits" / "2")
            answered_at_load = len(clients.records)
            load_started = time.monotonic()
            control.load_model("digits")  # returns once version 2 is ready; version 1 is then unloaded
            load_s = time.monotonic() - load_started
            during = clients.records[answered_at_load:]  # answered while load_model ran
            clients.wait_until(lambda runs: all(run[-5:] == ["2"] * 5 for run in runs), "5 answers of version 2 each")
        index = {(m["name"], m.get("version")): m.get("state") for m in control.get_model_repository_index()}
        assert control.is_model_ready("digits", "2")
        assert not control.is_model_ready("digits", "1")
        control.close()
    finally:
        assert server.stop() == []
    records = clients.records
    errors = [r for r in records if r[4]]
    assert errors == [], errors[:5]
    # Every client (two over HTTP, two over gRPC): version 1's answers, then version 2's, in the order sent.
    for number, run in enumerate(clients.runs):
        ones, twos = run.count("1"), run.count("2")
        assert ones >= 5 and twos >= 5 and run == ["1"] * ones + ["2"] * twos, (number, run)
    # Version 1 kept answering while version 2 loaded (and warmed up).
    assert any(r[3] == "1" for r in during), "no request was answered by version 1 during the load"
    with capsys.disabled():
        print(
            f"\n  reload: {len(records)} requests, 0 failed; load_model took {load_s:.2f} s, "
            f"{len(during)} requests answered meanwhile (by version 1 until version 2 was ready); index {index}"
        )


def test_sigterm_under_load_drains_refuses_cleanly_and_leaves_nothing(tmp_path, capsys):
    repo = digits_repository(tmp_path)
    proc, lines, (http, grpc, _) = start_serve_command(repo, "--exit-timeout", str(EXIT_TIMEOUT_S))
    try:
        assert "(supervised)" in lines[-1], "".join(lines)
        family = psutil.Process(proc.pid).children(recursive=True)
        stubs = [p for p in family if "triton_python_backend_stub" in " ".join(p.cmdline())]
        regions = {m.path for p in stubs for m in p.memory_maps() if m.path.startswith("/dev/shm/")}
        assert len(stubs) == 2 and regions
        with VersionedClients(f"127.0.0.1:{http}", f"127.0.0.1:{grpc}", scans(), timeout_s=5) as clients:
            clients.wait_until(lambda runs: all(run.count("1") >= 3 for run in runs), "3 answers per client")
            signalled = time.time()
            os.kill(proc.pid, signal.SIGTERM)
            # Readiness drops at once, so a load balancer stops sending while the server drains: the probe
            # sees "not ready" while the process is still running.
            not_ready_while_running = False
            while not not_ready_while_running and proc.poll() is None:
                try:
                    probe = httpclient.InferenceServerClient(
                        f"127.0.0.1:{http}", connection_timeout=2, network_timeout=2
                    )
                    ready = probe.is_server_ready()
                    probe.close()
                except Exception:  # noqa: BLE001 - a closed port is "not ready" too
                    ready = False
                not_ready_while_running = not ready and proc.poll() is None
                time.sleep(0.05)
            not_ready_after = time.time() - signalled
            output, _ = proc.communicate()  # a shutdown that hangs is pytest-timeout's to fail
            exited = time.time()
            time.sleep(1)  # clients keep trying against the stopped server
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = "".join(lines) + output
    assert proc.returncode == 0, text
    assert "no stub process or /dev/shm region left" in output, text
    assert not [p.pid for p in stubs if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not [r for r in regions if Path(r).exists()]
    assert "supervisor" not in output.replace("(supervised)", ""), "the supervisor took shutdown for a crash"

    assert not_ready_while_running, "readiness did not drop before the server exited"
    records = clients.records
    accepted_before = [r for r in records if r[0] < signalled]
    assert accepted_before and all(not r[4] for r in accepted_before), [r for r in accepted_before if r[4]][:5]
    late = [r for r in records if r[0] >= signalled]
    refused = [r for r in late if r[4]]
    assert refused, "no request was refused after the shutdown"
    # Clean refusals, each quickly, never a client timeout: while Triton unloads the models it answers
    # "has no available versions" (HTTP 400 / gRPC NOT_FOUND); once its endpoints are down, the port is closed.
    clean = (
        "has no available versions",
        "Connection refused",
        "UNAVAILABLE",
        "Server is stopping",
        "Connection reset",
        "connection closed",
        "Broken pipe",
        "failed to connect",
        "Socket closed",
        "503",
    )
    unclean = [r for r in refused if not any(c.lower() in r[4].lower() for c in clean)]
    assert unclean == [], unclean[:5]
    timed_out = [r for r in refused if any(t in r[4].lower() for t in ("timed out", "timeout", "deadline"))]
    assert timed_out == [], f"refused requests waited for their client timeout: {timed_out[:5]}"
    kinds = sorted({r[4].split(":")[0] + ": " + r[4].split(":", 1)[1].strip()[:90] for r in refused})
    with capsys.disabled():
        print(
            f"\n  shutdown: not ready {not_ready_after:.2f} s after SIGTERM, exit after {exited - signalled:.2f} s "
            f"(exit timeout {EXIT_TIMEOUT_S} s); "
            f"{len(accepted_before)} requests sent before it all answered; after it "
            f"{len(late) - len(refused)} answered, {len(refused)} refused: {kinds}"
        )
