"""tritonkit/gpu/check.sh as a user runs it: the dry run everywhere, the real GPU check where CUDA is.

The dry run exports digits, generates and checks the KIND_GPU configs, starts the local server and
compares its HTTP and gRPC answers with eager PyTorch, runs the measurement code with tiny sizes,
and writes results.md and results.json in which every CUDA figure says why it has no value.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tritonkit.gpu import results, state, steps_export

ROOT = Path(__file__).resolve().parents[2]
CUDA = torch.cuda.is_available()
NO_CUDA = (
    "torch sees no CUDA device here: the real GPU check (tritonkit/gpu/check.sh without --dry-run) "
    "runs only where torch.cuda.is_available(); the dry run covers every other step"
)


def run_check(out: Path, *flags: str, timeout: float) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHON": sys.executable}
    return subprocess.run(
        ["bash", str(ROOT / "tritonkit/gpu/check.sh"), *flags, str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def load_results(out: Path) -> dict:
    assert (out / "results.md").is_file(), "results.md was not written"
    assert (out / "results.json").is_file(), "results.json was not written"
    return json.loads((out / "results.json").read_text())


def statuses(data: dict) -> dict[str, str]:
    return {s["name"]: s["status"] for s in data["steps"]}


@pytest.mark.timeout(420)
def test_dry_run(tmp_path):
    out = tmp_path / "out"
    proc = run_check(out, "--dry-run", timeout=400)
    assert proc.returncode == 0, f"{proc.stdout[-6000:]}\n{proc.stderr[-3000:]}"
    data = load_results(out)
    assert data["mode"] == "dry-run"

    steps = statuses(data)
    assert list(steps) == list(state.STEPS), steps
    assert all(steps[s] == "ok" for s in steps if s != "gpu_memory"), steps
    assert steps["gpu_memory"] == results.DRY_RUN

    exports = {(e["model"], e["variant"]): e for e in data["exports"]}
    assert exports[("digits", "torchscript/fp32")]["status"] == "ok"
    assert exports[("digits", "torchscript/fp16")]["status"] == "ok"
    for variant in steps_export.OPTIONAL_VARIANTS:
        assert exports[("digits", variant)]["status"] == results.DRY_RUN

    answers = data["details"]["answers"]
    assert {(a["model"], a["protocol"]) for a in answers} == {
        (m, p) for m in ("digits", "digits_fp16") for p in ("http", "grpc")
    }
    assert all(a["ok"] for a in answers)

    # Every figure is a CUDA figure: skipped with the reason, and the code path still ran on the CPU.
    assert data["figures"]
    for fig in data["figures"]:
        assert fig["status"] == results.DRY_RUN and fig["value"] is None, fig
    ran = {f["name"] for f in data["figures"] if f.get("code_path_value") is not None}
    assert {
        "throughput_b32",
        "latency_b1_p50",
        "inprocess_limit",
        "served_throughput_c64",
        "first_request_warmup",
        "first_request_no_warmup",
        "steady_p50",
    } <= ran
    assert {(t["model"], t["name"]) for t in data["targets"]} >= {
        ("efficientnet_lite0", "fp16_speedup_b32"),
        ("minilm", "fp16_speedup_b32"),
        ("minilm", "served_vs_inprocess"),
        ("digits", "first_request_warmup"),
    }
    assert all(t["status"] == results.DRY_RUN and t["met"] is None for t in data["targets"])

    for name in ("digits", "digits_fp16"):
        config = (out / "gpu-configs" / name / "config.pbtxt").read_text()
        assert "KIND_GPU" in config and "KIND_CPU" not in config
    # Generation: the GPU configs as export --target gpu writes them, and the measurement run on tiny steps.
    for name, steps in (("text_generator", "smollm2_decode"), ("text_generator_fp16", "smollm2_decode_fp16")):
        config = (out / "gpu-configs" / name / "config.pbtxt").read_text()
        assert "KIND_GPU" in config and "KIND_CPU" not in config and f'"{steps}"' in config, config
        assert 'string_value: "inprocess"' in config
    generated = [f for f in data["figures"] if f["name"] == "generation_tokens_per_s"]
    assert {(f["variant"], f["streams"]) for f in generated} == {
        (f"torchscript/{p}", n) for p in ("fp32", "fp16") for n in (1, 2)
    }
    assert all(f["code_path_value"] > 0 for f in generated)
    assert "would install" in data["steps"][0]["detail"]
    markdown = (out / "results.md").read_text()
    assert "## Targets" in markdown and results.DRY_RUN in markdown


@pytest.mark.skipif(not CUDA, reason=NO_CUDA)
@pytest.mark.timeout(900)
def test_gpu_check(tmp_path):
    out = tmp_path / "out"
    proc = run_check(out, timeout=880)
    data = load_results(out)
    print((out / "results.md").read_text())
    assert proc.returncode == 0, f"{proc.stdout[-6000:]}\n{proc.stderr[-3000:]}"
    assert data["mode"] == "gpu"
    assert not [s for s in data["steps"] if s["status"].startswith("failed")]
    measured = {(f["name"], f["model"], f["variant"]) for f in data["figures"] if f["status"] == results.MEASURED}
    for model in state.MODELS:
        for variant in ("torchscript/fp32", "torchscript/fp16"):
            assert ("throughput_b32", model, variant) in measured
        assert ("served_throughput_c64", model, "torchscript/fp16") in measured
    assert all(t["status"] in ("met", "missed") for t in data["targets"]), data["targets"]
