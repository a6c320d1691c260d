"""Repeated, interleaved trials of the things compared, and their figures with intervals.

An *arm* is one thing measured (a served config, a model version, a rate); ``run_trials`` measures every arm
once a round for ``trials`` rounds (A B, B A, ...: ``evidence.interleaved``), switching the server to each arm
before its trial. Each trial is one ``Measurement`` (``loadtest.generators.probe``: perf_analyzer or Locust behind
one interface); ``summarize`` turns an arm's trials into an interval per figure and ``slo.verdict`` judges them.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

from loadtest.core import evidence
from loadtest.core.evidence import Interval
from loadtest.core.measurement import Measurement, floor_figures, samples
from loadtest.core.metrics import STREAM_FIGURES

Log = Callable[[str], None]


@dataclasses.dataclass(frozen=True)
class Arm:
    """One thing measured: how to measure it once, and how to put the server in its state first."""

    name: str
    measure: Callable[[], Measurement]
    prepare: Callable[[], None] | None = None
    """Called before each of this arm's trials when the previous trial was of another arm (apply a config,
    load a version); None when the arms need no switching (different model names served side by side)."""


@dataclasses.dataclass
class ArmResult:
    name: str
    trials: list[Measurement] = dataclasses.field(default_factory=list)
    warmup: list[Measurement] = dataclasses.field(default_factory=list)
    """Trials run first and left out of the figures."""

    @property
    def usable(self) -> list[Measurement]:
        return [m for m in self.trials if m.usable]

    def samples(self) -> dict[str, list[float]]:
        """Figure -> the usable trials' values (``evidence.METRICS``)."""
        return samples(self.usable)

    def intervals(self) -> dict[str, Interval]:
        return summarize(self.usable)

    def error_counts(self) -> tuple[int, int] | None:
        """``error_counts`` of the usable trials."""
        return error_counts(self.usable)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "trials": [m.to_dict() for m in self.trials],
            "warmup": [m.to_dict() for m in self.warmup],
            "intervals": {k: v.to_dict() for k, v in self.intervals().items()},
        }


def error_counts(measurements: Sequence[Measurement]) -> tuple[int, int] | None:
    """(failed, handled) over ``measurements``, from Triton's counters; None without any, or where one lacks them."""
    views = [m.server for m in measurements]
    if not views or any("requests" not in v or "failures" not in v for v in views):
        return None
    failed = sum(int(v["failures"]) for v in views)
    return failed, failed + sum(int(v["requests"]) for v in views)


def summarize(measurements: Sequence[Measurement]) -> dict[str, Interval]:
    """An interval per figure over the trials (``evidence.figure_interval``: latencies on the log scale, the
    geometric mean, as the SLO verdict judges them; shares within [0, 1]; rates at least 0)."""
    return {metric: evidence.figure_interval(metric, values) for metric, values in samples(measurements).items()}


def run_trials(arms: Sequence[Arm], trials: int, *, warmup_rounds: int = 0, log: Log = print) -> dict[str, ArmResult]:
    """Every arm once a round, ``warmup_rounds`` rounds left out first, then ``trials`` rounds measured."""
    order = evidence.interleaved([arm.name for arm in arms], warmup_rounds + trials)
    by_name = {arm.name: arm for arm in arms}
    results = {arm.name: ArmResult(arm.name) for arm in arms}
    current: str | None = None
    for index, (round_, name) in enumerate(order, 1):
        arm = by_name[name]
        if arm.prepare is not None and current != name:
            arm.prepare()
        current = name
        measured = arm.measure()
        kept = round_ >= warmup_rounds
        (results[name].trials if kept else results[name].warmup).append(measured)
        label = f"trial {round_ - warmup_rounds + 1}/{trials}" if kept else f"warm-up {round_ + 1}/{warmup_rounds}"
        log(f"  [{index}/{len(order)}] {name} {label}: {line(measured)}")
    return results


def line(m: Measurement) -> str:
    """One trial on one line."""
    if not m.usable:
        return m.not_usable_reason
    good = "" if math.isnan(m.goodput_share) else f"  goodput {m.goodput_share:.1%}"
    text = f"{m.throughput:,.1f}/s  p50 {m.p50_ms:.3f} ms  p99 {m.p99_ms:.3f} ms  errors {m.error_rate:.2%}{good}"
    if m.streamed:
        text = f"{text}  {stream_figures(m)}"
    if m.floor_ms:  # the generator's own time in those latencies (server_trace.floor_ms)
        text += f"  (generator floor {floor_figures(m.floor_ms)})"
    return text


def stream_figures(m: Measurement) -> str:
    """A streamed run's p99 TTFT, p99 ITL and tokens/s, labelled as the campaign report labels them."""
    return "  ".join(
        f"{name} {'n/a' if math.isnan(value := getattr(m, metric)) else fmt.format(value)}{unit}"
        for metric, (name, fmt, unit) in STREAM_FIGURES.items()
    )


def table(results: dict[str, ArmResult], metrics: Sequence[str] = evidence.METRICS) -> list[list[str]]:
    """Rows of ``arm, metric, estimate, low, high, trials`` for a report."""
    rows = []
    for name, result in results.items():
        for metric, iv in result.intervals().items():
            if metric in metrics and not math.isnan(iv.estimate):
                rows.append([name, metric, f"{iv.estimate:.4g}", f"{iv.low:.4g}", f"{iv.high:.4g}", str(iv.trials)])
    return rows
