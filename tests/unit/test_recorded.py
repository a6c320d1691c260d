"""export.user.recorded: a --model-file export records its arguments and serving settings in its manifest, so
`tritonkit export NAME` exports it again, and a re-export keeps the settings `tritonkit tune` wrote."""

import json
import subprocess
import sys

from export import catalog
from export import config as config_io
from export.changes import ServingChanges
from export.spec import DynamicBatching, InstanceGroup, ModelSpec, QueuePolicy, TensorSpec
from export.user import recorded
from tests.user_models import USER_MODEL, scorer_export_args


def export(*args):
    return subprocess.run([sys.executable, "-m", "export", *args], capture_output=True, text=True)


def test_settings_round_trip_through_a_catalog_entry():
    spec = ModelSpec(
        "m",
        (TensorSpec("x", "FP32", (4,)),),
        (TensorSpec("y", "FP32", (2,)),),
        max_batch_size=16,
        dynamic_batching=DynamicBatching(0, (4, 8), queue_policy=QueuePolicy(32, 5000)),
        instance_groups=(InstanceGroup(3),),
        warmup=False,
    )
    settings = recorded.settings_of(spec)
    assert json.loads(json.dumps(settings)) == settings  # what a manifest holds
    entry = catalog.CatalogEntry("m", "m.py:build", {"cpu": (), "gpu": ()}, settings)

    class Zoo:  # the parts of a ZooModel that CatalogEntry.spec reads
        inputs, outputs, description, labels, real_data_check = spec.inputs, spec.outputs, "", (), ""

    again = entry.spec(Zoo())
    assert (again.max_batch_size, again.dynamic_batching, again.instance_groups, again.warmup) == (
        16,
        spec.dynamic_batching,
        spec.instance_groups,
        False,
    )
    plain = recorded.settings_of(spec.replace(dynamic_batching=None))
    assert "dynamic_batching" not in plain


def test_a_model_file_export_records_its_arguments_and_a_re_export_keeps_tuned_settings(scorer_export, tmp_path):
    folder = scorer_export.copy_to(tmp_path) / "scorer"  # the first export: `python -m export` the session ran
    args = recorded.read(folder)
    assert args["model_file"] == f"{USER_MODEL.resolve()}:build" and args["name"] == "scorer"
    assert args["inputs"] == ["features:FP32:16"] and args["outputs"] == ["scores"]
    assert args["settings"]["max_batch_size"] == 16

    # What `tritonkit tune` does when it writes a pick for this model.
    tuned = ServingChanges(max_queue_delay_us=0, instances=3).apply(config_io.read(folder))
    config_io.write(tuned, tmp_path)
    assert recorded.update_settings(folder, tuned, "tuned: 3 instances, no delay") == [folder / "1" / "manifest.json"]
    written = (folder / "config.pbtxt").read_text()

    again = export("scorer", "--repository", str(tmp_path))  # by name, from the manifest
    assert again.returncode == 0, again.stderr
    assert "serving settings from its last export (tuned)" in again.stdout
    assert (folder / "config.pbtxt").read_text() == written
    assert recorded.read(folder)["tuned"] == "tuned: 3 instances, no delay"

    # The original command again: a flag given wins, what it does not say stays tuned.
    third = export(*scorer_export_args(tmp_path, max_batch_size=8))
    assert third.returncode == 0, third.stderr
    spec = config_io.read(folder)
    assert spec.max_batch_size == 8 and spec.instance_groups == (InstanceGroup(3),)
    assert spec.dynamic_batching.max_queue_delay_us == 0


def test_a_name_that_is_neither_in_the_catalog_nor_exported_is_refused(tmp_path):
    result = export("nosuch", "--repository", str(tmp_path))
    assert result.returncode == 2
    assert "nosuch" in result.stderr and "no --model-file export" in result.stderr
