"""The CLI teaches through --help and refuses bad settings with a message naming them."""

import subprocess
import sys

import pytest

from tritonkit_cli import build_parser


@pytest.mark.parametrize("command", ["export", "serve", "demo", "loadtest"])
def test_help_lists_each_subcommand(command, capsys):
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args([command, "--help"])
    assert exit_info.value.code == 0
    assert "usage: tritonkit " + command in capsys.readouterr().out


def test_export_refuses_unknown_model():
    result = subprocess.run([sys.executable, "-m", "export", "nosuchmodel"], capture_output=True, text=True)
    assert result.returncode == 2
    assert "nosuchmodel" in result.stderr and "digits" in result.stderr


def test_export_refuses_bad_setting(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "export", "digits", "--repository", str(tmp_path), "--preferred-batch-sizes", "128"],
        capture_output=True, text=True,
    )
    assert result.returncode == 2
    assert "preferred_batch_sizes [128] exceed max_batch_size=64" in result.stderr


def test_serve_refuses_clashing_ports():
    result = subprocess.run(
        [sys.executable, "-m", "tritonkit_cli", "serve", "--http-port", "9000", "--grpc-port", "9000"],
        capture_output=True, text=True,
    )
    assert result.returncode == 2 and "must differ" in result.stderr


def test_loadtest_refuses_a_bad_campaign_before_starting_anything(tmp_path):
    missing = subprocess.run([sys.executable, "-m", "tritonkit_cli", "loadtest", str(tmp_path / "none.toml")],
                             capture_output=True, text=True)
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    bad = tmp_path / "bad.toml"
    bad.write_text("[slo]\np99_ms = 5\n[[scenarios]]\nname = 's'\nmodel = 'digits'\nprotocol = 'grpc'\n"
                   "shape = { kind = 'open' }\n")
    refused = subprocess.run([sys.executable, "-m", "tritonkit_cli", "loadtest", str(bad)], capture_output=True,
                             text=True)
    assert refused.returncode == 2 and "missing ['rate']" in refused.stderr


def test_a_load_failure_reason_is_one_line_without_the_python_backends_stack():
    from deploy.server import _one_line

    reason = ("Internal: RuntimeError: PytorchStreamReader failed reading zip archive\n\nAt:\n"
              "  /venv/torch/jit/_serialization.py(192): load\n  /backends/pytorch/model.py(86): load\n")
    assert _one_line(reason) == "Internal: RuntimeError: PytorchStreamReader failed reading zip archive"
    assert _one_line("failed to load 'x':\n  no file") == "failed to load 'x': no file"
