"""loadtest.tune.space: the candidates the tuner generates from a served config and its export's limits."""

import json

import pytest

from export import config as config_io
from export.changes import ServingChanges
from export.spec import DynamicBatching, InstanceGroup, ModelSpec, QueuePolicy, TensorSpec
from loadtest.tune import space
from loadtest.tune.space import OFF, Point, SpaceError
from tests.served import served_config

DIGITS = config_io.from_json(served_config("digits"))


def scorer(**changes) -> ModelSpec:
    spec = ModelSpec(
        "scorer",
        (TensorSpec("user", "FP32", (16,)),),
        (TensorSpec("probs", "FP32", (1,)),),
        max_batch_size=32,
        dynamic_batching=DynamicBatching(500),
        instance_groups=(InstanceGroup(1),),
    )
    return spec.replace(**changes)


def test_the_space_of_digits_spans_every_setting_within_the_checked_limit():
    grid, start = space.space_for(DIGITS, 64, ["torchscript/fp32", "onnx/fp32"], users=16)
    values = grid.values
    assert values["batcher"] == (OFF, 0, 100, 500, 1000, 2000)  # off and no delay are both there
    assert values["preferred"][0] == () and (8, 16, 32, 64) in values["preferred"]  # none, and as served
    assert (8,) in values["preferred"] and (16,) in values["preferred"]  # what 16 users can form
    assert values["instances"] == (1, 2, 3, 4)
    assert values["format"] == ("torchscript/fp32", "onnx/fp32")
    assert max(values["max_batch_size"]) == 64 and min(values["max_batch_size"]) >= 4
    # The start is the served config itself.
    assert start == Point("torchscript/fp32", 100, (8, 16, 32, 64), 2, 64)
    assert start in grid.points()


def test_max_batch_size_never_exceeds_what_the_export_was_checked_for():
    grid, _ = space.space_for(
        DIGITS.replace(max_batch_size=16, dynamic_batching=DynamicBatching(1000, (8, 16))), 16, ["torchscript/fp32"]
    )
    assert max(grid.values["max_batch_size"]) == 16
    assert all(p.max_batch_size <= 16 for p in grid.points())
    assert all(max(p.preferred, default=0) <= p.max_batch_size for p in grid.points())


def test_the_checked_limit_comes_from_the_manifest(tmp_path):
    folder = tmp_path / "scorer"
    (folder / "1").mkdir(parents=True)
    assert space.checked_max_batch_size(folder, scorer()) == 32  # no manifest: the served value
    (folder / "1" / "manifest.json").write_text(json.dumps({"max_batch_size": 16}))
    assert space.checked_max_batch_size(folder, scorer()) == 16


def test_normalise_drops_meaningless_and_refuses_impossible_points():
    grid, _ = space.space_for(scorer(), 32, ["torchscript/fp32"])
    assert grid.normalise(Point("torchscript/fp32", OFF, (8,), 1, 32)) == Point("torchscript/fp32", OFF, (), 1, 32)
    assert grid.normalise(Point("torchscript/fp32", 0, (64,), 1, 32)) is None
    points = grid.points()
    assert len(points) == len(set(points))
    assert all(p.batcher is not OFF or p.preferred == () for p in points)


def test_a_model_with_a_queue_policy_keeps_its_batcher_and_gets_no_delay():
    policy = scorer(dynamic_batching=DynamicBatching(0, (8,), queue_policy=QueuePolicy(64, 100_000)))
    grid, start = space.space_for(policy, 32, ["torchscript/fp32"])
    assert grid.values["batcher"] == (0,)
    changed = Point("torchscript/fp32", 0, (), 2, 16).changes().apply(policy)
    assert changed.dynamic_batching.queue_policy == QueuePolicy(64, 100_000)


def test_a_model_that_does_not_batch_varies_formats_and_instances_only():
    plain = scorer(max_batch_size=0, dynamic_batching=None)
    grid, start = space.space_for(plain, 0, ["torchscript/fp32", "onnx/fp32"])
    assert grid.values["batcher"] == (OFF,) and grid.values["max_batch_size"] == (0,)
    assert grid.grid_size() == 2 * 4


def test_points_become_serving_changes():
    assert Point("onnx/fp32", OFF, (), 3, 16).changes() == ServingChanges(
        dynamic_batching=False, instances=3, max_batch_size=16
    )
    changed = Point("torchscript/fp32", 0, (8,), 2, 32).changes().apply(scorer())
    assert changed.dynamic_batching == DynamicBatching(0, (8,)) and changed.instance_groups == (InstanceGroup(2),)
    assert Point("onnx/fp32", 0, (), 1, 8).served_model("digits") == "digits_onnx"
    assert Point("torchscript/fp16", 0, (), 1, 8).served_model("scorer") == "scorer_fp16"
    p = Point("torchscript/fp32", 500, (4, 8), 2, 16)
    assert Point.from_dict(json.loads(json.dumps(p.to_dict()))) == p


def test_formats_are_the_exported_folders(tmp_path):
    for name in ("scorer", "scorer_onnx", "other_fp16"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.pbtxt").write_text("")
    assert space.formats_in(tmp_path, "scorer") == ["torchscript/fp32", "onnx/fp32"]
    with pytest.raises(SpaceError, match="no exported format"):
        space.space_for(scorer(), 32, [])
