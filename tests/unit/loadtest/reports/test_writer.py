"""loadtest/reports/writer.py: the one report writer the studies extend."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from loadtest.core.results import write_json
from loadtest.reports.writer import save_report


def _csv(rows: list[dict]) -> str:
    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    return text.getvalue()


def test_the_writer_writes_every_file_it_is_given_and_the_json_reads_back(tmp_path):
    out = tmp_path / "new" / "folder"
    data = {"model": "digits", "p99_ms": 4.25, "runs": [{"rate": 100}], "where": Path("/srv/models")}
    png = tmp_path / "plot.png"
    png.write_bytes(b"\x89PNG")
    written = save_report(
        data,
        out,
        lambda d: f"# {d['model']}\n",
        plots=[png, None],
        files={"runs.csv": lambda d: _csv(d["runs"]), "index.html": lambda d: f"<h1>{d['model']}</h1>\n"},
    )
    assert written == [out / "results.json", out / "summary.md", out / "runs.csv", out / "index.html", png]
    # What JSON cannot hold is written as its text; everything else reads back equal.
    assert json.loads((out / "results.json").read_text()) == {**data, "where": "/srv/models"}
    assert (out / "summary.md").read_text() == "# digits\n"
    assert (out / "runs.csv").read_bytes() == b"rate\r\n100\r\n"  # as the csv module wrote it
    assert (out / "index.html").read_text() == "<h1>digits</h1>\n"


def test_a_study_names_its_own_files(tmp_path):
    written = save_report({"rows": {}}, tmp_path, lambda d: "bench\n", names=("bench.json", "bench.md"))
    assert written == [tmp_path / "bench.json", tmp_path / "bench.md"]
    assert not (tmp_path / "results.json").exists() and not (tmp_path / "summary.md").exists()
    assert json.loads((tmp_path / "bench.json").read_text()) == {"rows": {}}


def test_every_json_has_one_indent_and_a_trailing_newline(tmp_path):
    text = write_json(tmp_path / "x.json", {"a": [1]}).read_text()
    assert text == '{\n "a": [\n  1\n ]\n}\n'


def test_plots_drawn_by_the_writer_come_after_the_json_so_a_failing_plot_leaves_the_data(tmp_path):
    def draw():
        assert (tmp_path / "results.json").is_file()  # the data is on disk before any plot is drawn
        raise RuntimeError("matplotlib broke")

    with pytest.raises(RuntimeError, match="matplotlib broke"):
        save_report({"probes": [1, 2]}, tmp_path, lambda d: "", plots=draw)
    assert json.loads((tmp_path / "results.json").read_text()) == {"probes": [1, 2]}


def test_the_summary_sees_what_a_drawing_callable_drew(tmp_path):
    drawn: list[Path] = []

    def draw() -> list[Path]:
        drawn.append(tmp_path / "a.png")
        return drawn

    written = save_report({}, tmp_path, lambda d: f"![a]({drawn[0].name})\n", plots=draw)
    assert written[-1] == tmp_path / "a.png"
    assert (tmp_path / "summary.md").read_text() == "![a](a.png)\n"
