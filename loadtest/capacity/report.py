"""What ``tritonkit capacity`` leaves behind (``reports/capacity-<model>/``): ``results.json`` (every probe and
trial), ``summary.md`` and ``capacity.png`` (p99 against offered rate, the budget line, the knee and the
capacity interval as a band); and the autoscaling target as a kustomize patch of the HorizontalPodAutoscaler
in deploy/k8s (``hpa_patch``).

The HPA of deploy/k8s scales on ``triton_queue_time_per_request_seconds``: per pod, Triton's queue time per
request (deploy/k8s/monitoring/prometheus-adapter-values.yaml). The same quantity is what
``server_metrics`` reads around every run (``Measurement.server["queue_ms"]``), so its value at the rate each
replica is planned to carry is the target that keeps replicas at that rate.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import yaml

from loadtest.capacity.replica_plan import metric_at
from loadtest.capacity.search import CapacityResult
from loadtest.core import evidence
from loadtest.core.measurement import Measurement
from loadtest.core.metrics import STREAM_FIGURES
from loadtest.errors import LoadTestError
from loadtest.reports.writer import SUMMARY, save_report

PROJECT = Path(__file__).resolve().parents[2]
HPA_FILE = PROJECT / "deploy" / "k8s" / "base" / "triton-hpa.yaml"
QUEUE_METRIC = "triton_queue_time_per_request_seconds"
"""The Pods metric the HPA scales on that capacity can derive (seconds of queueing per request)."""
DPI = 110


def hpa_metric(path: Path = HPA_FILE) -> tuple[dict[str, Any], str]:
    """The HorizontalPodAutoscaler of deploy/k8s and the name of the Pods metric it scales on."""
    try:
        docs = [d for d in yaml.safe_load_all(Path(path).read_text()) if d]
    except (OSError, yaml.YAMLError) as exc:
        raise LoadTestError(f"cannot read the HorizontalPodAutoscaler in {path}: {exc}") from None
    hpa = next((d for d in docs if d.get("kind") == "HorizontalPodAutoscaler"), None)
    if hpa is None:
        raise LoadTestError(f"no HorizontalPodAutoscaler in {path}")
    pods = [m["pods"]["metric"]["name"] for m in hpa["spec"].get("metrics", []) if m.get("type") == "Pods"]
    if not pods:
        raise LoadTestError(f"the HorizontalPodAutoscaler in {path} scales on no Pods metric")
    return hpa, pods[0]


def quantity(seconds: float) -> str:
    """Seconds as a Kubernetes quantity in milli-units (``0.0032`` -> ``3.2m``), at least ``0.001m``."""
    return f"{max(round(seconds * 1000, 3), 0.001):g}m"


def queue_points(result: CapacityResult) -> list[tuple[float, float]]:
    """(offered rate, Triton's queue ms per request) of every usable run, probes and trials."""
    return [(rate, float(m.server.get("queue_ms", math.nan))) for rate, m in runs(result) if m.usable]


def hpa_patch(
    seconds: float, per_pod_rps: float, model: str, max_replicas: int | None = None, path: Path = HPA_FILE
) -> str:
    """A kustomize patch (strategic merge) that sets the HPA's queue-time target to ``seconds`` and, given, its
    maxReplicas, keeping its other metrics; for the ``patches:`` list of an overlay beside
    deploy/k8s/overlays/<gpu|cpu>."""
    hpa, metric = hpa_metric(path)
    if metric != QUEUE_METRIC:
        raise LoadTestError(f"the HPA in {path} scales on {metric!r}; capacity derives only {QUEUE_METRIC!r}")
    target = {
        "type": "Pods",
        "pods": {
            "metric": {"name": metric},
            "target": {"type": "AverageValue", "averageValue": quantity(seconds)},
        },
    }
    # A patch replaces the metrics list whole: the HPA's other metrics (the generator's waiting streams) are kept.
    others = [m for m in hpa["spec"].get("metrics", []) if m.get("pods", {}).get("metric", {}).get("name") != metric]
    spec: dict[str, Any] = {"metrics": [target, *others]}
    if max_replicas is not None:
        spec["maxReplicas"] = max(max_replicas, int(hpa["spec"].get("minReplicas", 1)))
    patch = {
        "apiVersion": hpa["apiVersion"],
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": hpa["metadata"]["name"]},
        "spec": spec,
    }
    head = (
        f"# tritonkit capacity {model}: Triton's queue time per request measured at {per_pod_rps:.1f} req/s per\n"
        f"# pod (the capacity's lower bound less the burst headroom), on the server measured; re-measure on the\n"
        f"# pods' own hardware. maxReplicas (when set): the replicas that serve the --target-rps.\n"
    )
    return head + yaml.safe_dump(patch, sort_keys=False)


def hpa_target(result: CapacityResult, per_pod_rps: float) -> float:
    """Seconds of queueing per request at ``per_pod_rps``, from the runs around it (NaN without any)."""
    return metric_at(queue_points(result), per_pod_rps) / 1000


# --- the report folder -----------------------------------------------------------------------------


def write(result: CapacityResult, out: Path, extra: dict[str, Any], sentence: str) -> Path:
    """results.json, summary.md and capacity.png into ``out``; returns the summary's path."""
    data = {**extra, "sentence": sentence, **result.to_dict()}
    # The plot is drawn once results.json is written: the probes outlive a plot that fails.
    save_report(
        data, out, lambda _: markdown(result, extra, sentence), plots=lambda: [plot(result, out / "capacity.png")]
    )
    return out / SUMMARY


def _cell(value: float, fmt: str = "{:.3f}") -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else fmt.format(value)


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def runs(result: CapacityResult) -> list[tuple[float, Measurement]]:
    """(offered rate, measurement) of every run, probes and trials."""
    return [(p.rate, p.measurement) for p in result.probes] + [
        (c.rate, m) for c in result.confirmations for m in c.result.trials
    ]


def _stream_cells(m: Measurement, streamed: bool) -> list[str]:
    """A run's p99 TTFT, p99 ITL and tokens/s cells (none when no run of the report streamed)."""
    if not streamed:
        return []
    return [_cell(getattr(m, metric), fmt) for metric, (_, fmt, _) in STREAM_FIGURES.items()]


def markdown(result: CapacityResult, extra: dict[str, Any], sentence: str) -> str:
    lines = [f"# Capacity of {extra.get('model', '?')}", "", f"**{sentence}**", ""]
    lines += [
        f"- {key}: {extra[key]}" for key in ("command", "generator", "arrivals", "date", "commit") if key in extra
    ]
    lines += [f"- {note}" for note in result.notes]
    if result.knee is not None:
        rates = ", ".join(f"{r:.1f}" for r in result.knee.rates)
        knees = ", ".join(f"{k.rate:.1f}" + (f" ({k.censored})" if k.censored else "") for k in result.knee.rounds)
        lines.append(f"- the knee of each round of runs at {rates} req/s: {knees}")
    if result.plan_rate is not None:
        lines.append(f"- one replica is planned at {result.plan_rate:.1f} req/s")
    if streams := result.stream_text(with_interval=True):
        lines.append(f"- streams at {result.rate:g} req/s (GenAI-Perf's figures, 95% CI over the trials): {streams}")
    # Streamed models only: p99 TTFT, p99 ITL and tokens/s of every run (report_streams' labels).
    streamed = any(m.streamed for _, m in runs(result))
    heads = [f"{name}{unit}" for name, _, unit in STREAM_FIGURES.values()] if streamed else []
    head = ["rate offered", "phase", "completed/s", "p50 ms", "p99 ms", *heads, "errors", "queue ms", "outcome"]
    lines += ["", "## Search", "", _row(head)]
    lines.append("|---" * (len(heads) + 8) + "|")
    for p in result.probes:
        m = p.measurement
        cells = [f"{p.rate:.1f}", p.phase, f"{m.throughput:.1f}", _cell(m.p50_ms), _cell(m.p99_ms)]
        cells += _stream_cells(m, streamed)
        cells += [f"{m.error_rate:.2%}", _cell(m.server.get("queue_ms", math.nan)), p.outcome]
        lines.append(_row(cells))
    for c in result.confirmations:
        lines += ["", f"## Trials at {c.rate:g} req/s", "", c.verdict.text(), ""]
        lines += [_row(["trial", "completed/s", "p50 ms", "p99 ms", *heads, "errors", "queue ms"])]
        lines.append("|---" * (len(heads) + 6) + "|")
        for i, m in enumerate(c.result.trials, 1):
            cells = [str(i), f"{m.throughput:.1f}", _cell(m.p50_ms), _cell(m.p99_ms), *_stream_cells(m, streamed)]
            lines.append(_row([*cells, f"{m.error_rate:.2%}", _cell(m.server.get("queue_ms", math.nan))]))
    plan = extra.get("plan")
    if plan:
        lines += ["", "## Plan", ""] + [f"- {line}" for line in plan.get("lines", [])]
    lines += ["", "![p99 against offered rate](capacity.png)", ""]
    return "\n".join(lines)


def _pyplot():
    """pyplot on the Agg backend, imported when the plot is drawn (the command line stays light)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def p99_interval(confirmation) -> evidence.Interval | None:
    """The p99 interval the rate's verdict judged over its trials; None under two trials or when the interval
    reaches 0 (a bar on the log axis could not show it)."""
    iv = next((limit.interval for limit in confirmation.verdict.limits if limit.name == "p99"), None)
    return iv if iv is not None and iv.has_interval and iv.low > 0 else None


def plot(result: CapacityResult, path: Path) -> Path:
    """p99 against offered rate: the search's runs (passing filled, failing hollow), the trials and their p99's
    interval at each confirmed rate, the budget, the confirmed rate and the capacity interval as a band."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    budget = result.budget.p99_ms
    passing = [(p.rate, p.measurement.p99_ms) for p in result.probes if p.passed]
    failing = [(p.rate, p.measurement.p99_ms) for p in result.probes if not p.passed]
    for points, style, label in (
        (passing, {"color": "tab:blue"}, "search: pass"),
        (failing, {"facecolors": "none", "edgecolors": "tab:red"}, "search: fail"),
    ):
        points = [(r, v) for r, v in points if math.isfinite(v)]
        if points:
            ax.scatter(*zip(*points, strict=True), label=label, zorder=3, **style)
    trials = [(c.rate, m.p99_ms) for c in result.confirmations for m in c.result.usable if math.isfinite(m.p99_ms)]
    if trials:
        ax.scatter(*zip(*trials, strict=True), marker="x", color="black", label="trials", zorder=4)
    bars = [(c.rate, iv) for c, iv in ((c, p99_interval(c)) for c in result.confirmations) if iv is not None]
    if bars:
        ax.errorbar(
            [rate for rate, _ in bars],
            [iv.estimate for _, iv in bars],
            yerr=[[iv.estimate - iv.low for _, iv in bars], [iv.high - iv.estimate for _, iv in bars]],
            fmt="D",
            color="black",
            markerfacecolor="none",
            capsize=4,
            label="p99 of the trials, 95% CI",
            zorder=5,
        )
    ax.axhline(budget, color="tab:red", linestyle="--", label=f"budget {budget:g} ms")
    iv = result.capacity
    if iv is not None:
        if iv.has_interval:
            ax.axvspan(iv.low, iv.high, color="tab:green", alpha=0.2, label="capacity 95% CI")
        ax.axvline(iv.estimate, color="tab:green", label=f"capacity {iv.estimate:.1f} req/s")
    if result.first_fail is not None:
        ax.axvline(result.first_fail.rate, color="tab:red", linestyle=":", label="first failing rate")
    ax.set_xlabel("offered rate (req/s)")
    ax.set_ylabel("p99 (ms)")
    ax.set_yscale("log")
    ax.set_title("p99 against offered rate")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.savefig(path, dpi=DPI, bbox_inches="tight")
    plt.close(fig)
    return path
