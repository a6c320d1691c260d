"""The one metric table: every figure a run is judged and reported on, with its label, format, unit, direction,
whether only a streamed run has it, and the ``Slo`` field that limits it. Reports, console lines, CSV columns,
intervals, verdicts and budgets derive from ``TABLE``; a new metric is one row here (docs/architecture.md).

A metric's name is the attribute it has on a ``Measurement`` and the key of its figures and intervals over
trials (``results.RunResult.intervals``, ``trials.ArmResult``)."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Metric:
    name: str
    label: str
    """How reports head it (``p99``, ``req/s``); with ``unit``, its column."""
    fmt: str
    unit: str = ""
    word: str = ""
    """How a verdict line names it (``tritonkit compare``); default: ``label``."""
    higher_is_better: bool = False
    share: bool = False
    """A fraction of the requests: its interval stays within [0, 1]."""
    stream: bool = False
    """Only a streamed run (a decoupled model) has it."""
    limit: str | None = None
    """The ``Slo`` field that limits it, if any."""

    @property
    def figure(self) -> tuple[str, str, str]:
        """(label, format, unit): as a report writes it."""
        return self.label, self.fmt, self.unit

    @property
    def said(self) -> str:
        return self.word or self.label


TABLE = (
    Metric("throughput", "req/s", "{:.1f}", word="throughput", higher_is_better=True),
    Metric("p50_ms", "p50", "{:.3f}", " ms"),
    Metric("p99_ms", "p99", "{:.3f}", " ms", limit="p99_ms"),
    Metric("error_rate", "error rate", "{:.2%}", word="errors", share=True, limit="max_error_rate"),
    Metric("goodput_share", "goodput", "{:.2%}", higher_is_better=True, share=True, limit="min_goodput"),
    Metric("goodput_rps", "goodput/s", "{:.1f}", word="goodput", higher_is_better=True),
    Metric("ttft_p99_ms", "p99 TTFT", "{:.3f}", " ms", stream=True, limit="ttft_ms"),
    Metric("itl_p99_ms", "p99 ITL", "{:.3f}", " ms", stream=True, limit="itl_ms"),
    Metric("output_token_throughput", "tokens/s", "{:.1f}", higher_is_better=True, stream=True),
)
BY_NAME = {m.name: m for m in TABLE}

METRICS = tuple(m.name for m in TABLE if not m.stream)
"""The figures every trial gives and every interval is reported for."""
STREAM_METRICS = tuple(m.name for m in TABLE if m.stream)
"""The figures of a streamed run beside ``METRICS``, each with its interval over trials."""
HIGHER_IS_BETTER = frozenset(m.name for m in TABLE if m.higher_is_better)
SHARES = frozenset(m.name for m in TABLE if m.share)
FIGURES = {m.name: m.figure for m in TABLE if not m.stream}
"""``METRICS`` as reports name and format them."""
STREAM_FIGURES = {m.name: m.figure for m in TABLE if m.stream}
"""``STREAM_METRICS`` as reports name and format them (the trials' table, the console's intervals)."""
LATENCY_LIMITS = {m.label: (m.name, m.limit) for m in TABLE if m.limit and m.unit == " ms"}
"""The latency budgets a run is judged on: the limit's name -> (the run's figure, the ``Slo`` field)."""
STREAM_LIMITS = {name: pair for name, pair in LATENCY_LIMITS.items() if BY_NAME[pair[0]].stream}
"""The latency budgets of streams (decoupled models)."""


def word(name: str) -> str:
    """``goodput_rps`` -> ``goodput``: the word a verdict line uses (``Metric.word``, else its label)."""
    return BY_NAME[name].said


def column(name: str) -> str:
    """``p99_ms`` -> ``p99 ms``: the metric's column heading."""
    m = BY_NAME[name]
    return f"{m.label}{m.unit}"
