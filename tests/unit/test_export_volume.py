"""The export as the containers run it: a read-only project, a volume at /models, optional variants.

tests/functional/test_container_rules.py runs the containers' own commands under their rules (uid 1000,
read-only tree); these are the same faults, one at a time, in this process.
"""

import json
import tempfile
import warnings
from pathlib import Path

import pytest

from deploy.server import DEFAULT_REPOSITORY
from export import catalog, cli, pipeline, variants
from export.errors import FormatUnavailable
from export.formats import onnx as onnx_format
from export.formats import torchscript
from export.seed import COMPLETE_MARKER
from export.variants import REQUIRED_FORMATS, Variant
from export.zoo import base
from tritonkit_errors import ExitStatus

# --- the weight cache -------------------------------------------------------------------------------


def test_cache_leaves_a_project_it_cannot_write_for_the_users_cache(tmp_path, monkeypatch):
    project = tmp_path / "opt" / "tritonkit"
    project.mkdir(parents=True)
    (project / ".cache").write_text("")  # not a folder this process can write into
    monkeypatch.setattr(base, "PROJECT_ROOT", project)
    monkeypatch.delenv("TRITONKIT_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert base.cache_dir() == tmp_path / "xdg" / "tritonkit"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert base.cache_dir() == tmp_path / "home" / ".cache" / "tritonkit"


def test_a_checkout_keeps_its_own_cache_and_the_variable_wins(tmp_path, monkeypatch):
    monkeypatch.setattr(base, "PROJECT_ROOT", tmp_path)
    monkeypatch.delenv("TRITONKIT_CACHE", raising=False)
    assert base.cache_dir() == tmp_path / ".cache"
    monkeypatch.setenv("TRITONKIT_CACHE", str(tmp_path / "elsewhere"))
    assert base.cache_dir() == tmp_path / "elsewhere"


def test_weights_that_cannot_be_cached_are_still_returned(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("TRITONKIT_CACHE", str(tmp_path / "file" / "cache"))  # under a file: mkdir fails
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        state = base.cached_state_dict("m", {"r": 1}, lambda: {"w": 1})
    assert state == {"w": 1}
    assert any("not cached" in str(w.message) and "TRITONKIT_CACHE" in str(w.message) for w in caught)


# --- staging ----------------------------------------------------------------------------------------


def test_staging_is_in_the_temp_folder_not_beside_the_repository(tmp_path, monkeypatch):
    seen = []
    convert = torchscript.convert

    def spy(zoo, variant, target, **kwargs):
        seen.append(Path(target))
        return convert(zoo, variant, target, **kwargs)

    monkeypatch.setattr(torchscript, "convert", spy)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    repository = tmp_path / "volume" / "models"
    done = pipeline.export_entry(catalog.entry("digits"), repository, variants=[Variant("torchscript")])
    assert done[0].result.ok, done[0].result.summary()
    (staged,) = seen
    assert staged.is_relative_to(tmp_path / "tmp"), staged
    assert sorted(p.name for p in (tmp_path / "volume").iterdir()) == ["models"]
    assert (repository / "digits" / "1" / "model.pt").is_file()
    # Readable by the volume's group, not only by the export's user (mkdtemp's 0700 is not kept).
    assert (repository / "digits" / "1").stat().st_mode & 0o055 == 0o055


# --- a volume this user cannot write ----------------------------------------------------------------


def test_a_repository_that_cannot_be_written_is_one_line_naming_the_user_and_the_storage(tmp_path, capsys):
    (tmp_path / "file").write_text("")
    code = cli.main(
        ["digits", "--repository", str(tmp_path / "file" / "models"), "--seed-from", str(DEFAULT_REPOSITORY)]
    )
    err = capsys.readouterr().err
    assert code == ExitStatus.USAGE
    (line,) = [line for line in err.splitlines() if line.strip()]
    assert line.startswith("export: error:") and "not writable by uid" in line
    assert "fsGroup" in line and "StorageClass" in line and "docs/production.md" in line


# --- required and optional variants -----------------------------------------------------------------


def test_gpu_requires_torchscript_and_treats_accelerated_formats_as_optional():
    assert Variant("torchscript", "fp16").required_on("gpu") and Variant("torchscript").required_on("gpu")
    assert not Variant("torch-tensorrt", "fp16").required_on("gpu")
    assert not Variant("onnx", "fp16").required_on("gpu")
    assert all(Variant(f).required_on("cpu") for f in REQUIRED_FORMATS["cpu"])
    for entry in catalog.load().values():
        assert all(v.required_on("cpu") for v in entry.variants["cpu"]), entry.name
        # Every model keeps a required variant on the GPU: the stack never comes up with none of it.
        assert any(v.required_on("gpu") for v in entry.variants["gpu"]), entry.name


def test_an_optional_variant_whose_toolchain_is_missing_reports_and_does_not_fail(tmp_path, monkeypatch, capsys):
    # The cpu target has no optional format; make ONNX optional and its toolchain missing, as
    # Torch-TensorRT is in an image built without it.
    monkeypatch.setitem(variants.REQUIRED_FORMATS, "cpu", frozenset({"torchscript"}))

    def missing(*_args, **_kwargs):
        raise FormatUnavailable("onnxruntime here has no CUDAExecutionProvider")

    monkeypatch.setattr(onnx_format, "convert", missing)
    stale = tmp_path / "digits_onnx" / "1"
    stale.mkdir(parents=True)
    (stale / "model.onnx").write_text("from an earlier release")
    code = cli.main(["digits", "--repository", str(tmp_path), "--seed-from", str(DEFAULT_REPOSITORY)])
    out = capsys.readouterr().out
    assert code == 0, out
    (line,) = [line for line in out.splitlines() if line.startswith("digits_onnx ")]
    assert "skipped" in line and "optional: onnxruntime here has no CUDAExecutionProvider" in line
    assert "1 optional variant(s) not exported" in out
    assert not (tmp_path / "digits_onnx").exists(), "a stale optional variant would be served"
    marker = json.loads((tmp_path / COMPLETE_MARKER).read_text())
    assert marker["not_exported"] == ["digits_onnx"] and marker["exports"] == 3
    assert marker["optional"] == [], "nothing optional was exported: export.serving_check has nothing to load"
    assert (tmp_path / "digits" / "1" / "model.pt").is_file()

    # The same variant named on the command line is required: the run fails and writes no marker.
    code = cli.main(
        ["digits", "--format", "onnx", "--repository", str(tmp_path), "--seed-from", str(DEFAULT_REPOSITORY)]
    )
    assert code == ExitStatus.BROKEN
    assert not (tmp_path / COMPLETE_MARKER).exists()
    # So is every variant under --require-all.
    code = cli.main(["digits", "--require-all", "--repository", str(tmp_path)])
    assert code == ExitStatus.BROKEN


def test_a_required_variant_without_its_toolchain_fails_the_run(tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the gpu target's required variants can be exported here")
    code = cli.main(
        ["digits", "--target", "gpu", "--repository", str(tmp_path), "--seed-from", str(DEFAULT_REPOSITORY)]
    )
    captured = capsys.readouterr()
    assert code == ExitStatus.BROKEN
    assert "a required variant was skipped" in captured.err
    lines = {line.split()[0]: line for line in captured.out.splitlines() if line.startswith("digits")}
    assert "optional:" not in lines["digits"] and "optional:" in lines["digits_trt_fp16"]
    assert not (tmp_path / COMPLETE_MARKER).exists()
