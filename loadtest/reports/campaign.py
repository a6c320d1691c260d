"""Turn a campaign's ``results.json`` into files a person reads: CSVs, a Markdown summary, PNG plots
and one HTML page, all in ``reports/<campaign>/``.

Everything here reads only ``CampaignResult``, so ``python -m loadtest.reports reports/<c>/results.json``
redraws a report without running the campaign again. Runs without server stats (the FastAPI
baseline), runs where every request failed and empty timelines render too (the plots:
``loadtest.reports.plots``). A run of two or more trials shows each figure as its estimate with the
95% interval over the trials (``loadtest.core.evidence``), and its trials one by one. Streamed runs
(decoupled models) get a table of their TTFT, ITL, output tokens/s and goodput, and columns of their own in
runs.csv and the trials' table (``loadtest.reports.streams``; ``stream_text`` on the console).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from pathlib import Path
from typing import Any

import numpy as np
from jinja2 import Environment

from loadtest.core import evidence
from loadtest.reports import plots as report_plots, streams as report_streams
from loadtest.reports.headline import campaign_headline
from loadtest.target import server_trace
from loadtest.reports.plots import PCT_KEYS, STACK
from loadtest.reports.plots import label as _label
from loadtest.reports.plots import lat as _lat
from loadtest.reports.plots import num as _num
from loadtest.reports.streams import (  # noqa: F401 (stream_text: the console's)
    STREAM_HEADERS,
    STREAM_NOTE,
    stream_table,
    stream_text,
)
from loadtest.core.results import CampaignResult, RunResult
from loadtest.core.metrics import FIGURES, column
from loadtest.reports.writer import save_report

LATENCY_KEYS = PCT_KEYS + ["mean", "max"]
FLOOR_KEYS = server_trace.FLOOR_KEYS
BREAKDOWN_KEYS = ("queue", "compute_input", "compute_infer", "compute_output", "request", "client_network")
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
    + [f"generator_floor_{k}_ms" for k in FLOOR_KEYS]
    + ["goodput_share", "goodput_rps", "trials"]
    + [f"{m}_{end}" for m in evidence.METRICS for end in ("low", "high")]
    + ["slo_passed", "slo_verdict", "slo_violations"]
)
TIMELINE_FIELDS = ["scenario", "variant", "t", "requests", "failures", "p50_ms", "p99_ms"]


def _fmt(value: Any, digits: int = 3) -> str:
    return "" if (f := _num(value)) is None else f"{f:.{digits}f}"


def _figure(run: RunResult, metric: str, value: Any) -> str:
    """A figure of the run; with its interval (``estimate (low-high)``) when the run had 2+ trials."""
    return report_streams.with_interval(run, metric, value, FIGURES[metric][1])


def _runs_rows(result: CampaignResult) -> list[dict[str, Any]]:
    rows, streamed = [], report_streams.streamed(result)
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
        row.update({f"generator_floor_{k}_ms": _fmt(run.generator_floor_ms.get(k)) for k in FLOOR_KEYS})
        row.update({"goodput_share": _fmt(run.goodput_share, 6), "goodput_rps": _fmt(run.goodput_rps)})
        row["trials"] = len(run.all_trials())
        for metric in evidence.METRICS:
            iv = run.interval(metric)
            row.update(
                {f"{metric}_low": _fmt(iv.low, 6) if iv else "", f"{metric}_high": _fmt(iv.high, 6) if iv else ""}
            )
        row.update({"slo_passed": run.passed, "slo_verdict": run.outcome.lower()})
        row["slo_violations"] = "; ".join(run.slo_violations)
        rows.append(row | (report_streams.csv_cells(run) if streamed else {}))
    return rows


def _run_fields(result: CampaignResult) -> list[str]:
    """``RUN_FIELDS``, and the stream columns after them when a run streamed."""
    return RUN_FIELDS + (report_streams.STREAM_FIELDS if report_streams.streamed(result) else [])


def _csv_text(rows: list[dict[str, Any]], fields: list[str]) -> str:
    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, fieldnames=fields)
    writer.writeheader()
    writer.writerows(rows)
    return text.getvalue()


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
    ["scenario", "variant", "SLO", "req/s"]
    + [f"{k} ms" for k in LATENCY_KEYS]
    + ["error rate", "goodput", "goodput/s", "trials", "requests", "failures", "avg batch"]
    + ["served model", "protocol", "shape"]
)
"""The key columns first (which run, its verdict, its rate and latencies), so a narrow page shows them without
scrolling. Figures of a run of 2+ trials read ``estimate (low-high)``, the 95% interval over its trials; the other
columns (requests, p90, mean, ...) are its trials pooled."""
SLO_COLUMN = SUMMARY_HEADERS.index("SLO")
_FIGURE_OF = {column(name): name for name in FIGURES}
"""A summary column -> the metric whose interval it shows."""


def _summary_table(result: CampaignResult) -> list[list[str]]:
    rows = []
    for run in result.runs:
        c = run.client
        pooled = {"error rate": c.error_rate, "req/s": c.throughput_rps} | {
            f"{k} ms": _lat(run, k) for k in LATENCY_KEYS
        }
        cells = {
            header: _figure(run, _FIGURE_OF[header], value) if header in _FIGURE_OF else _fmt(value) or "n/a"
            for header, value in pooled.items()
        }
        cells |= {
            "scenario": run.scenario,
            "variant": run.variant,
            "SLO": run.outcome,
            "goodput": _figure(run, "goodput_share", run.goodput_share),
            "goodput/s": _figure(run, "goodput_rps", run.goodput_rps),
            "trials": str(len(run.all_trials())),
            "requests": str(c.requests),
            "failures": str(c.failures),
            "avg batch": _fmt(run.server.avg_batch, 2) if run.server else "n/a",
            "served model": run.served_model,
            "protocol": run.protocol,
            "shape": str(run.shape.get("kind", "")),
        }
        rows.append([cells[header] for header in SUMMARY_HEADERS])
    return rows


TRIAL_HEADERS = ["run", "trial"] + [name for name, _, _ in FIGURES.values()]
"""The trials' table; streamed runs add ``report_streams.trial_headers``."""


def _trial_headers(result: CampaignResult) -> list[str]:
    return TRIAL_HEADERS + report_streams.trial_headers(result)


def _trial_table(result: CampaignResult) -> list[list[str]]:
    """Every trial of the runs of 2+ trials, one row each, in the order they were measured per run."""
    rows = []
    for run in result.runs:
        if not run.trials:
            continue
        for i, trial in enumerate(run.trials, 1):
            figures = trial.measurement().figures()
            rows.append(
                [_label(run), str(i)]
                + [("n/a" if _num(figures[m]) is None else f.format(figures[m])) for m, (_, f, _) in FIGURES.items()]
                + report_streams.trial_cells(result, figures)
            )
    return rows


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
    p99, err, good = _num(slo.get("p99_ms")), _num(slo.get("max_error_rate")), _num(slo.get("min_goodput"))
    text = f"p99 ≤ {_fmt(p99) or 'n/a'} ms, error rate ≤ {'n/a' if err is None else f'{err:.2%}'}"
    for key, name in (("ttft_ms", "TTFT"), ("itl_ms", "ITL")):
        if (budget := _num(slo.get(key))) is not None:
            text += f", p99 {name} ≤ {budget:g} ms"
    return text + (f", goodput ≥ {good:.2%}" if good is not None else "")


def _verdict_notes(run: RunResult) -> list[str]:
    """What the verdict rests on: the limits missed or straddled, and what would settle it."""
    return run.slo_violations + ([run.settle] if run.settle else [])


INTERVAL_NOTE = (
    "A run of two or more trials shows each figure as its mean over the trials with the 95% interval "
    "(Student's t over the trials' values): estimate (low-high). Its SLO verdict is PASS when the interval's "
    "worst end is within every limit, FAIL when its best end misses one, INCONCLUSIVE when it straddles."
)
GOODPUT_NOTE = (
    "Goodput: requests answered without error within the p99 budget (every success when there is none), "
    "as a share of all requests and per second."
)


def _goodput_note(result: CampaignResult) -> str:
    if any(_num(result.slo.get(k)) is not None for k in ("ttft_ms", "itl_ms")):
        return GOODPUT_NOTE + " A streamed request counts only within the TTFT and ITL budgets too."
    return GOODPUT_NOTE


FLOOR_HEADERS = [
    "run",
    "client p50 ms",
    "Triton p50 ms",
    "floor p50 ms",
    "client p99 ms",
    "Triton p99 ms",
    "floor p99 ms",
    "client mean ms",
    "Triton mean ms",
    "floor mean ms",
]
FLOOR_NOTE = (
    "Triton's own time per request from its trace API over each run (`loadtest/target/server_trace.py`), and the "
    "generator's floor: the client's percentile minus Triton's, the time the load generator, its library, the "
    "loopback and Triton's frontend add (the median over traced trials; a difference of percentiles). A Triton "
    "older than 2.57.0 is not traced (it can crash while tracing): its runs have the means alone, Triton's from "
    "its metrics."
)


def _floor_table(result: CampaignResult) -> list[list[str]]:
    rows = []
    for run in result.runs:
        if not run.server or not run.generator_floor_ms:
            continue
        traced = [t.server.trace["request"] for t in run.all_trials() if t.server and "request" in t.server.trace]
        server = {k: float(np.median([q[k] for q in traced])) if traced else None for k in ("p50", "p99")}
        cells = [_label(run)]
        for k in ("p50", "p99"):
            cells += [_fmt(_lat(run, k)), _fmt(server[k]), _fmt(run.generator_floor_ms.get(k))]
        request = run.server.breakdown_ms.get("request")
        cells += [_fmt(_lat(run, "mean")), _fmt(request), _fmt(run.server.breakdown_ms.get("client_network"))]
        rows.append(cells)
    return rows


def _summary_md(result: CampaignResult, plots: list[Path]) -> str:
    headline = campaign_headline(result)
    lines = [
        f"# Load campaign `{result.campaign}`",
        "",
        f"**{headline.verdict}**: {headline.text}.",
        "",
        f"Started {result.started}.",
        "",
        f"SLO: {_slo_text(result.slo)}.",
        "",
        "## Runs",
        "",
    ]
    lines += _md_table(SUMMARY_HEADERS, _summary_table(result))
    lines += ["", _goodput_note(result)]
    stream_rows = stream_table(result)
    if stream_rows:
        lines += ["", "## Streams: TTFT, ITL, tokens/s", "", STREAM_NOTE, ""] + _md_table(STREAM_HEADERS, stream_rows)
    trial_rows = _trial_table(result)
    if trial_rows:
        lines += ["", "## Trials", "", INTERVAL_NOTE, ""] + _md_table(_trial_headers(result), trial_rows)
    lines += [
        "",
        "## Where the time goes",
        "",
        "Mean ms per request at each stage, and its share of the client's mean latency.",
        "",
    ]
    time_rows = _time_table(result)
    lines += _md_table(TIME_HEADERS, time_rows) if time_rows else ["No run has server stats."]
    floor_rows = _floor_table(result)
    if floor_rows:
        lines += ["", "## The load generator's floor", "", FLOOR_NOTE, ""] + _md_table(FLOOR_HEADERS, floor_rows)
    lines += ["", "## SLO verdict", ""]
    for run in result.runs:
        lines.append(f"- **{_label(run)}**: {run.outcome}")
        lines += [f"  - {v}" for v in _verdict_notes(run)]
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


HTML = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Load campaign {{ r.campaign }}</title>
<style>
body { font-family: sans-serif; margin: 2em; color: #222; } img { max-width: 100%; margin: 0.5em 0; }
.scroll { max-width: 100%; overflow-x: auto; margin: 0.5em 0 1.5em; }
table { border-collapse: collapse; font-size: 0.9em; }
td code, li code { overflow-wrap: anywhere; }
.headline { font-size: 1.1em; padding: 0.5em 0.8em; border-left: 0.4em solid #999; background: #f7f7f7; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; white-space: nowrap; }
.scroll td:first-child { position: sticky; left: 0; background: #fff; }
th { background: #f3f3f3; } td:first-child, td:nth-child(2) { text-align: left; }
.PASS { background: #d8f5d8; color: #145214; font-weight: bold; }
.FAIL { background: #f9d6d6; color: #7a1010; font-weight: bold; }
.INCONCLUSIVE { background: #fbeecb; color: #6b4d00; font-weight: bold; }
</style></head><body>
<h1>Load campaign {{ r.campaign }}</h1>
<p class="headline"><span class="{{ headline.verdict }}">{{ headline.verdict }}</span>: {{ headline.text }}.</p>
<p>Started {{ r.started }}. SLO: {{ slo }}.</p>
<p>Data: <a href="results.json">results.json</a>, <a href="runs.csv">runs.csv</a>,
<a href="timeline.csv">timeline.csv</a>, <a href="summary.md">summary.md</a></p>
<h2>Runs</h2>
<div class="scroll"><table><tr>{% for h in headers %}<th>{{ h }}</th>{% endfor %}</tr>
{% for row in rows %}<tr>{% for c in row %}
<td{% if loop.index0 == slo_column %} class="{{ c }}"{% endif %}>{{ c }}</td>{% endfor %}</tr>
{% endfor %}</table></div>
<p>{{ goodput_note }}</p>
{% if stream_rows %}<h2>Streams: TTFT, ITL, tokens/s</h2><p>{{ stream_note }}</p>
<div class="scroll"><table><tr>{% for h in stream_headers %}<th>{{ h }}</th>{% endfor %}</tr>
{% for row in stream_rows %}<tr>{% for c in row %}<td>{{ c }}</td>{% endfor %}</tr>{% endfor %}</table></div>
{% endif %}
{% if trial_rows %}<h2>Trials</h2><p>{{ interval_note }}</p>
<div class="scroll"><table><tr>{% for h in trial_headers %}<th>{{ h }}</th>{% endfor %}</tr>
{% for row in trial_rows %}<tr>{% for c in row %}<td>{{ c }}</td>{% endfor %}</tr>{% endfor %}</table></div>
{% endif %}
<h2>SLO verdict</h2><ul>
{% for run in r.runs %}<li><b>{{ run.scenario }} / {{ run.variant }}</b>:
<span class="{{ run.outcome }}">{{ run.outcome }}</span>
<ul>{% for v in notes(run) %}<li>{{ v }}</li>{% endfor %}
{% for msg, n in errors(run) %}<li>error <code>{{ msg }}</code>: {{ n }}</li>{% endfor %}</ul></li>
{% endfor %}</ul>
<h2>Where the time goes</h2>
{% if time_rows %}<div class="scroll"><table><tr>{% for h in time_headers %}<th>{{ h }}</th>{% endfor %}</tr>
{% for row in time_rows %}<tr>{% for c in row %}<td>{{ c }}</td>{% endfor %}</tr>{% endfor %}</table></div>
{% else %}<p>No run has server stats.</p>{% endif %}
<h2>Plots</h2>
{% for p in plots %}<h3>{{ p }}</h3><img src="plots/{{ p }}" alt="{{ p }}">
{% endfor %}
<h2>Tuning</h2>
{% for caption, headers, rows in tuning %}<h3>{{ caption }}</h3>
<div class="scroll"><table><tr>{% for h in headers %}<th>{{ h }}</th>{% endfor %}</tr>
{% for row in rows %}<tr>{% for c in row %}<td>{{ c }}</td>{% endfor %}</tr>{% endfor %}</table></div>
{% else %}<p>No tuning in this campaign.</p>{% endfor %}
</body></html>
"""


def _index_html(result: CampaignResult, plots: list[Path]) -> str:
    template = Environment(autoescape=True).from_string(HTML)
    return template.render(
        r=result,
        headline=campaign_headline(result),
        slo_column=SLO_COLUMN,
        slo=_slo_text(result.slo),
        headers=SUMMARY_HEADERS,
        rows=_summary_table(result),
        goodput_note=_goodput_note(result),
        stream_note=STREAM_NOTE,
        stream_headers=STREAM_HEADERS,
        stream_rows=stream_table(result),
        interval_note=INTERVAL_NOTE,
        trial_headers=_trial_headers(result),
        trial_rows=_trial_table(result),
        notes=_verdict_notes,
        time_headers=TIME_HEADERS,
        time_rows=_time_table(result),
        plots=[p.name for p in plots],
        tuning=_tuning_blocks(result.tuning),
        errors=_top_errors,
    )


def write_report(result: CampaignResult, out_dir: Path) -> list[Path]:
    """Write results.json, summary.md, runs.csv, timeline.csv, index.html and plots/*.png into ``out_dir``;
    returns the paths written."""
    out_dir = Path(out_dir)
    (out_dir / "plots").mkdir(parents=True, exist_ok=True)
    plots: list[Path] = []  # drawn once results.json is written; the summary and the page name them

    def draw() -> list[Path]:
        plots.extend(report_plots.plots(result, out_dir / "plots"))
        return plots

    files = {
        "runs.csv": lambda _: _csv_text(_runs_rows(result), _run_fields(result)),
        "timeline.csv": lambda _: _csv_text(_timeline_rows(result), TIMELINE_FIELDS),
        "index.html": lambda _: _index_html(result, plots),
    }
    # CampaignResult's own form, which CampaignResult.load reads back.
    data = dataclasses.asdict(result)
    return save_report(data, out_dir, lambda _: _summary_md(result, plots), plots=draw, files=files)
