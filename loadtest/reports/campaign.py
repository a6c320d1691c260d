"""Turn a campaign's ``results.json`` into files a person reads: CSVs, a Markdown summary, PNG plots
and one HTML page, all in ``reports/<campaign>/``.

Everything here reads only ``CampaignResult``, so ``python -m loadtest.reports reports/<c>/results.json``
redraws a report without running the campaign again. Runs without server stats (the FastAPI
baseline), runs where every request failed and empty timelines render too (the plots:
``loadtest.reports.plots``). A run of two or more trials shows each figure as its estimate with the
95% interval over the trials (``loadtest.core.evidence``), and its trials one by one. Streamed runs
(decoupled models) get a table of their TTFT, ITL, output tokens/s and goodput, and columns of their own in
runs.csv and the trials' table (``loadtest.reports.streams``; ``stream_text`` on the console). The tables and the
CSVs' rows are ``loadtest.reports.tables``'.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from jinja2 import Environment

from loadtest.core.results import CampaignResult, RunResult
from loadtest.reports import plots as report_plots
from loadtest.reports import tables
from loadtest.reports.headline import campaign_headline
from loadtest.reports.plots import label as _label
from loadtest.reports.plots import num as _num
from loadtest.reports.streams import (  # noqa: F401 (stream_text: the console's)
    STREAM_HEADERS,
    STREAM_NOTE,
    stream_table,
    stream_text,
)
from loadtest.reports.writer import save_report


def _top_errors(run: RunResult) -> list[tuple[str, int]]:
    return sorted(run.client.errors.items(), key=lambda e: -e[1])[:5]


def _slo_text(slo: dict[str, float]) -> str:
    p99, err, good = _num(slo.get("p99_ms")), _num(slo.get("max_error_rate")), _num(slo.get("min_goodput"))
    text = f"p99 ≤ {tables.fmt(p99) or 'n/a'} ms, error rate ≤ {'n/a' if err is None else f'{err:.2%}'}"
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


FLOOR_NOTE = (
    "Triton's own time per request from its trace API over each run (`loadtest/target/server_trace.py`), and the "
    "generator's floor: the client's percentile minus Triton's, the time the load generator, its library, the "
    "loopback and Triton's frontend add (the median over traced trials; a difference of percentiles). A Triton "
    "older than 2.57.0 is not traced (it can crash while tracing): its runs have the means alone, Triton's from "
    "its metrics."
)


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
    lines += tables.md_table(tables.SUMMARY_HEADERS, tables.summary_table(result))
    lines += ["", _goodput_note(result)]
    stream_rows = stream_table(result)
    if stream_rows:
        lines += ["", "## Streams: TTFT, ITL, tokens/s", "", STREAM_NOTE, ""]
        lines += tables.md_table(STREAM_HEADERS, stream_rows)
    trial_rows = tables.trial_table(result)
    if trial_rows:
        lines += ["", "## Trials", "", INTERVAL_NOTE, ""] + tables.md_table(tables.trial_headers(result), trial_rows)
    lines += [
        "",
        "## Where the time goes",
        "",
        "Mean ms per request at each stage, and its share of the client's mean latency.",
        "",
    ]
    time_rows = tables.time_table(result)
    lines += tables.md_table(tables.TIME_HEADERS, time_rows) if time_rows else ["No run has server stats."]
    floor_rows = tables.floor_table(result)
    if floor_rows:
        lines += ["", "## The load generator's floor", "", FLOOR_NOTE, ""]
        lines += tables.md_table(tables.FLOOR_HEADERS, floor_rows)
    lines += ["", "## SLO verdict", ""]
    for run in result.runs:
        lines.append(f"- **{_label(run)}**: {run.outcome}")
        lines += [f"  - {v}" for v in _verdict_notes(run)]
        lines += ["  - error `" + msg.replace("`", "'") + f"`: {n}" for msg, n in _top_errors(run)]
    lines += ["", "## Tuning", ""]
    blocks = tables.tuning_blocks(result.tuning)
    for caption, headers, rows in blocks:
        lines += [f"**{caption}**", ""] + tables.md_table(headers, rows) + [""]
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
        slo_column=tables.SLO_COLUMN,
        slo=_slo_text(result.slo),
        headers=tables.SUMMARY_HEADERS,
        rows=tables.summary_table(result),
        goodput_note=_goodput_note(result),
        stream_note=STREAM_NOTE,
        stream_headers=STREAM_HEADERS,
        stream_rows=stream_table(result),
        interval_note=INTERVAL_NOTE,
        trial_headers=tables.trial_headers(result),
        trial_rows=tables.trial_table(result),
        notes=_verdict_notes,
        time_headers=tables.TIME_HEADERS,
        time_rows=tables.time_table(result),
        plots=[p.name for p in plots],
        tuning=tables.tuning_blocks(result.tuning),
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
        "runs.csv": lambda _: tables.csv_text(tables.runs_rows(result), tables.run_fields(result)),
        "timeline.csv": lambda _: tables.csv_text(tables.timeline_rows(result), tables.TIMELINE_FIELDS),
        "index.html": lambda _: _index_html(result, plots),
    }
    # CampaignResult's own form, which CampaignResult.load reads back.
    data = dataclasses.asdict(result)
    return save_report(data, out_dir, lambda _: _summary_md(result, plots), plots=draw, files=files)
