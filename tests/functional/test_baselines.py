"""The FastAPI baseline of `make bench`, run as a real uvicorn process, in both modes."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request

import numpy as np
import pytest
import torch

from deploy.server import free_ports
from export.zoo.digits import split
from loadtest.studies.bench.baselines.fastapi_app import serve_in_subprocess, stop_subprocess


def _post(port: int, body: bytes) -> tuple[int, dict]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/infer", data=body, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _get(port: int, path: str) -> tuple[int, dict]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
        return response.status, json.loads(response.read())


@pytest.fixture(scope="module")
def digits_rows():
    x_test = split()[1][:24]
    return x_test


@pytest.mark.parametrize("batcher", [False, True], ids=["per-request", "micro-batcher"])
def test_the_baseline_serves_digits_like_eager_torchscript(repository, digits_rows, batcher):
    module = torch.jit.load(str(repository / "digits" / "1" / "model.pt")).eval()
    with torch.inference_mode():
        expected = module(torch.from_numpy(digits_rows)).argmax(1).numpy()

    (port,) = free_ports(1)
    proc = serve_in_subprocess("digits", port, batcher, repository, timeout_s=60)
    try:
        assert _get(port, "/health")[0] == 200

        # one request carrying a batch of real rows
        status, body = _post(port, json.dumps({"inputs": {"PIXELS": digits_rows.tolist()}}).encode())
        assert status == 200, body
        probabilities = np.asarray(body["outputs"]["PROBABILITIES"])
        assert probabilities.shape == (len(digits_rows), 10)
        np.testing.assert_array_equal(probabilities.argmax(1), expected)

        # one row per request, all at once (the batcher may join them)
        answers = [None] * len(digits_rows)

        def send(i):
            answers[i] = _post(port, json.dumps({"inputs": {"PIXELS": digits_rows[i : i + 1].tolist()}}).encode())

        threads = [threading.Thread(target=send, args=(i,)) for i in range(len(digits_rows))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert [a[0] for a in answers] == [200] * len(digits_rows)
        got = [int(np.argmax(a[1]["outputs"]["PROBABILITIES"][0])) for a in answers]
        assert got == expected.tolist()

        # bad input gets a 4xx with a message, and the server keeps serving
        status, body = _post(port, b'{"inputs": {"PIXELS": [[1.0, 2.0')
        assert status == 422 and "JSON" in json.dumps(body)
        status, body = _post(port, json.dumps({"inputs": {"PIXELS": [[1.0] * 63]}}).encode())
        assert status == 400 and "63" in body["detail"]
        status, body = _post(port, json.dumps({"inputs": {"IMAGE": [[1.0] * 64]}}).encode())
        assert status == 400 and "PIXELS" in body["detail"]
        status, body = _post(port, json.dumps({"input": {}}).encode())
        assert status == 422
        status, body = _post(port, json.dumps({"inputs": {"PIXELS": digits_rows[:2].tolist()}}).encode())
        assert status == 200 and np.argmax(body["outputs"]["PROBABILITIES"], 1).tolist() == expected[:2].tolist()
        assert proc.poll() is None

        status, stats = _get(port, "/stats")
        assert stats["mode"] == ("batcher" if batcher else "per-request")
        if batcher:
            assert stats["rows"] >= 2 * len(digits_rows) + 2 and stats["forwards"] <= stats["requests"]
    finally:
        stop_subprocess(proc)
    assert proc.poll() is not None
    log = proc.log_path.read_text()
    proc.log_path.unlink()
    assert "Traceback" not in log, log[-2000:]


def test_first_request_without_warmup_on_a_server_of_its_own(repository, digits_rows):
    from loadtest.probes.first_request import measure

    result = measure(repository, "digits", {"PIXELS": digits_rows[:1]}, warmup=False, steady_requests=20)
    assert result.warmup is False and result.warmup_entries == 0  # digits' config has 2 entries
    assert result.first_ms > 0 and result.steady_p50_ms > 0 and result.steady_requests == 20
    assert result.ratio == pytest.approx(result.first_ms / result.steady_p50_ms)
    assert result.ready_s > 0
