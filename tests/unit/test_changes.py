"""export/changes.py: serving changes applied to a ModelSpec, each bad value refused by name."""

import pytest

from export import catalog, zoo
from export.changes import ServingChanges, apply_changes
from export.config import from_model_config, to_model_config
from export.errors import SpecError
from export.spec import DynamicBatching, InstanceGroup, ModelSpec, QueuePolicy, TensorSpec


def spec(**kwargs) -> ModelSpec:
    values = {
        "max_batch_size": 16,
        "instance_groups": (InstanceGroup(2, "KIND_CPU"),),
        "dynamic_batching": DynamicBatching(0, (4,), queue_policy=QueuePolicy(128, 200_000)),
        **kwargs,
    }
    return ModelSpec(
        name="m", inputs=(TensorSpec("x", "FP32", (4,)),), outputs=(TensorSpec("y", "FP32", (2,)),), **values
    )


def test_unset_fields_keep_the_models_values():
    assert not ServingChanges() and ServingChanges().apply(spec()) == spec()
    assert ServingChanges(instances=3).changed == ("instances",)


def test_each_change_lands_in_the_spec():
    changed = ServingChanges(
        max_batch_size=8,
        max_queue_delay_us=0,
        preferred_batch_sizes=(8, 2),
        instances=1,
        warmup=False,
        default_timeout_us=50_000,
    ).apply(spec())
    assert changed.max_batch_size == 8 and not changed.warmup
    assert changed.instance_groups == (InstanceGroup(1, "KIND_CPU"),)
    assert changed.dynamic_batching == DynamicBatching(0, (2, 8), queue_policy=QueuePolicy(128, 50_000))
    assert [w.batch_size for w in to_model_config(ServingChanges(max_batch_size=8).apply(spec())).model_warmup] == [
        1,
        8,
    ]


def test_the_queue_policy_merges_field_by_field_and_goes_when_it_limits_nothing():
    merged = ServingChanges(timeout_action="DELAY").apply(spec()).dynamic_batching.queue_policy
    assert merged == QueuePolicy(128, 200_000, "DELAY")
    assert ServingChanges(max_queue_size=0, default_timeout_us=0).apply(spec()).dynamic_batching.queue_policy is None
    added = ServingChanges(max_queue_size=4).apply(spec(dynamic_batching=None)).dynamic_batching
    assert added == DynamicBatching(0, queue_policy=QueuePolicy(max_queue_size=4))


def test_the_batcher_goes_off_and_on():
    assert ServingChanges(dynamic_batching=False).apply(spec()).dynamic_batching is None
    assert ServingChanges(dynamic_batching=True).apply(spec(dynamic_batching=None)).dynamic_batching == DynamicBatching(
        max_queue_delay_us=0
    )
    kept = spec().dynamic_batching
    assert ServingChanges(dynamic_batching=True).apply(spec()).dynamic_batching == kept


@pytest.mark.parametrize(
    "kwargs, named",
    [
        ({"max_batch_size": -1}, "max_batch_size=-1"),
        ({"instances": 0}, "instances=0"),
        ({"max_queue_delay_us": 2.5}, "max_queue_delay_us=2.5"),
        ({"max_queue_size": True}, "max_queue_size=True"),
        ({"timeout_action": "DROP"}, "timeout_action='DROP'"),
        ({"instance_kind": "KIND_TPU"}, "instance_kind='KIND_TPU'"),
        ({"warmup": "no"}, "warmup='no'"),
        ({"preferred_batch_sizes": (0, 4)}, r"preferred_batch_sizes=\(0, 4\)"),
        ({"dynamic_batching": False, "max_queue_size": 4}, "max_queue_size change the dynamic batcher"),
    ],
)
def test_bad_values_are_named_when_made(kwargs, named):
    with pytest.raises(SpecError, match=named):
        ServingChanges(**kwargs)


def test_combinations_the_spec_refuses_are_named_when_applied():
    with pytest.raises(SpecError, match=r"preferred_batch_sizes \[4\] exceed max_batch_size=2"):
        ServingChanges(max_batch_size=2).apply(spec())
    with pytest.raises(SpecError, match="dynamic batching needs max_batch_size > 0"):
        ServingChanges(max_batch_size=0).apply(spec())
    assert ServingChanges(max_batch_size=0, dynamic_batching=False).apply(spec()).max_batch_size == 0


def test_from_a_table_and_unknown_keys():
    assert apply_changes(spec(), {"instances": 4, "preferred_batch_sizes": [2]}) == ServingChanges(
        instances=4, preferred_batch_sizes=(2,)
    ).apply(spec())
    with pytest.raises(SpecError, match="'max_queue_delay'"):
        ServingChanges.from_dict({"max_queue_delay": 5})


def test_a_served_config_changed_and_regenerated():
    """The path a campaign variant takes: served config -> spec -> changes -> config."""
    entry = catalog.entry("minilm")
    served = to_model_config(entry.spec(zoo.build("minilm")))
    changed = to_model_config(ServingChanges(instances=1, default_timeout_us=100_000).apply(from_model_config(served)))
    assert changed.instance_group[0].count == 1
    assert changed.dynamic_batching.default_queue_policy.default_timeout_microseconds == 100_000
    assert changed.dynamic_batching.default_queue_policy.max_queue_size == 128  # kept from the catalog
    changed.instance_group[0].count = served.instance_group[0].count
    changed.dynamic_batching.default_queue_policy.default_timeout_microseconds = 150_000
    assert changed == served  # nothing else moved


def test_the_catalog_applies_changes_before_the_gpu_target():
    entry = catalog.entry("digits")
    model = zoo.build("digits")
    gpu = entry.spec(model, target="gpu", changes=ServingChanges(instances=3, instance_kind="KIND_CPU"))
    assert gpu.instance_groups == (InstanceGroup(3, "KIND_GPU"),)
