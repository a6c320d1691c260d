"""The CLI teaches through --help and refuses bad settings with a message naming them."""

import subprocess
import sys

import pytest

from tritonkit_cli import build_parser


@pytest.mark.parametrize("command", ["export", "serve", "demo"])
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
