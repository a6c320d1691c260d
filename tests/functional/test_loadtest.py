"""A short campaign against the real server: Locust over both protocols, closed and open loop, two Locust
processes, a variant applied and restored through model control, tuning (dry run), the report, and the
client's counts checked against Triton's own counters."""

import csv
import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import tritonclient.http as httpclient

from export import catalog
from loadtest.campaign import file as campaign_io
from loadtest.campaign.execution import execute
from loadtest.core.results import CampaignResult
from loadtest.reports.campaign import write_report
from loadtest.target import server_trace
from loadtest.target.endpoints import Endpoints
from tests import browser
from tests.trial_samples import PASSING, campaign_of, run_of

CAMPAIGN = textwrap.dedent("""
    name = "functional"
    [slo]
    p99_ms = 2000.0
    max_error_rate = 0.0
    gate = "best-variant"

    [[scenarios]]
    name = "digits-grpc-users"
    model = "digits"
    protocol = "grpc"
    duration_s = 2
    warmup_s = 0.5
    processes = 1
    shape = { kind = "users", users = 4 }

    [[scenarios]]
    name = "digits-http-open"
    model = "digits"
    protocol = "http"
    duration_s = 2
    warmup_s = 0.5
    processes = 2
    shape = { kind = "open", rate = 80 }

    [[variants]]
    name = "as-deployed"

    [[variants]]
    name = "one-instance"
    models = ["digits"]
    instances = 1
    max_queue_delay_us = 500

    [tune]
    models = ["digits"]
    budget_s = 4
    leaders = 1
    trials = 2
    measurement_ms = 500
""")


def digits_config(server) -> dict:
    client = httpclient.InferenceServerClient(server.config.http_url)
    try:
        return client.get_model_config("digits")
    finally:
        client.close()


def written_files(repository: Path) -> dict[Path, bytes]:
    """What a [tune] step may write: export/tuned.toml and every digits format's config.pbtxt."""
    return {p: p.read_bytes() for p in (catalog.TUNED, *sorted(repository.glob("digits*/config.pbtxt")))}


@pytest.fixture(scope="module")
def campaign_run(server, repository, tmp_path_factory):
    out = tmp_path_factory.mktemp("reports") / "functional"
    before = digits_config(server)
    files = written_files(repository)
    status = execute(campaign_io.parse(CAMPAIGN), Endpoints.of(server), repository, out, dry_run=True)
    return status, out, before, files


def test_campaign_passes_and_writes_the_report(campaign_run):
    status, out, _, _ = campaign_run
    assert status == 0
    for name in (
        "index.html",
        "summary.md",
        "results.json",
        "runs.csv",
        "timeline.csv",
        "plots/percentiles.png",
        "plots/batch_sizes.png",
        "plots/time_breakdown.png",
        "plots/timeline_0.png",
    ):
        assert (out / name).stat().st_size > 0, name
    # One run per scenario and variant: no sweep of load, so no latency-against-throughput curve.
    assert not (out / "plots" / "latency_vs_throughput.png").exists()
    rows = list(csv.DictReader((out / "runs.csv").open()))
    assert [(r["scenario"], r["variant"]) for r in rows] == [
        ("digits-grpc-users", "as-deployed"),
        ("digits-http-open", "as-deployed"),
        ("digits-grpc-users", "one-instance"),
        ("digits-http-open", "one-instance"),
    ]


def test_the_report_fits_a_1400_px_browser_window_with_every_image_loaded(campaign_run, tmp_path):
    """The page as a reader sees it in headless Chromium: no sideways scrolling of the page, nothing outside a
    table's own scrolling box past the window's edge, every plot loaded. The same for a campaign of 13 runs
    whose runs table is far wider than the window (it scrolls within its box)."""
    _, out, _, _ = campaign_run
    wide = campaign_of(*(run_of(PASSING, f"scenario-{i}", f"variant-{i}") for i in range(13)))
    write_report(wide, tmp_path / "wide")
    for page in (out / "index.html", tmp_path / "wide" / "index.html"):
        try:
            seen = browser.layout(page)
        except RuntimeError as exc:
            pytest.fail(str(exc), pytrace=False)
        assert seen.page <= seen.window and seen.wide == [], (page, seen)
        assert seen.images >= 4 and seen.missing == [], (page, seen)


def test_one_or_two_locust_processes_count_what_tritons_counters_count(campaign_run):
    """The closed loop in one Locust process, the open loop in two (``processes = 2``, ``tritonkit loadtest
    --processes 2``: the latencies of both merged into one result): each result counts every request Triton
    counted, closed loop exactly, open loop within what was in flight. (A closed loop over two processes, the
    same master/worker merge, is counted exactly in test_distributed_load.py; a second process costs a run ~3 s.)"""
    _, out, _, _ = campaign_run
    assert {s.name: s.processes for s in campaign_io.parse(CAMPAIGN).scenarios} == {
        "digits-grpc-users": 1,
        "digits-http-open": 2,
    }
    result = CampaignResult.load(out / "results.json")
    for run in result.runs:
        c, s = run.client, run.server
        assert c.failures == 0 and c.requests > 0, run.scenario
        # Every request the clients sent (warm-up included) reached the server once, and nothing else did. The
        # open loop's one known gap: a few requests still in flight when Locust stops a worker reach the server
        # but not the client's figures (seen: 3 of 414); closed-loop users send none after they are stopped.
        sent = c.requests + c.warmup_requests
        if run.shape["kind"] == "open":
            # In flight when the workers stop: what the rate sends within the slowest request's time, plus 3 a
            # process for timer catch-up (digits-http-open runs 2). Seen: 4 of 389, and 7 of 360 with a 38 ms stall.
            in_flight = math.ceil(run.shape["rate"] * c.latency_ms["max"] / 1000) + 3 * 2
            assert sent <= s.requests + s.failures <= sent + in_flight, (run.scenario, run.variant, in_flight)
        else:
            assert sent == s.requests + s.failures, (run.scenario, run.variant)
        assert s.inferences >= s.executions > 0 and s.avg_batch >= 1
        assert sum(size * n for size, n in s.batch_histogram.items()) <= s.inferences
        assert c.latency_ms["p50"] <= c.latency_ms["p99"] <= c.latency_ms["p99.9"] <= c.latency_ms["max"]
        # Each request's client time contains its server time; both sums cover the same requests (warm-up
        # included), so the client's is the larger with no slack.
        server_sum_ms = s.breakdown_ms["request"] * min(sent, s.requests + s.failures)
        assert c.latency_sum_ms >= server_sum_ms, (run.scenario, run.variant, c.latency_sum_ms, server_sum_ms)
        assert sum(p.requests for p in c.timeline) == c.requests


def test_open_loop_holds_its_rate_across_two_processes(campaign_run):
    _, out, _, _ = campaign_run
    result = CampaignResult.load(out / "results.json")
    for run in (r for r in result.runs if r.shape["kind"] == "open"):
        assert 0.6 * 80 < run.client.throughput_rps < 1.4 * 80, run.client.throughput_rps


def test_the_variant_was_served_and_the_config_restored(server, campaign_run):
    _, out, before, _ = campaign_run
    result = CampaignResult.load(out / "results.json")
    one = [r for r in result.runs if r.variant == "one-instance"]
    assert one and all(r.served_model == "digits" for r in one)
    assert digits_config(server) == before


def test_tuning_searched_compared_the_variants_and_wrote_nothing(campaign_run, repository):
    _, out, _, files = campaign_run
    tuning = CampaignResult.load(out / "results.json").tuning["digits"]
    assert tuning["generator"] == "perf_analyzer" and tuning["load"].startswith("4 users")
    assert {"as-deployed", "one-instance"} <= {c["variant"] for c in tuning["candidates"]}  # compared points
    assert tuning["pick"] != "none" and tuning["written"] is False
    assert written_files(repository) == files  # the dry run left tuned.toml and the configs byte-identical
    assert not list(catalog.TUNED.parent.glob(".tuned.toml*")), "the dry run left its candidate file behind"
    assert "Tuning" in (out / "summary.md").read_text()
    assert (out / "tune" / "digits" / "tune.png").stat().st_size > 0


def test_slo_gate_fails_the_command_and_names_the_scenario(server, tmp_path):
    campaign = tmp_path / "tight.toml"
    campaign.write_text(
        CAMPAIGN.split('[[scenarios]]\nname = "digits-http-open"')[0]
        .replace("p99_ms = 2000.0", "p99_ms = 0.01")
        .replace('gate = "best-variant"', "")
        .replace("duration_s = 2", "duration_s = 1")
    )
    c = server.config
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tritonkit_cli",
            "loadtest",
            str(campaign),
            "--out",
            str(tmp_path),
            "--http-url",
            c.http_url,
            "--grpc-url",
            c.grpc_url,
            "--metrics-url",
            c.metrics_url,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1, done.stderr[-2000:]
    assert "SLO gate FAILED" in done.stderr
    assert "digits-grpc-users / as-deployed: p99" in done.stderr and "exceeds the 0.01 ms budget by" in done.stderr
    assert json.loads((tmp_path / "functional" / "results.json").read_text())["runs"]


@pytest.mark.parametrize("protocol", ["grpc"])
def test_a_streamed_model_reports_ttft_itl_and_tokens(server, tmp_path, protocol):
    """``tritonkit loadtest --model text_generator`` (decoupled: a gRPC stream) reports time to first token,
    inter-token latency and output tokens/s (results.json, summary.md, index.html, runs.csv), each request's
    figures within its latency. HTTP generate_stream's event-by-event timing is checked against a local server
    in tests/unit/loadtest/generators/locust/test_users.py (the suite's time)."""
    c = server.config
    done = subprocess.run(
        [
            *(sys.executable, "-m", "tritonkit_cli", "loadtest", "--model", "text_generator"),
            # 6 s: a 16-token answer of the real SmolLM2 takes 1-3 s here (decode steps of 55-150 ms); a 3 s run
            # with 0.5 s left out once ended before either user's first answer (CI, 2026-12-04: no request completed)
            *("--protocol", protocol, "--users", "2", "--processes", "1", "--duration", "6", "--warmup-s", "0.5"),
            *("--slo-ttft-ms", "60000", "--slo-itl-ms", "10000", "--out", str(tmp_path)),
            *("--http-url", c.http_url, "--grpc-url", c.grpc_url, "--metrics-url", c.metrics_url),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "TTFT p50 " in done.stdout and "tokens/s" in done.stdout
    (run,) = json.loads((tmp_path / "text_generator" / "results.json").read_text())["runs"]
    client = run["client"]
    assert client["failures"] == 0 and client["streams"]
    assert len(client["streams"]) == client["requests"]
    assert 0 < client["ttft_ms"]["p50"] <= client["ttft_ms"]["p99"] < 60000
    assert 0 < client["itl_ms"]["p50"] <= client["itl_ms"]["p99"] < 10000
    assert client["output_tokens"] > 0 and client["output_token_throughput"] > 0
    for latency, ttft, itl, tokens in client["streams"]:
        assert 1 <= tokens <= 16  # text_generator_samples ask for 16 tokens; a response carries one or more
        # the first token, then the others ITL apart, all before the request's end
        assert 0 < ttft and ttft + (itl or 0) * (tokens - 1) <= latency * 1.001 + 0.002
    assert run["goodput_share"] == 1.0  # generous budgets: every success counts
    report = tmp_path / "text_generator"
    assert "## Streams: TTFT, ITL, tokens/s" in (report / "summary.md").read_text()
    assert "<h2>Streams: TTFT, ITL, tokens/s</h2>" in (report / "index.html").read_text()
    (row,) = csv.DictReader((report / "runs.csv").read_text().splitlines())
    assert float(row["ttft_p99_ms"]) == pytest.approx(client["ttft_ms"]["p99"], abs=1e-3)
    assert int(row["output_tokens"]) == client["output_tokens"] and float(row["output_token_throughput"]) > 0


def test_each_run_carries_the_generators_floor_from_tritons_own_time_in_the_same_run(campaign_run, server_traces):
    """The server's side of every run comes from Triton's trace API where Triton may be traced (every request of
    these short runs after the warm-up): its mean agrees with Triton's metrics over the same run, it is within the
    client's time, and the generator's floor (client minus server at p50 and p99) is what is left. A Triton older
    than 2.57.0 (the local one) is never traced, as it can crash while tracing: its floor is the client's mean
    less Triton's mean request time from its metrics."""
    _, out, _, _ = campaign_run
    result = CampaignResult.load(out / "results.json")
    for run in result.runs:
        c, s = run.client, run.server
        trace = s.trace
        if not server_traces:
            assert trace == {}, run.scenario
            floor = run.generator_floor_ms
            assert set(floor) == {"mean"} and 0 <= floor["mean"] < c.latency_ms["mean"], (run.scenario, floor)
            continue
        assert 0 < trace["traced"] <= s.requests + s.failures, run.scenario
        assert trace["request"]["mean"] == pytest.approx(s.breakdown_ms["request"], rel=0.3), run.scenario
        assert trace["queue"]["p50"] + trace["compute"]["p50"] <= trace["request"]["p99"]
        floor = server_trace.floor_ms(c.latency_ms, trace)
        assert 0 <= floor["p50"] < c.latency_ms["p50"], (run.scenario, floor)
        assert floor["p50"] == pytest.approx(c.latency_ms["p50"] - trace["request"]["p50"], abs=1e-3)
