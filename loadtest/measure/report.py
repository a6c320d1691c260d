"""Turn a campaign's ``results.json`` into files a person reads: CSVs, a Markdown summary, PNG plots
and one HTML page, all in ``reports/<campaign>/``.

Everything here reads only ``CampaignResult``, so ``python -m loadtest.measure.report reports/<c>/results.json``
redraws a report without running the campaign again. Runs without server stats (the FastAPI
baseline), runs where every request failed and empty timelines render too: a plot without data is
still written, as a small "no data" image, so links never break.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from pathlib import Path
from typing import Any

from jinja2 import Environment

from loadtest.drive.client_stats import PERCENTILES, percentile_key
from loadtest.measure.results import CampaignResult, RunResult

PCT_KEYS = [percentile_key(p) for p in PERCENTILES]
LATENCY_KEYS = PCT_KEYS + ["mean", "max"]
BREAKDOWN_KEYS = ("queue", "compute_input", "compute_infer", "compute_output", "request", "client_network")
STACK = (
    ("client_network", "client+network"),
    ("queue", "queue"),
    ("compute_input", "compute input"),
    ("compute_infer", "compute infer"),
    ("compute_output", "compute output"),
)
"""Parts of the client's mean latency, in the order a request meets them."""
RUN_FIELDS = (
    [
        "scenario",
        "variant",
        "model",
        "served_model",
        "protocol",
        "shape",
        "requests",
        "failures",
        "error_rate",
        "throughput_rps",
    ]
    + [f"{k}_ms" for k in LATENCY_KEYS]
    + ["server_requests", "server_inferences", "server_executions", "server_avg_batch"]
    + [f"{k}_ms" for k in BREAKDOWN_KEYS]
    + ["slo_passed", "slo_violations"]
)
TIMELINE_FIELDS = ["scenario", "variant", "t", "requests", "failures", "p50_ms", "p99_ms"]
MAX_BATCH_PANELS = 12
DPI = 100


def _num(value: Any) -> float | None:
    """A finite float, or None for missing, NaN and infinite values (runs where all requests failed)."""
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _fmt(value: Any, digits: int = 3) -> str:
    return "" if (f := _num(value)) is None else f"{f:.{digits}f}"


def _lat(run: RunResult, key: str) -> float | None:
    return _num(run.client.latency_ms.get(key))


def _label(run: RunResult) -> str:
    return f"{run.scenario} / {run.variant}"


def _runs_rows(result: CampaignResult) -> list[dict[str, Any]]:
    rows = []
    for run in result.runs:
        c, s = run.client, run.server
        row: dict[str, Any] = {
            "scenario": run.scenario,
            "variant": run.variant,
            "model": run.model,
            "served_model": run.served_model,
            "protocol": run.protocol,
            "shape": run.shape.get("kind", ""),
            "requests": c.requests,
            "failures": c.failures,
            "error_rate": _fmt(c.error_rate, 6),
            "throughput_rps": _fmt(c.throughput_rps),
        }
        row.update({f"{k}_ms": _fmt(_lat(run, k)) for k in LATENCY_KEYS})
        row.update(
            {
                "server_requests": s.requests if s else "",
                "server_inferences": s.inferences if s else "",
                "server_executions": s.executions if s else "",
                "server_avg_batch": _fmt(s.avg_batch) if s else "",
            }
        )
        row.update({f"{k}_ms": _fmt(s.breakdown_ms.get(k)) if s else "" for k in BREAKDOWN_KEYS})
        row.update({"slo_passed": run.passed, "slo_violations": "; ".join(run.slo_violations)})
        rows.append(row)
    return rows


def _write_csv(path: Path, rows: list[dict[str, Any]], fields: list[str]) -> None:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)


def _timeline_rows(result: CampaignResult) -> list[dict[str, Any]]:
    return [
        {
            "scenario": run.scenario,
            "variant": run.variant,
            "t": p.t,
            "requests": p.requests,
            "failures": p.failures,
            "p50_ms": _fmt(p.p50_ms),
            "p99_ms": _fmt(p.p99_ms),
        }
        for run in result.runs
        for p in run.client.timeline
    ]


SUMMARY_HEADERS = (
    ["scenario", "variant", "served model", "protocol", "shape", "requests", "failures", "error rate", "req/s"]
    + [f"{k} ms" for k in LATENCY_KEYS]
    + ["avg batch", "SLO"]
)


def _summary_table(result: CampaignResult) -> list[list[str]]:
    return [
        [
            run.scenario,
            run.variant,
            run.served_model,
            run.protocol,
            str(run.shape.get("kind", "")),
            str(run.client.requests),
            str(run.client.failures),
            f"{run.client.error_rate:.2%}",
            _fmt(run.client.throughput_rps, 1),
        ]
        + [_fmt(_lat(run, k)) or "n/a" for k in LATENCY_KEYS]
        + [_fmt(run.server.avg_batch, 2) if run.server else "n/a", "PASS" if run.passed else "FAIL"]
        for run in result.runs
    ]


TIME_HEADERS = ["run", "client mean ms"] + [f"{name} ms (share)" for _, name in STACK]


def _time_table(result: CampaignResult) -> list[list[str]]:
    """Mean ms per stage and its share of the client's mean; runs without server stats are left out."""
    rows = []
    for run in result.runs:
        if run.server is None:
            continue
        mean = _lat(run, "mean")
        cells = [_label(run), _fmt(mean) or "n/a"]
        for key, _ in STACK:
            v = _num(run.server.breakdown_ms.get(key))
            share = f" ({v / mean:.0%})" if v is not None and mean else ""
            cells.append(f"{_fmt(v) or 'n/a'}{share}")
        rows.append(cells)
    return rows


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, sort_keys=True, default=str)
    return str(value)


def _tuning_blocks(tuning: dict[str, Any]) -> list[tuple[str, list[str], list[list[str]]]]:
    """``result.tuning`` as (caption, headers, rows) tables, whatever its keys: the tuner's format may
    grow, and a report that drops an unknown key would hide why a config was picked."""
    blocks = []
    for name, value in tuning.items():
        if not isinstance(value, dict):
            blocks.append((str(name), ["key", "value"], [["value", _cell(value)]]))
            continue
        scalars = [[str(k), _cell(v)] for k, v in value.items() if not isinstance(v, (dict, list, tuple))]
        if scalars:
            blocks.append((str(name), ["key", "value"], scalars))
        for key, v in value.items():
            caption = f"{name}: {key}"
            if isinstance(v, dict):
                blocks.append((caption, ["key", "value"], [[str(k), _cell(x)] for k, x in v.items()]))
            elif isinstance(v, (list, tuple)) and v and all(isinstance(x, dict) for x in v):
                headers = list(dict.fromkeys(k for x in v for k in x))
                blocks.append((caption, [str(h) for h in headers], [[_cell(x.get(h)) for h in headers] for x in v]))
            elif isinstance(v, (list, tuple)):
                blocks.append((caption, ["#", "value"], [[str(i + 1), _cell(x)] for i, x in enumerate(v)]))
    return blocks


def _md_table(headers: list[str], rows: list[list[str]]) -> list[str]:
    def line(cells: list[str]) -> str:
        # Cells hold free text (error messages, tuner reasons): keep it from becoming table or HTML syntax.
        return "| " + " | ".join(c.replace("|", "\\|").replace("<", "&lt;").replace("\n", " ") for c in cells) + " |"

    return [line(headers), "|" + "---|" * len(headers)] + [line(r) for r in rows]


def _top_errors(run: RunResult) -> list[tuple[str, int]]:
    return sorted(run.client.errors.items(), key=lambda e: -e[1])[:5]


def _slo_text(slo: dict[str, float]) -> str:
    p99, err = _num(slo.get("p99_ms")), _num(slo.get("max_error_rate"))
    return f"p99 ≤ {_fmt(p99) or 'n/a'} ms, error rate ≤ {'n/a' if err is None else f'{err:.2%}'}"


def _summary_md(result: CampaignResult, plots: list[Path]) -> str:
    lines = [
        f"# Load campaign `{result.campaign}`",
        "",
        f"Started {result.started}.",
        "",
        f"SLO: {_slo_text(result.slo)}.",
        "",
        "## Runs",
        "",
    ]
    lines += _md_table(SUMMARY_HEADERS, _summary_table(result))
    lines += [
        "",
        "## Where the time goes",
        "",
        "Mean ms per request at each stage, and its share of the client's mean latency.",
        "",
    ]
    time_rows = _time_table(result)
    lines += _md_table(TIME_HEADERS, time_rows) if time_rows else ["No run has server stats."]
    lines += ["", "## SLO verdict", ""]
    for run in result.runs:
        lines.append(f"- **{_label(run)}**: {'PASS' if run.passed else 'FAIL'}")
        lines += [f"  - {v}" for v in run.slo_violations]
        lines += ["  - error `" + msg.replace("`", "'") + f"`: {n}" for msg, n in _top_errors(run)]
    lines += ["", "## Tuning", ""]
    blocks = _tuning_blocks(result.tuning)
    for caption, headers, rows in blocks:
        lines += [f"**{caption}**", ""] + _md_table(headers, rows) + [""]
    if not blocks:
        lines += ["No tuning in this campaign.", ""]
    lines += ["## Plots", ""] + [f"![{p.stem}](plots/{p.name})" for p in plots]
    lines += ["", "Data: [results.json](results.json), [runs.csv](runs.csv), [timeline.csv](timeline.csv)", ""]
    return "\n".join(lines)


# --- plots -------------------------------------------------------------------------------------


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


def _plot_latency_vs_throughput(result: CampaignResult, path: Path) -> Path:
    title = "Latency vs throughput"
    scenarios = list(
        dict.fromkeys(r.scenario for r in result.runs if _lat(r, "p50") is not None or _lat(r, "p99") is not None)
    )
    if not scenarios:
        return _no_data(path, title, "no run has a successful request")
    fig, axes = _grid(len(scenarios))
    budget = _num(result.slo.get("p99_ms"))
    # One colour per variant across all panels, so a config is recognisable from scenario to scenario.
    colors = {v: f"C{i % 10}" for i, v in enumerate(dict.fromkeys(r.variant for r in result.runs))}
    for ax, scenario in zip(axes, scenarios, strict=True):
        runs = [r for r in result.runs if r.scenario == scenario]
        for variant in dict.fromkeys(r.variant for r in runs):
            points = sorted(
                ((r.client.throughput_rps, _lat(r, "p50"), _lat(r, "p99")) for r in runs if r.variant == variant),
                key=lambda p: p[0],
            )
            x = [p[0] for p in points]
            color = colors[variant]
            ax.plot(
                x, [p[1] if p[1] is not None else math.nan for p in points], "o-", color=color, label=f"{variant} p50"
            )
            ax.plot(
                x, [p[2] if p[2] is not None else math.nan for p in points], "^--", color=color, label=f"{variant} p99"
            )
        if budget is not None:
            ax.axhline(budget, color="red", linestyle=":", linewidth=1, label="SLO p99 budget")
        ax.set_title(scenario)
        ax.set_xlabel("throughput (req/s)")
        ax.set_ylabel("latency (ms)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"{title} (circle p50, triangle p99; one colour per variant)")
    fig.tight_layout()
    return _save(fig, path)


def _plot_percentiles(result: CampaignResult, path: Path) -> Path:
    title = "Client latency percentiles per run"
    runs = [r for r in result.runs if any(_lat(r, k) is not None for k in PCT_KEYS)]
    if not runs:
        return _no_data(path, title, "no run has a successful request")
    fig, ax = _pyplot().subplots(figsize=(max(6.0, 1.2 * len(runs) + 2), 4.5))
    width = 0.8 / len(PCT_KEYS)
    values = []
    for j, key in enumerate(PCT_KEYS):
        ys = [_lat(r, key) for r in runs]
        values += [y for y in ys if y is not None and y > 0]
        ax.bar(
            [i + (j - (len(PCT_KEYS) - 1) / 2) * width for i in range(len(runs))],
            [y if y is not None else 0.0 for y in ys],
            width,
            label=key,
        )
    budget = _num(result.slo.get("p99_ms"))
    if budget is not None:
        ax.axhline(budget, color="red", linestyle="--", label=f"SLO p99 budget ({budget:g} ms)")
        values.append(budget)
    # A tail 20x above the median flattens the median bars into nothing on a linear axis.
    if values and max(values) / min(values) > 20:
        ax.set_yscale("log")
    ax.set_xticks(range(len(runs)), [_label(r) for r in runs], rotation=30, ha="right")
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
        ax.set_title(f"{_label(run)} (avg {run.server.avg_batch:.2f})", fontsize=10)
        ax.set_xlabel("batch size")
        ax.set_ylabel("executions")
    more = f" (first {MAX_BATCH_PANELS} of {len(runs)} runs)" if len(runs) > MAX_BATCH_PANELS else ""
    fig.suptitle(title + more)
    fig.tight_layout()
    return _save(fig, path)


def _plot_timeline(run: RunResult, path: Path) -> Path:
    title = f"Timeline: {_label(run)}"
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
    labels = [_label(r) for r in runs]
    for i, (key, name) in enumerate(STACK):
        # A negative client+network (clock noise) cannot be stacked; clamp it.
        widths = [max(_num(r.server.breakdown_ms.get(key)) or 0.0, 0.0) for r in runs]
        ax.barh(labels, widths, left=left, color=f"C{i}", label=name)
        left = [a + b for a, b in zip(left, widths, strict=True)]
    ax.invert_yaxis()
    ax.set_xlabel("mean latency (ms)")
    ax.set_title(title)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    return _save(fig, path)


def _plots(result: CampaignResult, plot_dir: Path) -> list[Path]:
    plots = [
        _plot_latency_vs_throughput(result, plot_dir / "latency_vs_throughput.png"),
        _plot_percentiles(result, plot_dir / "percentiles.png"),
        _plot_batch_sizes(result, plot_dir / "batch_sizes.png"),
        _plot_time_breakdown(result, plot_dir / "time_breakdown.png"),
    ]
    return plots + [_plot_timeline(run, plot_dir / f"timeline_{i}.png") for i, run in enumerate(result.runs)]


HTML = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Load campaign {{ r.campaign }}</title>
<style>
body { font-family: sans-serif; margin: 2em; color: #222; } img { max-width: 100%; margin: 0.5em 0; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
th { background: #f3f3f3; } td:first-child, td:nth-child(2) { text-align: left; }
.PASS { background: #d8f5d8; color: #145214; font-weight: bold; }
.FAIL { background: #f9d6d6; color: #7a1010; font-weight: bold; }
</style></head><body>
<h1>Load campaign {{ r.campaign }}</h1>
<p>Started {{ r.started }}. SLO: {{ slo }}.</p>
<p>Data: <a href="results.json">results.json</a>, <a href="runs.csv">runs.csv</a>,
<a href="timeline.csv">timeline.csv</a>, <a href="summary.md">summary.md</a></p>
<h2>Runs</h2>
<table><tr>{% for h in headers %}<th>{{ h }}</th>{% endfor %}</tr>
{% for row in rows %}<tr>{% for c in row[:-1] %}<td>{{ c }}</td>{% endfor %}
<td class="{{ row[-1] }}">{{ row[-1] }}</td></tr>
{% endfor %}</table>
<h2>SLO verdict</h2><ul>
{% for run in r.runs %}<li><b>{{ run.scenario }} / {{ run.variant }}</b>:
<span class="{{ 'PASS' if run.passed else 'FAIL' }}">{{ 'PASS' if run.passed else 'FAIL' }}</span>
<ul>{% for v in run.slo_violations %}<li>{{ v }}</li>{% endfor %}
{% for msg, n in errors(run) %}<li>error <code>{{ msg }}</code>: {{ n }}</li>{% endfor %}</ul></li>
{% endfor %}</ul>
<h2>Where the time goes</h2>
{% if time_rows %}<table><tr>{% for h in time_headers %}<th>{{ h }}</th>{% endfor %}</tr>
{% for row in time_rows %}<tr>{% for c in row %}<td>{{ c }}</td>{% endfor %}</tr>{% endfor %}</table>
{% else %}<p>No run has server stats.</p>{% endif %}
<h2>Plots</h2>
{% for p in plots %}<h3>{{ p }}</h3><img src="plots/{{ p }}" alt="{{ p }}">
{% endfor %}
<h2>Tuning</h2>
{% for caption, headers, rows in tuning %}<h3>{{ caption }}</h3>
<table><tr>{% for h in headers %}<th>{{ h }}</th>{% endfor %}</tr>
{% for row in rows %}<tr>{% for c in row %}<td>{{ c }}</td>{% endfor %}</tr>{% endfor %}</table>
{% else %}<p>No tuning in this campaign.</p>{% endfor %}
</body></html>
"""


def _index_html(result: CampaignResult, plots: list[Path]) -> str:
    template = Environment(autoescape=True).from_string(HTML)
    return template.render(
        r=result,
        slo=_slo_text(result.slo),
        headers=SUMMARY_HEADERS,
        rows=_summary_table(result),
        time_headers=TIME_HEADERS,
        time_rows=_time_table(result),
        plots=[p.name for p in plots],
        tuning=_tuning_blocks(result.tuning),
        errors=_top_errors,
    )


def write_report(result: CampaignResult, out_dir: Path) -> list[Path]:
    """Write results.json, runs.csv, timeline.csv, summary.md, plots/*.png and index.html into
    ``out_dir``; returns the paths written."""
    out_dir = Path(out_dir)
    (out_dir / "plots").mkdir(parents=True, exist_ok=True)
    result.save(out_dir / "results.json")
    _write_csv(out_dir / "runs.csv", _runs_rows(result), RUN_FIELDS)
    _write_csv(out_dir / "timeline.csv", _timeline_rows(result), TIMELINE_FIELDS)
    plots = _plots(result, out_dir / "plots")
    (out_dir / "summary.md").write_text(_summary_md(result, plots))
    (out_dir / "index.html").write_text(_index_html(result, plots))
    return (
        [out_dir / n for n in ("results.json", "runs.csv", "timeline.csv", "summary.md")]
        + plots
        + [out_dir / "index.html"]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m loadtest.measure.report", description="Regenerate a campaign report from its results.json."
    )
    parser.add_argument("results", type=Path, help="reports/<campaign>/results.json")
    parser.add_argument("--out", type=Path, default=None, help="output folder (default: the json's folder)")
    args = parser.parse_args(argv)
    if not args.results.is_file():
        parser.error(f"{args.results}: no such file")
    for path in write_report(CampaignResult.load(args.results), args.out or args.results.parent):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
