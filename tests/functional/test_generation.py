"""make bench-generation's code path, end to end, on the tiny steps (the real figures come from the full run)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

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
    assert len(rows) == 2, out
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        streams, served_tokens = int(cells[0]), int(cells[4])
        assert served_tokens <= streams * 6 and float(cells[7]) > 0 and float(cells[8]) > 0, row
        assert cells[9].startswith(("met", "MISSED", "no target")), row
    assert "| in-process | ~10 |" in out and "| BLS | ~300 |" in out
    assert "| on (WARMUP true) |" in out and "| off (WARMUP false) |" in out
