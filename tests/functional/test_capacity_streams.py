"""`tritonkit capacity text_generator` with a TTFT budget against the session's tiny generator
(tests/functional/conftest.py: ``tiny_generator``): the search judges p99 TTFT beside p99, and the answer, every
run line, results.json and summary.md carry p99 TTFT, p99 ITL and output tokens/s (GenAI-Perf's figures).

Short: one rate (``--max-rate`` = ``--start-rate``: no doubling, no knee), 2 trials, 3 s runs, one Locust
process. The budgets sit far above a busy 2-core runner's stalls: a 3 s run at 3 req/s has a handful of
requests, so its p99 is its slowest, and two trials' log-scale interval is wide (see test_capacity.py)."""

import json
import math
import subprocess
import sys
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[2]
SHORT = ["--duration", "3", "--processes", "1", "--start-rate", "3", "--max-rate", "3", "--trials", "2"]


def test_a_streamed_models_capacity_judges_ttft_and_reports_ttft_itl_and_tokens(tiny_generator, tmp_path):
    c = tiny_generator.config
    urls = ["--http-url", c.http_url, "--grpc-url", c.grpc_url, "--metrics-url", c.metrics_url]
    budgets = ["--slo-p99-ms", "60000", "--slo-ttft-ms", "30000"]
    done = subprocess.run(
        [sys.executable, "-m", "tritonkit_cli", "capacity", "text_generator", *budgets, *SHORT, "--out", str(tmp_path)]
        + urls,
        cwd=PROJECT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    output = done.stdout + done.stderr
    # The budgets are minutes: the rate holds them (0), or two trials' interval reaches past one (4). "No rate
    # meets" (1) would be a tiny model's p99 over a minute, a failure.
    assert done.returncode in (0, 4), output[-3000:]
    assert "capacity text_generator: p99 <= 60000 ms, p99 TTFT <= 30000 ms, errors <= 0.00%" in done.stdout
    raw = json.loads((tmp_path / "results.json").read_text())
    assert raw["budget"]["ttft_ms"] == 30000 and raw["budget"]["itl_ms"] is None
    runs = raw["probes"] + [t for conf in raw["confirmations"] for t in conf["trials"]]
    usable = [r for r in runs if not r["error"] and not r["saturated"]]
    assert usable, output[-3000:]
    for run in usable:  # each run's stream figures, as a loadtest of the model reports them
        assert 0 < run["ttft_p99_ms"] <= run["p99_ms"] and run["output_token_throughput"] > 0
        assert 0 < run["itl_p99_ms"] < run["p99_ms"] or math.isnan(run["itl_p99_ms"])  # NaN: single-token streams
    assert "p99 TTFT " in done.stdout and "tokens/s " in done.stdout  # the run lines
    intervals = raw["confirmations"][0]["intervals"]
    assert intervals["ttft_p99_ms"]["trials"] >= 1 and "output_token_throughput" in intervals
    assert "| p99 TTFT ms | p99 ITL ms | tokens/s |" in (tmp_path / "summary.md").read_text()
    if done.returncode == 0:  # the answer at the capacity
        assert raw["streams"]["rate"] == raw["rate"] and raw["streams"]["ttft_p99_ms"]["estimate"] > 0
        assert f"; at {raw['rate']:g} req/s: p99 TTFT " in raw["sentence"] and "tokens/s" in raw["sentence"]
