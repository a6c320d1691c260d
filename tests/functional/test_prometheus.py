"""The committed Prometheus rules and Grafana panel queries against a real Prometheus scraping the real
tritonserver under a short load: every recording rule and every panel query must return data (the GPU
panels' queries: be accepted; see test_gpu_only_panel_query_is_accepted).

Prometheus (/usr/bin/prometheus, installed by `make setup`) runs on a free loopback port with a
temporary storage folder, scraping and evaluating every second, with the committed rule files and
the `triton` job pointed at the session server's metrics port instead of DNS.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from deploy import monitoring
from deploy.client import connect
from deploy.server import free_ports

LOAD_S = 15
# Requests kept in flight per model (closed loop, gRPC async): enough for dynamic batching to form
# batches on a 2-core machine without starving the server of CPU.
IN_FLIGHT = {"digits": 12, "digits_onnx": 4}
START_TIMEOUT_S = 20
DATA_TIMEOUT_S = 30
STOP_TIMEOUT_S = 10
# $__rate_interval in a panel becomes this; with 1 s scrapes it holds 15 samples.
PANEL_WINDOW = "15s"

NON_GPU_QUERIES = [q for q in monitoring.dashboard_queries(PANEL_WINDOW) if not q.gpu_only]
GPU_QUERIES = [q for q in monitoring.dashboard_queries(PANEL_WINDOW) if q.gpu_only]


class Prometheus:
    def __init__(self, url: str, process: subprocess.Popen, log_path):
        self.url, self.process, self.log_path = url, process, log_path

    def api(self, path: str, **params) -> dict:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/{path}{query}", timeout=10) as response:
                return json.load(response)
        except urllib.error.HTTPError as exc:  # a bad query answers 400 with a JSON error body
            return json.load(exc)

    def query(self, expr: str) -> dict:
        return self.api("query", query=expr)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]


def closed_loop_load(url: str, seconds: float) -> dict[str, int]:
    """Keep IN_FLIGHT requests per model outstanding until ``seconds`` pass; answers per model."""
    client = connect("grpc", url)
    deadline = time.monotonic() + seconds
    lock, finished = threading.Lock(), threading.Semaphore(0)
    answered, errors = {m: 0 for m in IN_FLIGHT}, []
    rng = np.random.default_rng(0)
    pixels = rng.uniform(0, 16, size=(64, 1, 64)).astype(np.float32)

    def send(model: str):
        tensor = grpcclient.InferInput("PIXELS", [1, 64], "FP32")
        tensor.set_data_from_numpy(pixels[answered[model] % len(pixels)])
        client.async_infer(model, [tensor], callback=lambda result, error: done(model, error))

    def done(model: str, error):
        with lock:
            answered[model] += 1
            if error is not None:
                errors.append(error)
        if time.monotonic() < deadline and not errors:
            send(model)
        else:
            finished.release()

    loops = [m for m, n in IN_FLIGHT.items() for _ in range(n)]
    for model in loops:
        send(model)
    try:
        for _ in loops:
            assert finished.acquire(timeout=seconds + 60), "a request got no answer within 60 s"
    finally:
        client.close()
    assert not errors, errors[:3]
    return answered


@pytest.fixture(scope="module")
def prometheus(server, tmp_path_factory):
    binary = shutil.which("prometheus") or "/usr/bin/prometheus"
    if not shutil.which(binary):
        pytest.fail("prometheus is not installed: run `make setup` (deploy/setup.sh installs it)", pytrace=False)
    work = tmp_path_factory.mktemp("prometheus")
    (port,) = free_ports(1)
    address = f"127.0.0.1:{port}"
    config = work / "prometheus.yml"
    config.write_text(
        monitoring.render_prometheus_config(f"127.0.0.1:{server.config.metrics_port}", address, interval="1s")
    )
    log_path = work / "prometheus.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={work / 'data'}",
                f"--web.listen-address={address}",
                "--log.level=info",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    prom = Prometheus(f"http://{address}", process, log_path)
    try:
        wait_ready(prom)
        yield prom
    finally:
        process.terminate()
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=STOP_TIMEOUT_S)


def wait_ready(prom: Prometheus) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if prom.process.poll() is not None:
            pytest.fail(f"prometheus exited with {prom.process.returncode}:\n{prom.log()}", pytrace=False)
        try:
            with urllib.request.urlopen(f"{prom.url}/-/ready", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    pytest.fail(f"prometheus was not ready within {START_TIMEOUT_S} s:\n{prom.log()}", pytrace=False)


@pytest.fixture(scope="module")
def loaded(prometheus, server) -> dict[str, int]:
    """The load ran while Prometheus scraped, and every recording rule has data."""
    answered = closed_loop_load(server.config.grpc_url, LOAD_S)
    rules = monitoring.recording_rules()
    start = time.monotonic()
    deadline = start + DATA_TIMEOUT_S
    while True:
        if prometheus.process.poll() is not None:
            pytest.fail(f"prometheus exited with {prometheus.process.returncode}:\n{prometheus.log()}", pytrace=False)
        empty = [name for name in rules if not prometheus.query(name).get("data", {}).get("result")]
        if not empty:
            print(f"\n{LOAD_S} s of load, then every rule had data after {time.monotonic() - start:.1f} s")
            return answered
        if time.monotonic() > deadline:
            targets = json.dumps(prometheus.api("targets").get("data"), indent=1)[:2000]
            pytest.fail(
                f"after {DATA_TIMEOUT_S} s these rules have no data: {empty}\n"
                f"targets: {targets}\nprometheus log:\n{prometheus.log()}",
                pytrace=False,
            )
        time.sleep(0.5)


def values(response: dict) -> list[float]:
    return [float(sample["value"][1]) for sample in response["data"]["result"]]


def test_triton_target_is_up(prometheus, loaded):
    result = prometheus.query('up{job="triton"}')["data"]["result"]
    assert [float(s["value"][1]) for s in result] == [1.0], result


def test_all_rules_load_and_evaluate_without_error(prometheus, loaded):
    groups = prometheus.api("rules")["data"]["groups"]
    rules = [rule for group in groups for rule in group["rules"]]
    names = {rule["name"] for rule in rules}
    assert names == set(monitoring.recording_rules()) | set(monitoring.alert_names())
    broken = {rule["name"]: rule.get("lastError") for rule in rules if rule["health"] != "ok"}
    assert not broken, broken


@pytest.mark.parametrize("name", list(monitoring.recording_rules()))
def test_recording_rule_has_data(prometheus, loaded, name):
    response = prometheus.query(name)
    assert response["status"] == "success", response
    assert response["data"]["result"], f"{name} returned nothing\n{prometheus.log()}"


def test_digits_figures_from_the_rules(prometheus, loaded):
    """The rules see the load: digits served inferences, and batching formed batches of at least 1."""
    rate = values(prometheus.query('tritonkit:model:inferences:rate1m{model="digits"}'))
    batch = values(prometheus.query('tritonkit:model:batch_size:rate1m{model="digits"}'))
    p99 = values(prometheus.query('tritonkit:model:request_latency_seconds:p99{model="digits"}'))
    scrapes = values(prometheus.query('count_over_time(up{job="triton"}[1m])'))
    good = values(prometheus.query('sum_over_time(up{job="triton"}[1m])'))
    print(
        f"\nanswers per model {loaded}; {good[0]:.0f} of {scrapes[0]:.0f} scrapes succeeded; digits per the "
        f"rules: {rate[0]:.1f} inferences/s (1m rate), batch {batch[0]:.2f}, p99 {p99[0] * 1e3:.2f} ms"
    )
    assert rate and rate[0] > 0
    assert batch and batch[0] >= 1
    assert p99 and p99[0] > 0


@pytest.mark.parametrize("query", NON_GPU_QUERIES, ids=lambda q: f"{q.panel}-{q.ref_id}")
def test_panel_query_has_data(prometheus, loaded, query):
    response = prometheus.query(query.expr)
    assert response["status"] == "success", response
    assert response["data"]["result"], f"panel {query.panel!r} query {query.expr!r} returned nothing"


@pytest.mark.parametrize("query", GPU_QUERIES, ids=lambda q: f"{q.panel}-{q.ref_id}")
def test_gpu_only_panel_query_is_accepted(prometheus, loaded, query):
    """Prometheus parses and evaluates the query. Whether it has data is not checked here: every local server
    runs with ``--allow-gpu-metrics=false`` (deploy/server.py), so no ``nv_gpu_*`` series ever exists in this
    suite. tests/unit/test_monitoring.py checks that these panels use only metrics Triton documents and are
    the ones marked GPU-only; their data shows only on a GPU node serving with ``--allow-gpu-metrics=true``
    (the compose file, the gpu overlay)."""
    response = prometheus.query(query.expr)
    assert response["status"] == "success", response
