"""The PNG plots of a campaign report (``loadtest.reports.campaign`` writes them into ``reports/<campaign>/plots/``):
latency against throughput (where a scenario swept its load), the percentiles per run, the batch sizes, where the
time goes and each run's timeline. Figures of a run of two or more trials carry their 95% interval as error bars.
A plot without data is still written, as a small "no data" image, so links never break.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from loadtest.core.client_stats import PERCENTILES, percentile_key
from loadtest.core.results import CampaignResult, RunResult

PCT_KEYS = [percentile_key(p) for p in PERCENTILES]
STACK = (
    ("client_network", "client+network"),
    ("queue", "queue"),
    ("compute_input", "compute input"),
    ("compute_infer", "compute infer"),
    ("compute_output", "compute output"),
)
"""Parts of the client's mean latency, in the order a request meets them."""
MAX_BATCH_PANELS = 12
DPI = 100


def num(value: Any) -> float | None:
    """A finite float, or None for missing, NaN and infinite values (runs where all requests failed)."""
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def lat(run: RunResult, key: str) -> float | None:
    return num(run.client.latency_ms.get(key))


def label(run: RunResult) -> str:
    return f"{run.scenario} / {run.variant}"


def _pyplot():
    """matplotlib's pyplot, imported when the first plot is drawn (the ``tritonkit`` command line imports this
    module), on the Agg backend: files only, never a window."""
    import matplotlib

    matplotlib.use("Agg")  # must precede the pyplot import
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path) -> Path:
    fig.savefig(path, dpi=DPI, bbox_inches="tight")
    _pyplot().close(fig)
    return path


def _no_data(path: Path, title: str, why: str) -> Path:
    fig, ax = _pyplot().subplots(figsize=(5, 2))
    ax.set_axis_off()
    ax.set_title(title)
    ax.text(0.5, 0.5, f"no data: {why}", ha="center", va="center", fontsize=12, color="grey")
    return _save(fig, path)


def _grid(n: int, width: float = 5.0, height: float = 3.5, ncols: int = 3) -> tuple[Any, list[Any]]:
    cols = min(n, ncols)
    rows = math.ceil(n / cols)
    fig, axes = _pyplot().subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False)
    flat = list(axes.flat)
    for ax in flat[n:]:
        ax.set_axis_off()
    return fig, flat[:n]


def with_intervals(runs: list[RunResult], key: str) -> tuple[list[float], Any]:
    """Each run's ``key`` latency (``p50``, ``p99``, ...) and matplotlib's asymmetric error bars: a run of two or
    more trials gives its interval's estimate and bounds (as its table row does), the others their pooled value
    and no bar; the bars are None when no run had an interval."""
    ys, bounds = [], []
    for r in runs:
        iv = r.interval(f"{key}_ms")  # None for a figure without intervals (p90) or a run of one trial
        if iv is not None and None not in (num(iv.estimate), num(iv.low), num(iv.high)):
            ys.append(iv.estimate)
            bounds.append((max(iv.estimate - iv.low, 0.0), max(iv.high - iv.estimate, 0.0)))
        else:
            ys.append(v if (v := lat(r, key)) is not None else math.nan)
            bounds.append((0.0, 0.0))
    if not any(lo or hi for lo, hi in bounds):
        return ys, None
    return ys, [[lo for lo, _ in bounds], [hi for _, hi in bounds]]


def _sweeps(result: CampaignResult) -> dict[str, dict[str, list[RunResult]]]:
    """Scenario -> variant -> its runs by throughput, for the (scenario, variant) series of two or more runs: a
    curve of latency against load needs a sweep; one point per series says nothing the tables do not."""
    out: dict[str, dict[str, list[RunResult]]] = {}
    for r in result.runs:
        if lat(r, "p50") is not None or lat(r, "p99") is not None:
            out.setdefault(r.scenario, {}).setdefault(r.variant, []).append(r)
    return {
        scenario: {v: sorted(runs, key=lambda r: r.client.throughput_rps) for v, runs in series.items()}
        for scenario, series in out.items()
        if any(len(runs) > 1 for runs in series.values())
    }


def _plot_latency_vs_throughput(result: CampaignResult, path: Path) -> Path | None:
    """p50 and p99 against throughput where a scenario swept its load (``_sweeps``), each point with its interval
    over trials; None (no plot) where no scenario did."""
    sweeps = _sweeps(result)
    if not sweeps:
        return None
    fig, axes = _grid(len(sweeps))
    budget = num(result.slo.get("p99_ms"))
    # One colour per variant across all panels, so a config is recognisable from scenario to scenario.
    colors = {v: f"C{i % 10}" for i, v in enumerate(dict.fromkeys(r.variant for r in result.runs))}
    for ax, (scenario, series) in zip(axes, sweeps.items(), strict=True):
        for variant, runs in series.items():
            x = [r.client.throughput_rps for r in runs]
            color = colors[variant]
            for key, style in (("p50", "o-"), ("p99", "^--")):
                y, yerr = with_intervals(runs, key)
                ax.errorbar(x, y, yerr=yerr, fmt=style, color=color, capsize=3, label=f"{variant} {key}")
        if budget is not None:
            ax.axhline(budget, color="red", linestyle=":", linewidth=1, label="SLO p99 budget")
        ax.set_title(scenario)
        ax.set_xlabel("throughput (req/s)")
        ax.set_ylabel("latency (ms)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("Latency vs throughput (circle p50, triangle p99, bars: 95% interval over trials)")
    fig.tight_layout()
    return _save(fig, path)


def _plot_percentiles(result: CampaignResult, path: Path) -> Path:
    title = "Client latency percentiles per run"
    runs = [r for r in result.runs if any(lat(r, k) is not None for k in PCT_KEYS)]
    if not runs:
        return _no_data(path, title, "no run has a successful request")
    fig, ax = _pyplot().subplots(figsize=(max(6.0, 1.2 * len(runs) + 2), 4.5))
    width = 0.8 / len(PCT_KEYS)
    values = []
    for j, key in enumerate(PCT_KEYS):
        ys, yerr = with_intervals(runs, key)
        values += [y for y in ys if y > 0]
        ax.bar(
            [i + (j - (len(PCT_KEYS) - 1) / 2) * width for i in range(len(runs))],
            [0.0 if math.isnan(y) else y for y in ys],
            width,
            yerr=yerr,
            capsize=2,
            label=key,
        )
    budget = num(result.slo.get("p99_ms"))
    if budget is not None:
        ax.axhline(budget, color="red", linestyle="--", label=f"SLO p99 budget ({budget:g} ms)")
        values.append(budget)
    # A tail 20x above the median flattens the median bars into nothing on a linear axis.
    if values and max(values) / min(values) > 20:
        ax.set_yscale("log")
    ax.set_xticks(range(len(runs)), [label(r) for r in runs], rotation=30, ha="right")
    ax.set_ylabel("latency (ms)")
    ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def _plot_batch_sizes(result: CampaignResult, path: Path) -> Path:
    title = "Batch sizes Triton executed"
    runs = [r for r in result.runs if r.server is not None and r.server.batch_histogram]
    if not runs:
        return _no_data(path, title, "no run has server batch statistics")
    fig, axes = _grid(min(len(runs), MAX_BATCH_PANELS), width=4.5, height=3.0)
    for ax, run in zip(axes, runs[:MAX_BATCH_PANELS], strict=True):
        sizes = sorted(run.server.batch_histogram)
        ax.bar([str(s) for s in sizes], [run.server.batch_histogram[s] for s in sizes], color="C2")
        ax.set_title(f"{label(run)} (avg {run.server.avg_batch:.2f})", fontsize=10)
        ax.set_xlabel("batch size")
        ax.set_ylabel("executions")
    more = f" (first {MAX_BATCH_PANELS} of {len(runs)} runs)" if len(runs) > MAX_BATCH_PANELS else ""
    fig.suptitle(title + more)
    fig.tight_layout()
    return _save(fig, path)


def _plot_timeline(run: RunResult, path: Path) -> Path:
    title = f"Timeline: {label(run)}"
    points = run.client.timeline
    if not points:
        return _no_data(path, title, "empty timeline")
    t = [p.t for p in points]
    fig, ax = _pyplot().subplots(figsize=(8, 3.5))
    # Windows are one second long, so the counts are per-second rates.
    ax.plot(t, [p.requests for p in points], color="C0", label="requests/s")
    ax.plot(t, [p.failures for p in points], color="C3", label="failures/s")
    ax.set_xlabel("time since run start (s)")
    ax.set_ylabel("requests per second")
    right = ax.twinx()
    right.plot(t, [p.p50_ms if p.p50_ms is not None else math.nan for p in points], "--", color="C1", label="p50 ms")
    right.plot(t, [p.p99_ms if p.p99_ms is not None else math.nan for p in points], ":", color="C4", label="p99 ms")
    right.set_ylabel("latency (ms)")
    handles = ax.get_legend_handles_labels()[0] + right.get_legend_handles_labels()[0]
    ax.legend(
        handles, [h.get_label() for h in handles], fontsize=8, ncols=4, loc="upper center", bbox_to_anchor=(0.5, -0.18)
    )
    ax.set_ylim(bottom=0)
    right.set_ylim(bottom=0)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    return _save(fig, path)


def _plot_time_breakdown(result: CampaignResult, path: Path) -> Path:
    title = "Where the time goes (mean per request)"
    runs = [r for r in result.runs if r.server is not None]
    if not runs:
        return _no_data(path, title, "no run has server stats")
    fig, ax = _pyplot().subplots(figsize=(9, 1.0 + 0.5 * len(runs)))
    left = [0.0] * len(runs)
    labels = [label(r) for r in runs]
    for i, (key, name) in enumerate(STACK):
        # A negative client+network (clock noise) cannot be stacked; clamp it.
        widths = [max(num(r.server.breakdown_ms.get(key)) or 0.0, 0.0) for r in runs]
        ax.barh(labels, widths, left=left, color=f"C{i}", label=name)
        left = [a + b for a, b in zip(left, widths, strict=True)]
    ax.invert_yaxis()
    ax.set_xlabel("mean latency (ms)")
    ax.set_title(title)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    return _save(fig, path)


def plots(result: CampaignResult, plot_dir: Path) -> list[Path]:
    """The plots drawn, in the page's order; latency against throughput only where a scenario swept its load (a
    stale one from an earlier rendering of the folder is removed)."""
    sweep = _plot_latency_vs_throughput(result, plot_dir / "latency_vs_throughput.png")
    if sweep is None:
        (plot_dir / "latency_vs_throughput.png").unlink(missing_ok=True)
    plots = [
        *([sweep] if sweep is not None else []),
        _plot_percentiles(result, plot_dir / "percentiles.png"),
        _plot_batch_sizes(result, plot_dir / "batch_sizes.png"),
        _plot_time_breakdown(result, plot_dir / "time_breakdown.png"),
    ]
    return plots + [_plot_timeline(run, plot_dir / f"timeline_{i}.png") for i, run in enumerate(result.runs)]
