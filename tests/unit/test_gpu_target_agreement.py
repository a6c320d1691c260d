"""The GPU target's repository and the images that load it agree, model by model: where each model's file is
traced (device), the instance kind its config asks for, how a Python model runs other models' files (step
mode), and the torch build of the process that loads them. No file traced on CUDA may be loaded by the CPU
torch of the Triton image.

The configs are the real ones: ``tritonkit export --target gpu --configs-only --seed-from model_repository``
writes what the GPU containers' export writes (every exported variant's config, and the seeded Python
models and ensembles), without the model files. The torch builds come from the images' own files.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest

from deploy.server import DEFAULT_REPOSITORY, PROJECT_ROOT
from export import catalog, cli
from export import config as config_io
from export.pipeline import export_device
from export.seed import exported_names

DOCKER = PROJECT_ROOT / "deploy" / "docker"
NATIVE = {"pytorch_libtorch": "pytorch", "onnxruntime_onnx": "onnxruntime"}
"""Platforms served by Triton's native backends in the NGC image, built with CUDA there."""


@functools.cache
def gpu_repository(root: str) -> Path:
    repository = Path(root) / "models"
    code = cli.main(
        ["--target", "gpu", "--configs-only", "--repository", str(repository), "--seed-from", str(DEFAULT_REPOSITORY)]
    )
    assert code == 0
    return repository


@pytest.fixture(scope="module")
def repository(tmp_path_factory) -> Path:
    return gpu_repository(str(tmp_path_factory.mktemp("gpu-target")))


def torch_build(requirements: Path) -> str | None:
    """``cuda``, ``cpu`` or None (no torch pinned: the base image's own) from a requirements file."""
    for line in requirements.read_text().splitlines():
        match = re.match(r"\s*torch==([\w.]+)(\+(\w+))?", line.split("#")[0])
        if match:
            return "cpu" if match.group(3) == "cpu" else "cuda"
    return None


def image_torch() -> dict[str, str]:
    """The torch build of each process that loads a model file, from the images' files."""
    export_from = re.search(r"^FROM (\S+)", (DOCKER / "export.Dockerfile").read_text(), re.M).group(1)
    triton_from = re.search(r"^FROM (\S+)", (DOCKER / "triton.Dockerfile").read_text(), re.M).group(1)
    assert export_from.startswith("nvcr.io/nvidia/pytorch:") and triton_from.startswith("nvcr.io/nvidia/tritonserver:")
    # The export image keeps the NGC PyTorch (CUDA) unless its requirements pin another torch.
    export = torch_build(DOCKER / "export-requirements.txt") or "cuda"
    python_models = torch_build(DOCKER / "triton-requirements.txt")
    assert python_models, "triton-requirements.txt pins the torch the Python models import"
    # Triton's libtorch and onnxruntime backends in the NGC tritonserver image are CUDA builds.
    return {"export": export, "python": python_models, "native": "cuda"}


def models() -> list[str]:
    """Every model folder of the GPU target's repository: exported variants and seeded models."""
    entries = catalog.load()
    gpu = {v.model_name(e.name) for e in entries.values() for v in e.variants["gpu"]}
    seeded = {
        p.name
        for p in DEFAULT_REPOSITORY.iterdir()
        if (p / "config.pbtxt").is_file() and p.name not in exported_names(entries)
    }
    return sorted(gpu | seeded)


def _parameters(config) -> dict[str, str]:
    return {key: value.string_value for key, value in config.parameters.items()}


def _kinds(config) -> set[str]:
    from tritonclient.grpc import model_config_pb2 as mc

    return {mc.ModelInstanceGroup.Kind.Name(g.kind) for g in config.instance_group}


def in_process_steps(config) -> list[str]:
    """The models whose files a Python model loads into its own process (text_generator's STEP_MODE
    ``inprocess`` with its PREFILL_MODEL/DECODE_MODEL); none in ``bls`` mode, which sends them requests."""
    params = _parameters(config)
    if params.get("STEP_MODE") != "inprocess":
        return []
    return [value for key, value in sorted(params.items()) if key.endswith("_MODEL")]


def disagreements(repository: Path, name: str, torch: dict[str, str] | None = None) -> list[str]:
    """What disagrees for one model; ``torch``: the torch build per process (default: the images')."""
    torch = torch or image_torch()
    config = config_io.parse(repository / name / "config.pbtxt")
    platform = config.platform or config.backend
    problems = []
    if platform in NATIVE:
        # An exported file: traced on the target's device by the export image's torch.
        device = export_device("gpu")
        if device == "cuda" and torch["export"] != "cuda":
            problems.append(f"{name}: exported on CUDA by a CPU torch")
        if _kinds(config) != {"KIND_GPU"}:
            problems.append(f"{name}: file traced on {device} but instances {sorted(_kinds(config))}")
    elif platform == "python":
        if "KIND_GPU" in _kinds(config) and torch["python"] != "cuda":
            problems.append(
                f"{name}: KIND_GPU instances, but the Triton image's torch for Python models is {torch['python']}"
            )
        for step in in_process_steps(config):
            step_config = config_io.parse(repository / step / "config.pbtxt")
            assert (step_config.platform or step_config.backend) in NATIVE, f"{name} loads {step}, not an export"
            device = export_device("gpu")
            if device == "cuda" and torch["python"] != "cuda":
                problems.append(
                    f"{name}: STEP_MODE inprocess loads {step}, traced on CUDA, into the Triton "
                    f"image's {torch['python']} torch (deploy/docker/triton-requirements.txt)"
                )
            if device == "cuda" and "KIND_GPU" not in _kinds(config):
                problems.append(
                    f"{name}: runs {step}'s CUDA-traced file in process from {sorted(_kinds(config))} "
                    f"instances, which Triton gives no GPU"
                )
    elif platform == "ensemble":
        for step in config.ensemble_scheduling.step:
            if not (repository / step.model_name / "config.pbtxt").is_file():
                problems.append(f"{name}: step {step.model_name} is not in the GPU repository")
    else:
        problems.append(f"{name}: platform {platform!r} is not checked here")
    return problems


@pytest.mark.parametrize("name", models())
def test_device_instance_kind_step_mode_and_torch_build_agree(repository, name):
    assert (repository / name / "config.pbtxt").is_file(), f"{name} is not in the GPU target's repository"
    assert disagreements(repository, name) == []


def test_every_model_of_the_gpu_repository_is_checked(repository):
    assert sorted(p.name for p in repository.iterdir() if (p / "config.pbtxt").is_file()) == models()


def test_the_check_catches_a_cuda_traced_file_loaded_by_cpu_torch(repository, tmp_path):
    """The case the check exists for, built from the generated configs: a Python model on CPU instances that
    runs a GPU export's steps in its own process, as if the Triton image's torch were the CPU build."""
    import shutil

    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2 as mc

    copy = tmp_path / "models"
    config = config_io.parse(repository / "text_generator" / "config.pbtxt")
    for name in ["text_generator", *in_process_steps(config)]:
        shutil.copytree(repository / name, copy / name)
    config.parameters["STEP_MODE"].string_value = "inprocess"
    del config.instance_group[:]
    config.instance_group.add(count=1, kind=mc.ModelInstanceGroup.KIND_CPU)
    (copy / "text_generator" / "config.pbtxt").write_text(text_format.MessageToString(config))
    found = disagreements(copy, "text_generator", {**image_torch(), "python": "cpu"})
    assert any("traced on CUDA" in p and "cpu torch" in p for p in found), found
    assert any("which Triton gives no GPU" in p for p in found), found
