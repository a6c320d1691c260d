"""`tritonkit capacity` against the session's real server, with short runs: digits' capacity under a 250 ms p99
with an interval from four trials, the replica plan and HPA patch; and a budget no load can meet exits 1
naming the lowest rate probed and its p99."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

PROJECT = Path(__file__).resolve().parents[2]
# Short: a flow check on a shared machine. Runs of 4 s up to 40 req/s, the bracket narrowed to 50%; one Locust
# process (a second one starts late on 2 busy cores and misses the first arrivals of so short a run).
# The budget sits far above the stalls of a busy 2-core runner: there one request in 50-100 takes 30-75 ms, and
# a 4 s run at 10-20 req/s has only 40-80 requests, so its p99 is its slowest request. Under a 50 ms budget three
# such trials (p99 5.6, 8.0 and 29.8 ms) gave a log-scale interval of 1.2-98.6 ms: inconclusive (exit 4), which
# is the command's honest answer there but not the flow this test checks.
SHORT = ["--duration", "4", "--processes", "1", "--max-rate", "40", "--tolerance", "0.5"]


def capacity(server, *args: str) -> subprocess.CompletedProcess:
    c = server.config
    urls = ["--http-url", c.http_url, "--grpc-url", c.grpc_url, "--metrics-url", c.metrics_url]
    return subprocess.run(
        [sys.executable, "-m", "tritonkit_cli", "capacity", *args, *urls],
        cwd=PROJECT,
        capture_output=True,
        text=True,
        timeout=240,
    )


def test_digits_capacity_under_250_ms_has_an_interval_a_plan_and_a_patch(server, tmp_path):
    out, patch, kserve = tmp_path / "report", tmp_path / "hpa-patch.yaml", tmp_path / "isvc-patch.yaml"
    done = capacity(
        server,
        "digits",
        "--slo-p99-ms",
        "250",
        "--trials",
        "3",
        *SHORT,
        # one doubling (20, then 40 req/s) before the knee's rounds at 40
        "--start-rate",
        "20",
        "--target-rps",
        "100",
        "--write-patch",
        str(patch),
        "--write-kserve-patch",
        str(kserve),
        "--price-per-hour",
        "2.5",
        "--out",
        str(out),
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    line = re.search(
        r"p99 <= 250 ms holds up to (at least )?([0-9.]+) req/s \(95% CI ([0-9.]+)-([0-9.]+), "
        r"(the throughput of 3 trials at|3 trials at|the knee of [34] rounds at)",
        done.stdout,
    )
    assert line, done.stdout
    estimate, low, high = (float(line.group(i)) for i in (2, 3, 4))
    assert low <= estimate <= high
    assert "for constant-rate arrivals (perf_analyzer)" in done.stdout and "replicas for 100 req/s:" in done.stdout
    # KServe's and Ray Serve's targets: the requests in flight at the rate per replica (Little's law), each target
    # rounded down, with its interval.
    inflight = re.search(
        r"in flight per replica at ([0-9.]+) req/s: ([0-9.]+) \(95% CI ([0-9.]+)-([0-9.]+)\) by Little's law: "
        r"[0-9.]+ req/s x the mean latency there, ([0-9.]+) ms",
        done.stdout,
    )
    assert inflight, done.stdout
    per_pod, ongoing, ongoing_low, ongoing_high, mean_ms = (float(inflight.group(i)) for i in range(1, 6))
    assert ongoing == pytest.approx(per_pod * mean_ms / 1000, abs=0.01) and per_pod <= low
    assert ongoing_low <= ongoing <= ongoing_high
    rps = re.search(r"KServe scaleMetric rps: scaleTarget ([0-9]+) \(", done.stdout)
    assert rps and per_pod - 1.05 < int(rps.group(1)) <= per_pod + 0.05, done.stdout  # per_pod printed to 0.1
    concurrency = re.search(
        r"KServe scaleMetric concurrency: (?:scaleTarget ([0-9]+)|no whole scaleTarget)", done.stdout
    )
    assert concurrency, done.stdout
    if concurrency.group(1) is None:  # a whole concurrency target cannot hold under 1 request in flight
        assert ongoing < 1.005
    else:
        assert abs(int(concurrency.group(1)) - ongoing) < 1 and ongoing >= 0.995
    ray = re.search(r"Ray Serve target_ongoing_requests: (?:([0-9.]+) \(|none, under 0.1)", done.stdout)
    assert ray and (ray.group(1) is None or float(ray.group(1)) <= ongoing + 0.005), done.stdout
    isvc = yaml.safe_load(kserve.read_text())
    assert isvc["kind"] == "InferenceService" and isvc["metadata"]["name"] == "digits"
    assert isvc["spec"]["predictor"]["scaleMetric"] in ("concurrency", "rps")
    assert isvc["spec"]["predictor"]["scaleTarget"] >= 1
    assert "USD per million requests at 100 req/s" in done.stdout, done.stdout
    results = json.loads((out / "results.json").read_text())
    assert results["status"] == 0 and len(results["confirmations"][-1]["trials"]) == 3
    assert (out / "capacity.png").stat().st_size > 0 and "## Search" in (out / "summary.md").read_text()
    hpa = yaml.safe_load(patch.read_text())
    assert hpa["kind"] == "HorizontalPodAutoscaler" and hpa["spec"]["maxReplicas"] >= 2


def test_a_budget_within_the_generators_floor_is_refused_in_one_line_with_exit_2(server, server_traces, tmp_path):
    """A budget the generator's own time takes over a quarter of is the generator's, not the server's, to meet:
    the first run measures the floor (client minus Triton's own time: its trace's p50 and p99, or untraced, the
    means of its metrics) and the command stops there. (No rate meeting a budget the generator leaves room for
    exits 1: tests/unit/loadtest/capacity/test_search.py.)"""
    done = capacity(
        server, "digits", "--slo-p99-ms", "0.1", "--trials", "3", *SHORT, "--start-rate", "10", "--out", str(tmp_path)
    )
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-3000:]
    (line,) = [text for text in done.stderr.splitlines() if text.strip()]
    judged = "p99" if server_traces else "mean"
    assert re.fullmatch(
        rf"error: budget within the generator's floor: perf_analyzer's own {judged} is [0-9.]+ ms of the 0.1 ms "
        r"budget \(over 25%\) at 10 req/s; use a larger budget",
        line,
    )
    if server_traces:
        floor = re.search(r"generator floor at 10 req/s: p50 ([0-9.]+) p99 ([0-9.]+) ms .*traced", done.stdout)
        # Differences of percentiles, each >= 0; the p99's need not exceed the p50's (seen: p50 0.721, p99 0.412).
        assert floor and float(floor.group(1)) >= 0 and float(floor.group(2)) > 0.1 * 0.25
    else:
        floor = re.search(r"generator floor at 10 req/s: mean ([0-9.]+) ms .*no trace: Triton's means", done.stdout)
        assert floor and float(floor.group(1)) > 0.1 * 0.25


def test_perf_analyzer_plays_a_gamma_schedule_and_the_answer_names_the_pattern(server, tmp_path):
    # Each perf_analyzer run measures at least three windows of --duration / 3: 1 s windows at 40 req/s only (the
    # warm-up, one bracket run at --max-rate, then the knee's two rounds of three rates) keep it short.
    done = capacity(
        server,
        "digits",
        "--slo-p99-ms",
        "250",
        "--trials",
        "2",
        "--generator",
        "perf_analyzer",
        "--arrival",
        "gamma:0.5",
        "--duration",
        "3",
        "--start-rate",
        "40",
        "--max-rate",
        "40",
        "--out",
        str(tmp_path),
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    pattern = "gamma arrivals, burstiness 0.5 (perf_analyzer --request-intervals)"
    assert re.search(r"p99 <= 250 ms holds up to (at least )?[0-9.]+ req/s .*for " + re.escape(pattern), done.stdout)
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["status"] == 0 and results["generator"] == "perf_analyzer" and results["arrivals"] == pattern
    # the schedule played at 40 req/s spans five 1 s windows
    assert len((tmp_path / "schedules" / "40rps-1.txt").read_text().splitlines()) >= 5 * 1 * 40
