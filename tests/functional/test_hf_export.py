"""A `transformers` model as users bring it, end to end: a tiny BertModel (tests/data/hf_encoder.py: default
settings, so forward returns a ModelOutput and takes keyword arguments) exported with ``python -m export
--model-file`` to TorchScript and ONNX, served, and answering over gRPC what eager PyTorch answers at two
sequence lengths and for a batch whose shorter rows are padded (attention_mask 0)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

from deploy.client import connect, infer
from deploy.server import PROJECT_ROOT
from export.usermodel import load_factory
from tests.conftest import server_config, start_or_fail

NAME = "encoder"
HF_ENCODER = PROJECT_ROOT / "tests" / "data" / "hf_encoder.py"
OUTPUTS = ("last_hidden_state", "pooler_output")


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
        [
            sys.executable,
            "-m",
            "export",
            "--model-file",
            f"{HF_ENCODER}:build",
            "--name",
            NAME,
            "--input",
            "input_ids:INT64:-1",
            "--input",
            "attention_mask:INT64:-1",
            *[arg for output in OUTPUTS for arg in ("--output", output)],
            "--max-batch-size",
            "4",
            "--format",
            "torchscript",
            "--format",
            "onnx",
            "--repository",
            str(repository),
        ],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
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
