"""Exports and their parity checks: a right export passes, a wrong one is caught and not published."""

import json

import pytest
import torch
from torch import nn

from export import catalog, parity, pipeline
from export.formats import onnx as onnx_format
from export.formats import torchscript
from export.spec import ModelSpec, TensorSpec
from export.variants import Variant, base_model
from export.zoo.base import Tolerance, ZooModel


class Branchy(nn.Module):
    """Data-dependent control flow: tracing bakes in the branch the example took."""

    def forward(self, x):
        if x.sum() > 0:
            return x * 2
        return -x


def zoo_model(module, example) -> ZooModel:
    return ZooModel(
        name="t",
        module=module.eval(),
        inputs=(TensorSpec("x", "FP32", (4,)),),
        outputs=(TensorSpec("y", "FP32", (4,)),),
        example_inputs=(example,),
        random_inputs=lambda b, _s, g: (torch.randn(b, 4, generator=g),),
        reference_inputs=(torch.randn(16, 4),),
        tolerances={"fp32": Tolerance(atol=1e-5, rtol=1e-5), "fp16": Tolerance(atol=1e-2, rtol=1e-2)},
    )


def spec_for(model: ZooModel, variant: Variant, max_batch_size: int = 8) -> ModelSpec:
    return ModelSpec(
        name=variant.model_name(model.name),
        inputs=model.inputs,
        outputs=model.outputs,
        platform=variant.platform,
        precision=variant.precision,
        max_batch_size=max_batch_size,
    )


@pytest.mark.parametrize("variant", [Variant("torchscript"), Variant("torchscript", "fp16"), Variant("onnx")])
def test_faithful_export_passes_at_every_batch_size(tmp_path, variant):
    torch.manual_seed(0)
    model = zoo_model(nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.LayerNorm(8), nn.Linear(8, 4)), torch.randn(2, 4))
    done = pipeline.export_variant(model, spec_for(model, variant), variant, tmp_path / "repo")
    assert done.result.status == "ok", done.result.summary()
    assert [c["batch"] for c in done.manifest["parity"]["cases"]] == [1, 3, 8]
    folder = tmp_path / "repo" / variant.model_name("t")
    manifest = json.loads((folder / "1" / "manifest.json").read_text())
    assert manifest["files"][variant.filename] and manifest["variant"] == str(variant)
    assert (folder / "config.pbtxt").is_file()


def test_fp16_keeps_fp32_io_and_argument_names():
    model = zoo_model(nn.Linear(4, 4), torch.randn(2, 4))
    traced = torchscript.trace(torchscript.at_precision(model, "fp16"), model.example_inputs)
    assert [a.name for a in traced.forward.schema.arguments][1:] == ["x"]
    assert traced(torch.randn(3, 4)).dtype == torch.float32
    assert next(model.module.parameters()).dtype == torch.float32  # the eager reference is untouched


def test_trace_that_bakes_a_branch_is_a_mismatch_and_is_not_published(tmp_path):
    model = zoo_model(Branchy(), torch.ones(2, 4))
    variant = Variant("torchscript")
    done = pipeline.export_variant(model, spec_for(model, variant), variant, tmp_path / "repo")
    assert done.result.status == "mismatch"
    assert "max abs" in done.result.message
    assert not (tmp_path / "repo" / "t").exists()
    assert not list(tmp_path.glob(".export-*")), "the staging folder was left behind"


def test_untraceable_model_fails_with_the_reason_and_leaves_nothing(tmp_path):
    class Bad(nn.Module):
        def forward(self, x):
            return x.numpy()

    model = zoo_model(Bad(), torch.ones(1, 4))
    done = pipeline.export_variant(
        model, spec_for(model, Variant("torchscript")), Variant("torchscript"), tmp_path / "r"
    )
    assert done.result.status == "failed" and "Tracer cannot infer type" in done.result.message
    assert not (tmp_path / "r" / "t").exists()


def test_parity_uses_batch_sizes_up_to_the_maximum():
    assert parity.batch_sizes(64) == [1, 3, 8, 64]
    assert parity.batch_sizes(4) == [1, 3, 4]
    assert parity.batch_sizes(0) == [1]


def test_onnx_axes_are_dynamic_for_batch_and_sequence():
    model = zoo_model(nn.Identity(), torch.ones(1, 4))
    model.inputs = (TensorSpec("ids", "INT64", (-1,)),)
    assert onnx_format.dynamic_axes(model)["ids"] == {0: "batch", 1: "ids_1"}


def test_catalog_export_skips_when_up_to_date_and_redoes_on_change(tmp_path):
    entry = catalog.entry("digits")
    first = pipeline.export_entry(entry, tmp_path, variants=[Variant("torchscript")])
    assert first[0].result.ok and not first[0].up_to_date
    assert pipeline.export_entry(entry, tmp_path, variants=[Variant("torchscript")])[0].up_to_date
    changed = pipeline.export_entry(entry, tmp_path, variants=[Variant("torchscript")], max_batch_size=128)
    assert not changed[0].up_to_date


def test_gpu_target_without_cuda_is_skipped_with_one_clear_reason(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA; the GPU path is exercised by tritonkit/gpu instead")
    entry = catalog.entry("digits")
    done = pipeline.export_entry(entry, tmp_path, target="gpu", variants=[Variant("torch-tensorrt", "fp16")])
    assert done[0].result.status == "skipped" and "CUDA" in done[0].result.message
    assert not (tmp_path / "digits_trt_fp16").exists()


@pytest.mark.parametrize(
    ("served", "base"),
    [
        ("minilm", "minilm"),
        ("minilm_onnx", "minilm"),
        ("digits_fp16", "digits"),
        ("efficientnet_lite0_trt_fp16", "efficientnet_lite0"),
        ("smollm2_tiny_decode", "smollm2_tiny_decode"),
        ("onnx", "onnx"),
    ],
)
def test_a_served_variant_names_the_model_it_was_exported_from(served, base):
    assert base_model(served) == base
