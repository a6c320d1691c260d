"""export/token_generator.py: the token generator's GPU config, and the Triton image it must run in."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from tritonclient.grpc import model_config_pb2 as mc

from export import catalog
from export.cli import main as export_main
from export.config import parse
from export.errors import SpecError
from export.token_generator import for_target, is_generator, write_for_target

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "model_repository" / "text_generator" / "config.pbtxt"
DOCKER = ROOT / "deploy" / "docker"


def params(config) -> dict[str, str]:
    return {k: v.string_value for k, v in config.parameters.items()}


def image_torch() -> tuple[str, str, str]:
    """(version, local build tag, the index's tag) of torch in the Triton image."""
    pins = dict(re.findall(r"^([\w-]+)==(\S+)$", (DOCKER / "triton-requirements.txt").read_text(), re.M))
    version, _, build = pins["torch"].partition("+")
    index = re.search(r"download\.pytorch\.org/whl/(\w+)", (DOCKER / "triton.Dockerfile").read_text())
    return version, build, index.group(1) if index else ""


@pytest.fixture(scope="module")
def entries():
    return catalog.load()


def test_the_committed_generator_is_a_cpu_generator():
    config = parse(COMMITTED)
    assert is_generator(config)
    assert [g.kind for g in config.instance_group] == [mc.ModelInstanceGroup.KIND_CPU]
    assert params(config)["STEP_MODE"] == "inprocess" and params(config)["MAX_BATCH"] == "32"


def test_gpu_target_runs_fp16_steps_in_process_on_the_gpu(entries):
    config = for_target(parse(COMMITTED), entries, "gpu")
    p = params(config)
    assert [g.kind for g in config.instance_group] == [mc.ModelInstanceGroup.KIND_GPU]
    assert p["STEP_MODE"] == "inprocess"
    assert (p["PREFILL_MODEL"], p["DECODE_MODEL"]) == ("smollm2_prefill_fp16", "smollm2_decode_fp16")
    gpu_models = {v.model_name(e.name) for e in entries.values() for v in e.variants["gpu"]}
    assert {p["PREFILL_MODEL"], p["DECODE_MODEL"]} <= gpu_models, "the steps it loads are exported for the GPU"
    assert "FORCE_CPU_ONLY_INPUT_TENSORS" not in p
    # Everything else (inputs, limits, batching, warmup) is the committed config's.
    committed = params(parse(COMMITTED))
    for key in ("MAX_BATCH", "MAX_PREFILL_TOKENS", "WARMUP", "MAX_PROMPT_TOKENS", "MAX_NEW_TOKENS"):
        assert p[key] == committed[key]
    assert [i.name for i in config.input] == [i.name for i in parse(COMMITTED).input]


def test_gpu_target_with_bls_keeps_the_tensors_on_the_gpu(entries):
    p = params(for_target(parse(COMMITTED), entries, "gpu", step_mode="bls"))
    assert p["STEP_MODE"] == "bls" and p["FORCE_CPU_ONLY_INPUT_TENSORS"] == "no"
    for step in (p["PREFILL_MODEL"], p["DECODE_MODEL"]):  # the served step models run on the GPU
        base = entries[step.removesuffix("_fp16")]
        assert any(v.model_name(base.name) == step for v in base.variants["gpu"])


def test_fp32_steps_and_cpu_target(entries):
    p = params(for_target(parse(COMMITTED), entries, "gpu", precision="fp32"))
    assert (p["PREFILL_MODEL"], p["DECODE_MODEL"]) == ("smollm2_prefill", "smollm2_decode")
    cpu = for_target(for_target(parse(COMMITTED), entries, "gpu", "bls"), entries, "cpu")
    assert [g.kind for g in cpu.instance_group] == [mc.ModelInstanceGroup.KIND_CPU]
    assert params(cpu)["PREFILL_MODEL"] == "smollm2_prefill" and "FORCE_CPU_ONLY_INPUT_TENSORS" not in params(cpu)
    with pytest.raises(SpecError, match="step mode 'remote'"):
        for_target(parse(COMMITTED), entries, "gpu", step_mode="remote")


def test_the_triton_image_carries_the_torch_the_gpu_generator_needs(entries):
    """A KIND_GPU generator loads CUDA-traced steps in its own process: CPU torch could not (no CUDA-traced
    file loaded by CPU torch); with bls it holds CUDA tensors through DLPack, which needs CUDA torch too."""
    version, build, index = image_torch()
    release = dict(re.findall(r"^(\w+)=(\S+)$", (ROOT / ".env").read_text(), re.M))["NGC_RELEASE"]
    assert release == "25.10" and version.startswith("2.9."), "NGC 25.10 serves the PyTorch 2.9 line"
    for mode in ("inprocess", "bls"):
        config = for_target(parse(COMMITTED), entries, "gpu", step_mode=mode)
        assert config.instance_group[0].kind == mc.ModelInstanceGroup.KIND_GPU
        assert build.startswith("cu"), f"torch=={version}+{build}: a CPU build cannot run the GPU generator ({mode})"
        assert index == build, f"the Dockerfile's index ({index}) does not serve torch+{build}"


def test_export_cli_writes_the_generator_config_for_gpu_only_when_its_steps_exported(tmp_path, entries):
    repo = tmp_path / "repo"
    shutil.copytree(
        ROOT / "model_repository" / "text_generator",
        repo / "text_generator",
        ignore=shutil.ignore_patterns("__pycache__", "*.json"),
    )
    written = write_for_target(repo, entries, "gpu", only={"digits"})
    assert written == [] and parse(repo / "text_generator" / "config.pbtxt") == parse(COMMITTED)
    written = write_for_target(repo, entries, "gpu", only={"smollm2_prefill", "smollm2_decode"})
    assert written == [repo / "text_generator" / "config.pbtxt"]
    text = written[0].read_text()
    assert text.startswith("# Generated by `tritonkit export --target gpu`")
    assert params(parse(written[0]))["DECODE_MODEL"] == "smollm2_decode_fp16"
    # Without CUDA the step exports are skipped, so the CLI leaves the generator as it was.
    shutil.copy(COMMITTED, written[0])
    assert (
        export_main(
            [
                "smollm2_prefill",
                "smollm2_decode",
                "--target",
                "gpu",
                "--repository",
                str(repo),
                "--format",
                "torchscript",
                "--precision",
                "fp16",
            ]
        )
        == 3
    )
    assert written[0].read_text() == COMMITTED.read_text()
