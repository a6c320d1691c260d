"""loadtest/studies/overload/rows.py: one run's row of the overload table from a recorded result (warm-up failures
left out like warm-up successes), and rows, summary and runs written and read back (no server)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from loadtest.studies.overload import command as overload
from loadtest.studies.overload import report as overload_report
from loadtest.studies.overload import rows as overload_rows
from loadtest.studies.overload.report import WITH_POLICY, WITHOUT_POLICY
from tests.overload_samples import recorded_run


def test_the_table_from_a_recorded_result():
    run = recorded_run(WITH_POLICY, offered=8000, accepted=6000, refused=2000, dropped=0, p99=7.5, warmup_failures=40)
    r = overload_rows.row(run, WITH_POLICY, 2.0, 1000.0, 10.0, warmup_s=2.0)
    # warm-up failures (second 0) are left out like warm-up successes are
    assert (r["offered"], r["accepted"], r["refused"], r["dropped"], r["other_errors"]) == (8000, 6000, 2000, 0, 0)
    assert r["offered_rps"] == 1000.0 and r["accepted_rps"] == 750.0
    assert r["refusal_rate"] == pytest.approx(0.25) and r["drop_rate"] == 0
    assert r["meets_budget"] and r["client_kept_up"] and r["refusal_statuses"] == {"503": 2040}
    baseline = recorded_run(WITHOUT_POLICY, offered=8000, accepted=4000, refused=0, dropped=4000, p99=900.0)
    b = overload_rows.row(baseline, WITHOUT_POLICY, 2.0, 1000.0, 10.0, warmup_s=2.0)
    assert (b["refused"], b["dropped"], b["drop_rate"], b["meets_budget"]) == (0, 4000, 0.5, False)
    v = overload_report.verdict([r, b])
    assert v["passed"] and v["baseline_over_budget"] == [2.0]
    slow = overload_rows.row(
        recorded_run(WITH_POLICY, offered=4000, accepted=4000, refused=0, dropped=0, p99=12.0),
        WITH_POLICY,
        1.0,
        1000.0,
        10.0,
        warmup_s=2.0,
    )
    assert not slow["client_kept_up"]  # offered 500/s of 1000/s
    problems = overload_report.verdict([slow])["problems"]
    assert any("over the 10 ms budget" in p for p in problems) and any("client-bound" in p for p in problems)


def test_overload_outputs_round_trip(tmp_path):
    runs = [
        recorded_run(WITH_POLICY, offered=800, accepted=700, refused=100, dropped=0, p99=5.0),
        recorded_run(WITHOUT_POLICY, offered=800, accepted=800, refused=0, dropped=0, p99=50.0),
    ]
    rows = [overload_rows.row(run, run.variant, 1.0, 100.0, 10.0, 2.0) for run in runs]
    data = {
        "model": "digits",
        "served_model": "digits",
        "protocol": "grpc",
        "budget_ms": 10.0,
        "started": "now",
        "policy": "max_queue_size=16",
        "saturation": {
            "rps": 100.0,
            "users": 8,
            "steps": [{"users": 8, "throughput_rps": 100.0, "p99_ms": 3.0, "failures": 0}],
        },
        "duration_s": 10.0,
        "warmup_s": 2.0,
        "max_inflight": 4096,
        "rows": rows,
        "verdict": overload_report.verdict(rows),
        "runs": [dataclasses.asdict(r) for r in runs],
    }
    paths = overload_report.write_outputs(data, tmp_path)
    assert all(p.stat().st_size > 0 for p in paths)
    text = (tmp_path / "summary.md").read_text()
    assert "| queue-policy | 1x |" in text and "503 x100" in text and "PASS" in text
    saved = json.loads((tmp_path / "results.json").read_text())
    assert [r.variant for r in overload_rows.load_runs(saved)] == [WITH_POLICY, WITHOUT_POLICY]
    assert overload.main(["--report", str(tmp_path / "results.json")]) == 0
