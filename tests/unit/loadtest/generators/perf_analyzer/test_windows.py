"""perf_analyzer as the soak's load generator: the command it runs and how its passes become windows.
The real binary runs in tests/functional/test_soak.py."""

import stat

import pytest

from loadtest.generators.perf_analyzer import windows as perf_windows

# The lines perf_analyzer 2.51 prints with -v --percentile 99 (copied from a run against digits).
OUTPUT = """\
  Stabilizing using p99latency and throughput
  Pass [1] throughput: 921.818 infer/sec. p99 latency: 6484 usec
  Pass [2] throughput: 917.444 infer/sec. p99 latency: 7027 usec
  Pass [3] throughput: 917.774 infer/sec. p99 latency: 6992 usec
Failed to obtain stable measurement.
"""


def test_each_pass_becomes_a_window_with_its_p99():
    windows = perf_windows.parse_passes(OUTPUT, 60.0)
    assert [w["t"] for w in windows] == [0.0, 60.0, 120.0]
    assert [w["p99_ms"] for w in windows] == [6.484, 7.027, 6.992]
    assert windows[0]["requests"] == round(921.818 * 60) and windows[0]["length_s"] == 60.0
    assert all(w["failures"] == 0 and w["p50_ms"] is None for w in windows)
    assert perf_windows.parse_passes("no pass here", 60.0) == []


def test_the_command_asks_for_poisson_arrivals_at_the_rate_and_one_pass_per_window(tmp_path):
    cmd = perf_windows.command("digits", "127.0.0.1:8001", "grpc", 918.4, 10, 60.0, tmp_path / "in.json")
    text = " ".join(cmd)
    for part in (
        "-m digits",
        "-u 127.0.0.1:8001",
        "-i grpc",
        "--request-rate-range 918.4",
        "--request-distribution poisson",
        "--measurement-interval 60000",
        "--percentile 99",
        "--max-trials 10",
        f"--input-data {tmp_path / 'in.json'}",
    ):
        assert part in text, part
    assert float(cmd[cmd.index("--stability-percentage") + 1]) < 0.01  # never stable: every trial is run


def fake_perf_analyzer(tmp_path, output: str, code: int):
    script = tmp_path / "perf_analyzer"
    script.write_text(f"#!/bin/sh\ncat <<'EOF'\n{output}EOF\nexit {code}\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def test_a_run_of_every_window_ending_unstable_is_the_normal_end(tmp_path):
    binary = fake_perf_analyzer(tmp_path, OUTPUT, 2)
    run = perf_windows.run("digits", "x:1", "grpc", 900.0, 3, 60.0, binary=binary, log=lambda *_: None)
    assert len(run["windows"]) == 3 and run["requests"] == sum(w["requests"] for w in run["windows"])
    assert run["throughput_rps"] == pytest.approx(run["requests"] / 180)


def test_a_run_that_stops_early_or_fails_raises_with_the_output(tmp_path):
    binary = fake_perf_analyzer(tmp_path, OUTPUT, 2)
    with pytest.raises(perf_windows.PerfWindowsError, match="after 3 of 4 windows"):
        perf_windows.run("digits", "x:1", "grpc", 900.0, 4, 60.0, binary=binary, log=lambda *_: None)
    failing = fake_perf_analyzer(tmp_path, "Thread [0] had error: failed to connect\n", 99)
    with pytest.raises(perf_windows.PerfWindowsError, match="code 99.*\n.*had error"):
        perf_windows.run("digits", "x:1", "grpc", 900.0, 3, 60.0, binary=failing, log=lambda *_: None)
    with pytest.raises(ValueError, match="windows >= 2"):
        perf_windows.run("digits", "x:1", "grpc", 900.0, 1, 60.0, binary=binary, log=lambda *_: None)
