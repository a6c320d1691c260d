"""config.pbtxt generation: real ModelConfig protobuf, round-trips, and matches the committed files."""

import warnings
from pathlib import Path

import pytest

from export import catalog, zoo
from export.config import parse, render, to_model_config, write
from export.spec import DynamicBatching, InstanceGroup, ModelSpec, QueuePolicyWarning, TensorSpec
from tritonclient.grpc import model_config_pb2 as mc

REPOSITORY = Path(__file__).resolve().parents[2] / "model_repository"


def make_spec(**kwargs) -> ModelSpec:
    return ModelSpec(
        name="encoder",
        inputs=(TensorSpec("input_ids", "INT64", (-1,)), TensorSpec("attention_mask", "INT64", (-1,), optional=True)),
        outputs=(TensorSpec("embedding", "FP32", (384,)),),
        max_batch_size=32,
        dynamic_batching=DynamicBatching(max_queue_delay_us=500, preferred_batch_sizes=(8, 16)),
        instance_groups=(InstanceGroup(count=3, kind="KIND_CPU"),),
        parameters=(("INFERENCE_MODE", "true"),),
        **kwargs,
    )


def test_round_trip_through_text_format(tmp_path):
    spec = make_spec()
    path = write(spec, tmp_path)
    assert parse(path) == to_model_config(spec)


def test_fields_land_where_triton_reads_them():
    config = to_model_config(make_spec())
    assert config.platform == "pytorch_libtorch" and config.max_batch_size == 32
    assert [i.name for i in config.input] == ["input_ids", "attention_mask"]
    assert config.input[0].data_type == mc.TYPE_INT64 and list(config.input[0].dims) == [-1]
    assert config.input[1].optional
    assert config.dynamic_batching.max_queue_delay_microseconds == 500
    assert list(config.dynamic_batching.preferred_batch_size) == [8, 16]
    assert config.instance_group[0].count == 3 and config.instance_group[0].kind == mc.ModelInstanceGroup.KIND_CPU
    assert config.parameters["INFERENCE_MODE"].string_value == "true"


def test_warmup_covers_batch_one_and_max_and_skips_optional_inputs():
    warmups = to_model_config(make_spec()).model_warmup
    assert [w.batch_size for w in warmups] == [1, 32]
    for warmup in warmups:
        assert set(warmup.inputs) == {"input_ids"}  # optional attention_mask left out
        assert warmup.inputs["input_ids"].zero_data and list(warmup.inputs["input_ids"].dims) == [8]
    assert not to_model_config(make_spec(warmup=False)).model_warmup


def test_bytes_maps_to_type_string():
    spec = ModelSpec(name="t", platform="python", inputs=(TensorSpec("TEXT", "BYTES", (1,)),),
                     outputs=(TensorSpec("EMBEDDING", "FP32", (384,)),))
    assert to_model_config(spec).input[0].data_type == mc.TYPE_STRING


def test_committed_configs_match_the_catalog():
    """model_repository/<variant>/config.pbtxt is what `tritonkit export` generates from models.toml."""
    for entry in catalog.load().values():
        model = zoo.build(entry.builder)
        for variant in entry.variants["cpu"]:
            spec = entry.spec(model, variant, "cpu")
            committed = (REPOSITORY / spec.name / "config.pbtxt").read_text()
            assert committed == render(spec), f"{spec.name}: run `make export` and commit config.pbtxt"


def test_gpu_variants_get_gpu_instances_and_the_tensorrt_accelerator():
    entry = catalog.entry("digits")
    model = zoo.build("digits")
    configs = {str(v): to_model_config(entry.spec(model, v, "gpu")) for v in entry.variants["gpu"]}
    assert configs["torch-tensorrt/fp16"].name == "digits_trt_fp16"
    assert configs["torch-tensorrt/fp16"].platform == "pytorch_libtorch"
    for config in configs.values():
        assert all(g.kind == mc.ModelInstanceGroup.KIND_GPU for g in config.instance_group)
    onnx = configs["onnx/fp16"]
    assert onnx.platform == "onnxruntime_onnx"
    accelerator = onnx.optimization.execution_accelerators.gpu_execution_accelerator[0]
    assert accelerator.name == "tensorrt" and accelerator.parameters["precision_mode"] == "FP16"
    assert not configs["torchscript/fp32"].optimization.execution_accelerators.gpu_execution_accelerator


def test_queue_policy_is_written_when_set():
    spec = make_spec().replace(dynamic_batching=DynamicBatching(max_queue_delay_us=0, max_queue_size=64,
                                                                default_timeout_us=5000))
    policy = to_model_config(spec).dynamic_batching.default_queue_policy
    assert policy.max_queue_size == 64 and policy.default_timeout_microseconds == 5000
    assert policy.timeout_action == mc.ModelQueuePolicy.REJECT
    assert not to_model_config(make_spec()).dynamic_batching.HasField("default_queue_policy")


def test_a_queue_policy_with_a_batching_delay_warns():
    with pytest.warns(QueuePolicyWarning, match="max_queue_delay_us=100"):
        DynamicBatching(max_queue_delay_us=100, default_timeout_us=5000)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        DynamicBatching(max_queue_delay_us=100)  # no policy: the delay is fine
        DynamicBatching(max_queue_delay_us=0, max_queue_size=8)


def test_an_image_input_layout_lands_in_the_config(tmp_path):
    spec = ModelSpec(name="cnn", inputs=(TensorSpec("image", "FP32", (3, 224, 224), format="FORMAT_NCHW"),),
                     outputs=(TensorSpec("logits", "FP32", (1000,)),), max_batch_size=8)
    config = to_model_config(spec)
    assert config.input[0].format == mc.ModelInput.FORMAT_NCHW
    assert "format: FORMAT_NCHW" in render(spec)
    assert parse(write(spec, tmp_path)) == config
    assert "format" not in render(make_spec())  # FORMAT_NONE is protobuf's default: not written


def test_the_image_models_declare_nchw_in_every_variant():
    for name in ("efficientnet_lite0", "resnet50"):
        entry = catalog.entry(name)
        model = zoo.build(entry.builder)
        for target in ("cpu", "gpu"):
            for variant in entry.variants[target]:
                config = to_model_config(entry.spec(model, variant, target))
                assert [i.format for i in config.input] == [mc.ModelInput.FORMAT_NCHW], (config.name, target)
