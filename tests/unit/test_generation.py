"""loadtest/studies/generation.py: the pure parts (configs, the server log, the report lines)."""

from __future__ import annotations

import re
from pathlib import Path

from loadtest.studies import generation as gb

COMMITTED = Path(__file__).resolve().parents[2] / "model_repository" / "text_generator" / "config.pbtxt"


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
