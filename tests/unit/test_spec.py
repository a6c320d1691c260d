"""ModelSpec validation: bad values are refused early, and the error names them."""

import pytest

from export.errors import SpecError
from export.spec import DynamicBatching, InstanceGroup, ModelSpec, QueuePolicy, TensorSpec

PIXELS = TensorSpec("PIXELS", "FP32", (64,))
PROBS = TensorSpec("PROBABILITIES", "FP32", (10,))


def test_parse_tensor_spec():
    assert TensorSpec.parse("input_ids:int64:-1") == TensorSpec("input_ids", "INT64", (-1,))
    assert TensorSpec.parse("image:FP32:3,224,224").dims == (3, 224, 224)


@pytest.mark.parametrize(
    "text, named",
    [
        ("PIXELS:FP32", "NAME:DTYPE:DIMS"),
        ("PIXELS:FP33:64", "'FP33'"),
        ("PIXELS:FP32:6x4", "'6x4'"),
        ("PIXELS:FP32:0", "[0]"),
        ("9lives:FP32:4", "'9lives'"),
    ],
)
def test_bad_tensor_spec_is_named(text, named):
    with pytest.raises(SpecError, match=named.replace("[", r"\[").replace("]", r"\]")):
        TensorSpec.parse(text)


def spec(**kwargs):
    return ModelSpec(name="m", inputs=(PIXELS,), outputs=(PROBS,), **kwargs)


@pytest.mark.parametrize(
    "kwargs, named",
    [
        ({"max_batch_size": -1}, "max_batch_size=-1"),
        ({"dynamic_batching": DynamicBatching()}, "needs max_batch_size > 0"),
        ({"max_batch_size": 8, "dynamic_batching": DynamicBatching(preferred_batch_sizes=(4, 16))}, r"\[16\]"),
        ({"platform": "tensorflow"}, "'tensorflow'"),
        ({"version": 0}, "version 0"),
    ],
)
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


@pytest.mark.parametrize(
    "kwargs, named",
    [
        ({"max_queue_size": -1}, "max_queue_size=-1"),
        ({"default_timeout_us": 1.5}, "default_timeout_us=1.5"),
        ({"max_queue_size": True}, "max_queue_size=True"),
        ({"timeout_action": "DROP"}, "'DROP'"),
        ({"allow_timeout_override": "yes"}, "allow_timeout_override='yes'"),
    ],
)
def test_bad_queue_policy_is_named(kwargs, named):
    with pytest.raises(SpecError, match=named):
        QueuePolicy(**kwargs)


def test_a_queue_policy_that_limits_nothing_is_none():
    assert not QueuePolicy().limits and not QueuePolicy(timeout_action="DELAY").limits
    assert QueuePolicy(allow_timeout_override=True).limits
    assert DynamicBatching(queue_policy=QueuePolicy(timeout_action="DELAY")).queue_policy is None
    with pytest.raises(SpecError, match="not a QueuePolicy"):
        DynamicBatching(queue_policy={"max_queue_size": 4})


def test_models_toml_keeps_the_queue_policy_flat_in_its_batching_table():
    batching = DynamicBatching.from_settings(
        {
            "max_queue_delay_us": 0,
            "preferred_batch_sizes": [4],
            "max_queue_size": 128,
            "default_timeout_us": 200000,
            "timeout_action": "REJECT",
        }
    )
    assert batching == DynamicBatching(0, (4,), queue_policy=QueuePolicy(128, 200000, "REJECT"))
    assert DynamicBatching.from_settings({"max_queue_delay_us": 7}).queue_policy is None
    with pytest.raises(SpecError, match="'max_queue_delay'"):
        DynamicBatching.from_settings({"max_queue_delay": 7})


def test_labels_get_their_file_and_decoupled_needs_a_python_model():
    assert spec(labels=tuple("0123456789")).labels_file == "labels.txt"
    assert spec(labels_file="classes.txt").labels == ()
    with pytest.raises(SpecError, match="'../labels.txt'"):
        spec(labels_file="../labels.txt")
    with pytest.raises(SpecError, match="decoupled needs platform 'python'"):
        spec(decoupled=True)
    with pytest.raises(SpecError, match="latest_versions=0"):
        spec(latest_versions=0)


def test_an_image_input_declares_its_layout():
    assert TensorSpec.parse("image:FP32:3,224,224:NCHW").format == "FORMAT_NCHW"
    assert TensorSpec.parse("image:uint8:224,224,3:format_nhwc").format == "FORMAT_NHWC"
    assert TensorSpec.parse("image:FP32:3,224,224").format == "FORMAT_NONE"


@pytest.mark.parametrize(
    "make, named",
    [
        (lambda: TensorSpec("image", "FP32", (3, 224, 224), format="NCHW"), "'NCHW' is not one of"),
        (lambda: TensorSpec("PIXELS", "FP32", (64,), format="FORMAT_NCHW"), r"3 dims .* not dims \[64\]"),
        (lambda: TensorSpec("clip", "FP32", (8, 3, 224, 224), format="FORMAT_NCHW"), r"not dims \[8, 3, 224, 224\]"),
        (lambda: TensorSpec("IMAGE", "BYTES", (1, 1, 1), format="FORMAT_NHWC"), "numeric datatype, not BYTES"),
        (lambda: TensorSpec.parse("image:FP32:3,224,224:CHW"), "'FORMAT_CHW'"),
        (
            lambda: ModelSpec(
                name="m", inputs=(PIXELS,), outputs=(TensorSpec("mask", "FP32", (1, 224, 224), format="FORMAT_NCHW"),)
            ),
            r"outputs \['mask'\] have a format",
        ),
    ],
)
def test_a_format_outside_a_3_dim_numeric_input_is_refused(make, named):
    with pytest.raises(SpecError, match=named):
        make()
