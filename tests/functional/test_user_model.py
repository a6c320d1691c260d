"""A model that is not built in, end to end as a user runs it: their own model file, exported with
``tritonkit export --model-file``, load-tested with ``tritonkit loadtest --model`` over both protocols, with
payloads generated from its config and with a perf_analyzer input-data file; the clients' request count
equals Triton's.

The model has two FP32 inputs of different sizes and an INT64 input with a dynamic dim (token ids), so the
generated payloads need ``--shape`` and integers in the default ``--int-range``. The export is a
module-scoped fixture (``user_model``) that other checks of the same model (tuning) reuse.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from deploy.client import connect, infer
from deploy.server import PROJECT_ROOT
from loadtest.core.results import CampaignResult
from tests.conftest import server_config, start_or_fail

NAME = "scorer"
MODEL_FILE = textwrap.dedent('''
    import torch
    from torch import nn


    class Scorer(nn.Module):
        """A user's and an item's features and the item's tokens in, a match probability out."""

        def __init__(self):
            super().__init__()
            self.user = nn.Linear(16, 8)
            self.item = nn.Linear(24, 8)
            self.tokens = nn.Embedding(100, 8)

        def forward(self, user, item, tokens):
            text = self.tokens(tokens).mean(dim=1)
            return torch.sigmoid((self.user(user) * self.item(item) + text).sum(dim=1, keepdim=True))


    def build():
        torch.manual_seed(0)
        return Scorer()
''')
EXPORT_ARGS = [
    "--model-file",
    "{dir}/scorer.py:build",
    "--name",
    NAME,
    "--input",
    "user:FP32:16",
    "--input",
    "item:FP32:24",
    "--input",
    "tokens:INT64:-1",
    "--output",
    "probs",
    "--max-batch-size",
    "16",
]


# The load-tests run one Locust process (the default on 2 cores is 2, ~3 s more a run): the model, its payloads
# and the counts are the subject here; two processes' merge is test_loadtest.py's and test_distributed_load.py's.
def tritonkit(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tritonkit_cli", *args],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def user_model(tmp_path_factory):
    """(repository, work folder): the user's model file exported into a repository of its own."""
    work = tmp_path_factory.mktemp("user_model")
    (work / "scorer.py").write_text(MODEL_FILE)
    repository = work / "repository"
    done = tritonkit("export", *[a.format(dir=work) for a in EXPORT_ARGS], "--repository", str(repository))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert (repository / NAME / "config.pbtxt").is_file() and (repository / NAME / "1" / "model.pt").is_file()
    return repository, work


@pytest.fixture(scope="module")
def user_server(user_model):
    repository, _ = user_model
    server = start_or_fail(server_config(repository))
    yield server
    assert server.stop() == []


@pytest.fixture(scope="module")
def input_data(user_model):
    """A perf_analyzer input-data file for the model: flat lists and a dynamic input with its shape."""
    _, work = user_model
    rng = np.random.default_rng(1)
    entries = [
        {
            "user": rng.random(16).round(4).tolist(),
            "item": rng.random(24).round(4).tolist(),
            "tokens": {"content": rng.integers(0, 100, n).tolist(), "shape": [n]},
        }
        for n in (3, 5, 9)
    ]
    path = work / "requests.json"
    path.write_text(json.dumps({"data": entries}))
    return path


def check_report(out, protocol: str) -> None:
    result = CampaignResult.load(out / NAME / "results.json")
    (run,) = result.runs
    c, s = run.client, run.server
    assert run.protocol == protocol and run.served_model == NAME
    assert c.failures == 0 and c.requests > 0, c.errors
    # Every request the clients sent (warm-up included) reached Triton once, and nothing else did.
    assert c.requests + c.warmup_requests == s.requests + s.failures, (c.requests, c.warmup_requests, s.requests)
    assert (out / NAME / "index.html").is_file()


def test_the_exported_user_model_answers(user_server):
    client = connect("grpc", user_server.config.grpc_url)
    try:
        got = infer(
            client,
            NAME,
            {
                "user": np.ones((2, 16), np.float32),
                "item": np.ones((2, 24), np.float32),
                "tokens": np.array([[1, 2, 3], [4, 5, 6]], dtype=np.int64),
            },
        )["probs"]
    finally:
        client.close()
    assert got.shape == (2, 1) and ((0 < got) & (got < 1)).all()


def test_loadtest_starts_its_own_server_with_generated_payloads(user_model, tmp_path):
    repository, _ = user_model
    done = tritonkit(
        "loadtest",
        "--model",
        NAME,
        "--repository",
        str(repository),
        "--protocol",
        "grpc",
        "--users",
        "2",
        "--processes",
        "1",
        "--duration",
        "3",
        "--shape",
        "tokens:6",
        "--slo-p99-ms",
        "2000",
        "--out",
        str(tmp_path),
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"starting tritonserver on {repository} with {NAME}" in done.stdout
    assert "SLO gate passed: p99 <= 2000 ms" in done.stdout
    check_report(tmp_path, "grpc")


@pytest.mark.parametrize("protocol, data", [("http", "generated"), ("grpc", "input-data"), ("http", "input-data")])
def test_loadtest_against_a_running_server(user_server, input_data, protocol, data, tmp_path):
    c = user_server.config
    payload = (
        ["--shape", "tokens:4", "--int-range", "0:100"] if data == "generated" else ["--input-data", str(input_data)]
    )
    done = tritonkit(
        "loadtest",
        "--model",
        NAME,
        "--protocol",
        protocol,
        "--users",
        "2",
        "--processes",
        "1",
        "--duration",
        "2",
        *payload,
        "--http-url",
        c.http_url,
        "--grpc-url",
        c.grpc_url,
        "--metrics-url",
        c.metrics_url,
        "--out",
        str(tmp_path),
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "starting tritonserver" not in done.stdout
    expected = "3 distinct requests" if data == "input-data" else "64 distinct requests"
    assert f"payloads: {NAME}-{protocol} on {NAME}: {expected}" in done.stdout
    check_report(tmp_path, protocol)


def test_a_wrong_input_data_file_stops_before_any_load(user_server, user_model, tmp_path):
    _, work = user_model
    bad = work / "bad.json"
    bad.write_text(json.dumps({"data": [{"user": [0.0] * 16, "item": [0.0] * 23, "tokens": [1]}]}))
    c = user_server.config
    done = tritonkit(
        "loadtest",
        "--model",
        NAME,
        "--input-data",
        str(bad),
        "--http-url",
        c.http_url,
        "--grpc-url",
        c.grpc_url,
        "--metrics-url",
        c.metrics_url,
        "--out",
        str(tmp_path),
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [f"error: --input-data {bad}: entry 0: input 'item': 23 values; shape needs 24"]
    assert not (tmp_path / NAME / "results.json").exists()
