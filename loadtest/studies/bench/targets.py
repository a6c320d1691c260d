"""``make bench``'s ratios and targets: the ratios between its rows, paired by round, the targets each model's
figures are held to, and the figures derived from the measured ones (``finish``); the text of a figure with its
interval, which the targets and ``bench_report``'s Markdown both print.

Everything here reads the result dict ``loadtest.studies.bench.command.run`` writes as ``bench.json``, so a recorded
result is judged again without measuring anything. Ratios are paired by round: for each round in which both
rows measured, the ratio of their throughputs; the estimate is the geometric mean of those ratios and its 95%
interval Student's t interval of their logs, which is ``evidence.compare``'s change (B/A - 1, paired by round)
plus one. A result recorded before the bench ran trials (rows without ``trials``) has the ratio of the rows'
throughputs. A target is met when the whole interval is on its side of the threshold, missed when the whole
interval is on the other, else inconclusive; a figure measured once (perf_analyzer's, the first request's) is
met or missed on its one value.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable

from export.variants import base_model
from loadtest.core import evidence
from loadtest.core.evidence import Interval

P99_BUDGET_MS = 5.0
"""The p99 under which perf_analyzer's best level counts toward the throughput target."""
RATIOS = (
    ("3/1", "triton_tuned", "inprocess"),
    ("3/2", "triton_tuned", "triton_plain"),
    ("3/4", "triton_tuned", "fastapi"),
    ("3/5", "triton_tuned", "fastapi_batcher"),
)
"""Each ratio's name and its two rows, numerator first."""
OPS: dict[str, Callable[[float, float], bool]] = {">=": operator.ge, "<=": operator.le, "<": operator.lt}


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b and a > 0 and b > 0 and not math.isnan(a) and not math.isnan(b) else None


def throughput(entry: dict, row: str) -> float | None:
    return (entry.get("rows", {}).get(row) or {}).get("throughput")


def round_throughputs(entry: dict, row: str) -> list[float | None]:
    """The row's throughput in each round, None where its trial failed (empty for a result without trials)."""
    trials = (entry.get("rows", {}).get(row) or {}).get("trials") or []
    return [None if "error" in t else t.get("throughput") for t in trials]


def paired_ratio(a_values: list[float | None], b_values: list[float | None]) -> Interval | None:
    """a/b paired by round (rounds where either failed left out): the geometric mean of the rounds' ratios
    with the t interval of their logs (``evidence.compare``'s paired change plus one); one round: its ratio,
    no interval; None without a round where both measured."""
    if len(a_values) != len(b_values):
        return None
    pairs = [(a, b) for a, b in zip(a_values, b_values, strict=True) if ratio(a, b) is not None]
    if len(pairs) == 1:
        value = pairs[0][0] / pairs[0][1]
        return Interval(value, value, value, 1)
    if not pairs:
        return None
    change = evidence.compare("throughput", [b for _, b in pairs], [a for a, _ in pairs], 0.0).change
    return Interval(1 + change.estimate, 1 + change.low, 1 + change.high, change.trials)


def ratio_intervals(entry: dict) -> dict[str, Interval | None]:
    """Every ratio of ``RATIOS`` paired by round (None where no round measured both rows)."""
    return {name: paired_ratio(round_throughputs(entry, a), round_throughputs(entry, b)) for name, a, b in RATIOS}


def ratios(entry: dict) -> dict[str, float | None]:
    """Every ratio's estimate: paired by round when the rows have trials, else of the rows' throughputs."""
    paired = ratio_intervals(entry)
    return {
        name: paired[name].estimate if paired[name] is not None else ratio(throughput(entry, a), throughput(entry, b))
        for name, a, b in RATIOS
    }


def _ratio(name: str) -> Callable[[dict], Interval | float | None]:
    """A target's getter: the ratio's interval when the rows have trials, else its one value."""
    return lambda entry: ratio_intervals(entry)[name] or ratios(entry)[name]


def _first_request_ratio(entry: dict, warmup: bool = True) -> float | None:
    return next((i.get("ratio") for i in entry.get("first_request", []) if i.get("warmup") == warmup), None)


def _perf_under_budget(entry: dict) -> float | None:
    return ((entry.get("perf") or {}).get("best_under_p99") or {}).get("throughput")


# (model or "*", target, how it is measured, value getter, comparison, threshold, unit)
TARGETS = (
    ("minilm", "tuned Triton >= 0.95x the in-process limit (3/1)", _ratio("3/1"), ">=", 0.95, "x"),
    ("minilm", "tuned Triton >= 2x FastAPI (3/4)", _ratio("3/4"), ">=", 2.0, "x"),
    (
        "digits",
        f">= 10k infer/s at p99 < {P99_BUDGET_MS:g} ms (perf_analyzer)",
        _perf_under_budget,
        ">=",
        10000.0,
        " infer/s",
    ),
    ("digits", "tuned Triton >= 2.5x FastAPI (3/4)", _ratio("3/4"), ">=", 2.5, "x"),
    ("digits", "tuned Triton >= 1.2x FastAPI + batcher (3/5)", _ratio("3/5"), ">=", 1.2, "x"),
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


def status(value: Interval | float | None, op: str, threshold: float) -> str:
    """met, missed or inconclusive: an interval is met when its worst end holds, missed when its best end
    does not, else inconclusive; a single value (one run, one trial) is met or missed; none is missed."""
    if value is None:
        return "missed"
    if not isinstance(value, Interval):
        value = Interval(value, value, value, 1)
    if math.isnan(value.estimate):
        return "missed"
    worst, best = (value.low, value.high) if op == ">=" else (value.high, value.low)
    if OPS[op](worst, threshold):
        return "met"
    return "inconclusive" if OPS[op](best, threshold) else "missed"


def evaluate_targets(result: dict) -> list[dict]:
    """One entry per target that applies to a model of ``result``: the measured value (with its interval when
    it has one) and met, missed or inconclusive (:func:`status`).

    A value that could not be measured counts as missed (and says so)."""
    out = []
    for model, entry in result.get("models", {}).items():
        for applies, text, getter, op, threshold, unit in TARGETS:
            if applies not in ("*", model, base_model(model)):  # minilm's targets hold for minilm_onnx
                continue
            value = getter(entry)
            iv = value if isinstance(value, Interval) else None
            out.append(
                {
                    "model": model,
                    "target": text,
                    "value": iv.estimate if iv else value,
                    "interval": iv.to_dict() if iv else None,
                    "op": op,
                    "threshold": threshold,
                    "unit": unit,
                    "status": status(value, op, threshold),
                    "measured": "not measured" if value is None else measured_text(value, unit),
                }
            )
    return out


def finish(result: dict) -> dict:
    """The figures derived from the measured ones, in place: the one-client overheads (a p50 minus row 1's
    batch-1 median), every ratio (estimate and interval) and the targets."""
    for entry in result.get("models", {}).values():
        batch1 = entry["rows"]["inprocess"].get("batch1_median_ms")
        for key, p50 in (("one_client", "p50_ms"), ("one_user", "triton_p50_ms")):
            one = entry.setdefault(key, {})
            one["inprocess_batch1_ms"] = batch1
            one["overhead_ms"] = (one[p50] - batch1) if one.get(p50) and batch1 else None
        entry["ratios"] = ratios(entry)
        entry["ratio_intervals"] = {k: iv.to_dict() if iv else None for k, iv in ratio_intervals(entry).items()}
    result["targets"] = evaluate_targets(result)
    return result


def number_text(value: float | None, unit: str = "") -> str:
    if value is not None and unit == "x" and 0 < abs(value) < 0.1:  # e.g. Triton over an in-process MLP: 0.0040x
        return f"{value:.2g}x"
    formats = {"x": "{:.2f}x", " ms": "{:.3f} ms"}
    return "-" if value is None else formats.get(unit, "{:,.0f}" + unit).format(value)


def measured_text(value: Interval | float, unit: str) -> str:
    """A figure, with its interval when it has one (``2.90x (95% CI 2.60x-3.20x, 3 trials)``)."""
    if not isinstance(value, Interval):
        return number_text(value, unit)
    if not value.has_interval:
        return f"{number_text(value.estimate, unit)} (1 trial, no interval)"
    return (
        f"{number_text(value.estimate, unit)} ({value.confidence:.0%} CI {number_text(value.low, unit)}-"
        f"{number_text(value.high, unit)}, {value.trials} trials)"
    )
