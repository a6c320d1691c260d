"""make bench-generation's code path, end to end, on the tiny steps (the real figures come from the full run): its
tables, the streams' TTFT, ITL and tokens/s in GenAI-Perf's terms among them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from loadtest.studies.generation.command import GENAI_HEADER

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(400)
def test_generation_bench_prints_every_table_in_one_run():
    proc = subprocess.run(
        [sys.executable, "-m", "loadtest.studies.generation", "--tiny", "--tokens", "6", "--streams", "1", "2"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=380,
    )
    assert proc.returncode == 0, f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    out = proc.stdout
    rows = [line for line in out.splitlines() if line.startswith(("| 1 |", "| 2 |"))]
    assert len(rows) == 4, out  # the served-against-in-process table, then the same streams in GenAI-Perf's terms
    for row in rows[:2]:
        cells = [c.strip() for c in row.strip("|").split("|")]
        streams, served_tokens = int(cells[0]), int(cells[4])
        assert served_tokens <= streams * 6 and float(cells[7]) > 0 and float(cells[8]) > 0, row
        assert cells[9].startswith(("met", "MISSED", "no target")), row
    assert GENAI_HEADER in out
    for row in rows[2:]:
        cells = [c.strip() for c in row.strip("|").split("|")]
        streams, ttft_avg_ms, ttft_p99_ms = int(cells[0]), float(cells[1]), float(cells[3])
        tokens_per_s, tokens = float(cells[7]), int(cells[8])
        assert 0 < ttft_avg_ms <= ttft_p99_ms and tokens_per_s > 0 and 1 <= tokens <= streams * 6, row
    assert "| in-process | ~10 |" in out and "| BLS | ~300 |" in out
    assert "| on (WARMUP true) |" in out and "| off (WARMUP false) |" in out
