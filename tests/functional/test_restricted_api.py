"""The restricted-API flags that docker-compose.yml and deploy/k8s pass, on a real tritonserver: admin APIs
refuse a request without the key over both protocols, accept it with the key, and inference stays open."""

from __future__ import annotations

import json
import shutil
import urllib.error
import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from deploy import security
from deploy.client import connect, infer
from deploy.server import DEFAULT_REPOSITORY
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


def post(url: str, headers: dict) -> tuple[int, str]:
    request = urllib.request.Request(url, data=b"{}", headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_http_admin_apis_need_the_key(locked_server):
    url = f"http://{locked_server.config.http_url}/v2/repository/index"
    status, body = post(url, {})
    assert status == 403 and security.KEY_HEADER in body
    status, body = post(url, {security.KEY_HEADER: "wrong-key-0123456789"})
    assert status == 403
    status, body = post(url, {security.KEY_HEADER: KEY})
    assert status == 200 and json.loads(body)[0]["name"] == "digits"
    status, _ = post(f"http://{locked_server.config.http_url}/v2/repository/models/digits/unload", {})
    assert status == 403, "model control is an admin API"


def test_grpc_admin_apis_need_the_key(locked_server):
    client = grpcclient.InferenceServerClient(locked_server.config.grpc_url)
    try:
        with pytest.raises(InferenceServerException) as info:
            client.get_model_repository_index()
        # Triton 2.51 answers UNAVAILABLE (not PERMISSION_DENIED) and names the metadata it expects.
        assert "UNAVAILABLE" in str(info.value.status()) and security.GRPC_KEY_HEADER in info.value.message()
        with pytest.raises(InferenceServerException):
            client.get_model_config("digits")
        index = client.get_model_repository_index(headers={security.GRPC_KEY_HEADER: KEY})
        assert [m.name for m in index.models] == ["digits"]
    finally:
        client.close()


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
