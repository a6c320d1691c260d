"""The format registry (export/formats/registry.py): each format module registers its facts once, and the
variants, the configs, the platform check, the export pipeline and bench-export read them from there."""

import argparse
import dataclasses
import json
import re
from pathlib import Path

import pytest
import torch
from google.protobuf import text_format
from torch import nn
from tritonclient.grpc import model_config_pb2 as mc

from export import catalog, formats, pipeline, spec
from export import config as config_io
from export.errors import ExportError, SpecError
from export.formats import registry, torchscript
from export.spec import ModelSpec, TensorSpec
from export.variants import TARGETS, Variant, base_model
from export.zoo.base import Tolerance, ZooModel


def tiny_model(name: str = "t") -> ZooModel:
    torch.manual_seed(0)
    return ZooModel(
        name=name,
        module=nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 4)).eval(),
        inputs=(TensorSpec("x", "FP32", (4,)),),
        outputs=(TensorSpec("y", "FP32", (4,)),),
        example_inputs=(torch.randn(2, 4),),
        random_inputs=lambda b, _s, g: (torch.randn(b, 4, generator=g),),
        reference_inputs=(torch.randn(16, 4),),
        tolerances={"fp32": Tolerance(atol=1e-5, rtol=1e-5)},
    )


def every_variant():
    return [(f, t, p) for f in formats.entries() for t in f.targets for p in f.precisions[t]]


# --- the registered formats ---------------------------------------------------------------------------------


def test_the_three_formats_register_themselves_from_their_own_modules():
    assert formats.names() == ("torchscript", "torch-tensorrt", "onnx")  # the default first, as --help lists them
    for fmt in formats.entries():
        module = fmt.converter()
        assert module.FORMAT is fmt and Path(module.__file__).parent == Path(registry.__file__).parent
        assert callable(module.convert) and callable(module.load)


@pytest.mark.parametrize("fmt", formats.entries(), ids=lambda f: f.name)
def test_every_format_states_every_fact(fmt):
    assert fmt.filename and fmt.platform and fmt.backend and fmt.runtime and fmt.targets
    assert set(fmt.offered) <= set(registry.PRECISIONS) and fmt.required_on <= set(fmt.targets)
    assert fmt.platform in spec.platforms() and formats.of_platform(fmt.platform).filename == fmt.filename
    assert fmt.needs_gpu == ("cpu" not in fmt.targets)
    assert set(fmt.accelerated_precisions) <= set(fmt.offered)


def test_what_the_formats_say_today():
    """The facts that used to be spread over variants, config, spec and catalog, as the registry holds them."""
    ts, trt, onnx = (formats.get(n) for n in ("torchscript", "torch-tensorrt", "onnx"))
    assert (ts.filename, ts.platform, ts.backend, ts.suffix) == ("model.pt", "pytorch_libtorch", "pytorch", "")
    assert (onnx.filename, onnx.platform, onnx.backend) == ("model.onnx", "onnxruntime_onnx", "onnxruntime")
    assert trt.needs_gpu and not ts.needs_gpu and not onnx.needs_gpu
    assert onnx.precisions["cpu"] == ("fp32",) and onnx.accelerator == "tensorrt"
    assert [f.name for f in formats.entries() if "cpu" in f.required_on] == ["torchscript", "onnx"]
    assert [f.name for f in formats.entries() if "gpu" in f.required_on] == ["torchscript"]


@pytest.mark.parametrize(("fmt", "target", "precision"), every_variant(), ids=lambda v: getattr(v, "name", v))
def test_the_config_of_each_variant_comes_from_its_format(fmt, target, precision):
    variant = Variant(fmt.name, precision)
    variant.check_target(target)
    served = catalog.entry("digits").spec(tiny_model("digits"), variant, target)
    assert served.name == "_".join(p for p in ("digits", fmt.suffix, "" if precision == "fp32" else precision) if p)
    config = text_format.Parse(config_io.render(served), mc.ModelConfig())
    assert config.platform == fmt.platform
    accelerators = [a.name for a in config.optimization.execution_accelerators.gpu_execution_accelerator]
    assert accelerators == ([fmt.accelerator] if precision in fmt.accelerated_precisions else [])
    # What Triton fills in for the platform (the format's backend, runtime and file) reads back as unset.
    served_config = mc.ModelConfig()
    served_config.CopyFrom(config)
    served_config.backend = fmt.backend
    served_config.runtime = f"libtriton_{fmt.backend}.so"
    served_config.default_model_filename = fmt.filename
    assert config_io.without_server_defaults(served_config) == config


def test_a_precision_or_target_a_format_does_not_offer_is_refused_with_its_reason():
    with pytest.raises(SpecError, match=r"^torch-tensorrt/bf16 is not offered: use fp16 or fp32$"):
        Variant("torch-tensorrt", "bf16")
    with pytest.raises(SpecError, match=r"^torch-tensorrt builds TensorRT engines for a GPU: use --target gpu$"):
        Variant("torch-tensorrt", "fp16").check_target("cpu")
    with pytest.raises(SpecError, match=r"^onnx/fp16 runs through the TensorRT accelerator on a GPU: use --target gpu"):
        Variant("onnx", "fp16").check_target("cpu")


# --- an unknown name ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("lookup", [formats.get, Variant, lambda name: Variant.parse(f"{name}/fp16")])
def test_an_unknown_format_is_one_line_naming_it_and_the_known_ones(lookup):
    with pytest.raises(ExportError) as caught:
        lookup("tflite")
    assert str(caught.value) == "format 'tflite' is not one of torchscript, torch-tensorrt, onnx"


# --- adding a format ----------------------------------------------------------------------------------------

UNFROZEN = registry.Format(
    name="torchscript-unfrozen",
    filename="model.pt",
    platform="pytorch_libtorch",
    backend="pytorch",
    runtime="TorchScript (torch.jit.load), traced without freezing",
    precisions={"cpu": ("fp32",)},
    module=__name__,
    suffix="unfrozen",
    target_reason="is only tried on the CPU here",
)
"""A throwaway format, registered as a module of export/formats/ would register it; this module is its converter."""


def convert(zoo, variant, target, device="cpu", max_batch_size=0):
    torchscript.trace(zoo.module, zoo.example_inputs, freeze=False).save(str(target))


def load(path, device="cpu", variant=None):
    return torchscript.load(path, device, variant)


@pytest.fixture
def scratch_registry(monkeypatch):
    """The registry as it is, in a copy that this test may add to; the next test sees the real one."""
    formats.names()  # the modules of export/formats/ have registered
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))


def test_a_registered_format_is_derived_everywhere_and_exports(scratch_registry, tmp_path):
    formats.register(UNFROZEN)
    assert formats.names()[-1] == "torchscript-unfrozen"
    variant = Variant.parse("torchscript-unfrozen")
    assert variant.model_name("digits") == "digits_unfrozen" and base_model("digits_unfrozen") == "digits"
    assert (variant.platform, variant.filename) == ("pytorch_libtorch", "model.pt")
    with pytest.raises(SpecError, match="torchscript-unfrozen is only tried on the CPU here: use --target cpu"):
        variant.check_target("gpu")
    model = tiny_model()
    served = ModelSpec(name=variant.model_name("t"), inputs=model.inputs, outputs=model.outputs, max_batch_size=8)
    done = pipeline.export_variant(model, served, variant, tmp_path)
    assert done.result.status == "ok", done.result.summary()
    manifest = json.loads((tmp_path / "t_unfrozen" / "1" / "manifest.json").read_text())
    assert manifest["variant"] == "torchscript-unfrozen/fp32" and set(manifest["files"]) == {"model.pt"}


def test_the_scratch_registry_leaves_the_real_one_as_it_was(monkeypatch):
    with monkeypatch.context() as patch:
        patch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
        formats.register(UNFROZEN)
    assert "torchscript-unfrozen" not in formats.names()
    with pytest.raises(SpecError):
        Variant("torchscript-unfrozen")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"name": "onnx"}, "format 'onnx' is registered twice: by export.formats.onnx and by tests.unit"),
        ({"filename": "model.plan"}, "platform 'pytorch_libtorch' is served from model.pt by backend 'pytorch'"),
        ({"precisions": {"cpu": ("int8",)}}, "precisions ['int8'] are not among ('fp32', 'fp16', 'bf16')"),
        ({"precisions": {"tpu": ("fp32",)}}, "precisions {'tpu': ('fp32',)} must map targets ('cpu', 'gpu')"),
        ({"target_reason": "", "precisions": {"cpu": ("fp32",), "gpu": ("fp16",)}}, "target_reason is empty"),
        ({"platform": "python"}, "platform 'python' is not a platform an export writes"),
        ({"accelerated_precisions": ("fp16",)}, "accelerated_precisions ['fp16'] need an accelerator"),
    ],
)
def test_a_format_that_contradicts_itself_or_another_is_refused_naming_the_value(scratch_registry, change, message):
    with pytest.raises(SpecError, match=re.escape(message)):
        formats.register(dataclasses.replace(UNFROZEN, **change))
    assert "torchscript-unfrozen" not in formats.names()


def test_bench_export_times_the_runner_the_parity_check_uses(monkeypatch, tmp_path):
    """One runner per format: the export's parity check and ``tritonkit bench-export`` both call ``load``."""
    from export import bench

    loaded = []
    real = torchscript.load
    monkeypatch.setattr(torchscript, "load", lambda *a, **k: loaded.append(a[0].name) or real(*a, **k))
    model = tiny_model()
    variant = Variant("torchscript")
    served = ModelSpec(name="t", inputs=model.inputs, outputs=model.outputs, max_batch_size=8)
    assert pipeline.export_variant(model, served, variant, tmp_path / "repo").result.ok
    monkeypatch.setattr(bench, "VARIANTS", (variant,))
    entry = catalog.CatalogEntry("t", "t", {t: () for t in TARGETS}, {})
    monkeypatch.setattr(bench.catalog, "entry", lambda _name: entry)
    monkeypatch.setattr("export.zoo.build", lambda _builder: model)
    monkeypatch.setattr(bench, "median_ms", lambda run, inputs: 1.0)
    rows = bench.bench_model("t", tmp_path / "bench", batches=(1,))
    assert [r["variant"] for r in rows] == ["eager fp32", "torchscript/fp32"]
    assert loaded == ["model.pt", "model.pt"]


def test_the_export_command_offers_a_registered_format(scratch_registry):
    from export import cli

    formats.register(UNFROZEN)
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    assert parser.parse_args(["digits", "--format", "torchscript-unfrozen"]).formats == ["torchscript-unfrozen"]
