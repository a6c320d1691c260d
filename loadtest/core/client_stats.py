"""What the load generator saw: ``ClientStats`` (one run, client side), its per-second ``TimelinePoint``,
how a failure's status is read (refusals, drops), and the project's one percentile rule (nearest rank), for
plain sequences here and for HDR histograms in ``loadtest.core.latency``.

The Locust users and the perf_analyzer runners produce these; ``loadtest.core.results`` keeps them
beside the server's counters in a run's ``RunResult``.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

import numpy as np

PERCENTILES = (50.0, 90.0, 95.0, 99.0, 99.9)
"""Client-side percentiles every report shows."""


RETRYABLE_STATUSES = ("503", "429", "StatusCode.UNAVAILABLE", "StatusCode.RESOURCE_EXHAUSTED")
"""Statuses that mean "refused, try again": Triton answers a full queue ("Exceeds maximum queue size") and a
request that timed out in the queue ("Request timeout expired") with HTTP 503 / gRPC UNAVAILABLE."""
DROPPED = "dropped"
"""The status of an open-loop arrival the client never sent (every in-flight slot busy)."""
_STATUS = re.compile(r"^[\w.]+: \[([^\]]+)\]")
_HTTP_STATUS = re.compile(r"\bHTTP (\d{3})\b")


def failure_status(message: str) -> str:
    """The status of a recorded failure (``"InferenceServerException: [503] Exceeds maximum queue size"`` ->
    ``503``; ``[StatusCode.UNAVAILABLE] ...`` -> ``StatusCode.UNAVAILABLE``; a drop -> ``dropped``); without a
    status, the exception's class (``TimeoutError``)."""
    text = message.strip()
    if text.startswith(DROPPED):
        return DROPPED
    if match := _STATUS.match(text):
        return match.group(1)
    if match := _HTTP_STATUS.search(text.splitlines()[0] if text else ""):
        return match.group(1)
    return text.split(":", 1)[0].strip()[:60] or "error"


def is_refusal(status: str) -> bool:
    """A retryable refusal by the server (not a drop, not a hard error)."""
    return status in RETRYABLE_STATUSES


def percentile_key(p: float) -> str:
    """50 -> ``p50``, 99.9 -> ``p99.9``."""
    return f"p{p:g}"


def nearest_rank(p: float, total: int) -> int:
    """The project's one percentile rule: the 1-based rank of the pth percentile of ``total`` samples, the
    smallest rank with at least p% of the samples at or below it (p0 is the minimum, p100 the maximum)."""
    if not 0 <= p <= 100:
        raise ValueError(f"percentile {p} is not between 0 and 100")
    rank = max(1, math.ceil(round(p * total / 100, 9)))  # round() first: 99.9 * 41000 / 100 is 40959.00000000001
    return min(rank, total)


def percentiles(values, ps: tuple[float, ...]) -> list[float]:
    """Nearest-rank percentiles of a plain sequence of latencies (any unit), the same rule as
    ``loadtest.core.latency.value_at`` on an HDR histogram."""
    ordered = np.sort(np.asarray(values, dtype=np.float64), axis=None)
    if ordered.size == 0:
        raise ValueError("no values to take a percentile of")
    return [float(ordered[nearest_rank(p, ordered.size) - 1]) for p in ps]


def percentile(values, p: float) -> float:
    """The pth nearest-rank percentile of ``values``: ``percentile(range(1, 101), 99) == 99``."""
    return percentiles(values, (p,))[0]


@dataclasses.dataclass
class TimelinePoint:
    """One second of a run, client side."""

    t: float
    """Seconds since the run started (start of this one-second window)."""
    requests: int
    """Requests completed in the window (successes and failures)."""
    failures: int
    """Requests that failed in the window."""
    p50_ms: float | None
    """Median latency of the window's successful requests, ms; None when there were none."""
    p99_ms: float | None
    """99th percentile of the window's successful requests, ms; None when there were none."""
    refused: int = 0
    """Failures in the window with a retryable status (see ``ClientStats.refused``)."""


@dataclasses.dataclass
class ClientStats:
    """What the load generator saw. Latencies are of successful requests, microsecond resolution."""

    requests: int
    """Requests completed (successes and failures)."""
    failures: int
    """Requests that got an error (any status, timeout or connection error)."""
    duration_s: float
    """Measured wall time of the run."""
    latency_ms: dict[str, float]
    """``p50``, ``p90``, ``p95``, ``p99``, ``p99.9``, ``mean``, ``min``, ``max`` in ms."""
    timeline: list[TimelinePoint] = dataclasses.field(default_factory=list)
    """Per-second throughput, failures and latency."""
    hdr: str = ""
    """The merged HDR histogram (values in µs), base64 as ``HdrHistogram.encode`` writes it."""
    dropped: int = 0
    """Open-loop shape only: arrivals not sent because every in-flight slot was busy (in ``failures`` and
    ``requests``, not in ``error_rate``: the generator's limit, not the server's error)."""
    errors: dict[str, int] = dataclasses.field(default_factory=dict)
    """Error message (first line) -> count."""
    warmup_requests: int = 0
    """Requests completed outside the measured window: in the warm-up at the start (new connections, first
    batches), or after Locust's stop began (``Recorder.outside``): not in the figures above, but the server
    counted them."""
    retries: int = 0
    """Attempts sent again after a retryable failure (opt-in client retry, ``settings["retry"]``). A request
    that succeeded after retries is one success, its latency counted from its first send."""
    refused: int = 0
    """Failures with a retryable status (``RETRYABLE_STATUSES``: HTTP 503 / gRPC UNAVAILABLE, what Triton's queue
    policy answers when the queue is full or a request timed out in it); part of ``failures``."""
    failure_statuses: dict[str, int] = dataclasses.field(default_factory=dict)
    """Status of every failure -> count (``503``, ``StatusCode.UNAVAILABLE``, ``dropped``, or the exception class
    when there was no status); adds up to ``failures``."""
    refusal_latency_ms: dict[str, float] = dataclasses.field(default_factory=dict)
    """How long refusals took (``p50``, ``p99``, ``max``, ms) when the load generator reports it; else empty."""
    windows: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    """Per window of the run (60 s unless the load settings' ``window_s`` says otherwise): ``t`` (start, s),
    ``length_s``, ``requests``, ``failures``, ``p50_ms``, ``p99_ms`` (None without successes). The soak's
    p99 per minute."""
    latency_sum_ms: float = 0.0
    """Summed latency of every success, the warm-up window's included: the same requests the server's
    ``nv_inference_request_duration_us`` adds up, so the two sums compare without slack."""
    scheduled: int = 0
    """Open loop: requests of the measured seconds sent on a schedule (0 for a closed loop)."""
    late: int = 0
    """Of ``scheduled``, those sent more than ``latency.LATE_S`` after they fell due."""
    streams: list[list] = dataclasses.field(default_factory=list)
    """Decoupled models only: one row per successful streamed request of the measured window, raw (not
    rounded as Locust rounds): ``[latency_ms, ttft_ms, itl_ms or None (one token), tokens]``; what the stream
    figures below and goodput against TTFT/ITL budgets are counted from."""
    ttft_ms: dict[str, float] = dataclasses.field(default_factory=dict)
    """Time to first token (``stream_summary``): ``p50``, ``p90``, ``p99``, ``mean``, ``max`` in ms; empty
    unless the model streams."""
    itl_ms: dict[str, float] = dataclasses.field(default_factory=dict)
    """Inter-token latency per request, the same keys; empty unless a request streamed two tokens or more."""
    output_tokens: int = 0
    """Text responses (one generated token each) of the measured window's successful streamed requests."""
    output_token_throughput: float = 0.0
    """``output_tokens`` per second of the measured window."""

    @property
    def late_percent(self) -> float:
        """Share of the scheduled requests sent late, in percent (0 with none scheduled)."""
        return 100.0 * self.late / self.scheduled if self.scheduled else 0.0

    @property
    def throughput_rps(self) -> float:
        """Successful requests per second."""
        return (self.requests - self.failures) / self.duration_s if self.duration_s > 0 else 0.0

    @property
    def error_rate(self) -> float:
        """Failed / sent: an arrival the generator itself dropped (every in-flight slot busy) never reached the
        server, so it is the generator's limit (``probe.saturation``), not the server's error."""
        sent = self.requests - self.dropped
        return (self.failures - self.dropped) / sent if sent > 0 else 0.0

    @property
    def accepted(self) -> int:
        """Requests the server answered successfully."""
        return self.requests - self.failures

    @property
    def refusal_rate(self) -> float:
        """Refused / offered (every arrival, drops included)."""
        return self.refused / self.requests if self.requests else 0.0

    @property
    def other_failures(self) -> int:
        """Failures that are neither refusals nor client drops."""
        return self.failures - self.refused - self.dropped
