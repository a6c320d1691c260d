"""The campaign report's tables, one row per run (or trial), read from ``CampaignResult`` alone: the runs'
summary, the trials, where the time goes, the load generator's floor, the tuning blocks; and the rows of
runs.csv and timeline.csv. ``loadtest.reports.campaign`` lays them out as Markdown and HTML."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

import numpy as np

from loadtest.core import evidence
from loadtest.core.metrics import FIGURES, column
from loadtest.core.results import CampaignResult, RunResult
from loadtest.reports import streams as report_streams
from loadtest.reports.plots import PCT_KEYS, STACK
from loadtest.reports.plots import label as _label
from loadtest.reports.plots import lat as _lat
from loadtest.reports.plots import num as _num
from loadtest.target import server_trace

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


def fmt(value: Any, digits: int = 3) -> str:
    return "" if (f := _num(value)) is None else f"{f:.{digits}f}"


def figure(run: RunResult, metric: str, value: Any) -> str:
    """A figure of the run; with its interval (``estimate (low-high)``) when the run had 2+ trials."""
    return report_streams.with_interval(run, metric, value, FIGURES[metric][1])


def runs_rows(result: CampaignResult) -> list[dict[str, Any]]:
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
            "error_rate": fmt(c.error_rate, 6),
            "throughput_rps": fmt(c.throughput_rps),
        }
        row.update({f"{k}_ms": fmt(_lat(run, k)) for k in LATENCY_KEYS})
        row.update(
            {
                "server_requests": s.requests if s else "",
                "server_inferences": s.inferences if s else "",
                "server_executions": s.executions if s else "",
                "server_avg_batch": fmt(s.avg_batch) if s else "",
            }
        )
        row.update({f"{k}_ms": fmt(s.breakdown_ms.get(k)) if s else "" for k in BREAKDOWN_KEYS})
        row.update({f"generator_floor_{k}_ms": fmt(run.generator_floor_ms.get(k)) for k in FLOOR_KEYS})
        row.update({"goodput_share": fmt(run.goodput_share, 6), "goodput_rps": fmt(run.goodput_rps)})
        row["trials"] = len(run.all_trials())
        for metric in evidence.METRICS:
            iv = run.interval(metric)
            row.update({f"{metric}_low": fmt(iv.low, 6) if iv else "", f"{metric}_high": fmt(iv.high, 6) if iv else ""})
        row.update({"slo_passed": run.passed, "slo_verdict": run.outcome.lower()})
        row["slo_violations"] = "; ".join(run.slo_violations)
        rows.append(row | (report_streams.csv_cells(run) if streamed else {}))
    return rows


def run_fields(result: CampaignResult) -> list[str]:
    """``RUN_FIELDS``, and the stream columns after them when a run streamed."""
    return RUN_FIELDS + (report_streams.STREAM_FIELDS if report_streams.streamed(result) else [])


def csv_text(rows: list[dict[str, Any]], fields: list[str]) -> str:
    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, fieldnames=fields)
    writer.writeheader()
    writer.writerows(rows)
    return text.getvalue()


def timeline_rows(result: CampaignResult) -> list[dict[str, Any]]:
    return [
        {
            "scenario": run.scenario,
            "variant": run.variant,
            "t": p.t,
            "requests": p.requests,
            "failures": p.failures,
            "p50_ms": fmt(p.p50_ms),
            "p99_ms": fmt(p.p99_ms),
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


def summary_table(result: CampaignResult) -> list[list[str]]:
    rows = []
    for run in result.runs:
        c = run.client
        pooled = {"error rate": c.error_rate, "req/s": c.throughput_rps} | {
            f"{k} ms": _lat(run, k) for k in LATENCY_KEYS
        }
        cells = {
            header: figure(run, _FIGURE_OF[header], value) if header in _FIGURE_OF else fmt(value) or "n/a"
            for header, value in pooled.items()
        }
        cells |= {
            "scenario": run.scenario,
            "variant": run.variant,
            "SLO": run.outcome,
            "goodput": figure(run, "goodput_share", run.goodput_share),
            "goodput/s": figure(run, "goodput_rps", run.goodput_rps),
            "trials": str(len(run.all_trials())),
            "requests": str(c.requests),
            "failures": str(c.failures),
            "avg batch": fmt(run.server.avg_batch, 2) if run.server else "n/a",
            "served model": run.served_model,
            "protocol": run.protocol,
            "shape": str(run.shape.get("kind", "")),
        }
        rows.append([cells[header] for header in SUMMARY_HEADERS])
    return rows


TRIAL_HEADERS = ["run", "trial"] + [name for name, _, _ in FIGURES.values()]
"""The trials' table; streamed runs add ``report_streams.trial_headers``."""


def trial_headers(result: CampaignResult) -> list[str]:
    return TRIAL_HEADERS + report_streams.trial_headers(result)


def trial_table(result: CampaignResult) -> list[list[str]]:
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


def time_table(result: CampaignResult) -> list[list[str]]:
    """Mean ms per stage and its share of the client's mean; runs without server stats are left out."""
    rows = []
    for run in result.runs:
        if run.server is None:
            continue
        mean = _lat(run, "mean")
        cells = [_label(run), fmt(mean) or "n/a"]
        for key, _ in STACK:
            v = _num(run.server.breakdown_ms.get(key))
            share = f" ({v / mean:.0%})" if v is not None and mean else ""
            cells.append(f"{fmt(v) or 'n/a'}{share}")
        rows.append(cells)
    return rows


def cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, sort_keys=True, default=str)
    return str(value)


def tuning_blocks(tuning: dict[str, Any]) -> list[tuple[str, list[str], list[list[str]]]]:
    """``result.tuning`` as (caption, headers, rows) tables, whatever its keys: the tuner's format may
    grow, and a report that drops an unknown key would hide why a config was picked."""
    blocks = []
    for name, value in tuning.items():
        if not isinstance(value, dict):
            blocks.append((str(name), ["key", "value"], [["value", cell(value)]]))
            continue
        scalars = [[str(k), cell(v)] for k, v in value.items() if not isinstance(v, (dict, list, tuple))]
        if scalars:
            blocks.append((str(name), ["key", "value"], scalars))
        for key, v in value.items():
            caption = f"{name}: {key}"
            if isinstance(v, dict):
                blocks.append((caption, ["key", "value"], [[str(k), cell(x)] for k, x in v.items()]))
            elif isinstance(v, (list, tuple)) and v and all(isinstance(x, dict) for x in v):
                headers = list(dict.fromkeys(k for x in v for k in x))
                blocks.append((caption, [str(h) for h in headers], [[cell(x.get(h)) for h in headers] for x in v]))
            elif isinstance(v, (list, tuple)):
                blocks.append((caption, ["#", "value"], [[str(i + 1), cell(x)] for i, x in enumerate(v)]))
    return blocks


def md_table(headers: list[str], rows: list[list[str]]) -> list[str]:
    def line(cells: list[str]) -> str:
        # Cells hold free text (error messages, tuner reasons): keep it from becoming table or HTML syntax.
        return "| " + " | ".join(c.replace("|", "\\|").replace("<", "&lt;").replace("\n", " ") for c in cells) + " |"

    return [line(headers), "|" + "---|" * len(headers)] + [line(r) for r in rows]


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


def floor_table(result: CampaignResult) -> list[list[str]]:
    rows = []
    for run in result.runs:
        if not run.server or not run.generator_floor_ms:
            continue
        traced = [t.server.trace["request"] for t in run.all_trials() if t.server and "request" in t.server.trace]
        server = {k: float(np.median([q[k] for q in traced])) if traced else None for k in ("p50", "p99")}
        cells = [_label(run)]
        for k in ("p50", "p99"):
            cells += [fmt(_lat(run, k)), fmt(server[k]), fmt(run.generator_floor_ms.get(k))]
        request = run.server.breakdown_ms.get("request")
        cells += [fmt(_lat(run, "mean")), fmt(request), fmt(run.server.breakdown_ms.get("client_network"))]
        rows.append(cells)
    return rows
