"""The CLI teaches through --help and refuses bad settings with a message naming them.

Named after the command line as a whole rather than one module: tritonkit_cli.py with every subcommand's
parser and its make-target table (each subcommand's own checks are in test_export_cli.py, test_command.py...).
"""

import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest

import tritonkit_cli
from tritonkit_cli import MAKE_TARGETS, build_parser

MAKEFILE = Path(__file__).resolve().parents[2] / "Makefile"


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
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert "preferred_batch_sizes [128] exceed max_batch_size=64" in result.stderr


def test_serve_refuses_clashing_ports():
    result = subprocess.run(
        [sys.executable, "-m", "tritonkit_cli", "serve", "--http-port", "9000", "--grpc-port", "9000"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2 and "must differ" in result.stderr


def test_loadtest_refuses_a_bad_campaign_before_starting_anything(tmp_path):
    missing = subprocess.run(
        [sys.executable, "-m", "tritonkit_cli", "loadtest", str(tmp_path / "none.toml")], capture_output=True, text=True
    )
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    bad = tmp_path / "bad.toml"
    bad.write_text(
        "[slo]\np99_ms = 5\n[[scenarios]]\nname = 's'\nmodel = 'digits'\nprotocol = 'grpc'\nshape = { kind = 'open' }\n"
    )
    refused = subprocess.run(
        [sys.executable, "-m", "tritonkit_cli", "loadtest", str(bad)], capture_output=True, text=True
    )
    assert refused.returncode == 2 and "missing ['rate']" in refused.stderr


def makefile_targets() -> dict[str, str]:
    """Each target with a ``## `` help line -> its recipe, with the Makefile's variables written out the way
    MAKE_TARGETS writes them (``$(PY)`` -> python, ``.venv/bin/x`` -> x)."""
    targets, current = {}, None
    for line in MAKEFILE.read_text().splitlines():
        match = re.match(r"^([a-z-]+):[^=]*## ", line)
        if match:
            current = match.group(1)
            targets[current] = ""
        elif line.startswith("\t") and current:
            targets[current] += " " + line.strip()
        elif line and not line.startswith("\t"):
            current = None
    return {name: re.sub(r"\S*/bin/", "", recipe.replace("$(PY)", "python")) for name, recipe in targets.items()}


def test_help_lists_every_subcommand_every_make_target_and_the_exit_status(capsys):
    parser = build_parser()
    with pytest.raises(SystemExit) as exit_info:
        parser.parse_args(["--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    [subparsers] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for command in subparsers.choices:
        assert re.search(rf"^\s+{command}\s", text, re.M), command
    for target, command, _ in MAKE_TARGETS:
        assert re.search(rf"make {target}\s+{re.escape(command)}", text), target
    assert "exit status:" in text and "  2  bad arguments" in text


def test_the_make_table_is_the_makefile():
    targets = makefile_targets()
    assert set(targets) == {t for t, _, _ in MAKE_TARGETS}, "add the Makefile's new targets to MAKE_TARGETS"
    for target, command, _ in MAKE_TARGETS:
        for part in command.split(", "):
            assert part in targets[target], f"make {target}: {part!r} is not in its recipe {targets[target]!r}"


@pytest.mark.parametrize(
    "error", ["export.errors:SpecError", "deploy.errors:ServerStartError", "loadtest.errors:CampaignError"]
)
def test_any_tritonkit_error_is_one_line_and_exit_2(monkeypatch, capsys, error):
    import importlib

    from export import cli as export_cli

    module, name = error.split(":")
    cls = getattr(importlib.import_module(module), name)

    def fails(args):
        raise cls("the bad value is 7\nsecond line")

    monkeypatch.setattr(export_cli, "run", fails)
    assert tritonkit_cli.main(["export"]) == 2
    err = capsys.readouterr().err
    assert err == "tritonkit export: error: the bad value is 7\n"


def test_a_load_failure_reason_is_one_line_without_the_python_backends_stack():
    from deploy.server import _one_line

    reason = (
        "Internal: RuntimeError: PytorchStreamReader failed reading zip archive\n\nAt:\n"
        "  /venv/torch/jit/_serialization.py(192): load\n  /backends/pytorch/model.py(86): load\n"
    )
    assert _one_line(reason) == "Internal: RuntimeError: PytorchStreamReader failed reading zip archive"
    assert _one_line("failed to load 'x':\n  no file") == "failed to load 'x': no file"


# -- tritonkit loadtest --model: every bad input is one line and exit 2, before a server starts ------------
USER_CONFIG = """name: "scorer"
platform: "pytorch_libtorch"
max_batch_size: 8
input { name: "user" data_type: TYPE_FP32 dims: 4 }
input { name: "ids" data_type: TYPE_INT64 dims: -1 }
output { name: "probs" data_type: TYPE_FP32 dims: 1 }
"""


@pytest.fixture
def user_repository(tmp_path):
    (tmp_path / "repo" / "scorer" / "1").mkdir(parents=True)
    (tmp_path / "repo" / "scorer" / "config.pbtxt").write_text(USER_CONFIG)
    (tmp_path / "repo" / "texts" / "1").mkdir(parents=True)
    (tmp_path / "repo" / "texts" / "config.pbtxt").write_text(
        'name: "texts"\nbackend: "onnxruntime"\nmax_batch_size: 4\n'
        'input { name: "TEXT" data_type: TYPE_STRING dims: 1 }\noutput { name: "y" data_type: TYPE_FP32 dims: 1 }\n'
    )
    (tmp_path / "bad.json").write_text('{"data": [{"user": [1, 2, 3], "ids": {"content": [1], "shape": [1]}}]}')
    return tmp_path


@pytest.mark.parametrize(
    "extra, message",
    [
        (
            ["--model", "nosuch"],
            "error: model 'nosuch' is not in the repository {repo}; models there: ['scorer', 'texts']",
        ),
        (
            ["--model", "scorer"],
            "error: input 'ids' of model 'scorer' has a dynamic dim (dims [-1]): give its size with --shape ids:N",
        ),
        (
            ["--model", "texts"],
            "error: input 'TEXT' of model 'texts' is BYTES: random values cannot stand in for it; "
            "give real data with --input-data FILE.json or --samples FILE.py:FUNC",
        ),
        (
            ["--model", "scorer", "--input-data", "{tmp}/bad.json"],
            "error: --input-data {tmp}/bad.json: entry 0: input 'user': 3 values; shape needs 4",
        ),
        (["--model", "scorer", "--input-data", "{tmp}/none.json"], "error: --input-data {tmp}/none.json: no such file"),
        (
            ["--model", "scorer", "--shape", "ids:8", "--samples", "{tmp}/none.py:load"],
            "error: --samples '{tmp}/none.py:load': no file '{tmp}/none.py'",
        ),
        (
            ["--model", "scorer", "--shape", "ids"],
            "error: argument --shape: --shape 'ids' is not NAME:D1,D2,... with dims >= 1 (tritonkit loadtest --help)",
        ),
        (
            ["--model", "scorer", "--users", "4", "--rate", "9"],
            "error: argument --rate: not allowed with argument --users (tritonkit loadtest --help)",
        ),
        (
            ["--model", "scorer", "--protocol", "tcp"],
            "error: argument --protocol: invalid choice: 'tcp' (choose from "
            "'http', 'grpc') (tritonkit loadtest --help)",
        ),
        (["--model", "scorer", "--users", "0"], "error: --users 0 must be >= 1"),
        (
            [
                "--model",
                "scorer",
                "--http-url",
                "127.0.0.1:9",
                "--grpc-url",
                "127.0.0.1:9",
                "--metrics-url",
                "http://127.0.0.1:9/metrics",
            ],
            "error: no Triton server answers at --http-url 127.0.0.1:9: [Errno 111] Connection refused",
        ),
        ([], "error: give a campaign file or --model NAME (tritonkit loadtest --help)"),
        (["{tmp}/c.toml", "--model", "scorer"], "error: give a campaign file or --model, not both"),
    ],
)
def test_loadtest_model_refuses_bad_input_in_one_line(user_repository, extra, message):
    tmp, repo = user_repository, user_repository / "repo"
    args = [a.format(tmp=tmp, repo=repo) for a in extra]
    result = subprocess.run(
        [sys.executable, "-m", "tritonkit_cli", "loadtest", *args, "--repository", str(repo)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [message.format(tmp=tmp, repo=repo)], result.stderr
    assert "starting tritonserver" not in result.stdout
