"""`tritonkit export` from the command line: user models, and one clear error line for bad arguments."""

import subprocess
import sys

import pytest

from export import config as config_io
from tests.user_models import USER_MODEL


def export(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "export", *args], capture_output=True, text=True, cwd=cwd)


def test_user_model_exports_with_a_config(scorer_export):
    """`python -m export --model-file ...` as the session's fixture ran it (tests/conftest.py)."""
    result, repository = scorer_export.run, scorer_export.repository
    assert result.returncode == 0, result.stderr
    assert "scorer" in result.stdout and "ok" in result.stdout
    config = config_io.parse(repository / "scorer" / "config.pbtxt")
    assert config.max_batch_size == 16 and config.input[0].name == "features" and list(config.output[0].dims) == [4]
    assert (repository / "scorer" / "1" / "model.pt").is_file()


@pytest.mark.parametrize(
    "args, words",
    [
        (["nosuchmodel"], ["nosuchmodel", "digits"]),
        (
            ["--model-file", f"{USER_MODEL}:build", "--name", "m", "--input", "features:FP32", "--output", "y"],
            ["NAME:DTYPE:DIMS"],
        ),
        (
            ["--model-file", f"{USER_MODEL}:broken", "--name", "m", "--input", "features:FP32:16", "--output", "y"],
            ["raised RuntimeError", "weights file missing"],
        ),
        (
            ["--model-file", f"{USER_MODEL}:nothing", "--name", "m", "--input", "features:FP32:16", "--output", "y"],
            ["no callable 'nothing'"],
        ),
        (
            ["--model-file", "missing.py:build", "--name", "m", "--input", "features:FP32:16", "--output", "y"],
            ["no file 'missing.py'"],
        ),
        (["digits", "--preferred-batch-sizes", "128"], ["preferred_batch_sizes [128] exceed max_batch_size=64"]),
        (["digits", "--format", "torch-tensorrt"], ["use --target gpu"]),
    ],
)
def test_bad_arguments_give_one_clear_line_and_exit_2(tmp_path, args, words):
    result = export(*args, "--repository", str(tmp_path))
    assert result.returncode == 2, result.stdout + result.stderr
    error_lines = [line for line in result.stderr.splitlines() if "error" in line]
    assert len(error_lines) == 1, result.stderr
    for word in words:
        assert word in error_lines[0]


def test_a_model_that_does_not_trace_fails_the_export_and_writes_nothing(tmp_path):
    result = export(
        "--model-file",
        f"{USER_MODEL}:untraceable",
        "--name",
        "m",
        "--input",
        "features:FP32:16",
        "--output",
        "y",
        "--repository",
        str(tmp_path),
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "mismatch" in result.stdout and "max abs" in result.stdout
    assert "failed their checks" in result.stderr
    assert not (tmp_path / "m").exists()
