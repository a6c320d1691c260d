"""Triton's trace files read into each request's server-side times, and the generator's floor from them."""

import json
import math

import numpy as np
import pytest

from loadtest.target import server_trace


def _trace(trace_id: int, model: str, start_ns: int, queue_us: int, compute_us: int, end_cut: bool = False) -> list:
    """One request as Triton 2.51 writes it: an entry naming the model, then one entry per timestamp."""
    compute_start = start_ns + 20_000 + queue_us * 1000
    stamps = {
        "REQUEST_START": start_ns,
        "QUEUE_START": start_ns + 20_000,
        "COMPUTE_START": compute_start,
        "COMPUTE_END": compute_start + compute_us * 1000,
        "REQUEST_END": compute_start + compute_us * 1000 + 10_000,
        "GRPC_SEND_END": compute_start + compute_us * 1000 + 90_000,
    }
    if end_cut:
        stamps.pop("REQUEST_END")
    head = {"id": trace_id, "model_name": model, "model_version": 1, "request_id": str(trace_id)}
    return [head, *({"id": trace_id, "timestamps": [{"name": k, "ns": v}]} for k, v in stamps.items())]


def test_a_trace_file_gives_each_requests_time_in_the_server_its_queue_and_compute(tmp_path):
    first = _trace(1, "digits", 10**9, queue_us=300, compute_us=1000) + _trace(2, "other", 10**9, 1, 1)
    second = _trace(3, "digits", 2 * 10**9, queue_us=100, compute_us=500) + _trace(4, "digits", 2 * 10**9, 1, 1, True)
    (tmp_path / "trace.json.0").write_text(json.dumps(first))
    (tmp_path / "trace.json.1").write_text(json.dumps(second))
    times = server_trace.parse(sorted(tmp_path.glob("trace.json.*")), "digits")
    assert times.count == 2  # another model's request and one cut short (no REQUEST_END) are left out
    assert times.queue_ms.tolist() == [0.3, 0.1]
    assert times.compute_ms.tolist() == [1.0, 0.5]
    assert times.request_ms.tolist() == pytest.approx([1.33, 0.63])


def test_requests_before_the_warm_up_ended_are_left_out(tmp_path):
    (tmp_path / "trace.json.0").write_text(json.dumps(_trace(1, "m", 10, 1, 1) + _trace(2, "m", 5000, 1, 1)))
    assert server_trace.parse([tmp_path / "trace.json.0"], "m", since_ns=100).count == 1


def test_a_file_triton_was_still_writing_is_skipped_not_a_crash(tmp_path):
    (tmp_path / "trace.json.0").write_text('[{"id":1,"model_name":"m"')
    assert server_trace.parse([tmp_path / "trace.json.0"], "m").count == 0


def test_the_floor_is_the_clients_percentile_minus_the_servers_never_negative():
    times = server_trace.ServerTimes(np.arange(1, 101, dtype=float), np.zeros(100), np.ones(100))
    trace = times.quantiles()
    assert trace["traced"] == 100 and trace["request"] == {"p50": 50.0, "p99": 99.0, "mean": 50.5}
    assert server_trace.floor_ms({"p50": 51.5, "p99": 98.0}, trace) == {"p50": 1.5, "p99": 0.0}
    assert server_trace.floor_ms({"p50": 1.0, "p99": 2.0}, {}) == {}
    assert server_trace.floor_ms({"p50": math.nan, "p99": 120.0}, trace) == {"p99": 21.0}


def test_the_floor_line_falls_back_to_the_means_without_a_trace():
    trace = server_trace.ServerTimes(np.full(10, 1.0), np.zeros(10), np.ones(10)).quantiles()
    traced = server_trace.floor_ms({"p50": 1.5, "p99": 3.0}, trace)
    assert server_trace.floor_text(traced, trace) == "generator floor p50 0.500 p99 2.000 ms (10 traced)"
    untraced = server_trace.floor_ms({"p50": 1.5}, None, 0.7)
    assert "mean 0.700 ms (no trace" in server_trace.floor_text(untraced, None)
    assert server_trace.floor_text(server_trace.floor_ms({"p50": 1.5}, None), None) == ""


def test_an_untraced_floor_is_unknown_when_the_clients_mean_is_below_the_servers_not_zero():
    assert server_trace.floor_ms({"p50": 800.0}, None, -35.2) == {}
    assert server_trace.floor_ms({"p50": 1.0}, None, -0.6) == {}


@pytest.mark.parametrize(("expected", "rate"), [(100, 1), (4000, 1), (4001, 2), (40_000, 10), (math.inf, 1)])
def test_a_long_run_is_traced_every_nth_request_to_keep_the_sample_near_its_size(expected, rate):
    assert server_trace.rate_for(expected) == rate


def test_a_floor_over_a_quarter_of_the_budget_is_named_and_one_under_it_is_not():
    assert server_trace.floor_warning({"p50": 1.0, "p99": 3.0}, 10.0, "locust") == (
        "locust's own p99 is 3.00 ms of the 10 ms budget (over 25%): the p99 judged is largely the generator's"
    )
    assert server_trace.floor_warning({"p50": 1.0, "p99": 2.5}, 10.0) == ""
    assert server_trace.floor_warning({"p99": 3.0}, math.inf) == ""  # no budget: nothing to take a share of
    assert server_trace.floor_warning({}, 10.0) == ""


@pytest.mark.parametrize(
    ("version", "safe"),
    [("2.51.0", False), ("2.56.9", False), ("2.57.0", True), ("2.59.1", True), ("3.0.0dev", True), ("", False)],
)
def test_only_a_triton_with_the_trace_release_fix_is_traced(version, safe):
    # Triton before 2.57.0 unlocks a freed mutex after each traced request (server PR #8144) and can crash
    assert server_trace.traces_safely(version) is safe


def test_an_untraced_floor_is_the_client_mean_less_tritons_and_is_judged_against_the_budget():
    assert server_trace.floor_ms({"p50": 1.0, "p99": 9.0}, None, 0.75) == {"mean": 0.75}
    assert server_trace.floor_ms({"p50": 1.0}, {}, -0.2) == {"mean": 0.0}  # clock noise is not a negative floor
    assert server_trace.floor_ms({"p50": 1.0}, None, math.nan) == {}
    assert server_trace.floor_limit({"mean": 3.0}) == ("mean", 3.0)
    assert server_trace.floor_limit({"p50": 1.0, "p99": 2.0}) == ("p99", 2.0)
    assert server_trace.floor_warning({"mean": 3.0}, 10.0, "locust").startswith("locust's own mean is 3.00 ms of")
    assert server_trace.floor_warning({"mean": 2.0}, 10.0) == ""
