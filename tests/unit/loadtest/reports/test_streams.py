"""Stream figures wherever a load test reports (``loadtest.reports.streams``): the Streams table of
summary.md and index.html, runs.csv's stream columns, and for a streamed run of several trials each trial's
p99 TTFT, p99 ITL and tokens/s, their intervals (report, console) and the verdict over the trials by the one
SLO rule. A campaign without streams reports as it did before them."""

from __future__ import annotations

import csv
import math

import pytest

from loadtest.campaign.execution import interval_line
from loadtest.core import evidence
from loadtest.core.client_stats import ClientStats
from loadtest.core.latency import new_histogram, to_us
from loadtest.core.results import STREAM_METRICS, CampaignResult, Trial, goodput_of
from loadtest.core.spec import Candidate, Scenario, Slo
from loadtest.core.streams import stream_summary
from loadtest.generators.locust.run import run_result
from loadtest.reports.campaign import write_report
from loadtest.reports.streams import STREAM_FIELDS, STREAM_FIGURES
from loadtest.reports.tables import RUN_FIELDS, TRIAL_HEADERS
from tests.trial_samples import run_of

SCENARIO = Scenario("gen-grpc", "text_generator", "grpc", {"kind": "users", "users": 2})
NO_BUDGET = Slo(math.inf)


def stream_trial(first_ttft_ms: float, tokens: int = 16, budget: Slo = NO_BUDGET) -> Trial:
    """Ten streamed requests of 120 ms over 5 s: TTFTs from ``first_ttft_ms`` up by 1 ms (p99 the last), ITLs
    6.0 to 6.9 ms, ``tokens`` each (tokens/s: 2 x ``tokens``); goodput counted as ``trial_of`` does."""
    rows = [[120.0, first_ttft_ms + i, 6.0 + i / 10, tokens] for i in range(10)]
    hist = new_histogram()
    hist.record_value(to_us(0.12), len(rows))
    client = ClientStats(
        10,
        0,
        5.0,
        {"p50": 120.0, "p99": 120.0, "mean": 120.0},
        hdr=hist.encode().decode(),
        streams=rows,
        **stream_summary(rows, 5.0),
    )
    share, rate = goodput_of(client, budget.p99_ms, budget.ttft_ms, budget.itl_ms)
    return Trial(client, None, share, rate, budget.p99_ms, budget.ttft_ms, budget.itl_ms)


def stream_run(trials, budget: Slo = NO_BUDGET):
    return run_result(SCENARIO, Candidate("as-deployed"), "text_generator", trials, budget)


def three_trials(budget: Slo = NO_BUDGET):
    """p99 TTFT 39, 41, 43 ms; tokens/s 32, 34, 36."""
    return stream_run([stream_trial(30.0 + 2 * k, 16 + k, budget) for k in range(3)], budget)


def written(tmp_path, *runs, slo=None) -> dict[str, str]:
    result = CampaignResult("c", "2026-12-03T10:00:00Z", slo or {"p99_ms": math.inf, "max_error_rate": 0.0}, list(runs))
    write_report(result, tmp_path)
    return {name: (tmp_path / name).read_text() for name in ("summary.md", "index.html", "runs.csv")}


def csv_rows(text: str) -> tuple[list[str], list[dict[str, str]]]:
    reader = csv.DictReader(text.splitlines())
    return list(reader.fieldnames or []), list(reader)


def text_with_interval(values, fmt: str, metric: str) -> str:
    iv = evidence.figure_interval(metric, values)
    return f"{fmt.format(iv.estimate)} ({fmt.format(iv.low)}-{fmt.format(iv.high)})"


def test_the_html_page_has_the_streams_table_with_ttft_itl_tokens_and_goodput(tmp_path):
    html = written(tmp_path, stream_run([stream_trial(30.0)]), run_of([5.0]))["index.html"]
    assert "<h2>Streams: TTFT, ITL, tokens/s</h2>" in html
    # p50 of 30..39 is 34 (nearest rank), p90 38, p99 39, mean 34.5; ITL 6.4, 6.8, 6.9, 6.45; 160 tokens in 5 s
    cells = ["gen-grpc / as-deployed", "34.000", "38.000", "39.000", "34.500", "6.400", "6.800", "6.900", "6.450"]
    assert "".join(f"<td>{c}</td>" for c in cells + ["160", "32.0", "100.00%"]) in html
    assert "<td>s / v</td><td>" not in html.split("<h2>Streams")[1].split("</table>")[0], "only streamed runs"


def test_runs_csv_has_the_stream_columns_filled_for_streamed_runs_only(tmp_path):
    fields, (streamed, plain) = csv_rows(written(tmp_path, stream_run([stream_trial(30.0)]), run_of([5.0]))["runs.csv"])
    assert fields == RUN_FIELDS + STREAM_FIELDS
    assert [streamed[k] for k in ("ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms")] == [
        "34.000",
        "39.000",
        "6.400",
        "6.900",
    ]
    assert (streamed["output_tokens"], streamed["output_token_throughput"]) == ("160", "32.000")
    assert streamed["ttft_p99_ms_low"] == "", "one trial has no interval"
    assert all(plain[k] == "" for k in STREAM_FIELDS)


def test_a_campaign_without_streams_reports_as_before(tmp_path):
    files = written(tmp_path, run_of([5.0, 5.2, 4.9]))
    assert csv_rows(files["runs.csv"])[0] == RUN_FIELDS
    assert "Streams" not in files["index.html"] and "Streams" not in files["summary.md"]
    assert "| " + " | ".join(TRIAL_HEADERS) + " |" in files["summary.md"]
    assert "TTFT" not in files["index.html"] and "tokens/s" not in files["summary.md"]


def test_each_trial_of_a_streamed_run_keeps_its_p99_ttft_itl_and_tokens_per_second_with_their_intervals():
    run = three_trials()
    assert run.samples()["ttft_p99_ms"] == [39.0, 41.0, 43.0]
    assert run.samples()["output_token_throughput"] == [32.0, 34.0, 36.0]
    assert set(STREAM_METRICS) <= set(run.intervals) and tuple(STREAM_FIGURES) == STREAM_METRICS
    # latencies on the log scale, as the verdict judges them: the geometric mean of 39, 41 and 43 ms
    assert run.interval("ttft_p99_ms").estimate == pytest.approx((39.0 * 41.0 * 43.0) ** (1 / 3))
    assert run.interval("itl_p99_ms").estimate == pytest.approx(6.9)
    assert run.interval("output_token_throughput").estimate == 34.0


def test_the_verdict_over_streamed_trials_passes_fails_or_is_inconclusive_by_the_p99_ttft_interval():
    # The geometric mean of 39, 41 and 43 ms is about 41 ms, its 95% interval about 36-46 ms.
    assert three_trials(Slo(math.inf, ttft_ms=60.0)).verdict == "pass"
    failed = three_trials(Slo(math.inf, ttft_ms=30.0))
    assert failed.verdict == "fail" and failed.slo_violations[0].startswith("p99 TTFT 40.9")
    assert "(95% CI" in failed.slo_violations[0] and "3 trials" in failed.slo_violations[0]
    unsettled = three_trials(Slo(math.inf, ttft_ms=41.0, itl_ms=10.0))
    assert unsettled.verdict == "inconclusive" and "straddles the 41 ms budget" in unsettled.slo_violations[0]
    assert "settle p99 TTFT" in unsettled.settle or "p99 TTFT sits at its limit" in unsettled.settle


def test_the_report_shows_each_streamed_trial_and_the_intervals_over_them(tmp_path):
    run = three_trials()
    files = written(tmp_path, run, run_of([5.0, 5.2, 4.9]))
    summary = files["summary.md"]
    assert "| " + " | ".join(TRIAL_HEADERS + ["p99 TTFT", "p99 ITL", "tokens/s"]) + " |" in summary
    trial_rows = [line for line in summary.splitlines() if line.startswith("| gen-grpc / as-deployed | ")]
    assert trial_rows[-3].endswith("| 39.000 | 6.900 | 32.0 |") and trial_rows[-1].endswith("| 43.000 | 6.900 | 36.0 |")
    plain_trial_rows = [line for line in summary.splitlines() if line.startswith("| s / v | ")]
    assert plain_trial_rows[-1].endswith("| n/a | n/a | n/a |")
    ttft = text_with_interval([39.0, 41.0, 43.0], "{:.3f}", "ttft_p99_ms")
    tokens = text_with_interval([32.0, 34.0, 36.0], "{:.1f}", "output_token_throughput")
    stream_row = next(line for line in summary.splitlines() if ttft in line)
    assert f"| {tokens} |" in stream_row and "| 6.900 (6.900-6.900) |" in stream_row
    assert f"<td>{ttft}</td>" in files["index.html"]
    _, (row, _) = csv_rows(files["runs.csv"])
    low = evidence.interval([32.0, 34.0, 36.0], lower_bound=0.0).low
    assert float(row["output_token_throughput_low"]) == round(low, 6) and row["ttft_p99_ms_high"] != ""


def test_the_console_gives_a_streamed_runs_intervals_over_its_trials():
    line = interval_line(three_trials())
    assert "p99 TTFT 40.967 ms (95% CI" in line and "p99 ITL 6.900 ms" in line and "tokens/s 34.0 (95% CI" in line
    assert "TTFT" not in interval_line(run_of([5.0, 5.2, 4.9]))
