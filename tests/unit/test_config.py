"""export/config.py: ModelSpec -> real ModelConfig protobuf -> config.pbtxt, and back to the same ModelSpec."""

import json
import warnings
from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from export import catalog, zoo
from export.changes import ServingChanges
from export.config import (
    HEADER,
    as_served,
    from_json,
    from_model_config,
    parse,
    read,
    render,
    to_json,
    to_model_config,
    without_server_defaults,
    write,
)
from export.errors import ConfigError
from export.spec import DynamicBatching, InstanceGroup, ModelSpec, QueuePolicy, QueuePolicyWarning, TensorSpec
from export.variants import TARGETS

REPOSITORY = Path(__file__).resolve().parents[2] / "model_repository"
SERVED = Path(__file__).resolve().parents[1] / "data" / "configs" / "served_tritonserver_2.51.json"
"""What tritonserver 2.51 (nvidia-pytriton 0.7.0) answered to get_model_config for nine of the committed
models, captured from the local server; tests/functional/test_served_configs.py reads a live one."""
KEPT_ON_JSON = {
    "image_classifier": "ensemble",
    "text_embedder": "ensemble",
}
"""Committed configs that are not a ModelSpec. An ensemble's ensemble_scheduling is a graph of steps between
models, not the settings of one served model: the tuner and the campaigns change the models it calls, and
whoever edits an ensemble does so on its JSON. ``from_model_config`` refuses them, naming that field."""


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


def catalog_specs():
    """Every spec `tritonkit export` can generate from models.toml: each variant of each target."""
    specs = []
    for entry in catalog.load().values():
        model = zoo.build(entry.builder)
        specs += [entry.spec(model, variant, target) for target in TARGETS for variant in entry.variants[target]]
    return specs


def committed_configs() -> dict[str, Path]:
    return {path.parent.name: path for path in sorted(REPOSITORY.glob("*/config.pbtxt"))}


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
    assert config.version_policy.latest.num_versions == 1


def test_warmup_covers_batch_one_and_max_and_skips_optional_inputs():
    warmups = to_model_config(make_spec()).model_warmup
    assert [w.batch_size for w in warmups] == [1, 32]
    for warmup in warmups:
        assert set(warmup.inputs) == {"input_ids"}  # optional attention_mask left out
        assert warmup.inputs["input_ids"].zero_data and list(warmup.inputs["input_ids"].dims) == [8]
    assert not to_model_config(make_spec(warmup=False)).model_warmup


def test_a_python_model_names_its_backend_and_bytes_map_to_type_string():
    spec = ModelSpec(
        name="t",
        platform="python",
        inputs=(TensorSpec("TEXT", "BYTES", (1,)),),
        outputs=(TensorSpec("EMBEDDING", "FP32", (384,)),),
        decoupled=True,
        latest_versions=None,
    )
    config = to_model_config(spec)
    assert config.backend == "python" and not config.platform
    assert config.input[0].data_type == mc.TYPE_STRING
    assert config.model_transaction_policy.decoupled and not config.HasField("version_policy")


def test_committed_configs_match_the_catalog():
    """model_repository/<variant>/config.pbtxt is what `tritonkit export` generates from models.toml."""
    for entry in catalog.load().values():
        model = zoo.build(entry.builder)
        for variant in entry.variants["cpu"]:
            spec = entry.spec(model, variant, "cpu")
            committed = (REPOSITORY / spec.name / "config.pbtxt").read_text()
            assert committed == render(spec), f"{spec.name}: run `make export` and commit config.pbtxt"


def test_every_generated_config_parses_back_to_its_spec():
    """config -> spec -> config is the identity on whatever the generator writes (cpu and gpu), and spec ->
    config -> spec too, given what the protobuf does not carry (labels, description, version, precision)."""
    specs = catalog_specs()
    assert len(specs) > 20
    for spec in specs:
        config = to_model_config(spec)
        assert to_model_config(from_model_config(config)) == config, spec.name
        out_of_band = {
            "labels": spec.labels,
            "description": spec.description,
            "version": spec.version,
            "precision": spec.precision,
        }
        assert from_model_config(config, **out_of_band) == spec, spec.name
        alone = from_model_config(config)
        assert alone == spec.replace(
            labels=(), description="", precision=spec.precision if spec.tensorrt_accelerator else "fp32"
        ), spec.name
        assert alone.labels_file == ("labels.txt" if spec.labels else "")


def test_every_committed_config_parses_and_regenerates_to_the_same_protobuf():
    """Generated and hand-written Python-model configs alike; only KEPT_ON_JSON are refused, by name."""
    configs = committed_configs()
    assert {"digits", "postprocess", "text_generator", "image_classifier"} <= set(configs)
    generated = 0
    for name, path in configs.items():
        config = parse(path)
        if name in KEPT_ON_JSON:
            with pytest.raises(ConfigError, match="ensemble_scheduling") as info:
                from_model_config(config)
            assert info.value.field == "ensemble_scheduling"
            continue
        spec = from_model_config(config)
        assert to_model_config(spec) == config, name
        generated += path.read_text().startswith(HEADER)
    assert generated == sum(len(e.variants["cpu"]) for e in catalog.load().values())


def test_hand_written_python_models_are_specs():
    text_generator = from_model_config(parse(REPOSITORY / "text_generator" / "config.pbtxt"))
    assert text_generator.platform == "python" and text_generator.decoupled
    assert text_generator.latest_versions is None and not text_generator.warmup
    assert all(t.optional for t in text_generator.inputs)  # the convention or the model's own names
    assert dict(text_generator.parameters)["STEP_MODE"] == "inprocess"
    postprocess = from_model_config(parse(REPOSITORY / "postprocess" / "config.pbtxt"))
    assert postprocess.dynamic_batching == DynamicBatching(max_queue_delay_us=500)
    assert postprocess.outputs[0] == TensorSpec("LABELS", "BYTES", (-1,))


def test_read_recovers_an_exported_folder(tmp_path):
    """A real export (digits, TorchScript FP16) read back: labels from labels.txt, precision, description and
    version from the version folder's manifest.json."""
    from export.pipeline import export_entry
    from export.variants import Variant

    entry = catalog.entry("digits")
    [done] = export_entry(entry, tmp_path, variants=[Variant("torchscript", "fp16")], version=2)
    assert done.result.ok, done.result.summary()
    spec = read(tmp_path / "digits_fp16")
    assert spec == done.spec
    assert spec.precision == "fp16" and spec.version == 2 and len(spec.labels) == 10 and spec.description


BASE = (
    'name: "m" platform: "pytorch_libtorch" max_batch_size: 4 '
    'input { name: "x" data_type: TYPE_FP32 dims: 4 } output { name: "y" data_type: TYPE_FP32 dims: 2 } '
)
UNREPRESENTABLE = [
    ('input { name: "x" data_type: TYPE_FP32 dims: 4 reshape { shape: 2 shape: 2 } }', "input[0].reshape"),
    ('output { name: "z" data_type: TYPE_FP32 dims: 1 label_filename: "more.txt" }', "output[1].label_filename"),
    ("instance_group { count: 1 kind: KIND_GPU gpus: 1 }", "instance_group[0].gpus"),
    ("sequence_batching { }", "sequence_batching"),
    ("dynamic_batching { priority_levels: 2 }", "dynamic_batching.priority_levels"),
    ("dynamic_batching { default_queue_policy { timeout_action: DELAY } }", "dynamic_batching.default_queue_policy"),
    ("version_policy { all { } }", "version_policy"),
    ("response_cache { enable: true }", "response_cache"),
    ("optimization { graph { level: 1 } }", "optimization"),
]


@pytest.mark.parametrize("extra, field", UNREPRESENTABLE, ids=[f for _, f in UNREPRESENTABLE])
def test_a_field_a_spec_cannot_hold_is_refused_by_name(extra, field):
    base = BASE.replace('input { name: "x" data_type: TYPE_FP32 dims: 4 } ', "") if extra.startswith("input") else BASE
    with pytest.raises(ConfigError, match=field.replace("[", r"\[").replace("]", r"\]")) as info:
        from_model_config(text_format.Parse(base + extra, mc.ModelConfig()))
    assert info.value.field == field


def test_a_value_a_spec_refuses_is_named():
    with pytest.raises(ConfigError, match="'tensorflow_savedmodel'"):
        from_model_config(
            text_format.Parse(BASE.replace("pytorch_libtorch", "tensorflow_savedmodel"), mc.ModelConfig())
        )
    with pytest.raises(ConfigError, match="count 0"):
        from_model_config(text_format.Parse(BASE + "instance_group { kind: KIND_CPU }", mc.ModelConfig()))


def test_preferred_batch_sizes_in_any_order_parse():
    config = text_format.Parse(
        'name: "m" platform: "pytorch_libtorch" max_batch_size: 8 '
        'input { name: "x" data_type: TYPE_FP32 dims: 4 } '
        'output { name: "y" data_type: TYPE_FP32 dims: 2 } '
        "dynamic_batching { preferred_batch_size: 8 preferred_batch_size: 2 }",
        mc.ModelConfig(),
    )
    assert from_model_config(config).dynamic_batching.preferred_batch_sizes == (2, 8)


def test_parse_names_the_file_of_a_broken_config(tmp_path):
    (tmp_path / "config.pbtxt").write_text('name: "m"\nmax_batch_size: "eight"\n')
    with pytest.raises(ConfigError, match="config.pbtxt"):
        parse(tmp_path / "config.pbtxt")


def served() -> dict:
    return json.loads(SERVED.read_text())


def test_the_servers_json_parses_to_the_committed_spec():
    """What Triton serves is the committed config plus the values it fills in: a version policy where the
    config has none, and preferred_batch_size = max_batch_size for a batcher without one."""
    for name, data in served().items():
        if name in KEPT_ON_JSON:
            with pytest.raises(ConfigError, match="ensemble_scheduling"):
                from_json(data)
            continue
        from_file = from_model_config(parse(REPOSITORY / name / "config.pbtxt"))
        spec = from_json(data)
        assert spec == as_served(from_file), name
        assert from_json(json.dumps(data)) == spec
    python_model = from_json(served()["postprocess"])
    assert python_model.latest_versions == 1 and python_model.dynamic_batching.preferred_batch_sizes == (16,)


def test_the_load_apis_json_round_trips():
    for spec in catalog_specs():
        assert from_json(to_json(spec)) == from_model_config(to_model_config(spec)), spec.name
    data = served()["efficientnet_lite0"]
    assert to_json(from_json(data))["dynamic_batching"]["default_queue_policy"] == {
        "max_queue_size": 128,
        "default_timeout_microseconds": "200000",
    }


def test_server_defaults_are_removed_but_a_real_setting_stays():
    data = served()["digits"]
    stripped = without_server_defaults(from_json_config(data))
    assert not stripped.backend and not stripped.runtime and not stripped.default_model_filename
    assert not stripped.instance_group[0].name and not stripped.HasField("optimization")
    pinned = json.loads(json.dumps(data))
    pinned["instance_group"][0].update(kind="KIND_GPU", gpus=[1])
    with pytest.raises(ConfigError, match=r"instance_group\[0\]\.gpus"):
        from_json(pinned)
    every_gpu = json.loads(json.dumps(data))
    every_gpu["instance_group"][0].update(kind="KIND_GPU", gpus=[0, 1])
    assert from_json(every_gpu).instance_groups == (InstanceGroup(2, "KIND_GPU"),)
    with pytest.raises(ConfigError, match="no_such_field"):
        from_json({**data, "no_such_field": 1})


def from_json_config(data: dict) -> mc.ModelConfig:
    from google.protobuf import json_format

    return json_format.ParseDict(data, mc.ModelConfig())


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
    policy = QueuePolicy(max_queue_size=64, default_timeout_us=5000)
    spec = make_spec().replace(dynamic_batching=DynamicBatching(max_queue_delay_us=0, queue_policy=policy))
    written = to_model_config(spec).dynamic_batching.default_queue_policy
    assert written.max_queue_size == 64 and written.default_timeout_microseconds == 5000
    assert written.timeout_action == mc.ModelQueuePolicy.REJECT
    assert not to_model_config(make_spec()).dynamic_batching.HasField("default_queue_policy")
    assert from_model_config(to_model_config(spec)).dynamic_batching.queue_policy == policy


def test_a_queue_policy_with_a_batching_delay_warns():
    with pytest.warns(QueuePolicyWarning, match="max_queue_delay_us=100"):
        DynamicBatching(max_queue_delay_us=100, queue_policy=QueuePolicy(default_timeout_us=5000))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        DynamicBatching(max_queue_delay_us=100)  # no policy: the delay is fine
        DynamicBatching(max_queue_delay_us=0, queue_policy=QueuePolicy(max_queue_size=8))


def test_an_image_input_layout_lands_in_the_config(tmp_path):
    spec = ModelSpec(
        name="cnn",
        inputs=(TensorSpec("image", "FP32", (3, 224, 224), format="FORMAT_NCHW"),),
        outputs=(TensorSpec("logits", "FP32", (1000,)),),
        max_batch_size=8,
    )
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


HAND_WARMUP = (
    'model_warmup { name: "real_1" batch_size: 1 inputs { key: "x" value { data_type: TYPE_FP32 dims: 4 '
    'input_data_file: "x.bin" } } } '
    'model_warmup { name: "real_4" batch_size: 4 inputs { key: "x" value { data_type: TYPE_FP32 dims: 4 '
    'input_data_file: "x4.bin" } } }'
)


def test_hand_written_warmup_samples_are_kept_verbatim():
    config = text_format.Parse(BASE + HAND_WARMUP, mc.ModelConfig())
    spec = from_model_config(config)
    assert spec.warmup and len(spec.warmup_samples) == 2
    assert to_model_config(spec) == config
    generated = to_model_config(spec.replace(warmup_samples=()))
    assert from_model_config(generated).warmup_samples == ()  # the generator's own samples are not "hand-written"


def test_serving_changes_keep_the_hand_written_samples_that_still_fit():
    spec = from_model_config(text_format.Parse(BASE + HAND_WARMUP, mc.ModelConfig()))
    smaller = ServingChanges(max_batch_size=2).apply(spec)
    assert [w.name for w in to_model_config(smaller).model_warmup] == ["real_1"]
    off = ServingChanges(warmup=False).apply(spec)
    assert not off.warmup and off.warmup_samples == () and not to_model_config(off).model_warmup
