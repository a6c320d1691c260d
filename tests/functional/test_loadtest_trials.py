"""``tritonkit loadtest --model`` in repeated trials against the real server: every trial kept in results.json
with the interval of each figure, goodput reported, the verdict over the trials; a bad trial count is one line."""

import json
import subprocess
import sys

import tritonkit_cli


def loadtest(server, out, *extra: str) -> subprocess.CompletedProcess:
    c = server.config
    urls = ["--http-url", c.http_url, "--grpc-url", c.grpc_url, "--metrics-url", c.metrics_url]
    return subprocess.run(
        [sys.executable, "-m", "tritonkit_cli", "loadtest", "--model", "digits", "--out", str(out), *urls, *extra],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_three_trials_are_all_kept_and_report_intervals(server, tmp_path):
    # three, not two: with two trials t(1) = 12.7 makes a p99 interval (log scale) span a factor of hundreds. One
    # Locust process (the default on 2 cores is 2, ~3 s more a trial): the trials, not the processes, are the subject.
    done = loadtest(
        server, tmp_path, "--users", "2", "--processes", "1", "--duration", "2", "--trials", "3", "--slo-p99-ms", "1000"
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "SLO gate passed" in done.stdout and "over 3 trials: req/s" in done.stdout
    (run,) = json.loads((tmp_path / "digits" / "results.json").read_text())["runs"]
    assert len(run["trials"]) == 3 and run["verdict"] == "pass"
    for trial in run["trials"]:
        c = trial["client"]
        assert c["requests"] > 0 and c["failures"] == 0
        assert trial["goodput_share"] == 1.0  # every request answered well within 1 s
    assert run["client"]["requests"] == sum(t["client"]["requests"] for t in run["trials"])
    assert set(run["intervals"]) == {"throughput", "p50_ms", "p99_ms", "error_rate", "goodput_share", "goodput_rps"}
    p99 = run["intervals"]["p99_ms"]
    assert p99["trials"] == 3 and p99["low"] <= p99["estimate"] <= p99["high"]
    assert run["goodput_share"] == 1.0 and run["goodput_rps"] > 0
    summary = (tmp_path / "digits" / "summary.md").read_text()
    assert "## Trials" in summary and "goodput" in summary


def test_zero_trials_is_one_line_and_exit_2(server, tmp_path, capsys):
    # In this process: the refusal comes before any load, and a fresh interpreter would cost ~3 s of imports.
    c = server.config
    urls = ["--http-url", c.http_url, "--grpc-url", c.grpc_url, "--metrics-url", c.metrics_url]
    status = tritonkit_cli.main(["loadtest", "--model", "digits", "--out", str(tmp_path), *urls, "--trials", "0"])
    assert status == 2
    assert capsys.readouterr().err.strip() == "error: --trials 0 must be >= 1"
    assert not (tmp_path / "digits").exists()
