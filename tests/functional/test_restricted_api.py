"""The restricted-API flags that docker-compose.yml and deploy/k8s pass, on a real tritonserver: admin APIs
refuse a request without the key over both protocols (HTTP 403, gRPC UNAVAILABLE, each naming the header),
accept it with the key, inference and metadata stay open, and the load generator loads the server without
the key (the model's inputs read from its metadata)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from deploy import security
from deploy.client import connect, infer
from deploy.server import DEFAULT_REPOSITORY, PROJECT_ROOT
from loadtest.generators.payloads import served_model
from loadtest.target import apply
from tests.conftest import server_config, start_or_fail

KEY = "functional-test-key-0123456789"


@pytest.fixture(scope="module")
def locked_server(tmp_path_factory, repository):
    repo = tmp_path_factory.mktemp("repository")
    shutil.copytree(DEFAULT_REPOSITORY / "digits", repo / "digits")
    # Bound to loopback like every test server; the flags are what a non-loopback address adds.
    server = start_or_fail(server_config(repo, extra_args=tuple(security.restricted_flags(KEY))))
    yield server
    assert server.stop() == []


def call(url: str, headers: dict, method: str = "POST") -> tuple[int, str]:
    data = b"{}" if method == "POST" else None
    request = urllib.request.Request(url, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def assert_http_refused(answer: tuple[int, str]) -> None:
    status, body = answer
    assert status == 403, body
    assert json.loads(body)["error"] == f"This API is restricted, expecting header '{security.KEY_HEADER}'"


def assert_grpc_refused(info: pytest.ExceptionInfo) -> None:
    # Triton answers UNAVAILABLE (not PERMISSION_DENIED), the status of a server going down too: the message
    # naming the header is what tells a refusal (security.is_refusal).
    assert info.value.status() == "StatusCode.UNAVAILABLE"
    assert info.value.message() == f"This protocol is restricted, expecting header '{security.GRPC_KEY_HEADER}'"
    assert security.is_refusal(info.value.message())


def test_http_admin_apis_need_the_key(locked_server):
    base = f"http://{locked_server.config.http_url}"
    assert_http_refused(call(f"{base}/v2/repository/index", {}))
    assert_http_refused(call(f"{base}/v2/repository/index", {security.KEY_HEADER: "wrong-key-0123456789"}))
    status, body = call(f"{base}/v2/repository/index", {security.KEY_HEADER: KEY})
    assert status == 200 and json.loads(body)[0]["name"] == "digits"
    assert_http_refused(call(f"{base}/v2/repository/models/digits/unload", {}))  # model control is an admin API
    assert_http_refused(call(f"{base}/v2/models/digits/config", {}, "GET"))
    status, body = call(f"{base}/v2/models/digits", {}, "GET")
    assert status == 200 and json.loads(body)["inputs"][0]["name"] == "PIXELS", "metadata stays open"


def test_grpc_admin_apis_need_the_key(locked_server):
    client = grpcclient.InferenceServerClient(locked_server.config.grpc_url)
    try:
        with pytest.raises(InferenceServerException) as info:
            client.get_model_repository_index()
        assert_grpc_refused(info)
        with pytest.raises(InferenceServerException) as info:
            client.get_model_config("digits")
        assert_grpc_refused(info)
        index = client.get_model_repository_index(headers={security.GRPC_KEY_HEADER: KEY})
        assert [m.name for m in index.models] == ["digits"]
        assert client.get_model_metadata("digits").inputs[0].name == "PIXELS", "metadata stays open"
    finally:
        client.close()


def test_the_inputs_read_from_metadata_are_the_configs_over_both_protocols(locked_server):
    c = locked_server.config
    keyed = grpcclient.InferenceServerClient(c.grpc_url)
    try:
        real = keyed.get_model_config("digits", headers={security.GRPC_KEY_HEADER: KEY}, as_json=True)["config"]
    finally:
        keyed.close()
    for read in (apply.served_config(c.http_url, "digits"), apply.served_config_grpc(c.grpc_url, "digits")):
        assert apply.FROM_METADATA in read, "the config API was refused, so this came from the metadata"
        got, want = served_model(read), served_model(real)
        assert (got.inputs, got.outputs, got.batched, got.decoupled) == (
            want.inputs,
            want.outputs,
            want.batched,
            want.decoupled,
        )


def test_the_load_generator_loads_the_restricted_server_without_the_key(locked_server, tmp_path):
    """``tritonkit loadtest`` (Locust, gRPC) for a few seconds, the admin key nowhere in its environment."""
    c = locked_server.config
    env = {k: v for k, v in os.environ.items() if k != security.KEY_ENV}
    done = subprocess.run(
        [
            *(sys.executable, "-m", "tritonkit_cli", "loadtest", "--model", "digits", "--protocol", "grpc"),
            *("--users", "2", "--duration", "3", "--warmup-s", "0", "--out", str(tmp_path)),
            *("--http-url", c.http_url, "--grpc-url", c.grpc_url, "--metrics-url", c.metrics_url),
        ],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert f"note: {c.http_url} restricts its model-config API" in done.stderr
    (run,) = json.loads((tmp_path / "digits" / "results.json").read_text())["runs"]
    assert run["client"]["requests"] > 0 and run["client"]["failures"] == 0
    assert run["server"]["requests"] >= run["client"]["requests"], "Triton's statistics stay open too"


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_inference_and_health_stay_open(locked_server, protocol):
    url = locked_server.config.http_url if protocol == "http" else locked_server.config.grpc_url
    client = connect(protocol, url)
    try:
        assert client.is_server_ready() and client.is_model_ready("digits")
        out = infer(client, "digits", {"PIXELS": np.zeros((2, 64), np.float32)})["PROBABILITIES"]
        assert out.shape == (2, 10)
    finally:
        client.close()
