"""The one metric table (loadtest/core/metrics.py): the tables every report, verdict and budget reads derive from
it, and no other module keeps facts about a metric (a module-level dict or set keyed by metric names), read
statically with ``ast``."""

from __future__ import annotations

import ast
from pathlib import Path

from loadtest.core import evidence, metrics, results, slo
from loadtest.core.metrics import BY_NAME, TABLE
from loadtest.studies.compare import gate

LOADTEST = Path(__file__).resolve().parents[4] / "loadtest"
TABLE_MODULE = LOADTEST / "core" / "metrics.py"


def facts_outside_the_table(root: Path = LOADTEST, table: Path = TABLE_MODULE) -> list[str]:
    """``path:line NAME`` for each module- or class-level dict or set whose keys or members include two or more
    metric names, in any module but the table's: a second place that says something about a metric."""
    found = []
    for path in sorted(root.rglob("*.py")):
        if path == table:
            continue
        tree = ast.parse(path.read_text())
        scopes = [tree] + [node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)]
        for scope in scopes:
            for node in scope.body:
                if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
                    continue
                value = node.value
                if isinstance(value, ast.Call) and value.args:  # frozenset({...}), dict(...)
                    value = value.args[0]
                elements = value.keys if isinstance(value, ast.Dict) else getattr(value, "elts", [])
                named = [e.value for e in elements if isinstance(e, ast.Constant) and e.value in BY_NAME]
                if isinstance(value, (ast.Dict, ast.Set)) and len(named) >= 2:
                    target = node.targets[0] if isinstance(node, ast.Assign) else node.target
                    found.append(f"{path.relative_to(root.parent)}:{node.lineno} {ast.unparse(target)}")
    return found


def test_no_module_but_the_table_keeps_facts_about_metrics():
    assert facts_outside_the_table() == []


def test_a_second_table_of_metric_facts_is_named(tmp_path):
    (tmp_path / "core").mkdir()
    (tmp_path / "core" / "metrics.py").write_text('FIGURES = {"p50_ms": 1, "p99_ms": 2}\n')
    (tmp_path / "report.py").write_text(
        'LABELS = {"p50_ms": "p50", "p99_ms": "p99"}\n'
        'UP = frozenset({"throughput", "goodput_rps"})\n'
        'SHOWN = ("p50_ms", "p99_ms")\n'  # a selection, not a fact: allowed
        'def row(m):\n    return {"p50_ms": m.p50, "p99_ms": m.p99}\n'  # a record: allowed
        'class View:\n    UNITS = {"p50_ms": "ms", "p99_ms": "ms"}\n'
    )
    assert facts_outside_the_table(tmp_path, tmp_path / "core" / "metrics.py") == [
        f"{tmp_path.name}/report.py:1 LABELS",
        f"{tmp_path.name}/report.py:2 UP",
        f"{tmp_path.name}/report.py:7 UNITS",
    ]


def test_the_tables_the_reports_and_verdicts_read_are_the_metric_table():
    assert evidence.METRICS == ("throughput", "p50_ms", "p99_ms", "error_rate", "goodput_share", "goodput_rps")
    assert results.STREAM_METRICS == ("ttft_p99_ms", "itl_p99_ms", "output_token_throughput")
    assert set(evidence.METRICS + results.STREAM_METRICS) == set(BY_NAME) and len(TABLE) == len(BY_NAME)
    assert slo.STREAM_LIMITS == {"p99 TTFT": ("ttft_p99_ms", "ttft_ms"), "p99 ITL": ("itl_p99_ms", "itl_ms")}
    assert metrics.LATENCY_LIMITS == {"p99": ("p99_ms", "p99_ms")} | slo.STREAM_LIMITS
    assert gate.LABELS == {
        "throughput": "throughput",
        "p50_ms": "p50",
        "p99_ms": "p99",
        "goodput_rps": "goodput",
        "error_rate": "errors",
    }
    assert metrics.FIGURES["error_rate"] == ("error rate", "{:.2%}", "") and metrics.column("p99_ms") == "p99 ms"


def test_every_limit_is_a_field_of_the_slo_and_every_metric_a_field_of_a_measurement():
    from dataclasses import fields

    from loadtest.core.measurement import Measurement
    from loadtest.core.spec import Slo

    slo_fields = {f.name for f in fields(Slo)}
    assert {m.limit for m in TABLE if m.limit} <= slo_fields
    assert set(BY_NAME) <= {f.name for f in fields(Measurement)}
