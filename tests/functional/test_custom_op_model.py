"""A model calling a torch.library custom op, served by backends/pytorch with ``TORCH_OPS_MODULES``.

A module-scoped server on a temporary repository serves ``custom_op_mlp`` exported through the
pipeline (TorchScript, parity checked) with ``TORCH_OPS_MODULES: "backends.custom_ops"``. The same
file configured without the parameter, or with a module that does not import, fails to load with a
message that says why, while the server and the working model carry on.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch
from tritonclient.utils import InferenceServerException

from deploy.client import connect, infer
from export import config as config_io
from export import pipeline
from export.spec import DynamicBatching, ModelSpec
from export.variants import Variant
from export.zoo import custom_op
from export.zoo.digits import split
from tests.conftest import server_config, start_or_fail

NAME = "custom_op_mlp"
OP = "tritonkit::hardswish_clamp"
PARAMETERS = (("TORCH_OPS_MODULES", custom_op.TORCH_OPS_MODULES),)


@pytest.fixture(scope="module")
def model():
    return custom_op.build()


@pytest.fixture(scope="module")
def spec(model):
    return ModelSpec(
        name=NAME,
        inputs=model.inputs,
        outputs=model.outputs,
        max_batch_size=16,
        dynamic_batching=DynamicBatching(max_queue_delay_us=100),
        parameters=PARAMETERS,
        description=model.description,
    )


@pytest.fixture(scope="module")
def op_server(tmp_path_factory, model, spec):
    repo = tmp_path_factory.mktemp("custom_op_repo")
    done = pipeline.export_variant(model, spec, Variant("torchscript"), repo, source=pipeline.builder_source(NAME))
    assert done.result.ok, done.result.summary()
    assert 'key: "TORCH_OPS_MODULES"' in (repo / NAME / "config.pbtxt").read_text()
    server = start_or_fail(server_config(repo))
    yield server
    assert server.stop() == []


@pytest.fixture(params=["http", "grpc"])
def client(op_server, request):
    url = op_server.config.http_url if request.param == "http" else op_server.config.grpc_url
    client = connect(request.param, url)
    yield client
    client.close()


def eager(model, pixels: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return model.module(torch.from_numpy(pixels)).numpy()


def test_served_model_equals_eager(client, model):
    _, x_test, _, y_test = split()
    for batch in (1, 7, 16):
        pixels = np.ascontiguousarray(x_test[:batch])
        served = infer(client, NAME, {"PIXELS": pixels})["PROBABILITIES"]
        assert served.shape == (batch, 10) and served.dtype == np.float32
        assert np.abs(served - eager(model, pixels)).max() <= 1e-5
    # The held-out scans, 16 at a time: the served classifier is the trained one.
    served = np.concatenate(
        [infer(client, NAME, {"PIXELS": x_test[i : i + 16]})["PROBABILITIES"] for i in range(0, len(x_test), 16)]
    )
    assert np.abs(served - eager(model, x_test)).max() <= 1e-5
    assert (served.argmax(1) == y_test).mean() >= 0.9


def test_the_parameter_is_honoured_not_reported_as_ignored(op_server):
    log = op_server.log_path.read_text()
    assert not any("parameters not used" in line and NAME in line for line in log.splitlines())


def _add_model(op_server, spec, name: str, parameters) -> None:
    repo = op_server.config.model_repository
    (repo / name / "1").mkdir(parents=True)
    shutil.copy2(repo / NAME / "1" / "model.pt", repo / name / "1" / "model.pt")
    config_io.write(spec.replace(name=name, parameters=parameters), repo)


def _assert_fails_to_load_and_the_rest_carries_on(op_server, model, name: str, reason: str) -> str:
    """Loading ``name`` fails with ``reason``; returns the repository index's reason for it."""
    admin = connect("http", op_server.config.http_url)
    try:
        with pytest.raises(InferenceServerException, match=reason):
            admin.load_model(name)
        index = {m["name"]: m for m in admin.get_model_repository_index()}
        assert index[name]["state"] == "UNAVAILABLE" and reason in index[name]["reason"], index[name]
        assert admin.is_server_live() and admin.is_model_ready(NAME)
        pixels = split()[1][:3]
        assert np.abs(infer(admin, NAME, {"PIXELS": pixels})["PROBABILITIES"] - eager(model, pixels)).max() <= 1e-5
        return index[name]["reason"]
    finally:
        admin.close()


def test_without_the_parameter_the_model_fails_to_load_naming_the_unknown_op(op_server, model, spec):
    _add_model(op_server, spec, "custom_op_mlp_without_ops", ())
    reason = _assert_fails_to_load_and_the_rest_carries_on(op_server, model, "custom_op_mlp_without_ops", OP)
    assert "TORCH_OPS_MODULES" in reason  # and says how to fix it
    print(f"\nreason: {reason}")


def test_a_module_that_does_not_import_fails_the_load_clearly(op_server, model, spec):
    _add_model(op_server, spec, "custom_op_mlp_bad_module", (("TORCH_OPS_MODULES", "backends.no_such_ops"),))
    _assert_fails_to_load_and_the_rest_carries_on(
        op_server, model, "custom_op_mlp_bad_module", "cannot import 'backends.no_such_ops'"
    )
