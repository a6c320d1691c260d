"""The steps around the others: what is installed, what this host has, and the end.

Steps ``wheels``, ``environment``, ``stop`` and ``targets`` of the GPU check (:mod:`tritonkit.gpu.run`); each
takes the running ``Check`` and returns ``(status, detail)``.
"""

from __future__ import annotations

import platform

from tritonkit.gpu import results as res
from tritonkit.gpu import wheels as wheel_list
from tritonkit.gpu.state import MODELS, Check
from tritonkit.gpu.steps_export import optional_toolchains


def wheels(check: Check):
    rows = wheel_list.plan(check.wheel_dir, needs=wheel_list.needs(check.models, check.generation))
    total = wheel_list.summary(rows)
    check.results["details"]["wheels"] = {"directory": str(check.wheel_dir), "rows": rows, "summary": total}
    if total["no_wheel"] and not check.dry_run:
        return f"failed: not installed and no wheel: {', '.join(total['no_wheel'])}", ""
    would = "would install" if check.dry_run else "to install"
    return "ok", (
        f"{total['present']}/{total['listed']} present; {would}: "
        f"{', '.join(total['to_install']) or 'nothing'} ({total['to_install_bytes'] / 1e6:.1f} MB); "
        f"all listed wheels {total['listed_bytes'] / 1e6:.1f} MB"
    )


def environment(check: Check):
    import torch

    from deploy.server import TritonDistribution

    env = check.results["environment"]
    env.update(
        python=platform.python_version(),
        torch=torch.__version__,
        cuda=torch.version.cuda,
        cuda_available=torch.cuda.is_available(),
        # PyTorch's defaults, which the served runtime and the throughput figures keep (parity runs without TF32).
        tf32=f"cudnn {torch.backends.cudnn.allow_tf32}, matmul {torch.backends.cuda.matmul.allow_tf32}",
    )
    if torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name(0)
        env["gpu_count"] = torch.cuda.device_count()
    dist = TritonDistribution.find()
    env["tritonserver"] = str(dist.binary)
    check.toolchains = optional_toolchains()
    env["optional"] = ", ".join(f"{v}: {s}" for v, s in check.toolchains.items())
    if not check.dry_run and not torch.cuda.is_available():
        return "failed: torch sees no CUDA device (use --dry-run on a CPU machine)", ""
    return "ok", f"torch {torch.__version__}, cuda {torch.version.cuda}, {env.get('gpu', 'no GPU')}"


def stop(check: Check):
    if check.server is None:
        return "skipped: no server", ""
    left = check.server.stop()
    check.server = None
    if left:
        return f"failed: left behind {left}", ""
    return "ok", "no stub process or /dev/shm region left"


def targets(check: Check):
    # A dry run still lists every target of the issue, for all three models, each skipped with the reason.
    models = MODELS if check.dry_run else check.models
    check.results["targets"] = res.targets(
        check.results["figures"], models, res.DRY_RUN if check.dry_run else res.NOT_MEASURED
    )
    for t in check.results["targets"]:
        value = "" if t["value"] is None else f"{t['value']:.2f} "
        print(f"   {t['model']:<20} {t['what']}: {value}({t['comparison']} {t['threshold']}) {t['status']}")
    if check.dry_run:
        return "ok", "targets computed; every figure they need is skipped in a dry run"
    missed = [f"{t['model']} {t['name']}" for t in check.results["targets"] if t["status"] == "missed"]
    return "ok", (f"missed: {', '.join(missed)}" if missed else "all computed targets met")
