"""backends/pytorch: the native libtorch backend's conventions, served by the local Python runtime.

A module-scoped server loads small TorchScript models written here, each configured through the
same ModelSpec -> config.pbtxt path the export uses.
"""

from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn
from tritonclient.utils import InferenceServerException

from deploy.client import connect, infer, metrics, model_metric
from export import catalog, pipeline
from export import config as config_io
from export.spec import DynamicBatching, InstanceGroup, ModelSpec, TensorSpec
from export.user.model import load_user_model
from export.variants import Variant
from tests.conftest import infer_concurrently, server_config, start_or_fail


class Subtract(nn.Module):
    def forward(self, a, b):
        return a - b


class SumAndDifference(nn.Module):
    def forward(self, a, b):
        return a + b, a - b


class RefuseNegative(nn.Module):
    def forward(self, x):
        if bool((x < 0).any()):
            raise ValueError("negative values are not accepted")
        return x * 2


USER_MODEL = Path(__file__).resolve().parents[1] / "data" / "user_model.py"


def user_model():
    return load_user_model(f"{USER_MODEL}:build", "scorer", [TensorSpec("features", "FP32", (16,))], ["scores"])


def vec(name, n=4):
    return TensorSpec(name, "FP32", (n,))


MODELS = {
    # Inputs named after forward's arguments, listed in the config in the other order.
    "by_argument_name": (torch.jit.script(Subtract()), (vec("b"), vec("a")), (vec("out"),)),
    # NAME__index: the index, not the config order, says which argument each input is.
    "by_named_index": (torch.jit.script(Subtract()), (vec("INPUT__1"), vec("INPUT__0")), (vec("OUTPUT__0"),)),
    # Neither: config order is forward's order, for inputs and for outputs.
    "by_config_order": (torch.jit.script(SumAndDifference()), (vec("X"), vec("Y")), (vec("SUM"), vec("DIFF"))),
    "refuse_negative": (torch.jit.script(RefuseNegative()), (vec("x"),), (vec("y"),)),
}


@pytest.fixture(scope="module")
def runtime_server(tmp_path_factory):
    repo = tmp_path_factory.mktemp("runtime_repo")
    for name, (module, inputs, outputs) in MODELS.items():
        spec = ModelSpec(
            name=name,
            inputs=inputs,
            outputs=outputs,
            max_batch_size=8,
            warmup=False,
            # A long window so concurrent requests surely share one execution.
            dynamic_batching=DynamicBatching(max_queue_delay_us=300_000, preferred_batch_sizes=(4,)),
            instance_groups=(InstanceGroup(count=1),),
        )
        (repo / name / "1").mkdir(parents=True)
        module.save(str(repo / name / "1" / "model.pt"))
        config_io.write(spec, repo)
    user = user_model()
    entry = catalog.CatalogEntry(
        "scorer",
        f"{USER_MODEL}:build",
        {"cpu": (Variant("torchscript"),), "gpu": ()},
        {"max_batch_size": 16, "dynamic_batching": {"max_queue_delay_us": 500}},
    )
    assert all(done.result.ok for done in pipeline.export_entry(entry, repo, model=user))
    server = start_or_fail(server_config(repo))
    yield server
    assert server.stop() == []


@pytest.fixture
def http(runtime_server):
    client = connect("http", runtime_server.config.http_url)
    yield client
    client.close()


A = np.array([[5, 6, 7, 8]], dtype=np.float32)
B = np.array([[1, 1, 2, 2]], dtype=np.float32)


def test_inputs_matched_by_forward_argument_name(http):
    assert np.array_equal(infer(http, "by_argument_name", {"a": A, "b": B})["out"], A - B)


def test_inputs_matched_by_named_index(http):
    out = infer(http, "by_named_index", {"INPUT__0": A, "INPUT__1": B})["OUTPUT__0"]
    assert np.array_equal(out, A - B)


def test_inputs_and_outputs_in_config_order(http):
    out = infer(http, "by_config_order", {"X": A, "Y": B})
    assert np.array_equal(out["SUM"], A + B) and np.array_equal(out["DIFF"], A - B)


def test_a_failing_request_does_not_fail_the_rest_of_its_batch(runtime_server):
    """Four concurrent requests batched into one execution; the one with a negative value fails alone."""
    payloads = [np.full((1, 4), v, dtype=np.float32) for v in (1.0, 2.0, -1.0, 3.0)]
    before = metrics(runtime_server.config.metrics_url)
    results = infer_concurrently(runtime_server.config.http_url, "refuse_negative", [{"x": p} for p in payloads], "y")
    after = metrics(runtime_server.config.metrics_url)
    for i in (0, 1, 3):
        assert np.array_equal(results[i], payloads[i] * 2), results[i]
    error = results[2]
    assert isinstance(error, InferenceServerException)
    assert str(error.status()) == "400" and "negative values are not accepted" in error.message()
    batched = model_metric(after, "nv_inference_exec_count", "refuse_negative") - model_metric(
        before, "nv_inference_exec_count", "refuse_negative"
    )
    print(f"\nexecutions for 4 concurrent requests: {batched:.0f}")
    assert batched == 1, "the four requests were not batched, so the per-request path was not exercised"


def test_model_with_more_config_inputs_than_forward_arguments_fails_to_load_clearly(runtime_server):
    admin = connect("http", runtime_server.config.http_url)
    repo = runtime_server.config.model_repository
    spec = ModelSpec(name="too_many_inputs", inputs=(vec("a"), vec("b"), vec("c")), outputs=(vec("out"),))
    (repo / spec.name / "1").mkdir(parents=True)
    torch.jit.script(Subtract()).save(str(repo / spec.name / "1" / "model.pt"))
    config_io.write(spec, repo)
    with pytest.raises(InferenceServerException, match="forward takes 2 inputs"):
        admin.load_model(spec.name)
    # The failed model is reported with its reason; the server and the other models carry on.
    index = {m["name"]: m for m in admin.get_model_repository_index()}
    assert index[spec.name]["state"] == "UNAVAILABLE" and "forward takes 2 inputs" in index[spec.name]["reason"]
    assert admin.is_server_live() and admin.is_model_ready("by_argument_name")
    assert np.array_equal(infer(admin, "by_argument_name", {"a": A, "b": B})["out"], A - B)
    admin.close()


def test_user_model_from_a_file_serves_like_eager(http):
    """A module with LayerNorm and GELU, exported through `--model-file`'s path, at several batch sizes."""
    eager = user_model().module
    for batch in (1, 7, 16):
        features = torch.randn(batch, 16)
        with torch.no_grad():
            expected = eager(features).numpy()
        served = infer(http, "scorer", {"features": features.numpy()})["scores"]
        assert np.abs(served - expected).max() <= 1e-5
