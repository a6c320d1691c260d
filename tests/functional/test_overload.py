"""Overload against the session's server, on digits: with a tiny queue the excess is refused with the
retryable status (HTTP 503 / gRPC UNAVAILABLE) and counted as refusals; without a queue policy nothing is."""

import pytest

from export.spec import QueuePolicy
from loadtest.core.spec import Candidate
from loadtest.studies.overload import command as overload
from loadtest.target import apply
from loadtest.target.endpoints import Endpoints

RETRYABLE = {"http": "503", "grpc": "StatusCode.UNAVAILABLE"}


@pytest.fixture(scope="module")
def digits_server(server):
    """The session's server, its digits given a slow batcher for this module and its config back after
    (``apply.ServedConfigs``)."""
    endpoints = Endpoints.of(server)
    # Requests linger in the queue (a 20 ms batching window, one instance), so a queue of one overflows at once.
    # The tests offer at most 300 req/s: without a policy this instance serves that with room (batches of about
    # 6 per window), so no run leaves a backlog behind for the next reload to wait on. At 800 req/s a CI run once
    # fell to 134 req/s served, and the reload after it never returned.
    slow = Candidate.of("slow-batcher", ("digits",), max_queue_delay_us=20000, instances=1)
    with apply.ServedConfigs(endpoints.http) as configs:
        configs.apply(slow, "digits")
        yield server, endpoints


def _check(rows):
    (with_policy,) = [r for r in rows if r["config"] == overload.WITH_POLICY]
    (without,) = [r for r in rows if r["config"] == overload.WITHOUT_POLICY]
    return with_policy, without


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_a_full_queue_refuses_with_the_retryable_status(digits_server, tmp_path, protocol):
    server, endpoints = digits_server
    before = apply.served_config(endpoints.http, "digits")
    data = overload.measure(
        "digits",
        endpoints,
        tmp_path,
        protocol=protocol,
        budget_ms=10_000.0,
        duration_s=2,
        warmup_s=0.5,
        factors=(1.0,),
        saturation_rps=300,
        max_inflight=2048,
        policy=QueuePolicy(max_queue_size=1, default_timeout_us=0),
        trials=1,
        log=lambda *_: None,
    )
    with_policy, without = _check(data["rows"])
    assert with_policy["refused"] > 0 and with_policy["refusal_rate"] > 0
    assert set(with_policy["refusal_statuses"]) == {RETRYABLE[protocol]}
    assert with_policy["other_errors"] == 0 and with_policy["dropped"] == 0
    assert with_policy["accepted"] > 0
    assert without["refused"] == 0 and without["other_errors"] == 0 and without["dropped"] == 0
    assert without["accepted"] == without["offered"] > 0
    # refused requests never reached the model (Triton does not count them as its failures either), and the
    # config is served as before
    runs = {r.variant: r for r in overload.load_runs(data)}
    assert runs[overload.WITH_POLICY].server.requests < runs[overload.WITH_POLICY].client.requests
    assert runs[overload.WITHOUT_POLICY].server.failures == 0
    assert apply.served_config(endpoints.http, "digits") == before


def test_the_command_writes_the_report(digits_server, tmp_path):
    server, endpoints = digits_server
    status = overload.main(
        [
            "--model",
            "digits",
            "--saturation-rps",
            "150",
            "--factors",
            "2",
            "--trials",
            "2",
            "--duration",
            "4",
            "--warmup-s",
            "1",
            "--max-queue-size",
            "1",
            "--budget-ms",
            "10000",
            "--out",
            str(tmp_path),
            "--http-url",
            endpoints.http,
            "--grpc-url",
            endpoints.grpc,
            "--metrics-url",
            endpoints.metrics,
        ]
    )
    out = tmp_path / "digits"
    for name in ("results.json", "summary.md", "overload.png"):
        assert (out / name).stat().st_size > 0, name
    data = __import__("json").loads((out / "results.json").read_text())
    # the two configs interleaved, trial by trial
    assert [(r["config"], r["factor"], r["trial"]) for r in data["rows"]] == [
        (overload.WITH_POLICY, 2.0, 1),
        (overload.WITHOUT_POLICY, 2.0, 1),
        (overload.WITHOUT_POLICY, 2.0, 2),
        (overload.WITH_POLICY, 2.0, 2),
    ]
    assert [lv["trials"] for lv in data["verdict"]["levels"]] == [2, 2]
    # The verdict, from the recorded trials: with a queue of one, accepted requests wait behind at most one, so
    # their p99 is far under the 10 s budget (under an eighth of it, the two trials' interval stays within it);
    # the policy's level then fails only for a trial unfit to judge, and passes otherwise.
    policy = [r for r in data["rows"] if r["config"] == overload.WITH_POLICY]
    assert all(r["p99_ms"] is not None and r["p99_ms"] < 10_000 / 8 for r in policy), policy
    unfit = [r for r in policy if r.get("unfinished") or r["other_errors"] or r["dropped"] or not r["client_kept_up"]]
    expected = "fail" if unfit else "pass"
    assert data["verdict"]["verdict"] == expected, (data["verdict"], unfit)
    assert status == overload.EXIT[expected]
    assert "| queue-policy | 2x |" in (out / "summary.md").read_text()
