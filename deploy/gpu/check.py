"""``python -m deploy.gpu.check OUT_DIR [--dry-run]``: the GPU paths, proven on one NVIDIA GPU, in one run.

Steps (each recorded in ``OUT_DIR/results.json`` with a status, and in ``OUT_DIR/results.md``):

1. wheels: which listed wheels this interpreter lacks (``check.sh`` installed them before this runs).
2. environment: torch, CUDA, the GPU, tritonserver, and which optional toolchains import.
3. export: ``digits``, ``efficientnet_lite0``, ``minilm`` for the GPU target through
   ``export.pipeline``: TorchScript FP32 and FP16 on CUDA, parity against eager FP32 *on the GPU*
   with the catalog's tolerances; Torch-TensorRT FP16 and ONNX Runtime CUDA (FP32) / TensorRT (FP16)
   when their packages import, else ``skipped: not installed``.
4. configs: each served config is ``KIND_GPU`` and survives a ``text_format`` round trip.
5. inprocess: per model, TorchScript FP32 vs FP16 throughput at batch 32 and latency at batch 1,
   and the in-process limit (FP16 at the model's max batch) that the served figure is compared with.
6. serve: the local tritonserver with ``KIND_GPU`` instances of the backends/pytorch runtime.
7. answers: HTTP and gRPC answers of every served variant against eager FP32.
8. served_throughput: dynamic batching at concurrency 64 (batch-1 requests over gRPC).
9. gpu_memory: GPU memory of each instance (stub process), from ``nvidia-smi``.
10. first_request: first request after ready with and without warmup, and the steady p50.
11. generation: text_generator on the GPU (``deploy/gpu/generation.py``): the SmolLM2 steps exported
    FP32 and FP16 with parity, the generator's GPU configs as ``export --target gpu`` writes them,
    tokens/s and mean time to first token for 1, 8 and 32 concurrent streams, in-flight batching on.
12. stop, then targets.

``--dry-run`` runs every step that needs no CUDA on a CPU machine: ``digits`` only, exported for
the CPU target into a temporary repository, GPU-target configs generated and checked, the CPU
server started on free ports and checked over HTTP and gRPC, the measurement code run with tiny
sizes; every CUDA figure is recorded as ``skipped: dry run (no CUDA)``.

Heavy imports (torch, the exporters) happen inside the steps, so the ``spawn``-ed load workers
that re-import this module stay light.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

from deploy.gpu import generation, measure, steps_export, steps_serve
from deploy.gpu import results as res
from deploy.gpu import wheels as wheel_list
from deploy.gpu.steps_export import optional_toolchains
from deploy.lifecycle import local_server

MODELS = ("digits", "efficientnet_lite0", "minilm")
STEPS = (
    "wheels",
    "environment",
    "export",
    "configs",
    "inprocess",
    "serve",
    "answers",
    "served_throughput",
    "gpu_memory",
    "first_request",
    "generation",
    "stop",
    "targets",
)


@dataclasses.dataclass(frozen=True)
class Sizes:
    """How much each measurement does: the real run's sizes, or tiny ones for the dry run."""

    throughput_batch: int = 32
    latency_batch: int = 1
    seq_len: int = 128
    bench_seconds: float = 2.0
    bench_min_iters: int = 20
    concurrency: int = 64
    served_seconds: float = 8.0
    load_processes: int = 8
    steady_requests: int = 200
    ready_timeout_s: float = 300.0
    answer_batch: int = 4


DRY_SIZES = Sizes(
    throughput_batch=4,
    seq_len=16,
    bench_seconds=0.1,
    bench_min_iters=3,
    concurrency=4,
    served_seconds=1.0,
    load_processes=2,
    steady_requests=10,
    ready_timeout_s=240.0,
)


class Run:
    """Collects steps, exports and figures; writes the results after every step."""

    def __init__(self, out_dir: Path, dry_run: bool, models: tuple[str, ...]):
        self.out_dir = Path(out_dir)
        self.dry_run = dry_run
        self.models = models
        self.sizes = DRY_SIZES if dry_run else Sizes()
        self.started = time.time()
        self.results = {
            "tritonkit_gpu_check": 1,
            "mode": "dry-run" if dry_run else "gpu",
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "models": list(models),
            "environment": {},
            "steps": [],
            "exports": [],
            "figures": [],
            "targets": [],
            "details": {},
        }
        self.device = "cpu" if dry_run else "cuda"
        self.target = "cpu" if dry_run else "gpu"

    # -- bookkeeping ---------------------------------------------------------------------------
    def step(self, name: str, func, *args) -> bool:
        print(f"== {name}", flush=True)
        started = time.perf_counter()
        try:
            status, detail = func(*args)
        except Exception as exc:  # noqa: BLE001 - a step's failure is its status, with the cause
            status = f"failed: {type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
            detail = traceback.format_exc(limit=6)
        seconds = time.perf_counter() - started
        self.results["steps"].append({"name": name, "status": status, "seconds": round(seconds, 2), "detail": detail})
        print(
            f"   {status} ({seconds:.1f} s)" + (f": {detail}" if detail and not status.startswith("failed") else ""),
            flush=True,
        )
        if status.startswith("failed"):
            print(detail, flush=True)
        self.write()
        return status == "ok"

    def skip(self, name: str, reason: str) -> None:
        self.results["steps"].append({"name": name, "status": reason, "seconds": 0.0, "detail": ""})
        print(f"== {name}\n   {reason}", flush=True)

    def figure(
        self,
        name: str,
        model: str,
        unit: str,
        value: float | None = None,
        variant: str = "",
        cuda_only: bool = True,
        status: str | None = None,
        **extra,
    ) -> None:
        """Record a figure; in a dry run a CUDA figure keeps its CPU value only as ``code_path_value``."""
        if status is None:
            status = res.DRY_RUN if (self.dry_run and cuda_only) else res.MEASURED
        if status != res.MEASURED and value is not None:
            extra["code_path_value"] = value
        self.results["figures"].append(res.figure(name, model, value, unit, status, variant, **extra))

    def write(self) -> None:
        self.results["seconds"] = round(time.time() - self.started, 1)
        res.write(self.results, self.out_dir)


class Check(Run):
    """The run's state, which every step (a function of this object) reads and fills in."""

    def __init__(self, out_dir: Path, dry_run: bool, models: tuple[str, ...], wheel_dir: Path, keep: bool):
        super().__init__(out_dir, dry_run, models)
        self.wheel_dir = wheel_dir
        self.keep = keep
        self.workdir = Path(tempfile.mkdtemp(prefix="tritonkit-gpu-check-"))
        self.repository = self.workdir / "model_repository"
        self.zoo: dict = {}
        self.entries: dict = {}
        self.served: dict[str, dict[str, str]] = {}  # model -> variant -> served name
        self.server = None
        self.toolchains: dict[str, str] = {}

    def run(self) -> int:
        # SIGTERM / Ctrl-C unwind the steps once, into the `finally` below that stops the server the serve step
        # started (its server outlives the step, so no `with` block of the step's own can hold it); the process
        # then exits 128 + signum (deploy/lifecycle.py).
        with local_server(None):
            return self._run()

    def _run(self) -> int:
        try:
            order = [
                ("wheels", wheels),
                ("environment", environment),
                ("export", steps_export.export),
                ("configs", steps_export.configs),
                ("inprocess", measure.inprocess),
                ("serve", steps_serve.serve),
            ]
            needs_server = [
                ("answers", steps_serve.answers),
                ("served_throughput", measure.served_throughput),
                ("gpu_memory", measure.gpu_memory),
                ("first_request", steps_serve.first_request),
            ]
            blocked = None
            for name, func in order:
                if blocked:
                    self.skip(name, f"skipped: {blocked} failed")
                    continue
                ok = self.step(name, func, self)
                # A failed export blocks the rest only when no served variant passed its parity check.
                if not ok and (name in ("environment", "serve") or (name == "export" and not self.served)):
                    blocked = name
            for name, func in needs_server:
                if self.server is None or blocked:
                    self.skip(name, f"skipped: {blocked or 'serve'} failed")
                else:
                    self.step(name, func, self)
            if blocked == "environment":
                self.skip("generation", "skipped: environment failed")
            else:  # its own exports and server: it does not need the others'
                self.step("generation", generation.generation, self)
            self.step("stop", stop, self)
            self.step("targets", targets, self)
        finally:
            if self.server is not None:
                self.server.stop()
            if not self.keep:
                shutil.rmtree(self.workdir, ignore_errors=True)
            self.write()
        failed = [s["name"] for s in self.results["steps"] if s["status"].startswith("failed")]
        md, js = self.out_dir / "results.md", self.out_dir / "results.json"
        print(f"\n{md.read_text()}\nresults: {md} and {js} ({self.results['seconds']:.0f} s)")
        if failed:
            print(f"check: failed steps: {', '.join(failed)}", file=sys.stderr)
            return 1
        return 0


# -- the steps around the others: what is installed, what this host has, and the end -------------
def wheels(check: Check):
    rows = wheel_list.plan(check.wheel_dir)
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m deploy.gpu.check", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("out_dir", type=Path, help="folder for results.md and results.json (created)")
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="no CUDA: digits only, CPU export and server, tiny sizes; CUDA figures are skipped",
    )
    parser.add_argument(
        "--models",
        nargs="+",
        choices=MODELS,
        default=None,
        help=f"models to check (default: {' '.join(MODELS)}; digits in a dry run)",
    )
    parser.add_argument("--wheels", type=Path, default=wheel_list.DEFAULT_DIR, help="folder of the brought wheels")
    parser.add_argument("--keep", action="store_true", help="keep the temporary repository and server log")
    args = parser.parse_args(argv)
    models = tuple(args.models or (("digits",) if args.dry_run else MODELS))
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    return Check(args.out_dir, args.dry_run, models, args.wheels, args.keep).run()


if __name__ == "__main__":
    sys.exit(main())
