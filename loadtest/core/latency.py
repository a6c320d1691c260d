"""Every request's latency, at microsecond resolution, mergeable across Locust processes and hosts.

Locust rounds response times under 100 ms to whole milliseconds, which hides exactly the figures a
sub-millisecond model is judged by. Each load process records into an HDR histogram instead (values in
µs, 4 significant digits: exact to the microsecond below 16.4 ms, within 0.05% above) and ships it to
the master in Locust's own worker reports, where the histograms are added. One coarser histogram per
second of the run gives the time series.
"""

from __future__ import annotations

import json
import math
import os
import re
import threading
from collections import Counter
from collections.abc import Iterator

import numpy as np
from hdrh.histogram import HdrHistogram

from loadtest.core.client_stats import (
    PERCENTILES,
    ClientStats,
    TimelinePoint,
    failure_status,
    is_refusal,
    nearest_rank,
    percentile_key,
)
from loadtest.core.streams import StreamFigures, stream_summary

HIGHEST_US = 120_000_000
"""Largest latency recorded (2 minutes); longer ones are clamped to it."""
DIGITS = 4
"""Significant digits of the run histogram: exact µs up to 16,383 µs."""
TIMELINE_DIGITS = 2
LATE_S = 0.010
"""An open-loop request sent more than this after it fell due was sent late: the generator did not keep to
its schedule, and the time it lost is in that request's latency (counted from when it fell due). Not 1 ms:
gevent's timers wake up to a millisecond or two late (libev waits in whole milliseconds), so at 10 req/s on
a 2-core machine more than half the requests were over 1 ms late with the generator idle."""
"""The per-second histograms only feed plots; 1% resolution keeps a 10-minute soak small."""
WINDOW_S = 60
"""Length of the windows ``ClientStats.windows`` reports (a p99 per minute); the load settings' ``window_s``
(``TRITONKIT_LOAD``) changes it."""


def _window_s() -> float:
    try:
        return float(json.loads(os.environ.get("TRITONKIT_LOAD", "{}")).get("window_s", WINDOW_S))
    except (ValueError, AttributeError):
        return float(WINDOW_S)


def new_histogram(digits: int = DIGITS) -> HdrHistogram:
    return HdrHistogram(1, HIGHEST_US, digits)


def to_us(seconds: float) -> int:
    return max(1, min(HIGHEST_US, round(seconds * 1e6)))


def _counts(hist: HdrHistogram) -> np.ndarray:
    """The histogram's count per bucket index, a view of its C array (no copy, no Python loop)."""
    return np.ctypeslib.as_array(hist.counts)[: hist.counts_len]


def value_at(hist: HdrHistogram, percentiles: tuple[float, ...]) -> list[int]:
    """Nearest-rank percentiles (``nearest_rank``) of a histogram, in one vectorised pass; hdrh's own loop is
    pure Python and rounds the rank to nearest instead."""
    cumulative = np.cumsum(_counts(hist), dtype=np.int64)
    total = int(cumulative[-1])
    out = []
    for p in percentiles:
        index = int(np.searchsorted(cumulative, nearest_rank(p, total)))
        out.append(hist.get_highest_equivalent_value(hist.get_value_from_index(index)))
    return out


def buckets(hist: HdrHistogram) -> Iterator[tuple[int, int, int]]:
    """(lowest value, highest value, count) of each bucket that holds counts, in value order: hdrh's own
    iterators walk every bucket up to the largest value in pure Python, 0.5-3 s a histogram."""
    counts = _counts(hist)
    for index in np.flatnonzero(counts):
        lowest = hist.get_value_from_index(int(index))
        yield lowest, hist.get_highest_equivalent_value(lowest), int(counts[index])


def mean_us(hist: HdrHistogram) -> float:
    """hdrh's ``get_mean_value``: each count at the middle of its bucket's range (over ``buckets``)."""
    total = sum(count * (lowest + ((highest - lowest + 1) >> 1)) for lowest, highest, count in buckets(hist))
    return total / hist.get_total_count()


def percentiles_ms(hist: HdrHistogram) -> dict[str, float]:
    """p50 ... p99.9, mean, min, max in ms; NaN when the histogram is empty."""
    if hist.get_total_count() == 0:
        return {k: math.nan for k in [*map(percentile_key, PERCENTILES), "mean", "min", "max"]}
    *ranked, lowest, highest = value_at(hist, (*PERCENTILES, 0.0, 100.0))
    out = {percentile_key(p): v / 1000 for p, v in zip(PERCENTILES, ranked, strict=True)}
    out["mean"] = mean_us(hist) / 1000
    out["min"] = lowest / 1000
    out["max"] = highest / 1000
    return out


def _first_line(message: str) -> str:
    """The message without what differs per request (Triton prefixes some with the request id)."""
    line = message.strip().splitlines()[0] if message.strip() else "error"
    return re.sub(r"\[request id: [^\]]*\] ", "", line)[:200]


class Recorder:
    """Latencies and failures of one process. Thread- and greenlet-safe; ``drain`` hands over what was
    recorded since the last drain (what a worker sends to the master)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reset()

    def _reset(self) -> None:
        self.hist = new_histogram()
        self.seconds: dict[int, HdrHistogram] = {}
        self.counts: Counter = Counter()  # (second, "requests" | "failures") -> n
        self.errors: Counter = Counter()
        self.dropped = 0
        self.statuses: Counter = Counter()  # failure status ("503", "StatusCode.UNAVAILABLE", "dropped") -> n
        self.refusal_hist = new_histogram(TIMELINE_DIGITS)
        self.streams: list[list] = []  # [latency_ms, ttft_ms, itl_ms | None, tokens] per streamed success

    def success(self, second: int, latency_s: float, stream: StreamFigures | None = None) -> None:
        """A successful request; ``stream``: its TTFT, ITL and tokens when it was streamed (kept raw, µs)."""
        us = to_us(latency_s)
        with self._lock:
            if stream is not None:
                itl = None if stream.itl_s is None else to_us(stream.itl_s) / 1000
                self.streams.append([us / 1000, to_us(stream.ttft_s) / 1000, itl, stream.tokens])
            self.hist.record_value(us)
            window = self.seconds.get(second)
            if window is None:
                window = self.seconds[second] = new_histogram(TIMELINE_DIGITS)
            window.record_value(us)
            self.counts[(second, "requests")] += 1
            self.counts[(second, "latency_us")] += us

    def failure(self, second: int, message: str, latency_s: float | None = None) -> None:
        """A failed request; ``latency_s`` (optional) is kept for refusals, to show they came at once."""
        status = failure_status(message)
        with self._lock:
            self.counts[(second, "requests")] += 1
            self.counts[(second, "failures")] += 1
            self.errors[_first_line(message)] += 1
            self.statuses[status] += 1
            if is_refusal(status):
                self.counts[(second, "refused")] += 1
                if latency_s is not None:
                    self.refusal_hist.record_value(to_us(latency_s))

    def sent(self, second: int, lag_s: float) -> None:
        """An open-loop request sent ``lag_s`` after it fell due (measured seconds only)."""
        with self._lock:
            self.counts[(second, "scheduled")] += 1
            if lag_s > LATE_S:
                self.counts[(second, "late")] += 1

    def retry(self, second: int) -> None:
        """A failed attempt that is sent again (client retry): not a request of its own."""
        with self._lock:
            self.counts[(second, "retries")] += 1

    def outside(self, second: int, latency_s: float) -> None:
        """A request that completed outside the measured window: in the warm-up at the start, or after Locust's
        stop began (the stop's own work, 20-30 ms here, would be its latency). Counted apart, its latency only
        in the run's sum (the server's counters hold it too)."""
        with self._lock:
            self.counts[(second, "warmup")] += 1
            self.counts[(second, "warmup_us")] += to_us(latency_s)

    def drop(self, second: int) -> None:
        """An open-loop arrival that found no free slot: a failure the server never saw."""
        with self._lock:
            self.dropped += 1
        self.failure(second, "dropped: every in-flight slot busy (client saturated)")

    def drain(self) -> dict:
        """A JSON-able report of everything since the last drain, and forget it."""
        with self._lock:
            report = {
                "hdr": self.hist.encode().decode() if self.hist.get_total_count() else "",
                "seconds": {str(s): h.encode().decode() for s, h in self.seconds.items()},
                "counts": [[s, kind, n] for (s, kind), n in self.counts.items()],
                "errors": dict(self.errors),
                "dropped": self.dropped,
                "statuses": dict(self.statuses),
                "refusal_hdr": self.refusal_hist.encode().decode() if self.refusal_hist.get_total_count() else "",
                "streams": self.streams,
            }
            self._reset()
        return report


class Merger:
    """Adds up drained reports from any number of processes into one run's ``ClientStats``."""

    def __init__(self, window_s: float | None = None) -> None:
        self.window_s = window_s if window_s is not None else _window_s()
        self.hist = new_histogram()
        self.seconds: dict[int, HdrHistogram] = {}
        self.counts: Counter = Counter()
        self.errors: Counter = Counter()
        self.dropped = 0
        self.reports = 0
        self.statuses: Counter = Counter()
        self.refusal_hist = new_histogram(TIMELINE_DIGITS)
        self.streams: list[list] = []

    def add(self, report: dict) -> None:
        self.reports += 1
        if report["hdr"]:
            self.hist.decode_and_add(report["hdr"])
        for second, encoded in report["seconds"].items():
            window = self.seconds.setdefault(int(second), new_histogram(TIMELINE_DIGITS))
            window.decode_and_add(encoded)
        for second, kind, n in report["counts"]:
            self.counts[(int(second), kind)] += n
        self.errors.update(report["errors"])
        self.dropped += report["dropped"]
        self.statuses.update(report.get("statuses", {}))
        if report.get("refusal_hdr"):
            self.refusal_hist.decode_and_add(report["refusal_hdr"])
        self.streams += report.get("streams", [])

    def stats(self, duration_s: float) -> ClientStats:
        requests = sum(n for (_, kind), n in self.counts.items() if kind == "requests")
        failures = sum(n for (_, kind), n in self.counts.items() if kind == "failures")
        warmup = sum(n for (_, kind), n in self.counts.items() if kind == "warmup")
        retries = sum(n for (_, kind), n in self.counts.items() if kind == "retries")
        scheduled = sum(n for (_, kind), n in self.counts.items() if kind == "scheduled")
        late = sum(n for (_, kind), n in self.counts.items() if kind == "late")
        timeline = []
        for second in sorted({s for s, kind in self.counts if kind in ("requests", "failures")}):
            window = self.seconds.get(second)
            ok = window is not None and window.get_total_count() > 0
            timeline.append(
                TimelinePoint(
                    t=float(second),
                    requests=self.counts[(second, "requests")],
                    failures=self.counts[(second, "failures")],
                    p50_ms=value_at(window, (50.0,))[0] / 1000 if ok else None,
                    p99_ms=value_at(window, (99.0,))[0] / 1000 if ok else None,
                    refused=self.counts[(second, "refused")],
                )
            )
        return ClientStats(
            requests=requests,
            failures=failures,
            duration_s=duration_s,
            latency_ms=percentiles_ms(self.hist),
            timeline=timeline,
            hdr=self.hist.encode().decode() if self.hist.get_total_count() else "",
            dropped=self.dropped,
            errors=dict(self.errors.most_common(20)),
            warmup_requests=warmup,
            refused=sum(n for status, n in self.statuses.items() if is_refusal(status)),
            failure_statuses=dict(self.statuses),
            refusal_latency_ms=self._refusal_latency(),
            windows=self._windows(),
            retries=retries,
            scheduled=scheduled,
            late=late,
            latency_sum_ms=sum(n for (_, kind), n in self.counts.items() if kind in ("latency_us", "warmup_us")) / 1000,
            streams=self.streams,
            **stream_summary(self.streams, duration_s),
        )

    def _windows(self) -> list[dict]:
        """Per ``window_s`` of the run (from second 0): requests, failures and the p50/p99 of its successes,
        from the per-second histograms merged (exact to their 1% resolution, unlike an average of p99s)."""
        if self.window_s <= 0:
            return []
        seconds = sorted({s for s, kind in self.counts if kind in ("requests", "failures")})
        out = []
        for index in sorted({int(s // self.window_s) for s in seconds}):
            merged = new_histogram(TIMELINE_DIGITS)
            mine = [s for s in seconds if int(s // self.window_s) == index]
            for second in mine:
                if (window := self.seconds.get(second)) is not None:
                    merged.add(window)
            ok = merged.get_total_count() > 0
            p50, p99 = value_at(merged, (50.0, 99.0)) if ok else (None, None)
            out.append(
                {
                    "t": index * self.window_s,
                    "length_s": self.window_s,
                    "requests": sum(self.counts[(s, "requests")] for s in mine),
                    "failures": sum(self.counts[(s, "failures")] for s in mine),
                    "p50_ms": p50 / 1000 if ok else None,
                    "p99_ms": p99 / 1000 if ok else None,
                }
            )
        return out

    def _refusal_latency(self) -> dict[str, float]:
        if not self.refusal_hist.get_total_count():
            return {}
        p50, p99, top = value_at(self.refusal_hist, (50.0, 99.0, 100.0))
        return {"p50": p50 / 1000, "p99": p99 / 1000, "max": top / 1000}
