"""The one report writer every study extends (a ``loadtest.cli.study.Study`` writes in its ``report``),
and the latency text the reports share.

A study supplies its data (written as JSON), its Markdown renderer, the plots it drew and, where it has them,
further text files (a campaign's CSVs and HTML page) and its own file names (bench keeps ``bench.json`` and
``bench.md``). Campaigns, bench, capacity, tune, compare, overload and soak all write through
:func:`save_report`, so each JSON file reads back the same way (:func:`write_json`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from loadtest.core.results import write_json

RESULTS, SUMMARY = "results.json", "summary.md"


def ms_text(value: Any) -> str:
    """A latency in ms with three decimals, or '-' when there is none."""
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{float(value):.3f}"


def save_report(
    data: dict[str, Any],
    out_dir: Path,
    render: Callable[[dict[str, Any]], str],
    *,
    plots: Iterable[Path | None] | Callable[[], Iterable[Path | None]] = (),
    files: Mapping[str, Callable[[dict[str, Any]], str]] | None = None,
    names: tuple[str, str] = (RESULTS, SUMMARY),
) -> list[Path]:
    """Into ``out_dir`` (created): ``data`` as JSON, the plots, the summary ``render(data)``, then each of
    ``files`` (name: its text from ``data``); returns the paths written, plots last.

    ``plots``: the paths of plots the study drew (None: one it could not draw), or a callable that draws them,
    called once the JSON is written, so a plot that fails leaves a long run's data behind. ``names``: the JSON
    file's and the summary's. Text is written as given (no newline translation): a CSV's ``\\r\\n`` rows stay
    as the csv module wrote them."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    json_name, summary_name = names
    written = [write_json(out_dir / json_name, data)]
    drawn = [p for p in (plots() if callable(plots) else plots) if p is not None]
    for name, text in {summary_name: render, **(files or {})}.items():
        path = out_dir / name
        path.write_text(text(data), newline="")
        written.append(path)
    return written + drawn


def commit() -> str:
    """This checkout's short commit, for a report that says what produced its figures ("" outside git)."""
    import subprocess

    try:
        done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5)
    except OSError:
        return ""
    return done.stdout.strip()
