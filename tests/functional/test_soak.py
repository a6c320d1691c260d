"""Very short soaks through the command, each on a local server with only digits: one finds its rate itself (the
closed-loop and open-loop searches against the real server, in a few short steps), then soaks 9 s at that rate in
3 s windows with memory sampled every second; the report files are written and the three checks computed (not
required to pass). One soaks at a given rate with perf_analyzer. A soak stopped by SIGTERM once its Locust sends
(nothing left: server, stubs, shm regions, Locust): tests/functional/test_stop_signals.py."""

import functools
import itertools
import json
import os
import statistics

from loadtest.generators import saturation
from loadtest.studies.soak import checks as soak_checks
from loadtest.studies.soak import command as soak
from loadtest.target import endpoints as target


def verdict_of(data: dict) -> bool:
    """The soak's verdict again from the figures it recorded (the windows, the memory samples, the failure
    counts) and the checks' limits; each check's own verdict must agree."""
    client_failures, server_failures = data["client"]["failures"], data["server_failures"] or 0
    errors = client_failures + server_failures == 0
    end = data["duration_s"] + 1e-9
    full = [w for w in data["windows"] if w["t"] + w["length_s"] <= end and w.get("p99_ms") is not None]
    steady = len(full) >= 2 and abs(full[-1]["p99_ms"] - full[0]["p99_ms"]) <= soak_checks.P99_DRIFT * full[0]["p99_ms"]
    samples, warmup, window = data["memory"], data["memory_warmup_s"], data["window_s"]
    first = [s["total_bytes"] for s in samples if warmup <= s["t"] < warmup + window]
    last = [s["total_bytes"] for s in samples if s["t"] > samples[-1]["t"] - window and s["t"] >= warmup + window]
    flat = bool(first and last) and statistics.fmean(last) <= (1 + soak_checks.MEMORY_GROWTH) * statistics.fmean(first)
    assert [c["passed"] for c in data["checks"]] == [errors, steady, flat], (data["checks"], full)
    assert data["passed"] == (errors and steady and flat)
    return data["passed"]


def test_a_short_soak_finds_its_rate_writes_the_report_and_computes_the_checks(tmp_path, monkeypatch, capsys):
    """No --saturation-rps: closed-loop users doubling, then open-loop rates rising from an eighth of that until
    one falls behind, then the soak at 70% of the last rate kept up with. Few, short steps (3 s each; closed
    loop 2 and 4 users, open loop x4 a step, at most three: the last at twice the closed-loop rate usually
    falls behind) keep it to about a minute; the search code is the soak's own. The soak's report, windows,
    memory samples and CPU split are checked on the same run."""
    cpus = os.sched_getaffinity(0)
    monkeypatch.setattr(
        soak, "find_saturation", functools.partial(saturation.find_saturation, warmup_s=1.0, start_users=2, max_users=4)
    )
    monkeypatch.setattr(
        soak,
        "find_sustained_rate",
        functools.partial(saturation.find_sustained_rate, warmup_s=1.0, step=4.0, max_steps=3),
    )
    status = soak.main(
        [
            "--model",
            "digits",
            "--minutes",
            "0.15",
            "--window-s",
            "3",
            "--sample-s",
            "1",
            "--warmup-s",
            "1",
            "--memory-warmup-s",
            "2",
            "--search-duration",
            "3",
            "--out",
            str(tmp_path),
        ]
    )
    assert status in (0, 1), capsys.readouterr().err[-3000:]
    out = tmp_path / "digits"
    for name in ("results.json", "summary.md", "soak.png"):
        assert (out / name).stat().st_size > 0, name
    data = json.loads((out / "results.json").read_text())
    assert status == (0 if verdict_of(data) else 1)
    assert [c["name"] for c in data["checks"]] == ["no errors", "p99 steady", "memory flat"]
    assert all(isinstance(c["passed"], bool) and c["detail"] for c in data["checks"])
    p99 = data["checks"][1]
    assert p99["first_ms"] is not None and p99["last_ms"] is not None and p99["drift"] is not None
    assert [w["t"] for w in data["windows"]][:3] == [0, 3, 6]
    memory = data["checks"][2]
    assert memory["baseline_bytes"] > 0 and memory["final_bytes"] > 0
    assert len(data["memory"]) >= 5
    # the server and its two stub processes (digits runs two instances) were sampled
    assert all(len(s["processes"]) >= 3 for s in data["memory"][1:])
    assert "p99 per window" in (out / "summary.md").read_text()
    # by default the server and the load generator had their own CPUs, and this process got all of its back
    client, server = target.split_cpus(frozenset(cpus))
    assert (data["client_cpus"], data["server_cpus"]) == (sorted(client), sorted(server))
    assert os.sched_getaffinity(0) == cpus
    search = data["saturation_search"]
    assert search["given"] is False
    closed, opened = search["closed_loop"], search["open_loop"]
    assert 1 <= len(closed) <= 2 and [s["users"] for s in closed] == [2, 4][: len(closed)]
    assert search["closed_loop_rps"] == max(s["throughput_rps"] for s in closed) > 0
    assert opened[0]["rate"] == round(search["closed_loop_rps"] * soak.START_FRACTION, 1)
    assert all(abs(b["rate"] - 4 * a["rate"]) <= 0.4 for a, b in itertools.pairwise(opened))
    # The search stops at the first step that falls behind (or after three); the soak takes the last one before.
    rates = [s["rate"] for s in opened]
    chosen = rates.index(data["saturation_rps"])
    assert chosen == len(opened) - 2 or (len(opened) == 3 and chosen == 2), (rates, data["saturation_rps"])
    assert all(s["failures"] == 0 for s in opened[: chosen + 1])
    assert data["rate"] == round(0.7 * data["saturation_rps"], 1) and data["requests"] > 0
    assert "## Saturation" in (out / "summary.md").read_text()
    with capsys.disabled():
        print(
            f"\n  rate search: closed loop {search['closed_loop_rps']} req/s; open loop "
            f"{[(s['rate'], s['throughput_rps']) for s in opened]}; soak at {data['rate']} req/s"
        )


def test_a_soak_driven_by_perf_analyzer_has_a_window_per_pass(tmp_path):
    status = soak.main(
        [
            "--model",
            "digits",
            "--generator",
            "perf_analyzer",
            "--minutes",
            "0.15",
            "--window-s",
            "3",
            "--sample-s",
            "1",
            "--memory-warmup-s",
            "2",
            "--saturation-rps",
            "100",
            "--out",
            str(tmp_path),
        ]
    )
    data = json.loads((tmp_path / "digits" / "results.json").read_text())
    assert status == (0 if verdict_of(data) else 1)
    assert data["generator"] == "perf_analyzer" and data["rate"] == 70.0
    assert [w["t"] for w in data["windows"]] == [0, 3, 6]
    assert all(w["p99_ms"] > 0 and w["requests"] > 0 for w in data["windows"])
    # about 70 req/s for 9 s, and Triton counted no failure
    assert 0.8 * 70 * 9 < data["requests"] < 1.2 * 70 * 9
    assert data["server_failures"] == 0 and data["checks"][0]["passed"]
    assert "Open-loop Poisson load from perf_analyzer" in (tmp_path / "digits" / "summary.md").read_text()
