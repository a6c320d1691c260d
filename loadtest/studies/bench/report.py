"""``make bench``'s rows and its Markdown: a row's trials and the row they make (``row_summary``,
``inprocess_row``), the default users, the words for a served config, and ``bench.md`` (``render``).

``render`` reads the result dict ``loadtest.studies.bench.command.run`` writes as ``bench.json``, so a recorded result
renders again without measuring anything; one recorded before the bench ran trials (rows without ``trials``)
renders as it did, its figures plain. The ratios, the targets and the text of a figure with its interval are in
``bench_targets``; the names ``loadtest.studies.bench.command`` and ``bench_once`` take from there are importable from
here too.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

from loadtest.core.measurement import Measurement
from loadtest.core.trials import ArmResult
from loadtest.studies.bench.targets import (
    P99_BUDGET_MS,
    evaluate_targets,
    measured_text,
    number_text,
    ratio_intervals,
    ratios,
)

ROWS = (
    ("inprocess", "1. in-process, best batch"),
    ("triton_plain", "2. Triton plain"),
    ("triton_tuned", "3. Triton tuned"),
    ("fastapi", "4. FastAPI per request"),
    ("fastapi_batcher", "5. FastAPI + micro-batcher"),
)


ROW_METRICS = ("throughput", "p50_ms", "p99_ms")
MIN_USERS, MAX_USERS = 8, 32
"""Bounds of the default closed-loop users (:func:`default_users`)."""


def default_users(config: dict) -> int:
    """Closed-loop users enough for the served config to form its largest batch on every instance at once
    (instances x the largest preferred batch size, or ``max_batch_size`` without one; 1 per instance without
    a batcher), within [8, 32]: a closed loop of fewer users than that caps the batches below the config's, so
    the served rows could not reach the in-process limit at its best batch whatever the config."""
    instances = sum(int(g.get("count", 1)) for g in config.get("instance_group") or [{}])
    batching = config.get("dynamic_batching")
    if batching is None:
        batch = 1
    else:
        batch = max(
            [int(b) for b in batching.get("preferred_batch_size") or []] or [int(config.get("max_batch_size") or 1)]
        )
    return max(MIN_USERS, min(MAX_USERS, instances * batch))


# -- a row's trials --------------------------------------------------------------------------------
@dataclasses.dataclass
class Trial(Measurement):
    """One trial of one row: the figures every trial gives, the client's counts and the row's own details
    (row 1's batch table, a served row's average batch)."""

    requests: int = 0
    failures: int = 0
    detail: dict[str, Any] = dataclasses.field(default_factory=dict)


def locust_trial(client, **detail) -> Trial:
    """A trial from Locust's figures (``ClientStats``); a failed one when no request succeeded in the measured
    window (no latency to compare: a 1 s window on a loaded machine can end before the first answer)."""

    def ms(key: str) -> float:
        value = client.latency_ms.get(key)
        return math.nan if value is None else float(value)

    if client.requests <= client.failures or math.isnan(ms("p50")):
        errors = f" ({next(iter(client.errors))})" if client.errors else ""
        return Trial.failed(
            "locust", f"no request succeeded in the {client.duration_s:.2f} s window: {client.requests} done{errors}"
        )
    return Trial(
        client.throughput_rps,
        ms("p50"),
        ms("p99"),
        client.error_rate,
        "locust",
        requests=client.requests,
        failures=client.failures,
        detail=detail,
    )


def _value(x: Any) -> Any:
    return None if isinstance(x, float) and not math.isfinite(x) else x


def _trial_dict(t: Measurement) -> dict:
    """One trial as bench.json keeps it: its figures (None for none), why it failed, its scalar details."""
    out = {m: _value(float(getattr(t, m))) for m in ROW_METRICS}
    if not t.usable:
        out["error"] = t.not_usable_reason
    if isinstance(t, Trial):
        out.update(requests=t.requests, failures=t.failures)
        out.update({k: _value(v) for k, v in t.detail.items() if isinstance(v, int | float)})
    return out


def row_summary(result: ArmResult, **extra) -> dict:
    """A row from its trials: each figure's mean over the usable trials with its interval, the trials, the
    summed counts, and (``extra``) the row's own keys. No usable trial: the first failure is the row's error."""
    intervals, usable = result.intervals(), result.usable
    row: dict[str, Any] = {m: _value(intervals[m].estimate) if usable else None for m in ROW_METRICS}
    row["intervals"] = {m: intervals[m].to_dict() for m in ROW_METRICS if row[m] is not None}
    row["trials"] = [_trial_dict(t) for t in result.trials]
    row["requests"] = sum(t.get("requests", 0) for t in row["trials"])
    row["failures"] = sum(t.get("failures", 0) for t in row["trials"])
    row.update(extra)
    failed = [t["error"] for t in row["trials"] if "error" in t]
    if not usable:
        row["error"] = failed[0] if failed else "no trial"
    elif failed:
        row["note"] = f"{row.get('note', '')}; {len(failed)} of {len(row['trials'])} trials failed ({failed[0]})"
    return row


def inprocess_row(result: ArmResult, where: str) -> dict:
    """Row 1 from its trials: the figures, the batch-1 median (mean of the trials') and the last trial's batch
    table; ``where``: the file and cores, ``{threads}`` filled in."""
    usable = [t for t in result.usable if isinstance(t, Trial)]
    batch1 = [t.detail["batch1_median_ms"] for t in usable if t.detail.get("batch1_median_ms")]
    last = usable[-1].detail if usable else {}
    best = sorted({t.detail["best_batch"] for t in usable})
    note = f"{where.format(threads=last['threads'])}; best batch {best}" if usable else ""
    return row_summary(
        result,
        note=note,
        batch1_median_ms=sum(batch1) / len(batch1) if batch1 else None,
        **{k: last.get(k) for k in ("best_batch", "threads", "table")},
    )


# -- the Markdown ----------------------------------------------------------------------------------
def _ms(value: float | None) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.3f}"


def _cell(row: dict, metric: str, text: Callable[[float | None], str]) -> str:
    """A row's figure, with its interval (low-high) when it has one."""
    iv = (row.get("intervals") or {}).get(metric)
    if not iv or iv["trials"] < 2:
        return text(row.get(metric))
    return f"{text(iv['estimate'])} ({text(iv['low'])}-{text(iv['high'])})"


def _trials_text(trials: int | None) -> str:
    if trials is None:  # recorded before the bench ran trials
        return ""
    if trials == 1:
        return " 1 trial, no interval."
    return (
        f" {trials} rounds, every row once a round; each figure is the mean over the rounds with its 95% "
        "interval in brackets; ratios pair the rows' throughputs by round."
    )


def render_model(model: str, entry: dict) -> str:
    lines = [
        f"### {model}: {entry['users']} closed-loop users, {entry['duration_s']:g} s per row "
        f"({entry['warmup_s']:g} s warm-up left out)",
        "",
        f"Tuned config: {entry.get('tuned_source', '?')}.{_trials_text(entry.get('trials'))}",
        "",
        "| row | throughput (infer/s) | p50 ms | p99 ms | notes |",
        "|---|---|---|---|---|",
    ]
    for key, label in ROWS:
        row = entry.get("rows", {}).get(key) or {}
        note = row.get("error") or row.get("note", "")
        cells = [
            _cell(row, "throughput", lambda v: "-" if v is None else f"{v:,.0f}"),
            _cell(row, "p50_ms", _ms),
            _cell(row, "p99_ms", _ms),
        ]
        lines.append(f"| {label} | {' | '.join(cells)} | {note} |")
    lines.append("")
    paired = ratio_intervals(entry)
    lines.append(
        "Ratios (throughput): "
        + ", ".join(
            f"{k} = {measured_text(paired[k], 'x') if paired[k] is not None else number_text(v, 'x')}"
            for k, v in ratios(entry).items()
        )
    )
    if entry.get("trials"):
        lines.append("One run each, after the rounds: perf_analyzer, the one-client figures and the first request.")
    perf = entry.get("perf") or {}

    def level(r: dict | None) -> str:
        return (
            f"{r['throughput']:,.0f} infer/s at concurrency {r['concurrency']} (p99 {_ms(r['p99_ms'])} ms)"
            if r
            else "no level"
        )

    lines.append(
        f"perf_analyzer (row 3, gRPC, the rows' payloads): failed: {perf.get('error')}"
        if "best" not in perf
        else f"perf_analyzer (row 3, gRPC, the rows' payloads, concurrency {perf['range']}): "
        f"best {level(perf['best'])}; "
        f"best with p99 < {P99_BUDGET_MS:g} ms: {level(perf.get('best_under_p99'))}"
        + (f"; no stable figure at concurrency {', '.join(map(str, perf['failed']))}" if perf.get("failed") else "")
    )
    lines.append(render_one_client(entry))
    one = entry.get("one_user") or {}
    lines.append(
        "Second figure, Locust (1 user, HTTP, Python client): "
        + (
            f"failed: {one['error']}"
            if one.get("error")
            else f"Triton tuned p50 {_ms(one.get('triton_p50_ms'))} ms - in-process batch-1 median "
            f"{_ms(one.get('inprocess_batch1_ms'))} ms = {_ms(one.get('overhead_ms'))} ms"
        )
    )
    for item in entry.get("first_request", []):
        lines.append(
            f"First request after ready, warmup {'on' if item['warmup'] else 'off'}: "
            + (
                f"failed: {item['error']}"
                if item.get("error")
                else f"{item['first_ms']:.2f} ms vs steady p50 "
                f"{item['steady_p50_ms']:.2f} ms = {item['ratio']:.2f}x (ready after {item['ready_s']:.1f} s)"
            )
        )
    return "\n".join(lines)


def render_one_client(entry: dict) -> str:
    """The serving overhead at one client, from perf_analyzer (the C++ gRPC client) with the server's split."""
    one = entry.get("one_client") or {}
    head = "Serving overhead at one client (perf_analyzer, gRPC, concurrency 1): "
    if one.get("error") or one.get("p50_ms") is None:
        return head + f"failed: {one.get('error', 'not measured')}"
    return head + (
        f"Triton tuned p50 {_ms(one['p50_ms'])} ms - in-process batch-1 median "
        f"{_ms(one.get('inprocess_batch1_ms'))} ms = {_ms(one.get('overhead_ms'))} ms; "
        f"the server's split per request: queue {_ms(one.get('server_queue_ms'))} ms, compute "
        f"{_ms(one.get('server_compute_ms'))} ms (input {_ms(one.get('server_compute_input_ms'))}, infer "
        f"{_ms(one.get('server_compute_infer_ms'))}, output {_ms(one.get('server_compute_output_ms'))})"
    )


def render_targets(targets: list[dict]) -> str:
    lines = [
        "### targets (measured figures, not assertions)",
        "",
        "A target is met or missed when the figure's whole 95% interval is on one side of it, inconclusive when "
        "the interval straddles it; a figure without an interval (one run) is met or missed on its value.",
        "",
        "| model | target | measured | status |",
        "|---|---|---|---|",
    ]
    lines += [f"| {t['model']} | {t['target']} | {t['measured']} | {t['status']} |" for t in targets]
    return "\n".join(lines)


def render(result: dict) -> str:
    head = (
        f"## tritonkit side-by-side benchmark ({result.get('started', '')}; {result.get('machine', '')})\n\n"
        "Throughput in inferences/s (rows 2-5: batch-1 requests/s; row 1: items/s). "
        "Latencies: client side; row 1: per call at its best batch." + _cpus_text(result.get("cpus"))
    )
    parts = [head] + [render_model(m, e) for m, e in result.get("models", {}).items()]
    parts.append(render_targets(result.get("targets") or evaluate_targets(result)))
    return "\n\n".join(parts) + "\n"


def _cpus_text(cpus: dict | None) -> str:
    if not cpus or not (cpus.get("server") or cpus.get("client")):
        return " Servers and load generators shared every core."

    def text(c):
        return ",".join(map(str, c)) if c else "any"

    return (
        f" Servers (Triton, FastAPI) and row 1 on CPUs {text(cpus.get('server'))}, load generators on CPUs "
        f"{text(cpus.get('client'))}."
    )


def describe(config: dict) -> str:
    """Instances, batching and warmup of a Triton JSON config, in a few words."""
    count = sum(g.get("count", 1) for g in config.get("instance_group") or [{}])
    batching = config.get("dynamic_batching")
    text = f"{count} instance{'s' if count > 1 else ''}, " + (
        f"dynamic batching ({batching.get('max_queue_delay_microseconds', 0)} us, preferred "
        f"{batching.get('preferred_batch_size') or '-'})"
        if batching is not None
        else "no dynamic batching"
    )
    return text + f", {len(config.get('model_warmup') or [])} warmup samples"
