"""The report of a streamed run (``loadtest.reports.campaign``): its TTFT, ITL and tokens/s in a Streams table of
the summary, on the console line and in results.json; the stream budgets in the SLO line; a run of a model
that does not stream reports as before."""

from __future__ import annotations

import json
import math

from loadtest.campaign.execution import trial_line
from loadtest.core.client_stats import ClientStats
from loadtest.core.results import CampaignResult, Trial
from loadtest.core.spec import Candidate, Scenario, Slo
from loadtest.core.streams import stream_summary
from loadtest.generators.locust.run import run_result
from loadtest.reports.campaign import STREAM_HEADERS, stream_text, write_report
from tests.trial_samples import trial as plain_trial

ROWS = [[120.0, 30.0 + i, 6.0 + i / 10, 16] for i in range(10)]


def stream_run():
    client = ClientStats(
        10, 0, 5.0, {"p50": 120.0, "p99": 120.0, "mean": 120.0}, streams=ROWS, **stream_summary(ROWS, 5.0)
    )
    scenario = Scenario("gen-grpc", "text_generator", "grpc", {"kind": "users", "users": 2})
    return run_result(scenario, Candidate("as-deployed"), "text_generator", [Trial(client, None, 1.0, 2.0)], Slo(1e4))


def plain_run():
    scenario = Scenario("digits-grpc", "digits", "grpc", {"kind": "users", "users": 2})
    return run_result(scenario, Candidate("as-deployed"), "digits", [plain_trial(5.0)], Slo(10.0))


def report(tmp_path, *runs, slo=None):
    result = CampaignResult("c", "2026-12-03T10:00:00Z", slo or {"p99_ms": 1e4, "max_error_rate": 0.0}, list(runs))
    write_report(result, tmp_path)
    return (tmp_path / "summary.md").read_text()


def test_the_summary_has_a_streams_table_with_the_runs_ttft_itl_and_tokens(tmp_path):
    summary = report(tmp_path, stream_run(), plain_run())
    assert "## Streams: TTFT, ITL, tokens/s" in summary
    header = "| " + " | ".join(STREAM_HEADERS) + " |"
    lines = summary.splitlines()
    rows = lines[lines.index(header) + 2 :]
    # p50 of 30..39 is 34 (nearest rank), p90 38, p99 39, mean 34.5; ITL 6.4, 6.8, 6.9, 6.45; 160 tokens in 5 s
    assert rows[0].startswith("| gen-grpc / as-deployed | 34.000 | 38.000 | 39.000 | 34.500 | 6.400 | 6.800 |")
    assert rows[0].endswith("| 160 | 32.0 | 100.00% |")
    assert not rows[1].startswith("| digits"), "only streamed runs have a row"


def test_the_stream_figures_are_in_results_json(tmp_path):
    report(tmp_path, stream_run())
    (run,) = json.loads((tmp_path / "results.json").read_text())["runs"]
    client = run["client"]
    assert client["ttft_ms"]["p99"] == 39.0 and client["itl_ms"]["p50"] == 6.4
    assert client["output_tokens"] == 160 and client["output_token_throughput"] == 32.0
    assert len(client["streams"]) == 10


def test_a_report_without_streams_has_no_streams_table(tmp_path):
    assert "Streams" not in report(tmp_path, plain_run())


def test_the_console_line_of_a_streamed_trial_carries_its_ttft_itl_and_tokens_per_second():
    run = stream_run()
    assert stream_text(run.client) == "TTFT p50 34.000 p99 39.000 ms  ITL p50 6.400 p99 6.900 ms  32.0 tokens/s"
    assert trial_line(run.all_trials()[0]).endswith("  " + stream_text(run.client))
    assert stream_text(plain_run().client) == "" and "TTFT" not in trial_line(plain_run().all_trials()[0])


def test_the_slo_line_names_the_stream_budgets(tmp_path):
    slo = {"p99_ms": math.inf, "max_error_rate": 0.0, "ttft_ms": 200.0, "itl_ms": 25.0}
    summary = report(tmp_path, stream_run(), slo=slo)
    assert "SLO: p99 ≤ n/a ms, error rate ≤ 0.00%, p99 TTFT ≤ 200 ms, p99 ITL ≤ 25 ms." in summary
    assert "A streamed request counts only within the TTFT and ITL budgets too." in summary
