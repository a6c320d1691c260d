"""The overload study's levels: each config at each load judged over its trials, pass, fail or inconclusive
against the budget, and the report and exit status that follow (no server)."""

from __future__ import annotations

import json
import math

import pytest

from loadtest.studies.overload import command as overload
from loadtest.studies.overload import report as overload_report
from loadtest.studies.overload.report import WITH_POLICY, WITHOUT_POLICY


def trial_row(config: str, factor: float, trial: int, p99: float | None, **changes) -> dict:
    """One trial's row as ``overload_rows.row`` writes it: 1,000 offered, 200 refused, none dropped."""
    return {
        "config": config,
        "factor": factor,
        "trial": trial,
        "target_rps": 100.0,
        "offered_rps": 100.0,
        "offered": 1000,
        "accepted": 800,
        "accepted_rps": 80.0,
        "refused": 200,
        "refusal_rate": 0.2,
        "dropped": 0,
        "drop_rate": 0.0,
        "other_errors": 0,
        "p50_ms": 100.0,
        "p99_ms": p99,
        "budget_ms": 400.0,
        "meets_budget": p99 is not None and p99 <= 400.0,
        "goodput_share": 0.79,
        "goodput_rps": 79.0,
        "refusal_statuses": {"StatusCode.UNAVAILABLE": 200},
        "other_statuses": {},
        "refusal_latency_ms": {},
        "client_kept_up": True,
        **changes,
    }


def rows_for(p99s: dict[float, list[float]], baseline_p99: float = 5000.0) -> list[dict]:
    """Interleaved trials: at each factor, policy and no policy in turn, the policy's p99 from ``p99s``."""
    rows = []
    for factor, values in p99s.items():
        for trial, p99 in enumerate(values, 1):
            rows.append(trial_row(WITH_POLICY, factor, trial, p99))
            rows.append(trial_row(WITHOUT_POLICY, factor, trial, baseline_p99, refused=0, refusal_rate=0.0))
    return rows


@pytest.mark.parametrize(
    "p99s, verdict",
    [
        ([300.0, 310.0, 320.0], "pass"),
        ([350.0, 380.0, 440.0], "inconclusive"),
        ([500.0, 520.0, 540.0], "fail"),
        ([390.0], "pass"),  # one trial: its value decides
        ([401.0], "fail"),
    ],
)
def test_a_load_passes_fails_or_is_inconclusive_on_its_p99_interval(p99s, verdict):
    level = overload_report.level(rows_for({1.0: p99s}), WITH_POLICY, 1.0, 400.0)
    assert level["verdict"] == verdict and level["trials"] == len(p99s)
    iv = level["intervals"]["p99_ms"]
    assert iv["estimate"] == pytest.approx(sum(p99s) / len(p99s)) and iv["trials"] == len(p99s)
    assert level["intervals"]["refusal_rate"]["estimate"] == pytest.approx(0.2)
    assert level["intervals"]["goodput_share"]["estimate"] == pytest.approx(0.79)
    if verdict == "inconclusive":
        assert any("straddles the 400 ms budget" in p for p in level["problems"])
        assert any("would likely settle p99" in p or "more trials" in p for p in level["problems"])


def test_a_trial_the_client_could_not_drive_or_that_did_not_finish_fails_its_load():
    rows = rows_for({2.0: [300.0, 310.0, 320.0]})
    rows[2]["dropped"], rows[2]["drop_rate"] = 5, 0.005
    level = overload_report.level(rows, WITH_POLICY, 2.0, 400.0)
    assert level["verdict"] == "fail" and level["problems"] == [
        "2x trial 2: the client dropped 5 arrivals (raise --max-inflight)"
    ]
    unfinished = rows_for({2.0: [5000.0, 5000.0]})
    unfinished[1] = {**unfinished[1], "unfinished": "requests outlived the run", "p99_ms": None}
    baseline = overload_report.level(unfinished, WITHOUT_POLICY, 2.0, 400.0)
    assert baseline["verdict"] == "fail" and baseline["finished"] == 1 and baseline["over_budget"]


def test_the_study_passes_only_when_every_load_with_the_policy_passes():
    passing = overload.verdict(rows_for({1.0: [300.0, 310.0, 320.0], 2.0: [330.0, 340.0, 335.0]}))
    assert passing["verdict"] == "pass" and passing["passed"] and passing["baseline_over_budget"] == [1.0, 2.0]
    assert [(lv["config"], lv["factor"]) for lv in passing["levels"]] == [
        (WITH_POLICY, 1.0),
        (WITHOUT_POLICY, 1.0),
        (WITH_POLICY, 2.0),
        (WITHOUT_POLICY, 2.0),
    ]
    mixed = overload.verdict(rows_for({1.0: [300.0, 310.0, 320.0], 2.0: [350.0, 380.0, 440.0]}))
    assert mixed["verdict"] == "inconclusive" and not mixed["passed"]
    failing = overload.verdict(rows_for({1.0: [500.0, 520.0, 540.0], 2.0: [350.0, 380.0, 440.0]}))
    assert failing["verdict"] == "fail"


def test_the_report_prints_each_load_with_its_intervals_and_exits_four_when_inconclusive(tmp_path):
    rows = rows_for({1.0: [300.0, 310.0, 320.0], 2.0: [350.0, 380.0, 440.0]})
    data = {
        "model": "minilm",
        "served_model": "minilm",
        "protocol": "grpc",
        "budget_ms": 400.0,
        "started": "now",
        "policy": "max_queue_size=128",
        "saturation": {"rps": 100.0, "given": True},
        "trials": 3,
        "duration_s": 15.0,
        "warmup_s": 3.0,
        "max_inflight": 4096,
        "rows": rows,
        "verdict": overload.verdict(rows),
        "runs": [],
    }
    overload_report.write_outputs(data, tmp_path)
    text = (tmp_path / "summary.md").read_text()
    assert "3 trials per config and load, the two configs interleaved" in text
    assert "| queue-policy | 1x | 3 | 80.0 (80.0-80.0) | 20.0 (20.0-20.0) | 79.0 (79.0-79.0) |" in text
    assert "| 310.0 (285.2-334.8) | pass |" in text
    assert "| queue-policy | 2x | 3 |" in text and "| inconclusive |" in text
    assert "**INCONCLUSIVE**" in text and "With the queue policy: 1x pass, 2x inconclusive." in text
    assert "| queue-policy | 2x | 3 | 80.0 |" not in text  # trial tables carry the trial number
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["verdict"]["levels"][0]["intervals"]["p99_ms"]["trials"] == 3
    assert overload.main(["--report", str(tmp_path / "results.json")]) == 4


def test_a_result_recorded_before_the_trials_is_judged_again_from_its_rows(tmp_path):
    rows = [
        {k: v for k, v in r.items() if k not in ("trial", "goodput_share", "goodput_rps")}
        for r in rows_for({1.0: [300.0]})
    ]
    data = {
        "model": "minilm",
        "served_model": "minilm",
        "protocol": "grpc",
        "budget_ms": 400.0,
        "started": "then",
        "policy": "max_queue_size=128",
        "saturation": {"rps": 100.0, "given": True},
        "duration_s": 20.0,
        "warmup_s": 3.0,
        "max_inflight": 4096,
        "rows": rows,
        "verdict": {"passed": True, "problems": [], "baseline_over_budget": [1.0]},
        "runs": [],
    }
    overload_report.write_outputs(data, tmp_path)
    text = (tmp_path / "summary.md").read_text()
    assert "1 trial per config and load, no interval" in text and "| pass (1 trial, no interval) |" in text
    assert math.isnan(overload_report.level(rows, WITH_POLICY, 1.0, 400.0)["intervals"]["goodput_share"]["estimate"])
    assert overload.main(["--report", str(tmp_path / "results.json")]) == 0
