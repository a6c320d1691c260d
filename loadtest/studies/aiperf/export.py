"""AIPerf's export read back: the summary (``profile_export_aiperf.json``), the per-request records
(``profile_export.jsonl``: each answer's length) and the Markdown summary of ``tritonkit aiperf``'s report."""

from __future__ import annotations

import collections
import json
import math
from pathlib import Path

from loadtest.reports.writer import ms_text

SUMMARY = "profile_export_aiperf.json"
RECORDS = "profile_export.jsonl"
AGGREGATE = "profile_export_aiperf_aggregate.json"
KEYS = (
    "time_to_first_token",
    "inter_token_latency",
    "request_latency",
    "output_token_throughput",
    "request_throughput",
    "request_count",
    "completed_request_count",
    "request_error_rate",
    "output_sequence_length",
    "osl_mismatch_count",
    "goodput",
    "good_request_count",
    "good_request_fraction",
    "benchmark_duration",
)
"""The figures kept in the report, in AIPerf's names (each ``{"unit": ..., "avg": ..., "p99": ...}``)."""
STATS = ("avg", "p50", "p90", "p99", "max")
INTERVALS = (
    "time_to_first_token_avg",
    "time_to_first_token_p99",
    "inter_token_latency_avg",
    "inter_token_latency_p99",
    "request_latency_avg",
    "request_latency_p99",
    "output_token_throughput_avg",
    "request_throughput_avg",
)
"""The figures whose spread across AIPerf's profile runs (``--num-profile-runs`` above 1) the report keeps: each
run's value's mean and its confidence interval (``ci_low``, ``ci_high``)."""


def newest(artifacts: Path, name: str) -> Path | None:
    found = sorted(Path(artifacts).rglob(name), key=lambda p: p.stat().st_mtime)
    return found[-1] if found else None


def read(artifacts: Path) -> dict:
    """The run's figures (``KEYS``), AIPerf's version and errors, and with several profile runs its aggregate
    across them (``intervals``); ``ValueError`` when there is no summary or it says the run did not complete."""
    path = newest(artifacts, SUMMARY)
    if path is None:
        raise ValueError(f"AIPerf wrote no {SUMMARY} under {artifacts}")
    data = json.loads(path.read_text())
    if data.get("was_cancelled") or data.get("is_complete") is False:
        raise ValueError(f"AIPerf's run did not complete ({path})")
    found = {key: data[key] for key in KEYS if key in data}
    found["aiperf_version"] = data.get("aiperf_version", "")
    found["errors"] = data.get("error_summary") or []
    found["export"] = str(path)
    aggregate = newest(artifacts, AGGREGATE)
    if aggregate is not None:
        across = json.loads(aggregate.read_text())
        metrics = across.get("metrics", {})
        found["intervals"] = {
            "metadata": across.get("metadata", {}),
            "metrics": {key: metrics[key] for key in INTERVALS if key in metrics},
        }
    return found


def lengths(artifacts: Path, asked: int) -> dict:
    """Each answer's output length from AIPerf's records (``output_sequence_length``, counted with the model's
    tokenizer) in every profile run: how many answers of each length, and ``ok`` when every one had ``asked``
    tokens. A record without a length (an error) counts as length None."""
    counts: collections.Counter = collections.Counter()
    for path in sorted(Path(artifacts).rglob(RECORDS)):  # every profile run's
        for line in path.read_text().splitlines():
            if line.strip():
                metric = json.loads(line).get("metrics", {}).get("output_sequence_length") or {}
                counts[metric.get("value")] += 1
    answers = sum(counts.values())
    return {
        "asked": asked,
        "answers": answers,
        "by_length": {str(k): n for k, n in sorted(counts.items(), key=lambda kv: (kv[0] is None, kv[0] or 0))},
        "ok": answers > 0 and set(counts) == {asked},
    }


def _cell(figure: dict | None, stat: str) -> str:
    value = (figure or {}).get(stat)
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.2f}"


def intervals_lines(intervals: dict | None) -> list[str]:
    """The figures across the profile runs: mean and confidence interval of each run's value."""
    if not intervals or not intervals.get("metrics"):
        return []
    meta = intervals.get("metadata", {})
    level = meta.get("confidence_level")
    lines = [
        "",
        f"Across {meta.get('num_successful_runs', '?')} profile runs (mean, "
        f"{'' if level is None else f'{level:.0%} '}interval):",
        "",
        "| figure | unit | mean | low | high |",
        "|---|---|---|---|---|",
    ]
    for key, figure in intervals["metrics"].items():
        cells = " | ".join(_cell(figure, stat) for stat in ("mean", "ci_low", "ci_high"))
        lines.append(f"| {key} | {figure.get('unit', '')} | {cells} |")
    return lines


def render(data: dict) -> str:
    """summary.md: the run, AIPerf's stream figures, goodput, the answers' lengths and Triton's own counters."""
    a = data["aiperf"]
    lines = [
        f"# AIPerf against {data['model']}",
        "",
        f"AIPerf {a.get('aiperf_version', '')}, `template` endpoint, HTTP `{data['endpoint']}`"
        f"{' (streamed)' if data['streaming'] else ''}; {data['requests']} requests at concurrency "
        f"{data['concurrency']}, {data['input_tokens']} input tokens"
        f"{f', {asked} output tokens asked' if (asked := data['lengths'].get('asked')) else ''}, "
        f"{data['runs']} profile run(s); commit {data.get('commit') or '-'}.",
        "",
        "| metric | unit | " + " | ".join(STATS) + " |",
        "|---|---|" + "---|" * len(STATS),
    ]
    if data["runs"] > 1:
        lines[2] += " The table is the last profile run's; the intervals across the runs follow it."
    streamed = ("time_to_first_token", "inter_token_latency", "request_latency", "output_sequence_length")
    for key in streamed if data["streaming"] else ("request_latency",):
        if key in a:
            lines.append(f"| {key} | {a[key].get('unit', '')} | {' | '.join(_cell(a[key], s) for s in STATS)} |")
    lines += intervals_lines(a.get("intervals"))
    lines.append("")
    for key in ("output_token_throughput", "request_throughput", "request_count", "request_error_rate"):
        if key in a and (data["streaming"] or key != "output_token_throughput"):
            lines.append(f"- {key}: {_cell(a[key], 'avg')} {a[key].get('unit', '')}")
    budgets = data.get("budgets_ms") or {}
    if budgets:
        within = ", ".join(f"{name} <= {ms:g} ms" for name, ms in budgets.items())
        share = a.get("good_request_fraction", {}).get("avg")
        share_text = "-" if share is None else f"{share:.1%}"
        lines.append(
            f"- goodput ({within}): {_cell(a.get('goodput'), 'avg')} requests/s, "
            f"{_cell(a.get('good_request_count'), 'avg')} good requests ({share_text})"
        )
    if a.get("errors"):
        lines.append(f"- errors: {json.dumps(a['errors'])[:300]}")
    checked = data["lengths"]
    if checked.get("checked"):
        verdict = "every answer had" if checked["ok"] else "NOT every answer had"
        lines.append(
            f"- output lengths: {verdict} the {checked['asked']} tokens asked ({checked['answers']} answers, "
            f"by length {checked['by_length']})"
        )
    server = data["server"]
    breakdown = server.get("breakdown_ms", {})
    lines += [
        "",
        "Triton's own counters for the model over the run (its metrics port, read before and after"
        + ("; a decoupled model's request duration need not span its stream" if data["streaming"] else "")
        + "):",
        "",
        f"- requests {server.get('requests')}, failures {server.get('failures')}, executions "
        f"{server.get('executions')}",
        f"- mean per request, ms: request {ms_text(breakdown.get('request'))}, queue "
        f"{ms_text(breakdown.get('queue'))}, compute_infer {ms_text(breakdown.get('compute_infer'))}",
    ]
    return "\n".join(lines) + "\n"
