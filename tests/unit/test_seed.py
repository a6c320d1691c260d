"""``export --seed-from``: how the containers fill an empty model-repository volume before exporting."""

import json
import subprocess
import sys

from deploy.server import DEFAULT_REPOSITORY
from export import config as config_io
from export.seed import COMPLETE_MARKER, exported_names, mark_complete, seed

PYTHON_MODELS = {"preprocess", "postprocess", "tokenize", "text_generator"}
ENSEMBLES = {"image_classifier", "text_embedder"}


def test_seed_copies_the_committed_models_and_no_weights(tmp_path):
    copied = set(seed(DEFAULT_REPOSITORY, tmp_path))
    assert copied == PYTHON_MODELS | ENSEMBLES
    assert not copied & exported_names(), "export writes these; seeding them would mix targets"
    for name in PYTHON_MODELS:
        assert (tmp_path / name / "1" / "model.py").is_file()
    for name in copied:
        config_io.parse(tmp_path / name / "config.pbtxt")  # a real ModelConfig
    left = [
        p for p in tmp_path.rglob("*") if p.suffix in (".pt", ".onnx", ".plan", ".pyc") or p.name == "manifest.json"
    ]
    assert left == []


def test_seed_overwrites_an_older_copy(tmp_path):
    seed(DEFAULT_REPOSITORY, tmp_path)
    stale = tmp_path / "preprocess" / "config.pbtxt"
    stale.write_text("stale")
    seed(DEFAULT_REPOSITORY, tmp_path)
    assert stale.read_text() == (DEFAULT_REPOSITORY / "preprocess" / "config.pbtxt").read_text()


def test_export_cli_seeds_then_exports(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "export",
            "digits",
            "--format",
            "onnx",
            "--repository",
            str(tmp_path),
            "--seed-from",
            str(DEFAULT_REPOSITORY),
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    assert "seeded" in result.stdout and "preprocess" in result.stdout
    assert (tmp_path / "digits_onnx" / "1" / "model.onnx").is_file()
    assert (tmp_path / "tokenize" / "1" / "model.py").is_file()
    marker = json.loads((tmp_path / COMPLETE_MARKER).read_text())
    assert marker["target"] == "cpu" and marker["exports"] == 1


def test_a_failed_export_leaves_no_completion_marker(tmp_path):
    (tmp_path / COMPLETE_MARKER).write_text("{}")  # from an earlier run
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "export",
            "digits",
            "--format",
            "torch-tensorrt",
            "--repository",
            str(tmp_path),
            "--seed-from",
            str(DEFAULT_REPOSITORY),
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert not (tmp_path / COMPLETE_MARKER).exists()


def test_seed_from_a_missing_folder_is_one_clear_error(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "export",
            "digits",
            "--repository",
            str(tmp_path / "r"),
            "--seed-from",
            str(tmp_path / "nope"),
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert "--seed-from" in result.stderr and "not a directory" in result.stderr


def test_export_lists_the_optional_variants_it_delivered(tmp_path):
    marker = json.loads(mark_complete(tmp_path, "cpu", ["ok"], optional=["b_onnx", "a_onnx"]).read_text())
    assert marker["optional"] == ["a_onnx", "b_onnx"] and marker["not_exported"] == []
