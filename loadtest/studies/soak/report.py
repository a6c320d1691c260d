"""The soak's outputs (``loadtest.studies.soak.command``): ``summary.md`` (the checks, the saturation search, p99 per
window) and ``soak.png`` (p99 per window and per second; memory over time), beside ``results.json``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from loadtest.generators.saturation import KEEP_UP, KNEE
from loadtest.reports.writer import ms_text, save_report


def cpu_text(server_cpus: list[int] | None, client_cpus: list[int] | None) -> str:
    if not server_cpus and not client_cpus:
        return "Server and load generator shared the CPUs."
    return f"Server and stubs on CPUs {server_cpus or 'any'}, load generator on CPUs {client_cpus or 'any'}."


def summary_md(data: dict[str, Any]) -> str:
    checks = data["checks"]
    lines = [
        f"# Soak: `{data['served_model']}` over {data['protocol']}",
        "",
        f"Started {data['started']}. Open-loop Poisson load from {data.get('generator', 'locust')} at "
        f"{data['fraction']:g} x {data['saturation_rps']:.1f} "
        f"req/s (saturation) = {data['rate']:.1f} req/s for {data['duration_s']:g} s; p99 in windows of "
        f"{data['window_s']:g} s; RSS of tritonserver and its stubs every {data['sample_s']:g} s. "
        f"{cpu_text(data.get('server_cpus'), data.get('client_cpus'))}",
        "",
        f"Served {data['requests']} requests ({data['throughput_rps']:.1f}/s), p99 overall "
        f"{ms_text(data['p99_ms'])} ms.",
        "",
        "## Checks",
        "",
        "| check | result | detail |",
        "|---|---|---|",
    ]
    lines += [f"| {c['name']} | {'PASS' if c['passed'] else 'FAIL'} | {c['detail']} |" for c in checks]
    search = data.get("saturation_search") or {}
    if search.get("open_loop"):
        lines += [
            "",
            "## Saturation",
            "",
            f"Closed loop: {search['closed_loop_rps']:.1f} req/s. Open loop, the highest "
            f"rate kept up with (completed >= {KEEP_UP:.0%} of it or within Poisson noise, no failure, p99 <= "
            f"{KNEE:g}x the lowest step's):",
            "",
            "| offered req/s | completed req/s | p99 ms | failures |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {s['rate']:g} | {s['throughput_rps']:g} | {ms_text(s['p99_ms'])} | {s['failures']} |"
            for s in search["open_loop"]
        ]
    lines += [
        "",
        "## p99 per window",
        "",
        "| from s | requests | failures | p50 ms | p99 ms |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {w['t']:g} | {w['requests']} | {w['failures']} | {ms_text(w['p50_ms'])} | {ms_text(w['p99_ms'])} |"
        for w in data["windows"]
    ]
    if data.get("plot"):
        lines += ["", f"![soak]({data['plot']})"]
    lines += [
        "",
        "**PASS**: every check held." if data["passed"] else "",
        "**FAIL**: " + "; ".join(c["name"] for c in checks if not c["passed"]) if not data["passed"] else "",
    ]
    return "\n".join(line for line in lines).rstrip() + "\n"


def plot(data: dict[str, Any], path: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6.5), sharex=True)
    seconds = [p for p in data["timeline"] if p.get("p99_ms") is not None]
    top.plot(
        [p["t"] for p in seconds], [p["p99_ms"] for p in seconds], color="0.75", linewidth=0.8, label="p99 per second"
    )
    windows = [w for w in data["windows"] if w.get("p99_ms") is not None]
    top.step(
        [w["t"] for w in windows] + ([windows[-1]["t"] + windows[-1]["length_s"]] if windows else []),
        [w["p99_ms"] for w in windows] + ([windows[-1]["p99_ms"]] if windows else []),
        where="post",
        color="C0",
        linewidth=2,
        label=f"p99 per {data['window_s']:g} s window",
    )
    top.set(ylabel="latency, ms", title=f"{data['served_model']}: {data['rate']:.0f} req/s open loop")
    top.legend(fontsize=8)
    samples = data["memory"]
    if samples:
        times = [s["t"] for s in samples]
        bottom.plot(
            times, [s["total_bytes"] / 2**20 for s in samples], color="C1", linewidth=2, label="tritonserver + stubs"
        )
        names = sorted({n for s in samples for n in s["processes"]})
        for name in names:
            bottom.plot(times, [s["processes"].get(name, math.nan) / 2**20 for s in samples], linewidth=0.8, label=name)
        bottom.axvline(data["memory_warmup_s"], color="0.5", linestyle=":", label="end of memory warm-up")
    bottom.set(xlabel="seconds since the load started", ylabel="RSS, MiB")
    bottom.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def write_outputs(data: dict[str, Any], out_dir: Path) -> list[Path]:
    """results.json (``data``, naming the plot), summary.md and soak.png (none without matplotlib)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    png = plot(data, out_dir / "soak.png")
    data["plot"] = png.name if png else None
    return save_report(data, out_dir, summary_md, plots=[png])
