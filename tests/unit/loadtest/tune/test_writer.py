"""loadtest.tune.writer: the pick goes to export/tuned.toml for a catalog model and to the model folder's
config.pbtxt (and manifest) for a --model-file model; a dry run prints the diff and leaves every file
byte-identical."""

import shutil
import tomllib
from pathlib import Path

import pytest

from export import catalog
from export import config as config_io
from export.errors import SpecError
from export.spec import InstanceGroup
from export.user import recorded
from loadtest.core.measurement import Load, Measurement
from loadtest.core.spec import Slo
from loadtest.tune import writer
from loadtest.tune.search import SearchResult, Trial
from loadtest.tune.space import Point, SearchSpace
from loadtest.tune.tuner import Outcome, TuneOptions

REPOSITORY = Path(__file__).resolve().parents[4] / "model_repository"


def outcome_for(model: str, repository: Path, point: Point) -> Outcome:
    options = TuneOptions(model=model, slo=Slo(5.0), load=Load(users=16), repository=repository)
    trial = Trial(point, [Measurement(8000.0, 1.0, 4.0, 0.0, "perf_analyzer", 0.3)], order=1)
    result = SearchResult([trial], trial, trial, "descent", 10, "converged", 1)
    return Outcome(options, result, SearchSpace({}), "perf_analyzer", 64, {})


def snapshot(*roots: Path) -> dict[Path, bytes]:
    files = {}
    for root in roots:
        paths = [root] if root.is_file() else [p for p in root.rglob("*") if p.is_file()]
        files.update({p: p.read_bytes() for p in paths})
    return files


@pytest.fixture(scope="module")
def user_repository(scorer_export, tmp_path_factory) -> Path:
    return scorer_export.copy_to(tmp_path_factory.mktemp("repo"))


def test_a_catalog_models_dry_run_diffs_tuned_toml_and_every_format_and_writes_nothing(tmp_path):
    tuned = tmp_path / "tuned.toml"
    shutil.copy(catalog.TUNED, tuned)
    before = snapshot(tuned, catalog.TUNED, *REPOSITORY.glob("digits*/"))
    picked = outcome_for("digits", REPOSITORY, Point("onnx/fp32", 500, (), 3, 32))
    written = writer.write_pick(picked, dry_run=True, tuned_path=tuned)
    assert snapshot(tuned, catalog.TUNED, *REPOSITORY.glob("digits*/")) == before
    assert written.kind == "catalog" and written.dry_run and written.clients_call == "digits_onnx"
    assert str(tuned) in written.files and str(REPOSITORY / "digits_onnx" / "config.pbtxt") in written.files
    for text in (
        "+max_batch_size = 32",
        "+  max_queue_delay_microseconds: 500",
        "-  count: 2",
        "+  count: 3",
        "digits_fp16/config.pbtxt",
        "clients call digits_onnx",
        '+serves = "digits_onnx"',
    ):
        assert text in written.diff, text
    assert "dry run: nothing written" in written.text()


def test_a_catalog_pick_goes_into_tuned_toml_and_is_re_exported(tmp_path):
    repository = tmp_path / "repo"
    shutil.copytree(REPOSITORY / "digits", repository / "digits")  # the public format only: faster to re-export
    catalog_path = tmp_path / "models.toml"
    text = catalog.CATALOG.read_text()
    catalog_path.write_text(
        text.replace('cpu = ["torchscript/fp32", "torchscript/fp16", "onnx/fp32"]', 'cpu = ["torchscript/fp32"]', 1)
    )
    tuned = tmp_path / "tuned.toml"
    reloaded = []
    picked = outcome_for("digits", repository, Point("torchscript/fp32", 0, (), 3, 32))
    written = writer.write_pick(
        picked, dry_run=False, reload=reloaded.append, tuned_path=tuned, catalog_path=catalog_path
    )
    table = tomllib.loads(tuned.read_text())["digits"]
    assert table["max_batch_size"] == 32 and table["instance_groups"] == [{"count": 3, "kind": "KIND_CPU"}]
    assert table["dynamic_batching"]["max_queue_delay_us"] == 0 and "tritonkit tune" in table["note"]
    spec = config_io.read(repository / "digits")
    assert spec.max_batch_size == 32 and spec.instance_groups == (InstanceGroup(3),)
    assert reloaded == ["digits"] and not written.dry_run


def test_a_user_models_dry_run_writes_nothing(user_repository):
    before = snapshot(user_repository)
    picked = outcome_for("scorer", user_repository, Point("torchscript/fp32", 0, (8,), 2, 16))
    written = writer.write_pick(picked, dry_run=True)
    assert snapshot(user_repository) == before
    assert written.kind == "model folder"
    assert "+  count: 2" in written.diff and "-  max_queue_delay_microseconds: 500" in written.diff
    assert '"tuned": "tritonkit tune' in written.diff  # the manifest would record it too


def test_a_user_model_pick_goes_into_its_config_and_manifest(user_repository, tmp_path):
    repository = tmp_path / "repo"
    shutil.copytree(user_repository, repository)
    reloaded = []
    picked = outcome_for("scorer", repository, Point("torchscript/fp32", 0, (8,), 2, 16))
    writer.write_pick(picked, dry_run=False, reload=reloaded.append)
    spec = config_io.read(repository / "scorer")
    assert spec.instance_groups == (InstanceGroup(2),) and spec.dynamic_batching.preferred_batch_sizes == (8,)
    assert spec.dynamic_batching.max_queue_delay_us == 0 and spec.max_batch_size == 16
    args = recorded.read(repository / "scorer")
    assert args["settings"] == recorded.settings_of(spec) and args["tuned"].startswith("tritonkit tune")
    assert reloaded == ["scorer"]
    # Nothing of the model's weights or the other files moved.
    assert (repository / "scorer" / "1" / "model.pt").read_bytes() == (
        user_repository / "scorer" / "1" / "model.pt"
    ).read_bytes()


def test_no_pick_is_nothing_to_write(user_repository):
    picked = outcome_for("scorer", user_repository, Point("torchscript/fp32", 0, (), 1, 16))
    picked.result.best = None
    with pytest.raises(writer.WriteError, match="no candidate met the SLO"):
        writer.write_pick(picked, dry_run=True)


def test_the_format_a_tune_picked_is_what_clients_of_the_model_call(tmp_path):
    tuned = tmp_path / "tuned.toml"
    tuned.write_text('[minilm]\nnote = "picked"\nserves = "minilm_onnx"\nmax_batch_size = 32\n')
    assert catalog.served_pick("minilm", tuned) == "minilm_onnx"
    assert catalog.served_pick("digits", tuned) == "digits"
    assert catalog.load(tuned=tuned)["minilm"].settings["max_batch_size"] == 32  # serves is not a setting
    tuned.write_text('[minilm]\nserves = "digits_onnx"\n')
    with pytest.raises(SpecError, match="serves = 'digits_onnx' is not a served name of 'minilm'"):
        catalog.served_pick("minilm", tuned)
    tuned.write_text('[minilm]\nserves = "minilm_onnxx"\n')  # its name, but no format's suffix
    with pytest.raises(SpecError, match="is not a served name of 'minilm'"):
        catalog.served_pick("minilm", tuned)
