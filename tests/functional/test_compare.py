"""`tritonkit compare` as a user runs it, on digits with the local server it starts (the arms served side by
side from a staged repository, which is what is under test here, so not the session's server): A/A is not
called better or worse, and a 5 ms batching window at one closed-loop user is a p50 regression (exit 1).
Each trial is one second of load (perf_analyzer's three windows of a third of it) on a shared 2-core machine:
one user answered in about half a millisecond against one waiting out a 5 ms window is a difference far beyond
the noise of so short a trial."""

import json
import math
import subprocess
import sys
from pathlib import Path

from tritonkit_errors import ExitStatus

PROJECT = Path(__file__).resolve().parents[2]
SHORT = ["--users", "1", "--duration", "1", "--warmup-rounds", "1"]


def tritonkit(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tritonkit_cli", *args], cwd=PROJECT, capture_output=True, text=True, timeout=timeout
    )


def verdicts(out: Path) -> dict[str, str]:
    results = json.loads((out / "results.json").read_text())
    return {c["metric"]: c["verdict"] for c in results["verdict"]["comparisons"]}


def test_a_against_itself_never_fails_and_names_any_difference_it_finds(repository, tmp_path):
    out = tmp_path / "aa"
    done = tritonkit("compare", "digits", "--aa", *SHORT, "--trials", "2", "--budget-ms", "50", "--out", str(out))
    log = done.stdout[-3000:] + done.stderr[-3000:]
    # The noise of this shared machine often leaves 2 trials inconclusive. A metric called better or worse
    # against itself happens by chance (about one run in twenty per metric): A/A never fails on it, it names it.
    assert done.returncode in (ExitStatus.OK, ExitStatus.INCONCLUSIVE), log
    found = [m for m, v in verdicts(out).items() if v in ("better", "worse")]
    assert json.loads((out / "results.json").read_text())["verdict"]["aa_differences"] == found, log
    assert ("A/A found a difference" in done.stdout) == bool(found), log
    assert "A/A noise floor" in done.stdout
    results = json.loads((out / "results.json").read_text())
    assert results["mode"] == "A/A" and [a["served"] for a in results["arms"]] == ["digits", "digits__b"]
    trials = results["results"]["A"]["trials"] + results["results"]["B"]["trials"]
    assert len(trials) == 4 and all(t["generator"] == "perf_analyzer" for t in trials)
    # Goodput from perf_analyzer's profile export: a share of the requests, at most the throughput.
    for t in trials:
        assert 0 <= t["goodput_share"] <= 1 and not math.isnan(t["goodput_rps"])
        assert t["goodput_rps"] <= t["throughput"] * 1.05
    assert "| p50 |" in (out / "summary.md").read_text()


def test_a_5_ms_batching_window_at_one_user_is_a_p50_regression(repository, tmp_path):
    out = tmp_path / "ab"
    done = tritonkit(
        "compare",
        "digits",
        "--a",
        "max_queue_delay_us=0",
        "--b",
        "max_queue_delay_us=5000",
        *SHORT,
        "--trials",
        "3",
        "--out",
        str(out),
    )
    log = done.stdout[-3000:] + done.stderr[-3000:]
    assert done.returncode == ExitStatus.FAILED, log
    assert verdicts(out)["p50_ms"] == "worse", log
    assert "p50_ms: B is worse than A" in done.stdout
