"""The TorchScript export and its parity check: a right export passes, a wrong one is caught."""

import json

import pytest
import torch
from torch import nn

from export import catalog, pipeline, torchscript
from export.errors import ParityError
from export.spec import TensorSpec
from export.zoo.base import ZooModel


class Branchy(nn.Module):
    """Data-dependent control flow: tracing bakes in the branch the example took."""

    def forward(self, x):
        if x.sum() > 0:
            return x * 2
        return -x


def zoo_model(module, example, reference) -> ZooModel:
    return ZooModel(name="t", module=module.eval(), inputs=(TensorSpec("x", "FP32", (4,)),),
                    outputs=(TensorSpec("y", "FP32", (4,)),), example_inputs=(example,),
                    reference_inputs=(reference,), atol=1e-6)


def test_faithful_export_is_ok(tmp_path):
    torch.manual_seed(0)
    model = zoo_model(nn.Sequential(nn.Linear(4, 4), nn.Tanh()), torch.randn(2, 4), torch.randn(32, 4))
    result = torchscript.export(model, tmp_path / "1" / "model.pt")
    assert result.status == "ok", result.summary()
    assert result.max_abs_error <= 1e-6
    assert (tmp_path / "1" / "model.pt").is_file()


def test_trace_that_bakes_a_branch_is_a_mismatch(tmp_path):
    model = zoo_model(Branchy(), torch.ones(2, 4), -torch.ones(8, 4))
    result = torchscript.export(model, tmp_path / "model.pt")
    assert result.status == "mismatch"
    assert result.max_abs_error == pytest.approx(3.0)  # eager gives 1, the trace gives -2


def test_untraceable_model_is_a_failure_with_the_reason(tmp_path):
    class Bad(nn.Module):
        def forward(self, x):
            return x.numpy()

    result = torchscript.export(zoo_model(Bad(), torch.ones(1, 4), torch.ones(1, 4)), tmp_path / "model.pt")
    assert result.status == "failed" and result.message


def test_pipeline_writes_manifest_and_skips_when_up_to_date(tmp_path):
    entry = catalog.entry("digits")
    first = pipeline.export_entry(entry, tmp_path)
    assert not first.get("up_to_date")
    manifest = json.loads((tmp_path / "digits" / "manifest.json").read_text())
    assert manifest["conversions"][0]["status"] == "ok"
    assert (tmp_path / "digits" / manifest["conversions"][0]["path"]).is_file()
    assert pipeline.export_entry(entry, tmp_path).get("up_to_date")
    # A changed serving setting changes the fingerprint, so the model is exported again.
    assert not pipeline.export_entry(entry, tmp_path, max_batch_size=128).get("up_to_date")


def test_pipeline_raises_on_mismatch(tmp_path, monkeypatch):
    mismatch = zoo_model(Branchy(), torch.ones(2, 4), -torch.ones(8, 4))
    monkeypatch.setattr(pipeline.zoo, "build", lambda name: mismatch)
    entry = catalog.CatalogEntry("branchy", "digits", ("torchscript",), {"max_batch_size": 8})
    with pytest.raises(ParityError, match="branchy.*mismatch"):
        pipeline.export_entry(entry, tmp_path)
