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
11. stop, then targets.

``--dry-run`` runs every step that needs no CUDA on a CPU machine: ``digits`` only, exported for
the CPU target into a temporary repository, GPU-target configs generated and checked, the CPU
server started on free ports and checked over HTTP and gRPC, the measurement code run with tiny
sizes; every CUDA figure is recorded as ``skipped: dry run (no CUDA)``.

Heavy imports (torch, the exporters) happen inside the steps, so the ``spawn``-ed load workers
that re-import this module stay light.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import platform
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

from deploy.gpu import results as res
from deploy.gpu import wheels

MODELS = ("digits", "efficientnet_lite0", "minilm")
SERVED_VARIANTS = ("torchscript/fp32", "torchscript/fp16")
OPTIONAL_VARIANTS = ("torch-tensorrt/fp16", "onnx/fp32", "onnx/fp16")
FIRST_REQUEST_VARIANT = "torchscript/fp16"
OPTIONAL_EXPORT_BUDGET_S = 240
"""Torch-TensorRT and ONNX Runtime TensorRT build engines per shape; none starts after this many seconds."""
NOWARM_SUFFIX = "_nowarm"
STEPS = ("wheels", "environment", "export", "configs", "inprocess", "serve", "answers", "served_throughput",
         "gpu_memory", "first_request", "stop", "targets")


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


DRY_SIZES = Sizes(throughput_batch=4, seq_len=16, bench_seconds=0.1, bench_min_iters=3, concurrency=4,
                  served_seconds=1.0, load_processes=2, steady_requests=10, ready_timeout_s=240.0)


class Run:
    """Collects steps, exports and figures; writes the results after every step."""

    def __init__(self, out_dir: Path, dry_run: bool, models: tuple[str, ...]):
        self.out_dir = Path(out_dir)
        self.dry_run = dry_run
        self.models = models
        self.sizes = DRY_SIZES if dry_run else Sizes()
        self.started = time.time()
        self.results = {"tritonkit_gpu_check": 1, "mode": "dry-run" if dry_run else "gpu",
                        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "models": list(models),
                        "environment": {}, "steps": [], "exports": [], "figures": [], "targets": [],
                        "details": {}}
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
        print(f"   {status} ({seconds:.1f} s)" + (f": {detail}" if detail and not status.startswith("failed") else ""),
              flush=True)
        if status.startswith("failed"):
            print(detail, flush=True)
        self.write()
        return status == "ok"

    def skip(self, name: str, reason: str) -> None:
        self.results["steps"].append({"name": name, "status": reason, "seconds": 0.0, "detail": ""})
        print(f"== {name}\n   {reason}", flush=True)

    def figure(self, name: str, model: str, unit: str, value: float | None = None, variant: str = "",
               cuda_only: bool = True, status: str | None = None, **extra) -> None:
        """Record a figure; in a dry run a CUDA figure keeps its CPU value only as ``code_path_value``."""
        if status is None:
            status = res.DRY_RUN if (self.dry_run and cuda_only) else res.MEASURED
        if status != res.MEASURED and value is not None:
            extra["code_path_value"] = value
        self.results["figures"].append(res.figure(name, model, value, unit, status, variant, **extra))

    def write(self) -> None:
        self.results["seconds"] = round(time.time() - self.started, 1)
        res.write(self.results, self.out_dir)


# -- helpers --------------------------------------------------------------------------------------
def free_ports(count: int = 3) -> list[int]:
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def on_device(model, device: str):
    """The zoo model with its eager module and every input it makes on ``device``.

    Parity then compares the export with eager FP32 run on the same device (the GPU), and the
    converters trace on that device. ``export.formats.tensorrt`` moves the module back to the CPU
    after compiling, so :func:`export_variants` moves it again before each variant.
    """
    if device == "cpu":
        return model
    base_random = model.random_inputs

    def random_inputs(batch, seq_len, generator):
        return tuple(x.to(device) for x in base_random(batch, seq_len, generator))

    return dataclasses.replace(
        model, module=model.module.to(device).eval(), random_inputs=random_inputs,
        example_inputs=tuple(x.to(device) for x in model.example_inputs),
        reference_inputs=tuple(x.to(device) for x in model.reference_inputs),
    )


@contextlib.contextmanager
def pinned(module, active: bool = True):
    """Keep ``module`` where it is while a converter runs.

    ``export.formats.tensorrt.convert`` ends with ``zoo.module.to("cpu")``; the parity check that
    follows it would then run the eager reference on the CPU with CUDA inputs. Inside this block
    ``module.to`` returns the module unmoved.
    """
    if not active:
        yield module
        return
    module.to = lambda *args, **kwargs: module
    try:
        yield module
    finally:
        del module.to


def optional_toolchains() -> dict[str, str]:
    """Per optional variant: ``ok`` or why it is skipped (``skipped: not installed ...``)."""
    import importlib.util

    found = {}
    if importlib.util.find_spec("torch_tensorrt") is None:
        found["torch-tensorrt/fp16"] = f"{res.NOT_INSTALLED} (torch_tensorrt)"
    else:
        found["torch-tensorrt/fp16"] = "ok"
    try:
        import onnxruntime

        providers = onnxruntime.get_available_providers()
    except ImportError:
        providers = None
    if providers is None:
        found["onnx/fp32"] = found["onnx/fp16"] = f"{res.NOT_INSTALLED} (onnxruntime)"
    else:
        found["onnx/fp32"] = "ok" if "CUDAExecutionProvider" in providers else \
            f"{res.NOT_INSTALLED} (onnxruntime has no CUDAExecutionProvider: install onnxruntime-gpu)"
        found["onnx/fp16"] = "ok" if "TensorrtExecutionProvider" in providers else \
            f"{res.NOT_INSTALLED} (onnxruntime has no TensorrtExecutionProvider)"
    return found


def parse_nvidia_smi_apps(text: str) -> dict[int, float]:
    """``nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits`` -> {pid: MiB}."""
    usage: dict[int, float] = {}
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 2 and parts[0].isdigit():
            try:
                usage[int(parts[0])] = usage.get(int(parts[0]), 0.0) + float(parts[1])
            except ValueError:
                continue
    return usage


def model_of_stub(cmdline: list[str], repository: Path, names: set[str]) -> str | None:
    """Which served model a Python-backend stub process runs, from its command line."""
    text = " ".join(cmdline)
    for name in sorted(names, key=len, reverse=True):
        if re.search(rf"{re.escape(str(repository))}/{re.escape(name)}(/|\s|$)", text):
            return name
    return None


def within(actual, expected, tolerance) -> tuple[bool, float]:
    import numpy as np

    actual, expected = np.asarray(actual, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    if actual.shape != expected.shape:
        return False, float("inf")
    diff = np.abs(actual - expected)
    return bool((diff <= tolerance.atol + tolerance.rtol * np.abs(expected)).all()), float(diff.max())


# -- the check ------------------------------------------------------------------------------------
class Check(Run):
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

    # 1
    def wheels(self):
        rows = wheels.plan(self.wheel_dir)
        total = wheels.summary(rows)
        self.results["details"]["wheels"] = {"directory": str(self.wheel_dir), "rows": rows, "summary": total}
        if total["no_wheel"] and not self.dry_run:
            return f"failed: not installed and no wheel: {', '.join(total['no_wheel'])}", ""
        would = "would install" if self.dry_run else "to install"
        return "ok", (f"{total['present']}/{total['listed']} present; {would}: "
                      f"{', '.join(total['to_install']) or 'nothing'} ({total['to_install_bytes'] / 1e6:.1f} MB); "
                      f"all listed wheels {total['listed_bytes'] / 1e6:.1f} MB")

    # 2
    def environment(self):
        import torch

        from deploy.server import TritonDistribution

        env = self.results["environment"]
        env.update(python=platform.python_version(), torch=torch.__version__, cuda=torch.version.cuda,
                   cuda_available=torch.cuda.is_available())
        if torch.cuda.is_available():
            env["gpu"] = torch.cuda.get_device_name(0)
            env["gpu_count"] = torch.cuda.device_count()
        dist = TritonDistribution.find()
        env["tritonserver"] = str(dist.binary)
        self.toolchains = optional_toolchains()
        env["optional"] = ", ".join(f"{v}: {s}" for v, s in self.toolchains.items())
        if not self.dry_run and not torch.cuda.is_available():
            return "failed: torch sees no CUDA device (use --dry-run on a CPU machine)", ""
        return "ok", f"torch {torch.__version__}, cuda {torch.version.cuda}, {env.get('gpu', 'no GPU')}"

    # 3
    def export(self):
        from export import catalog, zoo
        from export.pipeline import export_entry
        from export.variants import Variant

        failures = []
        for name in self.models:
            entry = catalog.entry(name)
            self.entries[name] = entry
            model = on_device(zoo.build(entry.builder), self.device)
            self.zoo[name] = model
            wanted = list(SERVED_VARIANTS) + list(OPTIONAL_VARIANTS)
            for text in wanted:
                variant = Variant.parse(text)
                served_as = variant.model_name(name)
                record = {"model": name, "variant": text, "served_as": served_as}
                if text in OPTIONAL_VARIANTS:
                    reason = res.DRY_RUN if self.dry_run else self.toolchains.get(text, "ok")
                    if reason == "ok" and time.time() - self.started > OPTIONAL_EXPORT_BUDGET_S:
                        reason = (f"skipped: time budget (optional exports start only in the first "
                                  f"{OPTIONAL_EXPORT_BUDGET_S} s, so the check ends within 10 minutes)")
                    if reason != "ok":
                        self.results["exports"].append({**record, "status": reason})
                        continue
                if variant.precision not in model.tolerances:
                    self.results["exports"].append({**record, "status": f"skipped: {name} has no {variant.precision} tolerance"})
                    continue
                if self.device != "cpu":
                    model.module.to(self.device)
                with pinned(model.module, active=variant.format == "torch-tensorrt"):
                    done = export_entry(entry, self.repository, self.target, [variant], force=True, model=model,
                                        **self.overrides(entry))[0]
                r = done.result
                self.results["exports"].append({
                    **record, "status": r.status if r.status != "skipped" else f"skipped: {r.message}",
                    "max_abs_error": r.max_abs_error, "max_rel_error": r.max_rel_error, "atol": r.atol,
                    "real_data": r.real_data, "message": r.message if r.status != "skipped" else "",
                    "seconds": r.seconds, "device": self.device})
                print(f"   {served_as:<28} {text:<20} {r.status:<9} {r.details()}", flush=True)
                if text in SERVED_VARIANTS:
                    if r.ok:
                        self.served.setdefault(name, {})[text] = served_as
                    else:
                        failures.append(f"{served_as} {r.status}")
                elif r.status in ("failed", "mismatch"):
                    failures.append(f"{served_as} {r.status}")
        if failures:  # the variants that passed are still served and measured
            return f"failed: {'; '.join(failures)}", f"served: {sorted(n for v in self.served.values() for n in v.values())}"
        kept = sum(len(v) for v in self.served.values())
        return "ok", f"{kept} served variants passed parity on {self.device}"

    def overrides(self, entry) -> dict:
        if self.dry_run:  # one instance each: the dry run shares 2 cores with everything else
            return {"instance_groups": [{"count": 1, "kind": "KIND_CPU"}]}
        # Let Triton hand GPU-resident inputs to the runtime as they are (DLPack), not via host memory.
        params = dict(entry.settings.get("parameters") or {})
        params["FORCE_CPU_ONLY_INPUT_TENSORS"] = "no"
        return {"parameters": params}

    # 4
    def configs(self):
        from google.protobuf import text_format
        from tritonclient.grpc import model_config_pb2 as mc

        from export import config as config_io
        from export.variants import Variant

        checked, problems = [], []
        out = self.out_dir / "gpu-configs"
        for name in self.models:
            entry, model = self.entries[name], self.zoo[name]
            for text in SERVED_VARIANTS:
                variant = Variant.parse(text)
                overrides = {} if self.dry_run else self.overrides(entry)
                spec = entry.spec(model, variant, "gpu", **overrides)
                rendered = config_io.render(spec)
                parsed = text_format.Parse(rendered, mc.ModelConfig())
                if text_format.MessageToString(parsed) != text_format.MessageToString(config_io.to_model_config(spec)):
                    problems.append(f"{spec.name}: round trip changed the config")
                kinds = {mc.ModelInstanceGroup.Kind.Name(g.kind) for g in parsed.instance_group}
                if kinds != {"KIND_GPU"}:
                    problems.append(f"{spec.name}: instance kinds {sorted(kinds)}")
                config_io.write(spec, out)
                if not self.dry_run:  # the served file is the one the export wrote
                    served = config_io.parse(self.repository / spec.name / "config.pbtxt")
                    if {mc.ModelInstanceGroup.Kind.Name(g.kind) for g in served.instance_group} != {"KIND_GPU"}:
                        problems.append(f"{spec.name}: served config is not KIND_GPU")
                checked.append(spec.name)
        if problems:
            return f"failed: {'; '.join(problems)}", ""
        return "ok", f"KIND_GPU and round trip ok: {', '.join(checked)} (written under {out})"

    # 5
    def inprocess(self):
        import torch

        from export.variants import Variant

        sizes = self.sizes
        for name, variants in self.served.items():
            model, entry = self.zoo[name], self.entries[name]
            seq = sizes.seq_len if model.seq_lengths else None
            generator = torch.Generator().manual_seed(0)
            big = tuple(x.to(self.device) for x in model.random_inputs(sizes.throughput_batch, seq, generator))
            one = tuple(x.to(self.device) for x in model.random_inputs(sizes.latency_batch, seq, generator))
            max_batch = entry.settings.get("max_batch_size") or sizes.throughput_batch
            limit_batch = min(max_batch, sizes.throughput_batch) if self.dry_run else max_batch
            limit_inputs = tuple(x.to(self.device) for x in model.random_inputs(limit_batch, seq, generator))
            for text, served_as in variants.items():
                module = torch.jit.load(str(self.repository / served_as / "1" / Variant.parse(text).filename),
                                        map_location=self.device).eval()
                run = self.runner(module)
                tput = self.bench(run, big)
                lat = self.bench(run, one)
                self.figure("throughput_b32", name, "items/s", tput["items_per_s"], text,
                            batch=sizes.throughput_batch, seq_len=seq)
                self.figure("latency_b1_p50", name, "ms", lat["p50_ms"], text, batch=sizes.latency_batch, seq_len=seq)
                if text == FIRST_REQUEST_VARIANT:
                    limit = self.bench(run, limit_inputs)
                    self.figure("inprocess_limit", name, "items/s", limit["items_per_s"], text, batch=limit_batch,
                                seq_len=seq)
                del module
            if self.device == "cuda":
                torch.cuda.empty_cache()
        return "ok", f"{len(self.served)} models, batch {sizes.throughput_batch} and {sizes.latency_batch}"

    def runner(self, module):
        import torch

        def run(*inputs):
            with torch.inference_mode():
                return module(*inputs)

        return run

    def bench(self, run, inputs) -> dict:
        import torch

        sync = torch.cuda.synchronize if self.device == "cuda" else (lambda: None)
        for _ in range(3):  # the profiling executor specialises on the first calls
            run(*inputs)
        sync()
        times, started = [], time.perf_counter()
        while len(times) < self.sizes.bench_min_iters or (
                time.perf_counter() - started < self.sizes.bench_seconds and len(times) < 5000):
            t0 = time.perf_counter()
            run(*inputs)
            sync()
            times.append(time.perf_counter() - t0)
        batch = int(inputs[0].shape[0])
        return {"p50_ms": statistics.median(times) * 1e3, "items_per_s": batch * len(times) / sum(times),
                "calls": len(times)}

    # 6
    def serve(self):
        from deploy.server import LocalServer, ServerConfig
        from export import config as config_io

        load = []
        for name, variants in self.served.items():
            load += list(variants.values())
            warm = variants.get(FIRST_REQUEST_VARIANT)
            if warm:  # the same model with its warmup removed, for the first-request comparison
                cold = warm + NOWARM_SUFFIX
                shutil.copytree(self.repository / warm, self.repository / cold, dirs_exist_ok=True)
                config = config_io.parse(self.repository / cold / "config.pbtxt")
                config.name = cold
                del config.model_warmup[:]
                from google.protobuf import text_format

                (self.repository / cold / "config.pbtxt").write_text(text_format.MessageToString(config))
                load.append(cold)
        http, grpc, metrics = free_ports()
        config = ServerConfig(model_repository=self.repository, http_port=http, grpc_port=grpc, metrics_port=metrics,
                              load_models=tuple(load), ready_timeout_s=self.sizes.ready_timeout_s, exit_timeout_s=10)
        self.server = LocalServer(config, workdir=self.workdir / "server")
        started = time.perf_counter()
        self.server.start()
        self.results["details"]["ready_seconds"] = round(time.perf_counter() - started, 2)
        return "ok", (f"ready in {time.perf_counter() - started:.1f} s on HTTP {config.http_url}, gRPC {config.grpc_url}; "
                      f"{len(self.server.stub_pids())} stub processes; models {', '.join(load)}")

    # 7
    def answers(self):
        import torch

        from deploy.client import connect, infer

        # The first requests go to the first-request step; this one answers the other variants first.
        checked, problems = [], []
        for name, variants in self.served.items():
            model = self.zoo[name]
            seq = self.sizes.seq_len if model.seq_lengths else None
            inputs = model.random_inputs(self.sizes.answer_batch, seq, torch.Generator().manual_seed(1))
            with torch.no_grad():
                expected = model.module(*[x.to(self.device) for x in inputs])
            expected = expected if isinstance(expected, tuple) else (expected,)
            expected = [e.float().cpu().numpy() for e in expected]
            payload = {t.name: x.cpu().numpy() for t, x in zip(model.inputs, inputs)}
            for text, served_as in variants.items():
                tolerance = model.tolerances[text.split("/")[1]]
                for protocol in ("http", "grpc"):
                    url = self.server.config.http_url if protocol == "http" else self.server.config.grpc_url
                    client = connect(protocol, url)
                    try:
                        got = infer(client, served_as, payload, [t.name for t in model.outputs])
                    finally:
                        client.close()
                    for out, exp in zip(model.outputs, expected):
                        ok, err = within(got[out.name], exp, tolerance)
                        checked.append(f"{served_as}/{protocol} {err:.1e}")
                        self.results["details"].setdefault("answers", []).append(
                            {"model": served_as, "protocol": protocol, "output": out.name, "max_abs_error": err,
                             "atol": tolerance.atol, "rtol": tolerance.rtol, "ok": ok})
                        if not ok:
                            problems.append(f"{served_as} over {protocol}: max |served - eager| {err:.2e} "
                                            f"> atol {tolerance.atol:.0e} + rtol {tolerance.rtol:.0e}")
        if problems:
            return f"failed: {'; '.join(problems)}", ""
        return "ok", "max |served - eager|: " + ", ".join(checked)

    # 8
    def served_throughput(self):
        import torch

        from deploy.gpu import load

        for name, variants in self.served.items():
            served_as = variants.get(FIRST_REQUEST_VARIANT)
            if not served_as:
                continue
            model = self.zoo[name]
            seq = self.sizes.seq_len if model.seq_lengths else None
            inputs = {t.name: x.cpu().numpy() for t, x in
                      zip(model.inputs, model.random_inputs(1, seq, torch.Generator().manual_seed(2)))}
            figures = load.run(self.server.config.grpc_url, served_as, inputs, self.sizes.concurrency,
                               self.sizes.served_seconds, self.sizes.load_processes)
            self.results["details"].setdefault("served_throughput", {})[served_as] = figures
            if figures["errors"] or not figures["requests"]:
                return f"failed: {served_as}: {figures['errors']} errors, {figures['requests']} answers", ""
            self.figure("served_throughput_c64", name, "items/s", figures["items_per_s"], FIRST_REQUEST_VARIANT,
                        concurrency=self.sizes.concurrency, p50_ms=figures["p50_ms"], p99_ms=figures["p99_ms"])
        return "ok", f"concurrency {self.sizes.concurrency}, {self.sizes.served_seconds:.0f} s per model"

    # 9
    def gpu_memory(self):
        import psutil

        if self.dry_run:
            for name, variants in self.served.items():
                for text in variants:
                    self.figure("gpu_memory_per_instance", name, "MiB", None, text)
            # The command-line parsing is still exercised on the CPU stubs.
            names = set(self.server_models())
            found = {}
            for pid in self.server.stub_pids():
                try:
                    found[pid] = model_of_stub(psutil.Process(pid).cmdline(), self.repository, names)
                except psutil.Error:
                    pass
            self.results["details"]["stub_models"] = found
            return res.DRY_RUN, f"stubs mapped to models on CPU: {sorted(v for v in found.values() if v)}"
        smi = shutil.which("nvidia-smi")
        if smi is None:
            for name in self.served:
                self.figure("gpu_memory_per_instance", name, "MiB", status="skipped: nvidia-smi not found")
            return "skipped: nvidia-smi not found", ""
        text = subprocess.run([smi, "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                              capture_output=True, text=True, timeout=30).stdout
        usage = parse_nvidia_smi_apps(text)
        names = set(self.server_models())
        per_model: dict[str, list[float]] = {}
        for pid in self.server.stub_pids():
            try:
                owner = model_of_stub(psutil.Process(pid).cmdline(), self.repository, names)
            except psutil.Error:
                continue
            if owner and pid in usage:
                per_model.setdefault(owner, []).append(usage[pid])
        self.results["details"]["gpu_memory"] = {"nvidia_smi": usage, "per_model": per_model,
                                                 "server_pid_mib": usage.get(self.server.process.pid)}
        for name, variants in self.served.items():
            for text, served_as in variants.items():
                values = per_model.get(served_as)
                if values:
                    self.figure("gpu_memory_per_instance", name, "MiB", max(values), text, instances=len(values),
                                all_instances_mib=values)
                else:
                    self.figure("gpu_memory_per_instance", name, "MiB", variant=text,
                                status="skipped: no stub of this model in nvidia-smi")
        return "ok", ", ".join(f"{m}: {v} MiB" for m, v in per_model.items())

    def server_models(self) -> list[str]:
        names = [n for v in self.served.values() for n in v.values()]
        return names + [v[FIRST_REQUEST_VARIANT] + NOWARM_SUFFIX for v in self.served.values()
                        if FIRST_REQUEST_VARIANT in v]

    # 10
    def first_request(self):
        import torch

        from deploy.client import connect, infer

        client = connect("grpc", self.server.config.grpc_url)
        try:
            client.is_server_ready()
            for name, variants in self.served.items():
                warm = variants.get(FIRST_REQUEST_VARIANT)
                if not warm:
                    continue
                model = self.zoo[name]
                seq = self.sizes.seq_len if model.seq_lengths else None
                payload = {t.name: x.cpu().numpy() for t, x in
                           zip(model.inputs, model.random_inputs(1, seq, torch.Generator().manual_seed(3)))}
                firsts = {}
                for served_as in (warm, warm + NOWARM_SUFFIX):
                    t0 = time.perf_counter()
                    infer(client, served_as, payload)
                    firsts[served_as] = (time.perf_counter() - t0) * 1e3
                steady = []
                for _ in range(self.sizes.steady_requests):
                    t0 = time.perf_counter()
                    infer(client, warm, payload)
                    steady.append((time.perf_counter() - t0) * 1e3)
                p50 = statistics.median(steady)
                self.figure("first_request_warmup", name, "ms", firsts[warm], FIRST_REQUEST_VARIANT)
                self.figure("first_request_no_warmup", name, "ms", firsts[warm + NOWARM_SUFFIX], FIRST_REQUEST_VARIANT)
                self.figure("steady_p50", name, "ms", p50, FIRST_REQUEST_VARIANT, requests=len(steady))
        finally:
            client.close()
        return "ok", f"batch 1 over gRPC, steady p50 of {self.sizes.steady_requests} requests"

    # 11
    def stop(self):
        if self.server is None:
            return "skipped: no server", ""
        left = self.server.stop()
        self.server = None
        if left:
            return f"failed: left behind {left}", ""
        return "ok", "no stub process or /dev/shm region left"

    def targets(self):
        # A dry run still lists every target of the issue, for all three models, each skipped with the reason.
        models = MODELS if self.dry_run else self.models
        self.results["targets"] = res.targets(self.results["figures"], models,
                                              res.DRY_RUN if self.dry_run else res.NOT_MEASURED)
        for t in self.results["targets"]:
            value = "" if t["value"] is None else f"{t['value']:.2f} "
            print(f"   {t['model']:<20} {t['what']}: {value}({t['comparison']} {t['threshold']}) {t['status']}")
        if self.dry_run:
            return "ok", "targets computed; every figure they need is skipped in a dry run"
        missed = [f"{t['model']} {t['name']}" for t in self.results["targets"] if t["status"] == "missed"]
        return "ok", (f"missed: {', '.join(missed)}" if missed else "all computed targets met")

    # -- driver --------------------------------------------------------------------------------
    def run(self) -> int:
        try:
            order = [("wheels", self.wheels), ("environment", self.environment), ("export", self.export),
                     ("configs", self.configs), ("inprocess", self.inprocess), ("serve", self.serve)]
            needs_server = [("answers", self.answers), ("served_throughput", self.served_throughput),
                            ("gpu_memory", self.gpu_memory), ("first_request", self.first_request)]
            blocked = None
            for name, func in order:
                if blocked:
                    self.skip(name, f"skipped: {blocked} failed")
                    continue
                ok = self.step(name, func)
                # A failed export blocks the rest only when no served variant passed its parity check.
                if not ok and (name in ("environment", "serve") or (name == "export" and not self.served)):
                    blocked = name
            for name, func in needs_server:
                if self.server is None or blocked:
                    self.skip(name, f"skipped: {blocked or 'serve'} failed")
                else:
                    self.step(name, func)
            self.step("stop", self.stop)
            self.step("targets", self.targets)
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deploy.gpu.check", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir", type=Path, help="folder for results.md and results.json (created)")
    parser.add_argument("--dry-run", action="store_true",
                        help="no CUDA: digits only, CPU export and server, tiny sizes; CUDA figures are skipped")
    parser.add_argument("--models", nargs="+", choices=MODELS, default=None,
                        help=f"models to check (default: {' '.join(MODELS)}; digits in a dry run)")
    parser.add_argument("--wheels", type=Path, default=wheels.DEFAULT_DIR, help="folder of the brought wheels")
    parser.add_argument("--keep", action="store_true", help="keep the temporary repository and server log")
    args = parser.parse_args(argv)
    models = tuple(args.models or (("digits",) if args.dry_run else MODELS))
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    return Check(args.out_dir, args.dry_run, models, args.wheels, args.keep).run()


if __name__ == "__main__":
    sys.exit(main())
