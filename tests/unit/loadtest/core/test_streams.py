"""A streamed request's figures from its recorded timings: TTFT, ITL and tokens (GenAI-Perf's definitions),
their summary over a run, goodput against TTFT/ITL budgets, and the rows' way from the recorder to the run."""

from __future__ import annotations

import math

import pytest

from loadtest.core.latency import Merger, Recorder
from loadtest.core.streams import StreamFigures, carries_text, count_streams_within, stream_figures, stream_summary


def test_ttft_is_the_first_text_response_after_the_send_and_itl_the_mean_gap_after_it():
    figures = stream_figures(10.0, [10.2, 10.25, 10.3, 10.45])
    assert figures.ttft_s == pytest.approx(0.2)
    assert figures.itl_s == pytest.approx((10.45 - 10.2) / 3)  # (last - first) / (tokens - 1)
    assert figures.tokens == 4


def test_a_single_token_has_a_ttft_and_no_itl():
    assert stream_figures(1.0, [1.5]) == StreamFigures(0.5, None, 1)


def test_a_stream_without_text_has_no_figures():
    assert stream_figures(1.0, []) is None


ROWS = [
    # latency_ms, ttft_ms, itl_ms, tokens
    [100.0, 10.0, 6.0, 16],
    [120.0, 20.0, 6.5, 16],
    [140.0, 30.0, 7.0, 16],
    [90.0, 40.0, None, 1],
]


def test_the_summary_takes_nearest_rank_percentiles_and_counts_tokens_per_second():
    summary = stream_summary(ROWS, duration_s=2.0)
    assert summary["ttft_ms"] == {"p50": 20.0, "p90": 40.0, "p99": 40.0, "mean": 25.0, "max": 40.0}
    # ITL over the requests of two tokens or more only
    assert summary["itl_ms"]["p50"] == 6.5 and summary["itl_ms"]["max"] == 7.0
    assert summary["itl_ms"]["mean"] == pytest.approx(6.5)
    assert summary["output_tokens"] == 49
    assert summary["output_token_throughput"] == pytest.approx(24.5)


def test_a_run_without_streams_has_empty_stream_figures():
    assert stream_summary([], 5.0) == {"ttft_ms": {}, "itl_ms": {}, "output_tokens": 0, "output_token_throughput": 0.0}


def test_goodput_counts_the_streams_within_every_budget_given():
    assert count_streams_within(ROWS) == 4
    assert count_streams_within(ROWS, ttft_ms=20.0) == 2
    # a one-token request has no ITL to exceed the budget with
    assert count_streams_within(ROWS, itl_ms=6.0) == 2
    assert count_streams_within(ROWS, ttft_ms=30.0, itl_ms=6.5) == 2
    assert count_streams_within(ROWS, latency_ms=110.0, ttft_ms=50.0) == 2
    assert count_streams_within(ROWS, math.inf, 5.0, 5.0) == 0


def test_streamed_successes_travel_raw_from_each_process_to_the_runs_figures():
    merger = Merger(window_s=0)
    for ttft_s in (0.010, 0.030):
        recorder = Recorder()
        recorder.success(0, 0.2, StreamFigures(ttft_s, 0.0061234, 8))
        recorder.success(0, 0.05, StreamFigures(ttft_s, None, 1))
        recorder.success(0, 0.001)  # a plain request (not streamed) has no row
        recorder.outside(0, 0.5)
        merger.add(recorder.drain())
    stats = merger.stats(duration_s=2.0)
    assert sorted(stats.streams) == [
        [50.0, 10.0, None, 1],
        [50.0, 30.0, None, 1],
        [200.0, 10.0, 6.123, 8],  # µs resolution, not Locust's whole milliseconds
        [200.0, 30.0, 6.123, 8],
    ]
    assert stats.ttft_ms["p50"] == 10.0 and stats.ttft_ms["p99"] == 30.0
    assert stats.itl_ms["p99"] == pytest.approx(6.123)
    assert stats.output_tokens == 18 and stats.output_token_throughput == pytest.approx(9.0)


def test_a_recorder_of_plain_requests_reports_no_stream_figures():
    recorder = Recorder()
    recorder.success(0, 0.002)
    merger = Merger(window_s=0)
    merger.add(recorder.drain())
    stats = merger.stats(1.0)
    assert (stats.streams, stats.ttft_ms, stats.itl_ms, stats.output_tokens) == ([], {}, {}, 0)


def test_an_event_carries_text_when_it_holds_a_string_output_whatever_its_name():
    meta = {"model_name": "m", "model_version": "1"}
    assert carries_text(meta | {"text_output": "Hi"}) and carries_text(meta | {"TEXT": ["Hi"]})
    assert not carries_text(meta) and not carries_text(meta | {"COUNT": 3})
