"""A streamed request's figures, in GenAI-Perf's vocabulary: time to first token (TTFT), inter-token latency
(ITL), output tokens and their throughput, and goodput against TTFT/ITL budgets.

The stream senders (``loadtest.generators.locust.users``) give, per request, when each response carrying text came; the
Locust user turns that into ``StreamFigures`` (``stream_figures``); the recorder (``loadtest.core.latency``)
keeps one raw row per successful request, ``[latency_ms, ttft_ms, itl_ms or None, tokens]``, in
``ClientStats.streams``, and the summaries here are taken from those rows (the project's nearest-rank rule).

A token is a response that carries text: text_generator sends each generated token's text in a response of
its own (its detokenizer may hold back the bytes of an unfinished character until the next one, which then
carries both), so responses count generated tokens as GenAI-Perf's streaming figures do per response.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from loadtest.core.client_stats import percentile_key, percentiles

STREAM_PERCENTILES = (50.0, 90.0, 99.0)
"""Percentiles of time to first token and inter-token latency every report shows (with the mean)."""


@dataclasses.dataclass(frozen=True)
class StreamFigures:
    """One streamed request, GenAI-Perf's way: ``ttft_s`` from when the request was sent (open loop: when it
    fell due, as its latency) to its first response carrying text; ``itl_s`` the mean gap between its text
    responses, (last - first) / (tokens - 1), None with a single one; ``tokens`` its text responses (each
    response of text_generator carries one generated token's text)."""

    ttft_s: float
    itl_s: float | None
    tokens: int


_EVENT_FIELDS = frozenset({"model_name", "model_version", "id", "parameters"})
"""What a ``generate_stream`` event carries besides the outputs."""


def carries_text(event: dict) -> bool:
    """A ``generate_stream`` event holds a BYTES output (a string, or a list of them), whatever its name
    (``TEXT``, ``text_output``)."""
    return any(
        isinstance(v, str) or (isinstance(v, list) and v and all(isinstance(x, str) for x in v))
        for k, v in event.items()
        if k not in _EVENT_FIELDS
    )


def stream_figures(sent: float, token_times) -> StreamFigures | None:
    """The figures of a request sent at ``sent`` whose text responses came at ``token_times`` (the same clock,
    in order); None when no response carried text (nothing to time a first token by)."""
    times = list(token_times)
    if not times:
        return None
    itl = (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else None
    return StreamFigures(times[0] - sent, itl, len(times))


def _ms_summary(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    ranked = percentiles(values, STREAM_PERCENTILES)
    out = {percentile_key(p): v for p, v in zip(STREAM_PERCENTILES, ranked, strict=True)}
    return out | {"mean": float(np.mean(values)), "max": float(np.max(values))}


def stream_summary(streams: list, duration_s: float) -> dict[str, Any]:
    """``ClientStats``' stream figures from its raw rows (``[latency_ms, ttft_ms, itl_ms | None, tokens]``, one
    per successful streamed request): ``ttft_ms`` and ``itl_ms`` (p50, p90, p99, mean, max; ITL over the
    requests with two tokens or more), ``output_tokens`` and ``output_token_throughput`` (tokens/s)."""
    tokens = int(sum(row[3] for row in streams))
    return {
        "ttft_ms": _ms_summary([row[1] for row in streams]),
        "itl_ms": _ms_summary([row[2] for row in streams if row[2] is not None]),
        "output_tokens": tokens,
        "output_token_throughput": tokens / duration_s if duration_s > 0 and streams else 0.0,
    }


def count_streams_within(
    streams: list, latency_ms: float = math.inf, ttft_ms: float | None = None, itl_ms: float | None = None
) -> int:
    """Streamed requests (all successes) within every budget given: latency, TTFT and ITL. A request of one
    token has no ITL, so no ITL budget to miss."""
    ttft = math.inf if ttft_ms is None else ttft_ms
    itl = math.inf if itl_ms is None else itl_ms
    return sum(1 for row in streams if row[0] <= latency_ms and row[1] <= ttft and (row[2] is None or row[2] <= itl))
