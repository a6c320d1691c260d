"""ModelSpec validation: bad values are refused early, and the error names them."""

import pytest

from export.errors import SpecError
from export.spec import DynamicBatching, InstanceGroup, ModelSpec, TensorSpec

PIXELS = TensorSpec("PIXELS", "FP32", (64,))
PROBS = TensorSpec("PROBABILITIES", "FP32", (10,))


def test_parse_tensor_spec():
    assert TensorSpec.parse("input_ids:int64:-1") == TensorSpec("input_ids", "INT64", (-1,))
    assert TensorSpec.parse("image:FP32:3,224,224").dims == (3, 224, 224)


@pytest.mark.parametrize("text, named", [
    ("PIXELS:FP32", "NAME:DTYPE:DIMS"),
    ("PIXELS:FP33:64", "'FP33'"),
    ("PIXELS:FP32:6x4", "'6x4'"),
    ("PIXELS:FP32:0", "[0]"),
    ("9lives:FP32:4", "'9lives'"),
])
def test_bad_tensor_spec_is_named(text, named):
    with pytest.raises(SpecError, match=named.replace("[", r"\[").replace("]", r"\]")):
        TensorSpec.parse(text)


def spec(**kwargs):
    return ModelSpec(name="m", inputs=(PIXELS,), outputs=(PROBS,), **kwargs)


@pytest.mark.parametrize("kwargs, named", [
    ({"max_batch_size": -1}, "max_batch_size=-1"),
    ({"dynamic_batching": DynamicBatching()}, "needs max_batch_size > 0"),
    ({"max_batch_size": 8, "dynamic_batching": DynamicBatching(preferred_batch_sizes=(4, 16))}, r"\[16\]"),
    ({"platform": "tensorflow"}, "'tensorflow'"),
    ({"version": 0}, "version 0"),
])
def test_bad_model_spec_is_named(kwargs, named):
    with pytest.raises(SpecError, match=named):
        spec(**kwargs)


def test_bad_instance_group_and_batching_are_named():
    with pytest.raises(SpecError, match="count 0"):
        InstanceGroup(count=0)
    with pytest.raises(SpecError, match="'KIND_TPU'"):
        InstanceGroup(kind="KIND_TPU")
    with pytest.raises(SpecError, match="max_queue_delay_us=-5"):
        DynamicBatching(max_queue_delay_us=-5)


def test_repeated_tensor_names_are_refused():
    with pytest.raises(SpecError, match="repeat"):
        ModelSpec(name="m", inputs=(PIXELS,), outputs=(TensorSpec("PIXELS", "FP32", (10,)),))
