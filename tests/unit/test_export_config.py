"""export/model_kind.py, what kind of model a config serves: one answer to "is it an ensemble / a Python model /
decoupled" (``kind``, ``is_decoupled``, ``ensemble_steps``), read from the parsed config in every form the project
meets it, and the commands that decide from it which models a local server loads. (The ModelSpec <-> config
mapping: test_config.py.)"""

from __future__ import annotations

import json

import pytest
from google.protobuf import json_format

from export import config as config_io
from export import model_kind
from export.errors import ConfigError
from export.model_kind import ModelKind
from export.spec import ModelSpec, TensorSpec
from loadtest.studies.compare.spec import ArmSpec, needs_pipeline, plan
from loadtest.tune import command as tune_command
from loadtest.tune import tuner

PYTHON_NAMED_ENSEMBLE = """
# The Python step in front of the ensemble: it decodes what the ensemble is given.
name: "ensemble_decoder"
backend: "python"
max_batch_size: 8
input { name: "IMAGE" data_type: TYPE_UINT8 dims: -1 }
output { name: "PIXELS" data_type: TYPE_FP32 dims: 64 }
parameters { key: "description" value { string_value: "feeds the image ensemble" } }
"""
TENSOR_NAMED_ENSEMBLE = """
name: "ensemble_of_trees"
platform: "onnxruntime_onnx"
max_batch_size: 8
input { name: "X" data_type: TYPE_FP32 dims: 4 }
output { name: "Y" data_type: TYPE_FP32 dims: 1 }
"""
ENSEMBLE = """
name: "pipeline"
platform: "ensemble"
max_batch_size: 8
input { name: "IMAGE" data_type: TYPE_UINT8 dims: -1 }
output { name: "LABEL" data_type: TYPE_STRING dims: 1 }
ensemble_scheduling {
  step { model_name: "ensemble_decoder" model_version: -1 }
  step { model_name: "digits" model_version: -1 }
  step { model_name: "ensemble_decoder" model_version: -1 }
}
"""
STREAMING = """
name: "generator"
backend: "python"
max_batch_size: 0
input { name: "PROMPT" data_type: TYPE_STRING dims: 1 }
output { name: "TEXT" data_type: TYPE_STRING dims: 1 }
model_transaction_policy { decoupled: true }
"""


def forms(text: str) -> dict[str, object]:
    """One config as the project meets it: parsed config.pbtxt, the HTTP JSON, the gRPC ``as_json`` form (its
    ``config`` key, int64 as strings), the JSON text."""
    parsed = config_io.parse_text(text)
    http = json_format.MessageToDict(parsed, preserving_proto_field_name=True)
    grpc = {"config": json_format.MessageToDict(parsed, preserving_proto_field_name=True)}
    return {"protobuf": parsed, "http": http, "grpc": grpc, "text": json.dumps(http)}


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        (PYTHON_NAMED_ENSEMBLE, ModelKind.PYTHON),
        (TENSOR_NAMED_ENSEMBLE, ModelKind.TENSOR),
        (ENSEMBLE, ModelKind.ENSEMBLE),
    ],
)
def test_the_kind_comes_from_the_platform_and_backend_never_from_the_name_or_description(text, kind):
    assert "ensemble" in text  # what the old substring test matched
    assert {name: model_kind.kind(config) for name, config in forms(text).items()} == dict.fromkeys(forms(text), kind)


def test_only_a_tensor_model_calls_no_other_model():
    assert [k.calls_others for k in ModelKind] == [False, True, True]


def test_decoupled_is_read_from_the_transaction_policy_in_every_form():
    assert all(model_kind.is_decoupled(config) for config in forms(STREAMING).values())
    assert not any(model_kind.is_decoupled(config) for config in forms(PYTHON_NAMED_ENSEMBLE).values())


def test_an_ensembles_steps_are_its_called_models_in_order_each_once():
    assert model_kind.ensemble_steps(forms(ENSEMBLE)["grpc"]) == ("ensemble_decoder", "digits")
    assert model_kind.ensemble_steps(forms(PYTHON_NAMED_ENSEMBLE)["http"]) == ()


def test_a_model_spec_gets_the_same_answers():
    tensors = {"inputs": (TensorSpec("X", "FP32", (4,)),), "outputs": (TensorSpec("Y", "FP32", (1,)),)}
    python = ModelSpec(name="ensemble_tokens", **tensors, platform="python", decoupled=True)
    assert model_kind.kind(python) is ModelKind.PYTHON and model_kind.is_decoupled(python)
    onnx = ModelSpec(name="ensemble_tokens", **tensors, platform="onnxruntime_onnx")
    assert model_kind.kind(onnx) is ModelKind.TENSOR and not model_kind.is_decoupled(onnx)


def test_fields_a_newer_server_adds_are_ignored_and_what_is_no_config_is_refused():
    served = {**forms(STREAMING)["http"], "a_field_of_a_later_triton": {"x": 1}}
    assert model_kind.kind(served) is ModelKind.PYTHON
    with pytest.raises(ConfigError, match="does not parse as a ModelConfig"):
        model_kind.kind({"max_batch_size": "many"})
    with pytest.raises(ConfigError, match="not a model config: int"):
        model_kind.kind(3)


def _repository(tmp_path, **configs):
    for name, text in configs.items():
        (tmp_path / name / "1").mkdir(parents=True)
        (tmp_path / name / "config.pbtxt").write_text(text)
    return tmp_path


def test_a_model_named_like_an_ensemble_is_loaded_alone_and_a_pipeline_with_the_whole_repository(tmp_path):
    repository = _repository(
        tmp_path, ensemble_of_trees=TENSOR_NAMED_ENSEMBLE, ensemble_decoder=PYTHON_NAMED_ENSEMBLE, pipeline=ENSEMBLE
    )
    assert tune_command.models_to_load(repository, "ensemble_of_trees") == ("ensemble_of_trees",)
    assert tune_command.models_to_load(repository, "ensemble_decoder") == ("*",)
    assert tune_command.models_to_load(repository, "pipeline") == ("*",)
    assert not needs_pipeline(repository, plan("ensemble_of_trees", {"A": ArmSpec()}, repository, remote=False))
    assert needs_pipeline(repository, plan("ensemble_decoder", {"A": ArmSpec()}, repository, remote=False))


def test_the_ensemble_floor_counts_ensembles_only(tmp_path):
    calls_trees = ENSEMBLE.replace('"digits"', '"ensemble_of_trees"')
    repository = _repository(tmp_path, ensemble_of_trees=TENSOR_NAMED_ENSEMBLE, pipeline=calls_trees)
    (repository / "broken").mkdir()
    (repository / "broken" / "config.pbtxt").write_text('platform: "ensemble" max_batch_size: [')
    assert tuner.ensemble_floor(repository, {"ensemble_of_trees"}) == (8, ["pipeline"])
    decoder_only = _repository(tmp_path / "other", ensemble_decoder=PYTHON_NAMED_ENSEMBLE)
    assert tuner.ensemble_floor(decoder_only, {"ensemble_decoder"}) == (0, [])
