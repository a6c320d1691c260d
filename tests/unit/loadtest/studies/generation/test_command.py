"""loadtest/studies/generation/command.py: the pure parts (configs, the server log, the report lines)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from loadtest.studies.generation import command as gb

COMMITTED = Path(__file__).resolve().parents[5] / "model_repository" / "text_generator" / "config.pbtxt"


def params(text: str) -> dict[str, str]:
    return dict(re.findall(r'key: "(\w+)"\s*value \{ string_value: "([^"]*)" \}', text))


def test_set_parameters_renames_points_at_the_steps_and_sets_or_adds():
    text = gb.set_parameters(
        COMMITTED.read_text(),
        "text_generator_cold",
        gb.steps_of(tiny=True),
        {"WARMUP": "false", "INTRA_OP_THREAD_COUNT": "1"},
    )
    p = params(text)
    assert 'name: "text_generator_cold"' in text
    assert (p["PREFILL_MODEL"], p["DECODE_MODEL"]) == ("smollm2_tiny_prefill", "smollm2_tiny_decode")
    assert p["WARMUP"] == "false" and p["INTRA_OP_THREAD_COUNT"] == "1"
    assert list(p).count("WARMUP") == 1 and p["MAX_BATCH"] == params(COMMITTED.read_text())["MAX_BATCH"]


def test_logged_steps_reads_the_generators_batch_runs():
    log = (
        'I1201 15:32:47.6 11 model.py:304] "text_generator: 63 decode steps (inprocess), 2048 tokens, '
        'median 224.80 ms"\nI1201 15:32:48.1 11 model.py:304] "text_generator_bls: 3 decode steps (bls), '
        '4 tokens, median 73.04 ms"\n'
    )
    assert gb.logged_steps(log, "text_generator") == [(63, 2048, 224.8)]
    assert gb.logged_steps(log, "text_generator_bls") == [(3, 4, 73.04)]
    assert gb.logged_steps(log, "text_generator_cold") == []


def test_report_lines_say_met_or_missed_against_the_targets():
    inproc = {"step_ms": 100.0, "tokens_per_s": 80.0, "prefill_s": 0.1}
    served = {"step_ms": 110.0, "tokens": 512, "wall": 10.0, "ttft_mean": 0.3, "tokens_per_s": 51.2}
    line = gb.throughput_line(8, inproc, served)
    assert "| 0.64 | MISSED (>= 0.7) |" in line
    assert "| 1.00 | met (>= 0.6) |" in gb.throughput_line(32, inproc, {**served, "tokens_per_s": 80.0})
    assert line.endswith("|") and "no target" in gb.throughput_line(4, inproc, served)
    first = gb.first_request_line("off", {"ready_s": 6.0, "first_s": 0.36, "steady_s": 0.1, "ratio": 3.6})
    assert "MISSED (<= 1.5)" in first
    assert set(gb.TARGETS) == {1, 8, 32} and gb.FIRST_REQUEST_MAX == 1.5


def test_the_served_streams_are_summarised_as_the_load_test_does_in_genai_perfs_names():
    results = [
        {"sent": 0.0, "end": 0.5, "times": [0.1, 0.2, 0.3, 0.4], "pieces": 4},  # TTFT 100 ms, ITL 100 ms
        {"sent": 0.0, "end": 1.0, "times": [0.3, 0.5], "pieces": 2},  # TTFT 300 ms, ITL 200 ms
        {"sent": 0.1, "end": 0.2, "times": [], "pieces": 0},  # ended at once: no text to time
    ]
    r = gb.summarize_streams(results)
    assert r["wall"] == 1.0 and r["pieces"] == 6
    assert r["ttft_mean"] == pytest.approx((0.1 + 0.3 + 0.1) / 3), "a stream without text counts its end"
    assert r["streams"]["output_tokens"] == 6 and r["streams"]["output_token_throughput"] == 6.0
    # Nearest rank over the two streams with text: p50 the lower, p99 the higher.
    assert gb.genai_line(2, r) == "| 2 | 200.00 | 100.00 | 300.00 | 150.00 | 100.00 | 200.00 | 6.0 | 6 |"
    assert gb.GENAI_HEADER.count("|") == gb.genai_line(2, r).count("|")
    assert "time_to_first_token p99 ms" in gb.GENAI_HEADER and "output_token_throughput" in gb.GENAI_HEADER


def test_a_single_token_stream_has_no_inter_token_latency():
    r = gb.summarize_streams([{"sent": 0.0, "end": 0.2, "times": [0.1], "pieces": 1}])
    assert r["streams"]["itl_ms"] == {}
    assert gb.genai_line(1, r) == "| 1 | 100.00 | 100.00 | 100.00 | n/a | n/a | n/a | 5.0 | 1 |"
