"""tritonkit/demo.py without a server: an error on the way is one line naming the demo's log, which holds the rest."""

from __future__ import annotations

import pytest

import tritonkit_cli
from export.errors import ExportError
from tritonkit import demo


def demo_args(tmp_path):
    return tritonkit_cli.build_parser().parse_args(["demo", "--models", "digits", "--reports", str(tmp_path)])


@pytest.mark.parametrize(
    ("error", "status"), [(ExportError("digits: parity failed\nthe table"), 1), (RuntimeError("boom\nmore"), 1)]
)
def test_an_error_is_one_line_naming_the_log_which_holds_the_details(tmp_path, monkeypatch, capsys, error, status):
    def fails(*_):
        raise error

    monkeypatch.setattr(demo, "_run", fails)
    assert demo.run(demo_args(tmp_path)) == status
    captured = capsys.readouterr()
    log = tmp_path / "demo.log"
    first = str(error).splitlines()[0]
    assert captured.err == f"demo: error: {first} (details: {log})\n"
    assert captured.out == f"  library output (warnings, notices, progress bars): {log}\n"
    assert str(error) in log.read_text()
    if isinstance(error, RuntimeError):
        assert "Traceback" in log.read_text()
