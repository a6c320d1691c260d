"""loadtest.studies.compare.spec without a server: arm specs parse or are refused by name, and the arms are
served side by side under their own names from a staged repository."""

from pathlib import Path

import pytest

from export.changes import ServingChanges
from loadtest.studies.compare.spec import ArmSpec, CompareError, needs_pipeline, parse_spec, plan, stage

CONFIG = 'name: "m"\nplatform: "onnxruntime_onnx"\nversion_policy { specific { versions: 1 } }\nmax_batch_size: 8\n'


def test_serving_changes_model_and_version_parse_from_one_spec():
    spec = parse_spec("max_queue_delay_us=5000,instances=2,preferred_batch_sizes=8+4,warmup=false")
    assert spec.changes == ServingChanges(
        max_queue_delay_us=5000, instances=2, preferred_batch_sizes=(4, 8), warmup=False
    )
    assert spec.model is None and spec.version is None and spec.describe() == spec.text
    other = parse_spec("model=digits_onnx, version=2")
    assert (other.model, other.version, bool(other.changes)) == ("digits_onnx", 2, False)
    assert other.source("digits") == "digits_onnx" and spec.source("digits") == "digits"


def test_an_empty_spec_is_the_model_as_served():
    assert parse_spec("") == parse_spec(None) == parse_spec("served") == ArmSpec()
    assert ArmSpec().describe() == "as served"


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("max_queue_delay=5", "unknown key 'max_queue_delay'"),
        ("instances", "'instances' is not key=value"),
        ("instances=two", "instances='two' is not an integer"),
        ("instances=0", "instances=0 is out of range"),
        ("warmup=maybe", "warmup='maybe' is not true or false"),
        ("version=0", "version=0 must be an integer >= 1"),
        ("instances=1,instances=2", "instances given twice"),
        ("timeout_action=DROP", "timeout_action='DROP'"),
    ],
)
def test_a_bad_spec_is_refused_naming_the_bad_part(text, named):
    with pytest.raises(CompareError, match=named.replace("(", r"\(")):
        parse_spec(text)


def test_the_same_spec_on_both_sides_is_an_a_a_comparison():
    assert parse_spec("instances=2").same_as(parse_spec(" instances=2"))
    assert not parse_spec("instances=2").same_as(parse_spec("instances=3"))


def test_a_plain_arm_keeps_its_name_and_any_other_is_a_copy(tmp_path):
    specs = {"A": ArmSpec(), "B": parse_spec("max_queue_delay_us=5000")}
    a, b = plan("digits", specs, tmp_path, remote=False)
    assert (a.served, a.copy) == ("digits", False) and (b.served, b.copy) == ("digits__b", True)
    # A/A: the second arm cannot take the name the first has.
    a, b = plan("digits", {"A": ArmSpec(), "B": ArmSpec()}, tmp_path, remote=False)
    assert (a.served, b.served) == ("digits", "digits__b")
    # Another model needs no copy; a version does.
    _, b = plan("digits", {"A": ArmSpec(), "B": parse_spec("model=digits_onnx")}, tmp_path, remote=False)
    assert (b.served, b.copy) == ("digits_onnx", False)
    a, _ = plan("digits", {"A": parse_spec("version=2"), "B": ArmSpec()}, tmp_path, remote=False)
    assert (a.served, a.copy) == ("digits__a", True)


def test_a_running_server_serves_the_arms_under_their_own_names_and_refuses_copies(tmp_path):
    a, b = plan("digits", {"A": ArmSpec(), "B": parse_spec("instances=2")}, tmp_path, remote=True)
    assert a.served == b.served == "digits" and not (a.copy or b.copy)
    with pytest.raises(CompareError, match="need a local server"):
        plan("digits", {"A": ArmSpec(), "B": parse_spec("version=2")}, tmp_path, remote=True)


def _model(root: Path, name: str, versions=(1,)) -> Path:
    folder = root / name
    for v in versions:
        (folder / str(v)).mkdir(parents=True)
        (folder / str(v) / "model.onnx").write_text(f"weights {v}")
    (folder / "config.pbtxt").write_text(CONFIG.replace('"m"', f'"{name}"'))
    (folder / "labels.txt").write_text("a\n")
    return folder


def test_the_staged_repository_links_every_model_and_writes_each_copy_its_own_config(tmp_path):
    repository, staged = tmp_path / "repo", tmp_path / "staged"
    _model(repository, "m", versions=(1, 2))
    _model(repository, "other")
    staged.mkdir()
    specs = {"A": ArmSpec(), "B": parse_spec("version=2,instances=2")}
    arms = plan("m", specs, repository, remote=False)
    stage(arms, repository, staged)
    assert (staged / "m").resolve() == (repository / "m").resolve() and (staged / "other").is_symlink()
    copy = staged / "m__b"
    assert sorted(p.name for p in copy.iterdir()) == ["2", "config.pbtxt", "labels.txt"]
    assert (copy / "2" / "model.onnx").read_text() == "weights 2"
    config = (copy / "config.pbtxt").read_text()
    assert 'name: "m__b"' in config and "version_policy" not in config and "max_batch_size: 8" in config
    assert (repository / "m" / "config.pbtxt").read_text() == CONFIG  # the source is untouched
    assert not needs_pipeline(repository, arms)


def test_staging_refuses_a_missing_model_or_version(tmp_path):
    repository = tmp_path / "repo"
    _model(repository, "m")
    for specs, named in (
        ({"A": ArmSpec(), "B": parse_spec("version=3")}, "has no version 3"),
        ({"A": parse_spec("model=nope"), "B": ArmSpec()}, "no model 'nope'"),
    ):
        staged = tmp_path / f"staged{len(named)}"
        staged.mkdir()
        with pytest.raises(CompareError, match=named):
            stage(plan("m", specs, repository, remote=False), repository, staged)


def test_a_second_repository_gives_its_arm_a_copy_of_its_own_folder(tmp_path):
    first, second, staged = tmp_path / "one", tmp_path / "two", tmp_path / "staged"
    _model(first, "m")
    (_model(second, "m") / "1" / "model.onnx").write_text("candidate")
    staged.mkdir()
    specs = {"A": ArmSpec(), "B": ArmSpec(repository=second)}
    stage(plan("m", specs, first, remote=False), first, staged)
    assert (staged / "m__b" / "1" / "model.onnx").read_text() == "candidate"
    assert (staged / "m" / "1" / "model.onnx").read_text() == "weights 1"
