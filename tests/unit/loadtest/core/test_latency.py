"""Exact percentiles: HDR histograms against the nearest-rank rule on the raw samples, and merging across
processes."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadtest.core.client_stats import PERCENTILES, percentile_key, percentiles
from loadtest.core.latency import Merger, Recorder, buckets, mean_us, new_histogram, percentiles_ms, value_at


def merged(*recorders: Recorder, duration_s: float = 1.0):
    merger = Merger()
    for recorder in recorders:
        merger.add(recorder.drain())
    return merger.stats(duration_s)


def exact_ms(samples_us: np.ndarray) -> dict[str, float]:
    return {percentile_key(p): v / 1000 for p, v in zip(PERCENTILES, percentiles(samples_us, PERCENTILES), strict=True)}


ALL_PS = (0.0, 1.0, 25.0, 50.0, 90.0, 95.0, 99.0, 99.9, 99.99, 100.0)


def histogram_of(samples_us) -> object:
    hist = new_histogram()
    for us in samples_us:
        hist.record_value(int(us))
    return hist


@pytest.mark.parametrize("n", [1, 2, 3, 7, 100, 1000, 41000])
def test_the_sequence_rule_and_the_histogram_rule_agree_on_sub_16ms_samples(n):
    # At n = 41000, 99.9 * n / 100 is 40959.00000000001 in floating point: both must still take rank 40959.
    samples = np.random.default_rng(n).integers(1, 16000, size=n)
    assert value_at(histogram_of(samples), ALL_PS) == percentiles(samples, ALL_PS)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=16_000), min_size=1, max_size=200))
def test_the_sequence_rule_and_the_histogram_rule_agree_on_any_sub_16ms_samples(samples):
    assert value_at(histogram_of(samples), ALL_PS) == percentiles(samples, ALL_PS)


def test_sub_16ms_latencies_are_exact_to_the_microsecond():
    rng = np.random.default_rng(0)
    samples = np.clip(rng.lognormal(np.log(800), 0.6, 20000), 1, 16000).astype(np.int64)
    recorder = Recorder()
    for us in samples:
        recorder.success(0, us / 1e6)
    stats = merged(recorder)
    for key, value in exact_ms(samples).items():
        assert stats.latency_ms[key] == pytest.approx(value, abs=1e-9), key
    assert stats.latency_ms["min"] == samples.min() / 1000
    assert stats.latency_ms["max"] == samples.max() / 1000
    assert stats.latency_ms["mean"] == pytest.approx(samples.mean() / 1000, rel=1e-6)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=60_000_000), min_size=1, max_size=300))
def test_any_latency_is_within_hdr_precision(samples):
    recorder = Recorder()
    for us in samples:
        recorder.success(0, us / 1e6)
    stats = merged(recorder)
    for key, value in exact_ms(np.array(samples)).items():
        # 4 significant digits: exact below 16,384 µs, within 1/8192 relative above.
        assert abs(stats.latency_ms[key] - value) <= max(value / 8192, 0.0005), key


def test_merging_processes_equals_recording_in_one():
    rng = np.random.default_rng(1)
    parts = [rng.integers(50, 30000, size=n) for n in (500, 1200, 3)]
    recorders, single = [], Recorder()
    for part in parts:
        recorder = Recorder()
        for us in part:
            recorder.success(int(us) % 3, us / 1e6)
            single.success(int(us) % 3, us / 1e6)
        recorders.append(recorder)
    one, many = merged(single), merged(*recorders)
    assert one.latency_ms == many.latency_ms
    assert one.requests == many.requests == sum(map(len, parts))
    assert [p.requests for p in one.timeline] == [p.requests for p in many.timeline]


def test_drain_hands_over_once_and_counts_failures_warmup_and_drops():
    recorder = Recorder()
    recorder.success(0, 0.001)
    recorder.outside(0, 0.004)
    recorder.failure(1, "InferenceServerException: [request id: 7] unexpected shape\nmore")
    recorder.failure(1, "InferenceServerException: [request id: 8] unexpected shape")
    recorder.drop(2)
    first = recorder.drain()
    assert recorder.drain()["counts"] == []
    merger = Merger()
    merger.add(first)
    stats = merger.stats(2.0)
    assert (stats.requests, stats.failures, stats.warmup_requests, stats.dropped) == (4, 3, 1, 1)
    assert stats.errors["InferenceServerException: unexpected shape"] == 2  # request ids folded together
    assert stats.throughput_rps == 0.5
    assert stats.latency_sum_ms == 5.0  # the success and the warm-up request, not the failures
    assert [(p.t, p.requests, p.failures) for p in stats.timeline] == [(0.0, 1, 0), (1.0, 2, 2), (2.0, 1, 1)]
    assert stats.timeline[1].p99_ms is None


def test_empty_run_reports_nan_not_zero():
    stats = Merger().stats(1.0)
    assert stats.requests == 0 and math.isnan(stats.latency_ms["p99"])
    assert math.isnan(percentiles_ms(Merger().hist)["p50"])


def test_open_loop_sends_more_than_ten_milliseconds_late_are_counted_across_processes():
    first, second = Recorder(), Recorder()
    for lag in (0.0002, 0.0019, 0.0101, 0.030):
        first.sent(0, lag)
    second.sent(1, 0.0)
    merger = Merger(window_s=0)
    merger.add(first.drain())
    merger.add(second.drain())
    stats = merger.stats(2.0)
    assert (stats.scheduled, stats.late) == (5, 2) and stats.late_percent == pytest.approx(40.0)
    assert Merger(window_s=0).stats(1.0).late_percent == 0.0  # a closed loop schedules nothing


@pytest.mark.parametrize(("digits", "highest_us"), [(4, 900), (4, 40_000), (4, 110_000_000), (2, 5_000_000)])
def test_the_mean_and_the_buckets_are_hdrhs_own_without_its_walk_over_every_bucket(digits, highest_us):
    hist = new_histogram(digits)
    for value in np.random.default_rng(highest_us).integers(1, highest_us, 2_000):
        hist.record_value(int(value))
    hist.record_value(highest_us, 5)
    assert mean_us(hist) == hist.get_mean_value()
    walked = []
    for item in hist.get_recorded_iterator():
        top = item.value_iterated_to
        walked.append((hist.get_lowest_equivalent_value(top), top, item.count_at_value_iterated_to))
    assert list(buckets(hist)) == walked
