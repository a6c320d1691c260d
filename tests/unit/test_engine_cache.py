"""deploy/docker/engine_cache.py, compose's engine-cache step: the TensorRT engine cache outlives the server's
container, and is emptied when the export it was built for changed (ONNX Runtime would load an engine built
from old weights of a graph that kept its shape)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

from deploy.server import PROJECT_ROOT

SCRIPT = PROJECT_ROOT / "deploy" / "docker" / "engine_cache.py"
_spec = importlib.util.spec_from_file_location("engine_cache", SCRIPT)
engine_cache = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(engine_cache)


def export(repository, manifests: dict[str, dict], gpu: str = "NVIDIA L4") -> None:
    """A completed export: one manifest per version, and the marker naming the GPU it ran on."""
    for folder, manifest in manifests.items():
        (repository / folder).mkdir(parents=True, exist_ok=True)
        (repository / folder / "manifest.json").write_text(json.dumps(manifest))
    (repository / ".export-complete").write_text(json.dumps({"target": "gpu", "gpu": gpu, "finished": "now"}))


def build_engines(cache) -> None:
    """What ONNX Runtime leaves in the cache: engines, their profiles, a timing cache."""
    for name in ("TensorrtExecutionProvider_TRTKernel_graph_main_123_0_0_sm89.engine", "timing.cache"):
        (cache / name).write_bytes(b"engine")


def refresh(repository, cache) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(repository), str(cache)], capture_output=True, text=True, timeout=30
    )


@pytest.fixture
def stack(tmp_path):
    repository, cache = tmp_path / "models", tmp_path / "cache"
    cache.mkdir()
    export(repository, {"digits_onnx/1": {"fingerprint": "a1"}, "minilm_onnx/1": {"fingerprint": "b1"}})
    assert refresh(repository, cache).returncode == 0
    build_engines(cache)
    return repository, cache


def test_engines_are_kept_while_the_export_is_the_one_they_were_built_for(stack):
    repository, cache = stack
    # The export ran again and changed nothing (its marker's time is new).
    export(repository, {"digits_onnx/1": {"fingerprint": "a1"}, "minilm_onnx/1": {"fingerprint": "b1"}})
    done = refresh(repository, cache)
    assert done.returncode == 0 and "kept 2 files" in done.stdout, done.stdout + done.stderr
    assert len(list(cache.glob("*.engine"))) == 1


@pytest.mark.parametrize(
    "manifests, gpu",
    [
        ({"digits_onnx/1": {"fingerprint": "a2"}, "minilm_onnx/1": {"fingerprint": "b1"}}, "NVIDIA L4"),
        ({"digits_onnx/1": {"fingerprint": "a1"}, "minilm_onnx/1": {"fingerprint": "b1"}}, "NVIDIA L40S"),
    ],
    ids=["a model exported again", "exported on another GPU"],
)
def test_engines_are_dropped_when_the_export_changed(stack, manifests, gpu):
    repository, cache = stack
    export(repository, manifests, gpu)
    done = refresh(repository, cache)
    assert done.returncode == 0 and "emptied" in done.stdout, done.stdout + done.stderr
    assert [p.name for p in cache.iterdir()] == [engine_cache.STAMP]
    # Engines built after that are kept on the next start.
    build_engines(cache)
    assert "kept 2 files" in refresh(repository, cache).stdout


def test_a_new_version_folder_counts_as_a_change(stack):
    repository, cache = stack
    export(repository, {"digits_onnx/2": {"fingerprint": "a1"}})
    assert "emptied" in refresh(repository, cache).stdout


@pytest.mark.parametrize("problem", ["no export", "no cache folder"])
def test_a_missing_export_or_volume_stops_with_one_line(tmp_path, problem):
    repository, cache = tmp_path / "models", tmp_path / "cache"
    repository.mkdir()
    if problem == "no export":
        cache.mkdir()
    else:
        export(repository, {"digits_onnx/1": {"fingerprint": "a1"}})
    done = refresh(repository, cache)
    assert done.returncode == 2 and done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert ("run the export first" if problem == "no export" else "mount the trt-engine-cache volume") in line
