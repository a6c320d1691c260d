"""The measurements of the GPU check: in-process throughput and latency, served throughput, GPU memory.

Steps ``inprocess``, ``served_throughput`` and ``gpu_memory`` of the GPU check (:mod:`tritonkit.gpu.run`); each
takes the running ``Check``, records figures on it, and returns ``(status, detail)``.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from pathlib import Path

from tritonkit.gpu import results as res
from tritonkit.gpu.state import Check
from tritonkit.gpu.steps_serve import FIRST_REQUEST_VARIANT, server_models


def inprocess(check: Check):
    import torch

    from export.variants import Variant

    sizes = check.sizes
    for name, variants in check.served.items():
        model, entry = check.zoo[name], check.entries[name]
        seq = sizes.seq_len if model.seq_lengths else None
        generator = torch.Generator().manual_seed(0)
        big = tuple(x.to(check.device) for x in model.random_inputs(sizes.throughput_batch, seq, generator))
        one = tuple(x.to(check.device) for x in model.random_inputs(sizes.latency_batch, seq, generator))
        max_batch = entry.settings.get("max_batch_size") or sizes.throughput_batch
        limit_batch = min(max_batch, sizes.throughput_batch) if check.dry_run else max_batch
        limit_inputs = tuple(x.to(check.device) for x in model.random_inputs(limit_batch, seq, generator))
        for text, served_as in variants.items():
            module = torch.jit.load(
                str(check.repository / served_as / "1" / Variant.parse(text).filename), map_location=check.device
            ).eval()
            run = runner(module)
            tput = bench(check, run, big)
            lat = bench(check, run, one)
            check.figure(
                "throughput_b32", name, "items/s", tput["items_per_s"], text, batch=sizes.throughput_batch, seq_len=seq
            )
            check.figure("latency_b1_p50", name, "ms", lat["p50_ms"], text, batch=sizes.latency_batch, seq_len=seq)
            if text == FIRST_REQUEST_VARIANT:
                limit = bench(check, run, limit_inputs)
                check.figure(
                    "inprocess_limit", name, "items/s", limit["items_per_s"], text, batch=limit_batch, seq_len=seq
                )
            del module
        if check.device == "cuda":
            torch.cuda.empty_cache()
    return "ok", f"{len(check.served)} models, batch {sizes.throughput_batch} and {sizes.latency_batch}"


def runner(module):
    import torch

    def run(*inputs):
        with torch.inference_mode():
            return module(*inputs)

    return run


def bench(check: Check, run, inputs) -> dict:
    import torch

    from loadtest.core.client_stats import percentile  # numpy: kept out of the check's stdlib-only start

    sync = torch.cuda.synchronize if check.device == "cuda" else (lambda: None)
    for _ in range(3):  # the profiling executor specialises on the first calls
        run(*inputs)
    sync()
    times, started = [], time.perf_counter()
    while len(times) < check.sizes.bench_min_iters or (
        time.perf_counter() - started < check.sizes.bench_seconds and len(times) < 5000
    ):
        t0 = time.perf_counter()
        run(*inputs)
        sync()
        times.append(time.perf_counter() - t0)
    batch = int(inputs[0].shape[0])
    return {
        "p50_ms": percentile(times, 50.0) * 1e3,
        "items_per_s": batch * len(times) / sum(times),
        "calls": len(times),
    }


def served_throughput(check: Check):
    import torch

    from tritonkit.gpu import load

    failed, notes = [], []
    for name, variants in check.served.items():
        served_as = variants.get(FIRST_REQUEST_VARIANT)
        if not served_as:
            continue
        model = check.zoo[name]
        seq = check.sizes.seq_len if model.seq_lengths else None
        inputs = {
            t.name: x.cpu().numpy()
            for t, x in zip(model.inputs, model.random_inputs(1, seq, torch.Generator().manual_seed(2)), strict=True)
        }
        figures = load.run(
            check.server.config.grpc_url,
            served_as,
            inputs,
            check.sizes.concurrency,
            check.sizes.served_seconds,
            check.sizes.load_processes,
        )
        check.results["details"].setdefault("served_throughput", {})[served_as] = figures
        if figures["errors"] or not figures["requests"]:
            failed.append(f"{served_as}: {figures['errors']} errors, {figures['requests']} answers")
            continue
        check.figure(
            "served_throughput_c64",
            name,
            "items/s",
            figures["items_per_s"],
            FIRST_REQUEST_VARIANT,
            concurrency=check.sizes.concurrency,
            p50_ms=figures["p50_ms"],
            p99_ms=figures["p99_ms"],
            rejected=figures["rejected"],
        )
        if figures["rejected"]:
            notes.append(f"{served_as}: {figures['rejected']} requests refused by its queue policy (not counted)")
    if failed:
        return f"failed: {'; '.join(failed)}", "; ".join(notes)
    return "ok", f"concurrency {check.sizes.concurrency}, {check.sizes.served_seconds:.0f} s per model" + "".join(
        f"; {n}" for n in notes
    )


def gpu_memory(check: Check):
    import psutil

    if check.dry_run:
        for name, variants in check.served.items():
            for text in variants:
                check.figure("gpu_memory_per_instance", name, "MiB", None, text)
        # The command-line parsing is still exercised on the CPU stubs.
        names = set(server_models(check))
        found = {}
        for pid in check.server.stub_pids():
            try:
                found[pid] = model_of_stub(psutil.Process(pid).cmdline(), check.repository, names)
            except psutil.Error:
                pass
        check.results["details"]["stub_models"] = found
        return res.DRY_RUN, f"stubs mapped to models on CPU: {sorted(v for v in found.values() if v)}"
    smi = shutil.which("nvidia-smi")
    if smi is None:
        for name in check.served:
            check.figure("gpu_memory_per_instance", name, "MiB", status="skipped: nvidia-smi not found")
        return "skipped: nvidia-smi not found", ""
    text = subprocess.run(
        [smi, "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout
    usage = parse_nvidia_smi_apps(text)
    names = set(server_models(check))
    per_model: dict[str, list[float]] = {}
    for pid in check.server.stub_pids():
        try:
            owner = model_of_stub(psutil.Process(pid).cmdline(), check.repository, names)
        except psutil.Error:
            continue
        if owner and pid in usage:
            per_model.setdefault(owner, []).append(usage[pid])
    check.results["details"]["gpu_memory"] = {
        "nvidia_smi": usage,
        "per_model": per_model,
        "server_pid_mib": usage.get(check.server.process.pid),
    }
    for name, variants in check.served.items():
        for text, served_as in variants.items():
            values = per_model.get(served_as)
            if values:
                check.figure(
                    "gpu_memory_per_instance",
                    name,
                    "MiB",
                    max(values),
                    text,
                    instances=len(values),
                    all_instances_mib=values,
                )
            else:
                check.figure(
                    "gpu_memory_per_instance",
                    name,
                    "MiB",
                    variant=text,
                    status="skipped: no stub of this model in nvidia-smi",
                )
    return "ok", ", ".join(f"{m}: {v} MiB" for m, v in per_model.items())


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
