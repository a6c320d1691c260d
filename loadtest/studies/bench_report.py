"""``make bench``'s pure parts: the rows, ratios and targets of a result, and its Markdown (``bench.md``).

Everything here reads the result dict ``loadtest.studies.bench.run`` writes as ``bench.json``, so a recorded
result renders and is judged again without measuring anything.
"""

from __future__ import annotations

import math
import operator

P99_BUDGET_MS = 5.0
ROWS = (
    ("inprocess", "1. in-process, best batch"),
    ("triton_plain", "2. Triton plain"),
    ("triton_tuned", "3. Triton tuned"),
    ("fastapi", "4. FastAPI per request"),
    ("fastapi_batcher", "5. FastAPI + micro-batcher"),
)
RATIOS = (
    ("3/1", "triton_tuned", "inprocess"),
    ("3/2", "triton_tuned", "triton_plain"),
    ("3/4", "triton_tuned", "fastapi"),
    ("3/5", "triton_tuned", "fastapi_batcher"),
)


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b and a > 0 and b > 0 and not math.isnan(a) and not math.isnan(b) else None


def throughput(entry: dict, row: str) -> float | None:
    return (entry.get("rows", {}).get(row) or {}).get("throughput")


def ratios(entry: dict) -> dict[str, float | None]:
    return {name: ratio(throughput(entry, a), throughput(entry, b)) for name, a, b in RATIOS}


def _first_request_ratio(entry: dict, warmup: bool = True) -> float | None:
    return next((i.get("ratio") for i in entry.get("first_request", []) if i.get("warmup") == warmup), None)


def _perf_under_budget(entry: dict) -> float | None:
    return ((entry.get("perf") or {}).get("best_under_p99") or {}).get("throughput")


# (model or "*", target, how it is measured, value getter, comparison, threshold, unit)
TARGETS = (
    ("minilm", "tuned Triton >= 0.95x the in-process limit (3/1)", lambda e: ratios(e)["3/1"], ">=", 0.95, "x"),
    ("minilm", "tuned Triton >= 2x FastAPI (3/4)", lambda e: ratios(e)["3/4"], ">=", 2.0, "x"),
    (
        "digits",
        f">= 10k infer/s at p99 < {P99_BUDGET_MS:g} ms (perf_analyzer)",
        _perf_under_budget,
        ">=",
        10000.0,
        " infer/s",
    ),
    ("digits", "tuned Triton >= 2.5x FastAPI (3/4)", lambda e: ratios(e)["3/4"], ">=", 2.5, "x"),
    ("digits", "tuned Triton >= 1.2x FastAPI + batcher (3/5)", lambda e: ratios(e)["3/5"], ">=", 1.2, "x"),
    ("*", "first request after ready <= 1.5x steady p50 (warmup on)", _first_request_ratio, "<=", 1.5, "x"),
    (
        "digits",
        "p50 serving overhead at one client < 0.4 ms (perf_analyzer)",
        lambda e: (e.get("one_client") or {}).get("overhead_ms"),
        "<",
        0.4,
        " ms",
    ),
)


def evaluate_targets(result: dict) -> list[dict]:
    """One entry per target that applies to a model of ``result``: the measured value and met/missed.

    A value that could not be measured counts as missed (and says so)."""
    out = []
    for model, entry in result.get("models", {}).items():
        for applies, text, getter, op, threshold, unit in TARGETS:
            if applies not in ("*", model):
                continue
            value = getter(entry)
            met = value is not None and {">=": operator.ge, "<=": operator.le, "<": operator.lt}[op](value, threshold)
            out.append(
                {
                    "model": model,
                    "target": text,
                    "value": value,
                    "op": op,
                    "threshold": threshold,
                    "unit": unit,
                    "status": "met" if met else "missed",
                    "measured": "not measured" if value is None else _number(value, unit),
                }
            )
    return out


def _number(value: float | None, unit: str = "") -> str:
    if value is not None and unit == "x" and 0 < abs(value) < 0.1:  # e.g. Triton over an in-process MLP: 0.0040x
        return f"{value:.2g}x"
    formats = {"x": "{:.2f}x", " ms": "{:.3f} ms"}
    return "-" if value is None else formats.get(unit, "{:,.0f}" + unit).format(value)


def _ms(value: float | None) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.3f}"


def render_model(model: str, entry: dict) -> str:
    lines = [
        f"### {model}: {entry['users']} closed-loop users, {entry['duration_s']:g} s per row "
        f"({entry['warmup_s']:g} s warm-up left out)",
        "",
        f"Tuned config: {entry.get('tuned_source', '?')}",
        "",
        "| row | throughput (infer/s) | p50 ms | p99 ms | notes |",
        "|---|---|---|---|---|",
    ]
    for key, label in ROWS:
        row = entry.get("rows", {}).get(key) or {}
        note = row.get("error") or row.get("note", "")
        tp = row.get("throughput")
        lines.append(
            f"| {label} | {'-' if tp is None else f'{tp:,.0f}'} | {_ms(row.get('p50_ms'))} | "
            f"{_ms(row.get('p99_ms'))} | {note} |"
        )
    lines.append("")
    lines.append("Ratios (throughput): " + ", ".join(f"{k} = {_number(v, 'x')}" for k, v in ratios(entry).items()))
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
