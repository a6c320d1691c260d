"""The GPU check's state: the sizes of each measurement and the ``Check`` every step reads and fills in.

The steps (``steps_host``, ``steps_export``, ``steps_serve``, ``measure``, ``generation``) import this module
and nothing imports them but ``run``, so the check's modules import one way. Standard library only (and
``results``, pure logic): the ``spawn``-ed load workers that re-import the check stay light.
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
import traceback
from pathlib import Path

from tritonkit.gpu import results as res

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

    def __init__(
        self,
        out_dir: Path,
        dry_run: bool,
        models: tuple[str, ...],
        wheel_dir: Path,
        keep: bool,
        generation: bool = True,
    ):
        super().__init__(out_dir, dry_run, models)
        self.wheel_dir = wheel_dir
        self.keep = keep
        self.generation = generation
        """False with ``--no-generation``: the generation step is recorded as skipped."""
        self.results["generation"] = generation
        self.workdir = Path(tempfile.mkdtemp(prefix="tritonkit-gpu-check-"))
        self.repository = self.workdir / "model_repository"
        self.zoo: dict = {}
        self.entries: dict = {}
        self.served: dict[str, dict[str, str]] = {}  # model -> variant -> served name
        self.server = None
        self.toolchains: dict[str, str] = {}
