"""A Python-backend stub killed under load: the supervisor reloads its model, retrying clients lose nothing.

Own small server (digits only, two instances, so two stubs) with the supervisor on. One test kills a stub
while Locust (``TritonUser`` on digits over HTTP, retry on) and two checking gRPC threads (retry on) send
requests; the other kills one while clients without retry send, to show what they see. Run with ``-s`` or look at the
``recovery:`` lines the tests print (they bypass capture).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from deploy.retry import RetryPolicy, call_with_retry
from deploy.server import PROJECT_ROOT, LocalServer
from deploy.supervisor import parse_stub
from loadtest.generators.locust import runner
from tests.digits_server import digits_repository, scans, small_server

RETRY = {"attempts": 10, "backoff_ms": 50, "max_backoff_ms": 2000}
"""10 attempts over about 9 s of backoff: longer than a digits reload (a few seconds) on 2 busy cores."""


def live_stubs(server: LocalServer, model: str) -> list[tuple[str, int]]:
    """(instance name, pid) of every live stub of ``model``, sorted; an instance kept twice shows twice."""
    import psutil

    out = []
    for pid in server.stub_pids():
        try:
            proc = psutil.Process(pid)
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            parsed = parse_stub(proc.cmdline())
        except psutil.Error:
            continue
        if parsed and parsed[0] == model:
            out.append((parsed[1], pid))
    return sorted(out)


def stubs_of(server: LocalServer, model: str) -> dict[str, int]:
    """instance name -> pid of the live stubs of ``model``; each instance must have exactly one."""
    live = live_stubs(server, model)
    assert len({name for name, _ in live}) == len(live), f"an instance of {model} has two live stubs: {live}"
    return dict(live)


def settled(server: LocalServer, count: int, killed_pid: int) -> list:
    """The supervisor's events once the ``count``-th is looked after (the replaced instances stopped or
    ended, see Supervisor.settle), checking that exactly one live stub per instance is left, none of them
    the killed one."""
    events = server.supervisor.wait_for_events(count, timeout_s=server.supervisor.orphan_grace_s + 60, settled=True)
    assert len(events) == count and events[-1].settled_at is not None, [e.describe() for e in events]
    live = live_stubs(server, "digits")
    assert [name for name, _ in live] == ["digits_0_0", "digits_0_1"], f"replaced stubs kept: {live}"
    assert killed_pid not in {pid for _, pid in live}
    return events


class CheckingClients:
    """Threads that send scans and check every answer against the reference; they account for each request."""

    def __init__(
        self,
        server: LocalServer,
        reference: np.ndarray,
        pixels: np.ndarray,
        protocol: str,
        threads: int,
        retry: RetryPolicy | None,
    ):
        self.server, self.reference, self.pixels = server, reference, pixels
        self.protocol, self.retry = protocol, retry
        self.halt = threading.Event()
        self.lock = threading.Lock()
        self.sent = self.ok = self.wrong = self.retries = 0
        self.failures: list[tuple[float, str]] = []  # (wall time, error) of requests that failed for good
        self.successes: list[float] = []  # wall time of each answer
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(threads)]

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def stop(self) -> None:
        self.halt.set()
        for t in self.threads:
            t.join(timeout=60)
        assert not any(t.is_alive() for t in self.threads), "a client thread hung"

    def _run(self, seed: int) -> None:
        module = grpcclient if self.protocol == "grpc" else httpclient
        url = self.server.config.grpc_url if self.protocol == "grpc" else self.server.config.http_url
        client = module.InferenceServerClient(url)
        i = seed
        try:
            while not self.halt.is_set():
                i = (i + 7) % len(self.pixels)
                tensor = module.InferInput("PIXELS", [1, 64], "FP32")
                tensor.set_data_from_numpy(self.pixels[i : i + 1])
                with self.lock:
                    self.sent += 1
                retried = []
                try:
                    kwargs = {"client_timeout": 30} if self.protocol == "grpc" else {}
                    result, _ = call_with_retry(
                        lambda tensor=tensor, kwargs=kwargs: client.infer("digits", [tensor], **kwargs),
                        self.retry,
                        on_retry=retried.append,
                    )
                except InferenceServerException as exc:
                    with self.lock:
                        self.retries += len(retried)
                        self.failures.append((time.time(), str(exc)))
                    continue
                probs = result.as_numpy("PROBABILITIES")[0]
                good = np.allclose(probs, self.reference[i], atol=1e-5)
                with self.lock:
                    self.retries += len(retried)
                    self.ok += good
                    self.wrong += not good
                    self.successes.append(time.time())
        finally:
            client.close()


@pytest.fixture(scope="module")
def supervised(tmp_path_factory):
    server = small_server(digits_repository(tmp_path_factory.mktemp("stub-crash")), supervise=True)
    yield server
    left = server.stop()
    assert not left, f"left behind: {left}"


def reference_of(server: LocalServer, pixels: np.ndarray) -> np.ndarray:
    client = httpclient.InferenceServerClient(server.config.http_url)
    try:
        tensor = httpclient.InferInput("PIXELS", list(pixels.shape), "FP32")
        tensor.set_data_from_numpy(pixels)
        return client.infer("digits", [tensor]).as_numpy("PROBABILITIES")
    finally:
        client.close()


def served_successes(server: LocalServer) -> int:
    client = httpclient.InferenceServerClient(server.config.http_url)
    try:
        stats = client.get_inference_statistics("digits")["model_stats"]
        return sum(s["inference_stats"]["success"]["count"] for s in stats)
    finally:
        client.close()


def kill_one_stub(server: LocalServer) -> tuple[str, int, float]:
    stubs = stubs_of(server, "digits")
    assert len(stubs) == 2, f"digits should have two live stubs, found {stubs}"
    instance, pid = sorted(stubs.items())[-1]
    os.kill(pid, signal.SIGKILL)
    return instance, pid, time.time()


def report(capsys, text: str) -> None:
    with capsys.disabled():
        print(f"\n  recovery: {text}", flush=True)


def test_killed_stub_under_load_with_retries_loses_no_request(supervised, tmp_path, capsys):
    server = supervised
    pixels = scans()
    reference = reference_of(server, pixels)
    events_before = len(server.supervisor.events)
    out = tmp_path / "locust.json"
    settings = {
        "model": "digits",
        "protocol": "http",
        "url": server.config.http_url,
        "shape": {"kind": "users"},
        "retry": RETRY,
        "out": str(out),
    }
    locust = subprocess.Popen(
        [
            sys.executable,
            "-m",
            runner.LAUNCHER,
            "-f",
            str(runner.LOCUSTFILE),
            runner.USER_CLASS,
            "--headless",
            "--host",
            server.config.http_url,
            "-u",
            "6",
            "-r",
            "6",
            # Long enough to span the kill and the reload (a few seconds); the rest of a longer run adds nothing.
            "-t",
            "10s",
            "--only-summary",
            "--loglevel",
            "WARNING",
            "--stop-timeout",
            "15",
            "--exit-code-on-error",
            "0",
        ],
        cwd=PROJECT_ROOT,
        env={**os.environ, "TRITONKIT_LOAD": json.dumps(settings)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        with CheckingClients(server, reference, pixels, "grpc", threads=2, retry=RetryPolicy(**RETRY)) as checking:
            # Kill once Locust's users are sending (its start-up imports torch: seconds on 2 cores).
            baseline, deadline = served_successes(server), time.monotonic() + 90
            while served_successes(server) < baseline + 300 and time.monotonic() < deadline:
                time.sleep(0.2)
            assert locust.poll() is None, locust.stdout.read()
            instance, pid, killed_at = kill_one_stub(server)
            events = server.supervisor.wait_for_events(events_before + 1, timeout_s=90)
            time.sleep(2)  # answers after the recovery too
        output, _ = locust.communicate(timeout=120)
    finally:
        if locust.poll() is None:
            os.killpg(locust.pid, signal.SIGKILL)
            locust.wait()

    assert len(events) == events_before + 1, "the supervisor recorded no recovery"
    event = events[-1]
    assert event.ok, event.describe()
    assert event.model == "digits" and event.instances == [instance] and event.pids == [pid]
    report(
        capsys,
        f"{event.describe()}; kill -> ready {event.reloaded_at - killed_at:.2f} s "
        f"(pytest tests/functional/test_stub_crash.py, 6 Locust HTTP users + 2 gRPC threads, retry on)",
    )

    # The checking threads: every request sent got its answer, and every answer is right.
    assert checking.failures == [], checking.failures[:5]
    assert checking.wrong == 0
    assert checking.ok == checking.sent > 0
    # Locust: with retry on, no request failed for good; the dead stub's refusals show as retries.
    client = json.loads(out.read_text())["client"]
    assert client["failures"] == 0, (client["errors"], output[-2000:])
    assert client["requests"] > 0
    report(
        capsys,
        f"Locust: {client['requests']} requests, 0 failed, {client['retries']} retried; "
        f"checking threads: {checking.sent} sent, {checking.ok} right, {checking.retries} retried",
    )
    assert client["retries"] + checking.retries > 0, "the dead stub refused nothing: was it killed under load?"

    # Afterwards: ready, exactly two live stubs (the replaced instances stopped or ended), answering.
    event = settled(server, events_before + 1, pid)[-1]
    report(
        capsys,
        f"replaced instances: {len(event.orphans)} orphaned stub(s) ended, "
        f"{event.settled_at - event.reloaded_at:.0f} s after the reload",
    )
    probe = httpclient.InferenceServerClient(server.config.http_url)
    try:
        assert probe.is_server_ready() and probe.is_model_ready("digits")
    finally:
        probe.close()
    np.testing.assert_allclose(reference_of(server, pixels), reference, atol=1e-5)


def test_without_retries_clients_see_the_dead_stub_until_the_reload(supervised, capsys):
    server = supervised
    pixels = scans()
    reference = reference_of(server, pixels)
    events_before = len(server.supervisor.events)
    with CheckingClients(server, reference, pixels, "http", threads=4, retry=None) as clients:
        deadline = time.monotonic() + 60  # kill once the clients are being answered, not after a fixed second
        while clients.ok < 20 and time.monotonic() < deadline:
            time.sleep(0.05)
        instance, pid, killed_at = kill_one_stub(server)
        events = server.supervisor.wait_for_events(events_before + 1, timeout_s=90)
        time.sleep(2)
    assert len(events) == events_before + 1 and events[-1].ok, [e.describe() for e in events]
    event = events[-1]
    # What a client without retry sees: HTTP 500 naming the dead stub, only between the kill and the reload.
    assert clients.failures, "no request failed: the killed stub was not in use?"
    messages = {message for _, message in clients.failures}
    assert all(f"Stub process '{instance}' is not healthy" in m for m in messages), messages
    assert all(killed_at - 1 <= t <= event.reloaded_at + 1 for t, _ in clients.failures)
    # ... the other instance keeps answering meanwhile, and everything answers after the reload.
    assert any(killed_at < t < event.reloaded_at for t in clients.successes)
    assert any(t > event.reloaded_at for t in clients.successes)
    assert clients.wrong == 0 and clients.ok + len(clients.failures) == clients.sent
    report(
        capsys,
        f"{event.describe()}; without retry {len(clients.failures)} of {clients.sent} requests "
        f"failed ('Stub process ... is not healthy', HTTP 500), all before the reload",
    )
    event = settled(server, events_before + 1, pid)[-1]
    report(capsys, f"replaced instances: {len(event.orphans)} orphaned stub(s) ended")
