"""`tritonkit floor` against the session's server, short: both generators over gRPC at one rate, two rounds; each
arm's floor comes from Triton's own time in the same runs (its trace, or untraced its metrics' means), and the
comparison with perf_analyzer is a verdict."""

import json
import subprocess
import sys
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[2]


def test_both_generators_floors_and_their_difference_are_measured_in_one_run(server, server_traces, tmp_path):
    c = server.config
    urls = ["--http-url", c.http_url, "--grpc-url", c.grpc_url, "--metrics-url", c.metrics_url]
    args = ["digits", "--protocols", "grpc", "--trials", "2", "--duration", "2", "--out", str(tmp_path)]
    done = subprocess.run(
        [sys.executable, "-m", "tritonkit_cli", "floor", *args, *urls],
        cwd=PROJECT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    data = json.loads((tmp_path / "results.json").read_text())
    assert set(data["arms"]) == {"perf_analyzer grpc 20/s", "locust grpc 20/s"}
    for name, arm in data["arms"].items():
        assert arm["usable"] == 2, name
        for t in arm["trials"]:
            if server_traces:
                # the client's time less Triton's at the same percentile: never more than the client's
                assert 0 <= t["floor_ms"]["p50"] <= t["p50_ms"], (name, t)
            else:  # Triton 2.51 is not traced: the client's mean less Triton's mean, from its metrics
                assert set(t["floor_ms"]) == {"mean"} and t["floor_ms"]["mean"] >= 0, (name, t)
    (pair,) = data["pairs"]
    assert pair["generator"] == "locust" and pair["target"] in ("met", "missed", "inconclusive")
    assert "locust grpc at 20/s: p50 minus perf_analyzer's" in done.stdout
    assert "| arm | usable |" in (tmp_path / "summary.md").read_text()
