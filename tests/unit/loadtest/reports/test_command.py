"""The campaign report: every file is written, the numbers in it are the results' numbers, and odd
runs (no server stats, every request failed, empty timeline, a single run) render too."""

from __future__ import annotations

import csv
import dataclasses
import json
import math
from pathlib import Path

import pytest
from PIL import Image

from loadtest.core.client_stats import ClientStats, TimelinePoint
from loadtest.core.results import CampaignResult, RunResult, ServerStats
from loadtest.reports.campaign import write_report
from loadtest.reports.command import main
from loadtest.reports.tables import SUMMARY_HEADERS
from tests.trial_samples import PASSING, STRADDLING, campaign_of, run_of

SLO = {"p99_ms": 25.0, "max_error_rate": 0.01}
FAILED_SENTENCE = "error rate 100.00% is above the SLO's 1.00%"
P99_SENTENCE = "p99 31.250 ms is above the SLO's 25.000 ms"
FIXED_PLOTS = ["percentiles.png", "batch_sizes.png", "time_breakdown.png"]
"""Drawn for every campaign; latency against throughput only where a scenario swept its load."""


def latency(p50: float) -> dict[str, float]:
    return {
        "p50": p50,
        "p90": p50 * 1.6,
        "p95": p50 * 1.9,
        "p99": p50 * 2.5,
        "p99.9": p50 * 4.1,
        "mean": p50 * 1.1,
        "min": p50 * 0.3,
        "max": p50 * 6.0,
    }


def timeline(seconds: int, rps: int, p50: float) -> list[TimelinePoint]:
    return [TimelinePoint(float(t), rps + t, t % 2, p50 + 0.1 * t, p50 * 2.5) for t in range(seconds)]


def server(avg_batch: int, executions: int) -> ServerStats:
    return ServerStats(
        requests=executions * avg_batch,
        failures=0,
        inferences=executions * avg_batch,
        executions=executions,
        breakdown_ms={
            "request": 3.2,
            "queue": 0.8,
            "compute_input": 0.1,
            "compute_infer": 2.0,
            "compute_output": 0.05,
            "client_network": 1.1,
        },
        batch_histogram={1: executions // 4, avg_batch: executions - executions // 4},
        summary_ms={"p99": 7.5},
    )


def triton_run(scenario: str, variant: str, p50: float, rps: int, violations: list[str] = ()) -> RunResult:
    return RunResult(
        scenario=scenario,
        variant=variant,
        model="digits",
        served_model=f"digits_{variant}",
        protocol="http",
        shape={"kind": "closed", "users": 16},
        client=ClientStats(
            requests=rps * 10,
            failures=1,
            duration_s=10.0,
            latency_ms=latency(p50),
            timeline=timeline(10, rps, p50),
            errors={"HTTP 503": 1},
        ),
        server=server(4 if variant == "default" else 16, 100),
        slo_violations=list(violations),
    )


def campaign() -> CampaignResult:
    runs = [
        triton_run("digits_closed", "default", 4.0, 300),
        triton_run("digits_closed", "batch16", 3.0, 520),
        triton_run("digits_open", "default", 6.0, 280),
        triton_run("digits_open", "batch16", 12.5, 500, [P99_SENTENCE]),
    ]
    runs.append(
        RunResult(
            scenario="digits_closed",
            variant="fastapi",
            model="digits",
            served_model="digits",
            protocol="fastapi",
            shape={"kind": "closed", "users": 16},
            client=ClientStats(
                requests=900, failures=0, duration_s=10.0, latency_ms=latency(9.0), timeline=timeline(10, 90, 9.0)
            ),
        )
    )
    # Every request failed: percentiles are NaN or absent, no timeline latencies, no batches.
    runs.append(
        RunResult(
            scenario="image_burst",
            variant="default",
            model="image_classifier",
            served_model="image_classifier",
            protocol="grpc",
            shape={"kind": "open", "rate": 50},
            client=ClientStats(
                requests=50,
                failures=50,
                duration_s=5.0,
                latency_ms={"p50": math.nan, "p99": math.nan},
                errors={"UNAVAILABLE: model not ready": 50},
            ),
            server=ServerStats(0, 50, 0, 0, breakdown_ms={}),
            slo_violations=[FAILED_SENTENCE],
        )
    )
    tuning = {
        "digits": {
            "pick": "batch16",
            "reason": "highest req/s within the <SLO> & 25 ms p99",
            "analyzer": {"pick": "digits_config_3", "max_batch_size": 16},
            "comparison": [
                {"variant": "default", "rps": 300.0, "p99_ms": 10.0},
                {"variant": "batch16", "rps": 520.0, "p99_ms": 7.5},
            ],
        }
    }
    return CampaignResult("nightly <cpu>", "2026-11-29T17:00:00Z", dict(SLO), runs, tuning)


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> tuple[CampaignResult, Path, list[Path]]:
    result = campaign()
    out = tmp_path_factory.mktemp("report") / "nightly"
    return result, out, write_report(result, out)


def test_every_file_is_written_and_returned(report):
    result, out, written = report
    expected = {out / n for n in ("results.json", "runs.csv", "timeline.csv", "summary.md", "index.html")}
    expected |= {out / "plots" / n for n in FIXED_PLOTS}
    expected |= {out / "plots" / f"timeline_{i}.png" for i in range(len(result.runs))}
    assert set(written) == expected
    assert all(p.is_file() and p.stat().st_size > 0 for p in expected)


def test_pngs_are_real_images(report):
    _, out, _ = report
    for png in (out / "plots").glob("*.png"):
        with Image.open(png) as image:
            image.verify()
        with Image.open(png) as image:
            width, height = image.size
        assert 200 <= width <= 4000 and 100 <= height <= 4000, (png.name, image.size)


def test_runs_csv_carries_the_client_numbers(report):
    result, out, _ = report
    with (out / "runs.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(result.runs)
    for row, run in zip(rows, result.runs, strict=True):
        assert (row["scenario"], row["variant"], row["protocol"]) == (run.scenario, run.variant, run.protocol)
        p99 = run.client.latency_ms.get("p99", math.nan)
        assert row["p99_ms"] == ("" if math.isnan(p99) else f"{p99:.3f}")
        assert row["slo_passed"] == str(run.passed)
        assert row["slo_violations"] == "; ".join(run.slo_violations)
    fastapi, failed = rows[4], rows[5]
    assert fastapi["server_executions"] == fastapi["queue_ms"] == ""
    assert float(rows[1]["server_avg_batch"]) == 16.0 and float(rows[1]["queue_ms"]) == 0.8
    assert float(rows[1]["throughput_rps"]) == pytest.approx(result.runs[1].client.throughput_rps, abs=1e-3)
    assert failed["p50_ms"] == failed["p90_ms"] == "" and failed["error_rate"] == "1.000000"


def test_timeline_csv_has_one_row_per_second(report):
    result, out, _ = report
    with (out / "timeline.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == sum(len(r.client.timeline) for r in result.runs)
    assert list(rows[0]) == ["scenario", "variant", "t", "requests", "failures", "p50_ms", "p99_ms"]
    assert float(rows[0]["p99_ms"]) == pytest.approx(result.runs[0].client.timeline[0].p99_ms, abs=1e-3)


def test_summary_md(report):
    result, out, _ = report
    text = (out / "summary.md").read_text()
    assert "nightly <cpu>" in text and "2026-11-29T17:00:00Z" in text
    assert "p99 ≤ 25.000 ms" in text and "error rate ≤ 1.00%" in text
    assert FAILED_SENTENCE in text and P99_SENTENCE in text
    assert "**image_burst / default**: FAIL" in text and "**digits_closed / batch16**: PASS" in text
    assert "| digits_closed | batch16 |" in text and "| 7.500 |" in text  # p99 of 3.0 * 2.5
    assert "compute infer ms (share)" in text and "2.000 (61%)" in text  # 2.0 / mean 3.3
    assert "batch16" in text.split("## Tuning")[1] and "digits_config_3" in text
    for png in (out / "plots").glob("*.png"):
        assert f"(plots/{png.name})" in text


def test_index_html(report):
    result, out, _ = report
    html = (out / "index.html").read_text()
    for png in (out / "plots").glob("*.png"):
        assert f'src="plots/{png.name}"' in html
    for run in result.runs:
        assert run.scenario in html
    assert 'class="FAIL">FAIL' in html and 'class="PASS">PASS' in html
    assert "nightly &lt;cpu&gt;" in html and "<cpu>" not in html
    assert "&lt;SLO&gt; &amp; 25 ms" in html
    assert "error <code>UNAVAILABLE: model not ready</code>: 50" in html
    for name in ("results.json", "runs.csv", "timeline.csv"):
        assert f'href="{name}"' in html


def test_results_json_round_trips(report):
    result, out, _ = report
    loaded = CampaignResult.load(out / "results.json")
    # NaN != NaN, so compare the JSON text of both.
    assert json.dumps(dataclasses.asdict(loaded), sort_keys=True) == json.dumps(
        dataclasses.asdict(result), sort_keys=True
    )
    assert loaded.runs[0].server.batch_histogram == result.runs[0].server.batch_histogram


def test_main_regenerates_from_json(report, tmp_path, capsys):
    _, out, written = report
    again = tmp_path / "again"
    assert main([str(out / "results.json"), "--out", str(again)]) == 0
    printed = capsys.readouterr().out.split()
    assert printed == [str(again / p.relative_to(out)) for p in written]
    assert (again / "index.html").read_text() == (out / "index.html").read_text()
    assert (again / "runs.csv").read_text() == (out / "runs.csv").read_text()


def test_main_defaults_to_the_json_folder(tmp_path, capsys):
    CampaignResult("c", "2026-01-01T00:00:00Z", dict(SLO), [triton_run("s", "default", 2.0, 100)]).save(
        tmp_path / "results.json"
    )
    assert main([str(tmp_path / "results.json")]) == 0
    assert str(tmp_path / "index.html") in capsys.readouterr().out
    assert (tmp_path / "plots" / "timeline_0.png").is_file()


def test_main_refuses_a_missing_file(tmp_path):
    with pytest.raises(SystemExit) as exit_info:
        main([str(tmp_path / "nope.json")])
    assert exit_info.value.code == 2


@pytest.mark.parametrize(
    "runs",
    [
        pytest.param([], id="no runs"),
        pytest.param(
            [RunResult("only", "fastapi", "m", "m", "fastapi", {"kind": "closed"}, ClientStats(10, 10, 1.0, {}))],
            id="one failed fastapi run, no timeline",
        ),
    ],
)
def test_degenerate_campaigns_still_render(tmp_path, runs):
    result = CampaignResult("empty", "2026-01-01T00:00:00Z", {}, runs)
    written = write_report(result, tmp_path)
    assert all(p.is_file() for p in written)
    for name in FIXED_PLOTS:
        with Image.open(tmp_path / "plots" / name) as image:
            assert image.size[0] > 100
    assert "No tuning in this campaign." in (tmp_path / "summary.md").read_text()
    assert "No run has server stats." in (tmp_path / "index.html").read_text()


def test_many_runs_with_a_wide_latency_range(tmp_path):
    """More runs than batch panels, and p99.9 far above p50 (the log-scale branch)."""
    runs = [triton_run(f"s{i % 3}", f"v{i}", 0.2 * (i + 1), 100 + 10 * i) for i in range(13)]
    runs[-1].client.latency_ms["p99.9"] = 900.0
    written = write_report(CampaignResult("wide", "2026-01-01T00:00:00Z", dict(SLO), runs), tmp_path)
    assert len([p for p in written if p.suffix == ".png"]) == 3 + 13  # one run per (scenario, variant): no sweep
    with Image.open(tmp_path / "plots" / "batch_sizes.png") as image:
        width, height = image.size
    assert width > 1000 and height > 800  # 12 panels in a 3-column grid


def test_runs_of_several_trials_show_their_intervals_and_each_trial(tmp_path):
    result = campaign_of(run_of(STRADDLING, "open"), run_of([5.0], "single"), run_of(PASSING, "steady"))
    write_report(result, tmp_path)
    summary = (tmp_path / "summary.md").read_text()
    p99 = result.runs[0].interval("p99_ms")
    open_row = next(line for line in summary.splitlines() if line.startswith("| open |"))
    assert f"{p99.estimate:.3f} ({p99.low:.3f}-{p99.high:.3f})" in open_row and "INCONCLUSIVE" in open_row
    single_row = next(line for line in summary.splitlines() if line.startswith("| single |"))
    p50_cell = single_row.split("|")[SUMMARY_HEADERS.index("p50 ms") + 1]
    assert "| 5.000 |" in single_row and "(" not in p50_cell  # one trial: no interval
    trials = summary.split("## Trials")[1].split("## ")[0]
    assert trials.count("| open / v |") == 4 and trials.count("| steady / v |") == 3 and "single" not in trials
    assert "would likely settle p99" in summary
    html = (tmp_path / "index.html").read_text()
    assert 'class="INCONCLUSIVE"' in html and "<h2>Trials</h2>" in html
    row = next(r for r in csv.DictReader((tmp_path / "runs.csv").open()) if r["scenario"] == "open")
    assert row["trials"] == "4" and row["slo_verdict"] == "inconclusive"
    assert float(row["p99_ms_low"]) < 10.0 < float(row["p99_ms_high"])
    assert CampaignResult.load(tmp_path / "results.json").runs[0].intervals == result.runs[0].intervals


def test_latency_against_throughput_is_drawn_for_a_sweep_with_its_trials_intervals_and_left_out_otherwise(tmp_path):
    from loadtest.reports.plots import with_intervals

    swept = campaign_of(run_of(STRADDLING, "s", "v"), run_of(PASSING, "s", "v"), run_of(PASSING, "t", "v"))
    written = write_report(swept, tmp_path)
    assert tmp_path / "plots" / "latency_vs_throughput.png" in written
    ys, (low, high) = with_intervals(swept.runs[:2], "p99")
    p99 = swept.runs[0].interval("p99_ms")
    assert (ys[0], ys[0] - low[0], ys[0] + high[0]) == pytest.approx((p99.estimate, p99.low, p99.high))
    assert with_intervals([run_of([5.0])], "p99") == ([5.0], None)  # one trial: its value, no bar
    # Re-rendered into the same folder without a sweep: the stale plot goes, and the page does not name it.
    written = write_report(campaign_of(run_of(PASSING, "s", "v"), run_of(PASSING, "s", "w")), tmp_path)
    assert not (tmp_path / "plots" / "latency_vs_throughput.png").exists()
    assert "latency_vs_throughput" not in (tmp_path / "index.html").read_text()


def test_the_page_leads_with_the_verdict_line_and_every_table_scrolls_in_its_own_box(report):
    result, out, _ = report
    html = (out / "index.html").read_text()
    body = html.split("<body>")[1]
    assert body.index('<p class="headline">') < body.index("<h2>")  # the verdict line before any section
    assert '<span class="FAIL">FAIL</span>: ' in body  # image_burst failed every request
    assert html.count("<table>") == html.count('<div class="scroll"><table>') > 0
    summary = (out / "summary.md").read_text()
    assert summary.splitlines()[2].startswith("**FAIL**: ")
    assert SUMMARY_HEADERS[:4] == ["scenario", "variant", "SLO", "req/s"]
