"""Model Analyzer's pick on the real server: applied through load_model, and a real MA run on digits."""

import csv
import json
from pathlib import Path

import numpy as np
import psutil
import pytest

from deploy.client import connect, infer
from loadtest.core.spec import Candidate
from loadtest.target import apply
from loadtest.tune.analyzer import profile as analyzer

RECORDED = Path(__file__).resolve().parents[1] / "data" / "analyzer" / "digits.ckpt"
installed = pytest.mark.skipif(
    not (analyzer.ANALYZER_BIN.is_file() and analyzer.PERF_ANALYZER.is_file()),
    reason="Model Analyzer is not installed (.venv-analyzer, .venv/bin/perf_analyzer): bash deploy/setup.sh analyzer",
)


def test_recorded_pick_loads_into_the_served_model(server):
    """On the session server (no server of its own to start): the pick is loaded over digits, then the config
    served before is loaded back, as a variant's restore does, so later tests see the committed config."""
    pick = analyzer.pick_from_results(RECORDED, 5.0)
    client = connect("http", server.config.http_url)
    original = client.get_model_config("digits")
    try:
        merged = apply.override(original, Candidate("model-analyzer", changes=pick.changes()))
        client.load_model("digits", config=json.dumps(merged))
        served = client.get_model_config("digits")
        assert served["max_batch_size"] == pick.max_batch_size
        assert sum(g["count"] for g in served["instance_group"]) == pick.instance_count
        assert int(served["dynamic_batching"]["max_queue_delay_microseconds"]) == 500
        out = infer(client, "digits", {"PIXELS": np.zeros((pick.max_batch_size, 64), np.float32)})
        assert out["PROBABILITIES"].shape == (pick.max_batch_size, 10)
    finally:
        apply.load(server.config.http_url, "digits", original)
    try:
        assert client.get_model_config("digits") == original
    finally:
        client.close()


@installed
def test_profile_digits_picks_a_config_within_budget(repository, tmp_path):
    budget = 50.0  # generous: this checks the plumbing, not the speed of a shared 2-core machine
    # Two load points per config, not MA's four: the pick and the table are checked the same way.
    pick = analyzer.profile(
        "digits", repository, budget, tmp_path, max_instances=1, max_batch_size=8, concurrency=(1, 4), timeout_s=480
    )
    assert pick.model == "digits" and pick.config_name.startswith("digits_config_")
    assert 0 < pick.p99_ms <= budget and pick.throughput_infer_s > 0
    assert pick.concurrency in analyzer.CONCURRENCIES
    if pick.config_name != "digits_config_default":
        assert (pick.max_batch_size, pick.instance_count) == (8, 1)
    # Against what MA itself wrote (its results CSV, not the checkpoint the pick was read from): the pick is the
    # fastest row MA says satisfies the p99 constraint, with that row's figures.
    with open(tmp_path / analyzer.RESULTS_CSV, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["Model"] == "digits"]
    table = {(r["Model Config Path"], int(r["Concurrency"])): r for r in rows}
    row = table[(pick.config_name, pick.concurrency)]
    throughput = float(row["Throughput (infer/sec)"])
    assert row["Satisfies Constraints"] == "Yes", row
    assert throughput == pytest.approx(pick.throughput_infer_s, abs=0.06)
    assert float(row["p99 Latency (ms)"]) == pytest.approx(pick.p99_ms, abs=0.06)
    fastest = max(float(r["Throughput (infer/sec)"]) for r in table.values() if r["Satisfies Constraints"] == "Yes")
    assert throughput == fastest, sorted(table.items())
    # MA stopped the server it launched through our wrapper, stubs included.
    ours = [p for p in psutil.process_iter(["cmdline"]) if str(tmp_path) in " ".join(p.info["cmdline"] or [])]
    assert not ours, [p.info["cmdline"] for p in ours]
