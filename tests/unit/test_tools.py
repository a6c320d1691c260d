"""deploy/tools.py, side tools installed on first use, and the layers of deploy/setup.sh it runs."""

from __future__ import annotations

import subprocess

import pytest

from deploy import tools


def test_an_unknown_layer_exits_2_in_one_line_before_installing_anything():
    result = subprocess.run(["bash", str(tools.SETUP), "nosuch"], capture_output=True, text=True, timeout=30)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.splitlines() == [
        "setup: error: unknown layer 'nosuch' (layers: base perf-analyzer analyzer genai-perf aiperf deploy-tools "
        "browser all)"
    ]


def test_the_base_layer_stamp_does_not_require_the_side_tools():
    script = tools.SETUP.read_text()
    base = script[script.index("base() {") : script.index("\n}\n", script.index("base() {"))]
    venvs = (".venv-analyzer", ".venv-genai-perf", ".venv-aiperf")
    for side in (*venvs, "promtool", "amtool", "docker-compose", "perf_analyzer"):
        assert side not in base, side


def test_a_tool_that_is_there_is_used_without_running_the_set_up(tmp_path, failing_setup, capsys):
    tool = tmp_path / "model-analyzer"
    tool.write_text("")
    assert tools.ensure(tool, "analyzer", "Model Analyzer", "first use of tritonkit analyzer") == tool
    assert capsys.readouterr().err == "" and not failing_setup.exists()


def test_a_missing_tool_whose_install_fails_names_the_tool_and_the_log(tmp_path, failing_setup, capsys):
    with pytest.raises(tools.ToolMissing) as info:
        tools.ensure(tmp_path / "nowhere" / "genai-perf", "genai-perf", "GenAI-Perf", "first use of genai-perf")
    log = failing_setup / "genai-perf.log"
    assert str(info.value).startswith("GenAI-Perf is missing") and str(log) in str(info.value)
    assert "\n" not in str(info.value)
    assert capsys.readouterr().err == (f"setup: installing GenAI-Perf (first use of genai-perf); log: {log}\n"), (
        "one line saying what installs and why; the set-up's own output goes to the log"
    )
    assert log.read_text() == "setup: installing genai-perf (first use of genai-perf)\npip: no network\n"
