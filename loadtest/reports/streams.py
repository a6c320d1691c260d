"""The stream figures of a campaign report (decoupled models, ``loadtest.core.streams``), in GenAI-Perf's terms:
time to first token (TTFT), inter-token latency (ITL), output tokens/s and goodput. ``loadtest.reports.campaign``
puts them in a Streams table of ``summary.md`` and ``index.html``, in columns of ``runs.csv`` and of the trials'
table, and ``stream_text`` on the console line of a trial. They appear only when a run streamed: the report of
a campaign without streams is what it was before them.

A run of two or more trials shows the p99 TTFT, p99 ITL, tokens/s and goodput as ``estimate (low-high)``, the
95% interval over its trials (``RunResult.intervals``), as the runs table does for p99.
"""

from __future__ import annotations

from typing import Any

from loadtest.core.metrics import STREAM_FIGURES
from loadtest.core.results import STREAM_METRICS, CampaignResult, RunResult
from loadtest.reports.plots import label, num

STREAM_KEYS = ("p50", "p90", "p99", "mean")
STREAM_HEADERS = (
    ["run"]
    + [f"TTFT {k} ms" for k in STREAM_KEYS]
    + [f"ITL {k} ms" for k in STREAM_KEYS]
    + ["tokens", "tokens/s", "goodput"]
)
STREAM_NOTE = (
    "Streams (GenAI-Perf's figures): TTFT from a request's send (open loop: when it fell due) to its first "
    "response with text; ITL a request's mean gap between text responses, (last - first) / (tokens - 1), over "
    "requests of two tokens or more; tokens: responses with text (one generated token each); tokens/s over the "
    "measured window; goodput: requests answered without error within every budget given (p99, TTFT, ITL). A "
    "run of two or more trials shows p99, tokens/s and goodput as estimate (low-high) over its trials."
)
STREAM_FIELDS = [
    "ttft_p50_ms",
    "ttft_p99_ms",
    "itl_p50_ms",
    "itl_p99_ms",
    "output_tokens",
    "output_token_throughput",
] + [f"{m}_{end}" for m in STREAM_METRICS for end in ("low", "high")]
"""``runs.csv``'s stream columns (after the others; only when a run streamed): pooled figures, then the
intervals over the trials (empty for one trial)."""


def with_interval(run: RunResult, metric: str, value: Any, fmt: str) -> str:
    """A figure of the run; with its interval (``estimate (low-high)``) when the run had 2+ trials."""
    iv = run.interval(metric)
    if iv is not None and num(iv.estimate) is not None:
        return f"{fmt.format(iv.estimate)} ({fmt.format(iv.low)}-{fmt.format(iv.high)})"
    return "n/a" if num(value) is None else fmt.format(value)


def _fixed(value: Any, digits: int = 3) -> str:
    return "" if (f := num(value)) is None else f"{f:.{digits}f}"


def stream_text(c) -> str:
    """A streamed run's figures on the console (``""`` for a model that does not stream)."""
    if not c.streams:
        return ""
    itl = f"ITL p50 {c.itl_ms['p50']:.3f} p99 {c.itl_ms['p99']:.3f} ms  " if c.itl_ms else ""
    return (
        f"TTFT p50 {c.ttft_ms['p50']:.3f} p99 {c.ttft_ms['p99']:.3f} ms  {itl}{c.output_token_throughput:.1f} tokens/s"
    )


def stream_table(result: CampaignResult) -> list[list[str]]:
    """The streamed runs' TTFT, ITL, tokens and goodput (``STREAM_HEADERS``); no rows when no run streamed."""
    rows = []
    for run in result.runs:
        c = run.client
        if not c.streams:
            continue
        cells = [label(run)]
        for name, figures in (("ttft", c.ttft_ms), ("itl", c.itl_ms)):
            for k in STREAM_KEYS:
                value = figures.get(k)
                p99 = k == "p99"  # the figure judged by the budgets, with its interval over trials
                cells.append(with_interval(run, f"{name}_p99_ms", value, "{:.3f}") if p99 else _fixed(value) or "n/a")
        tokens_s = with_interval(run, "output_token_throughput", c.output_token_throughput, "{:.1f}")
        goodput = with_interval(run, "goodput_share", run.goodput_share, "{:.2%}")
        rows.append([*cells, str(c.output_tokens), tokens_s, goodput])
    return rows


def streamed(result: CampaignResult) -> bool:
    return any(run.client.streams for run in result.runs)


def csv_cells(run: RunResult) -> dict[str, Any]:
    """``STREAM_FIELDS`` of one run (all empty for a run that did not stream)."""
    c = run.client
    if not c.streams:
        return dict.fromkeys(STREAM_FIELDS, "")
    row: dict[str, Any] = {
        "ttft_p50_ms": _fixed(c.ttft_ms.get("p50")),
        "ttft_p99_ms": _fixed(c.ttft_ms.get("p99")),
        "itl_p50_ms": _fixed(c.itl_ms.get("p50")),
        "itl_p99_ms": _fixed(c.itl_ms.get("p99")),
        "output_tokens": c.output_tokens,
        "output_token_throughput": _fixed(c.output_token_throughput),
    }
    for metric in STREAM_METRICS:
        iv = run.interval(metric)
        row[f"{metric}_low"] = _fixed(iv.low, 6) if iv else ""
        row[f"{metric}_high"] = _fixed(iv.high, 6) if iv else ""
    return row


def trial_headers(result: CampaignResult) -> list[str]:
    """The trials' table's stream columns: when a run of 2+ trials streamed, else none."""
    return [name for name, _, _ in STREAM_FIGURES.values()] if _streamed_trials(result) else []


def trial_cells(result: CampaignResult, figures: dict[str, float]) -> list[str]:
    """One trial's stream cells (``Measurement.figures`` of ``Trial.measurement``), matching ``trial_headers``."""
    if not _streamed_trials(result):
        return []
    return [("n/a" if num(figures.get(m)) is None else f.format(figures[m])) for m, (_, f, _) in STREAM_FIGURES.items()]


def _streamed_trials(result: CampaignResult) -> bool:
    return any(run.trials and run.client.streams for run in result.runs)
