"""A `transformers` model as users bring it, end to end, with the commands of docs/exporting.md "From a
transformers model to a served pipeline" as written there: a tiny BertModel (tests/data/hf_encoder.py: default
settings, so forward returns a ModelOutput and takes keyword arguments) exported to TorchScript and ONNX with a
tokenizer function in front and mean pooling behind (tests/data/hf_pipeline.py), served. Each format answers
over gRPC what eager PyTorch answers at two sequence lengths and for a batch whose shorter rows are padded
(attention_mask 0); the pipeline answers text over HTTP and gRPC what the same functions and the eager model
answer in-process, gives a text its function refuses INVALID_ARGUMENT naming the step and input, and takes the
docs' load test of real sentences. The docs' tune and capacity commands (minutes of load each) are parsed by
the real command line here; tests/functional/test_tune.py and test_capacity.py run those commands."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from tritonclient.utils import InferenceServerException

from deploy.client import connect, infer
from deploy.server import PROJECT_ROOT
from export.user.model import load_factory
from loadtest.target.endpoints import Endpoints
from tests.conftest import server_config, start_or_fail

NAME = "encoder"
HF_ENCODER = PROJECT_ROOT / "tests" / "data" / "hf_encoder.py"
HF_PIPELINE = PROJECT_ROOT / "tests" / "data" / "hf_pipeline.py"
OUTPUTS = ("last_hidden_state", "pooler_output")
DOCS = PROJECT_ROOT / "docs" / "exporting.md"
SECTION = "## From a transformers model to a served pipeline"
TRITONKIT = Path(sys.executable).parent / "tritonkit"
TEXTS = ["A man is playing a guitar.", "The new server cut the p99 latency of the search service in half.", "Hi"]


def docs_commands() -> dict[str, list[str]]:
    """The section's commands by subcommand (``export``, ``loadtest``, ...), each as its argv after ``tritonkit``."""
    text = DOCS.read_text(encoding="utf-8").split(SECTION, 1)[1]
    block = re.search(r"```bash\n(.*?)```", text, re.S).group(1).replace("\\\n", " ")
    commands = [shlex.split(line) for line in block.splitlines() if line.strip()]
    assert all(c[0] == "tritonkit" for c in commands), commands
    return {c[1]: c[1:] for c in commands}


def batch(rows: list[list[int]], length: int) -> dict[str, np.ndarray]:
    """Token ids padded with 0 to ``length``, and the mask that says which are real."""
    ids = np.zeros((len(rows), length), np.int64)
    mask = np.zeros((len(rows), length), np.int64)
    for i, row in enumerate(rows):
        ids[i, : len(row)], mask[i, : len(row)] = row, 1
    return {"input_ids": ids, "attention_mask": mask}


CASES = {
    "sequence 4": batch([[2, 15, 27, 3]], 4),
    "sequence 13": batch([list(range(2, 15)), list(range(40, 53))], 13),
    "padded batch": batch([[2, 11, 12, 13, 14, 15, 16, 17, 3], [2, 30, 31, 3], [2, 3]], 9),
}


@pytest.fixture(scope="module")
def encoder_server(tmp_path_factory):
    repository = tmp_path_factory.mktemp("hf_export") / "repository"
    done = subprocess.run(
        [str(TRITONKIT), *docs_commands()["export"], "--repository", str(repository)],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "encoder_pipeline             ensemble" in done.stdout, done.stdout
    server = start_or_fail(server_config(repository))
    yield server
    assert server.stop() == []


@pytest.fixture(scope="module")
def eager():
    """The same factory's model, run as its users run it: keyword inputs, a ModelOutput back."""
    model = load_factory(f"{HF_ENCODER}:build")()

    def run(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        with torch.no_grad():
            result = model(**{name: torch.from_numpy(array) for name, array in inputs.items()})
        return {name: result[name].numpy() for name in OUTPUTS}

    return run


@pytest.mark.parametrize("served", [NAME, f"{NAME}_onnx"])
def test_each_format_answers_what_eager_answers(encoder_server, eager, served):
    client = connect("grpc", encoder_server.config.grpc_url)
    try:
        for case, inputs in CASES.items():
            got = infer(client, served, inputs, list(OUTPUTS))
            for name, expected in eager(inputs).items():
                assert got[name].shape == expected.shape, (case, name)
                np.testing.assert_allclose(got[name], expected, atol=1e-4, rtol=1e-4, err_msg=f"{case}: {name}")
    finally:
        client.close()


@pytest.fixture(scope="module")
def pipeline_in_process(eager):
    """The docs' functions and the eager model, called as the pipeline calls them."""
    tokenize, mean_pool = (load_factory(f"{HF_PIPELINE}:{name}") for name in ("tokenize", "mean_pool"))

    def run(texts: list[str]) -> np.ndarray:
        tokens = tokenize(np.array([[t.encode()] for t in texts], dtype=object))
        hidden = eager(tokens)["last_hidden_state"]
        return mean_pool(hidden, tokens["attention_mask"])["EMBEDDING"]

    return run


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_the_pipeline_answers_text_with_what_its_functions_and_eager_answer(
    encoder_server, pipeline_in_process, protocol
):
    c = encoder_server.config
    client = connect(protocol, c.http_url if protocol == "http" else c.grpc_url)
    try:
        for texts in (TEXTS, TEXTS[:1]):
            got = infer(client, "encoder_pipeline", {"TEXT": np.array([[t.encode()] for t in texts], dtype=object)})
            np.testing.assert_allclose(got["EMBEDDING"], pipeline_in_process(texts), atol=1e-4, rtol=1e-4)
    finally:
        client.close()


@pytest.mark.parametrize(("protocol", "status"), [("http", "[400]"), ("grpc", "[StatusCode.INVALID_ARGUMENT]")])
def test_a_text_the_preprocess_refuses_is_invalid_argument_naming_the_step_and_input_and_the_rest_serve_on(
    encoder_server, protocol, status
):
    c = encoder_server.config
    client = connect(protocol, c.http_url if protocol == "http" else c.grpc_url)
    try:
        with pytest.raises(InferenceServerException) as error:
            infer(client, "encoder_pipeline", {"TEXT": np.array([[b"   "]], dtype=object)})
        assert str(error.value) == (
            f"{status} in ensemble 'encoder_pipeline', encoder_pipeline_preprocess: preprocess tokenize failed on "
            "input TEXT: ValueError: TEXT is empty"
        )
        got = infer(client, "encoder_pipeline", {"TEXT": np.array([[b"still served"]], dtype=object)})
        assert got["EMBEDDING"].shape == (1, 32)
        assert client.is_model_ready(NAME) and client.is_model_ready("encoder_pipeline_preprocess")
    finally:
        client.close()


def test_the_docs_load_test_drives_the_pipeline_with_real_sentences(encoder_server, tmp_path):
    c = encoder_server.config
    argv = docs_commands()["loadtest"]
    argv[argv.index("--duration") + 1] = "3"  # the docs say 20 s; the requests are what this checks
    urls = ["--http-url", c.http_url, "--grpc-url", c.grpc_url, "--metrics-url", c.metrics_url]
    done = subprocess.run(
        [str(TRITONKIT), *argv, *urls, "--out", str(tmp_path)],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "encoder_pipeline-grpc on encoder_pipeline: 16 distinct requests" in done.stdout, done.stdout
    client = json.loads((tmp_path / "encoder_pipeline" / "results.json").read_text())["runs"][0]["client"]
    assert client["requests"] > 0 and client["failures"] == 0


def test_the_docs_tune_and_capacity_commands_parse_and_tune_via_finds_the_format_the_pipeline_calls(encoder_server):
    import tritonkit_cli
    from loadtest.tune.tuner import TuneError, TuneOptions, called_format

    parser = tritonkit_cli.build_parser()
    commands = docs_commands()
    tune, capacity = parser.parse_args(commands["tune"]), parser.parse_args(commands["capacity"])
    assert (tune.via, tune.samples, capacity.model, capacity.samples) == (
        "encoder_pipeline",
        "tests/data/hf_pipeline.py:sentences",
        "encoder_pipeline",
        "tests/data/hf_pipeline.py:sentences",
    )
    c = encoder_server.config
    endpoints = Endpoints.of(encoder_server)
    options = TuneOptions(model=NAME, slo=None, load=None, repository=c.model_repository, via="encoder_pipeline")
    assert called_format(endpoints, options, ["torchscript/fp32", "onnx/fp32"]) == "torchscript/fp32"
    with pytest.raises(TuneError, match="--via encoder: it is not an ensemble"):
        called_format(endpoints, TuneOptions(NAME, None, None, c.model_repository, via=NAME), ["torchscript/fp32"])
