"""`tritonkit tune`'s command line without a server: bad input is one line and exit 2, before any server starts.

loadtest/tune/command.py (the only module named ``command``)."""

import subprocess
import sys
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[4]


def tune(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tritonkit_cli", "tune", *args], cwd=PROJECT, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize(
    "args, words",
    [
        (["nosuch", "--slo-p99-ms", "5", "--users", "4"], ["'nosuch' is not in"]),
        (["digits", "--slo-p99-ms", "5"], ["one of the arguments --users --rate is required"]),
        (["digits", "--slo-p99-ms", "5", "--users", "4", "--rate", "10"], ["not allowed with argument"]),
        (["digits", "--slo-p99-ms", "-1", "--users", "4"], ["'-1' must be > 0"]),
        (["digits", "--slo-p99-ms", "5", "--users", "4", "--shape", "ids"], ["--shape 'ids' is not NAME:D1,D2"]),
        (
            ["digits", "--slo-p99-ms", "5", "--users", "4", "--delays-us", "0,soon"],
            ["'0,soon' is not a list of delays"],
        ),
        (
            ["digits", "--slo-p99-ms", "5", "--users", "4", "--input-data", "missing.json"],
            ["--input-data missing.json: no such file"],
        ),
        (["digits", "--slo-p99-ms", "5", "--users", "4", "--max-error-rate", "2"], ["--max-error-rate 2"]),
        (["digits", "--slo-p99-ms", "5", "--users", "4", "--trials", "1"], ["--trials 1", "at least 2 trials"]),
        (["digits", "--slo-p99-ms", "5", "--users", "4", "--min-effect", "1.5"], ["--min-effect 1.5"]),
        (["digits", "--slo-p99-ms", "5", "--users", "4", "--leaders", "0"], ["'0' must be > 0"]),
        (["digits", "--slo-p99-ms", "5", "--users", "4", "--instances", "2,0"], ["instance counts must be >= 1"]),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, words):
    done = tune(*args)
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip() and not line.startswith(("usage:", " "))]
    assert len(lines) == 1, done.stderr
    for word in words:
        assert word in lines[0], lines[0]


def test_help_teaches_the_load_the_budget_and_the_write_paths():
    done = tune("--help")
    assert done.returncode == 0
    for text in (
        "--users",
        "--rate",
        "--budget-s",
        "--analyzer",
        "--dry-run",
        "--trials",
        "--min-effect",
        "better beyond the",
        "inconclusive",
        "export/tuned.toml",
        "config.pbtxt",
        "perf_analyzer",
        "--repository",
        "--server-cpus",
    ):
        assert text in done.stdout, text
