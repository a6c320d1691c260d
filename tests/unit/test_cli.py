"""The CLI teaches through --help and refuses bad settings with a message naming them.

Named after the command line as a whole rather than one module: tritonkit_cli.py with every subcommand's
parser and its make-target table (each subcommand's own checks are in test_export_cli.py, test_command.py...).
Every subcommand is built one way: it answers ``--help``, refuses a bad flag in one line, and its ``python -m`` alias
parses the same flags; the subcommands are read from ``build_parser()``, so a new one is covered without a change
here, in this process (no server, no subprocess).
"""

import argparse
import importlib
import inspect
import re
import subprocess
import sys
from argparse import REMAINDER
from pathlib import Path

import pytest

import tritonkit_cli
from tritonkit_cli import MAKE_TARGETS, build_parser
from tritonkit_command import Command
from tritonkit_errors import EXIT_MEANINGS, ExitStatus

MAKEFILE = Path(__file__).resolve().parents[2] / "Makefile"


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
    from deploy.client import one_line

    reason = (
        "Internal: RuntimeError: PytorchStreamReader failed reading zip archive\n\nAt:\n"
        "  /venv/torch/jit/_serialization.py(192): load\n  /backends/pytorch/model.py(86): load\n"
    )
    assert one_line(reason) == "Internal: RuntimeError: PytorchStreamReader failed reading zip archive"
    assert one_line("failed to load 'x':\n  no file") == "failed to load 'x': no file"


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


# -- every subcommand, one way ------------------------------------------------------------------------------
def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = tritonkit_cli.build_parser()
    [action] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


SUBCOMMANDS = subcommands()
ALIASES = {command.name: command.alias for command in tritonkit_cli.COMMANDS if command.alias}
"""The subcommands with a ``python -m`` alias: a module with ``main``, or a package whose ``command`` module has it
(its ``__main__`` calls that)."""


def test_every_subcommand_is_a_command_of_the_one_list_registered_by_its_module():
    assert list(SUBCOMMANDS) == [command.name for command in tritonkit_cli.COMMANDS]
    for command in tritonkit_cli.COMMANDS:
        handler = SUBCOMMANDS[command.name].get_default("handler")
        owner = type(handler.__self__) if inspect.ismethod(handler) else handler  # a study's bound command
        assert owner.__module__ == command.module, command
    assert len({command.module for command in tritonkit_cli.COMMANDS}) == len(tritonkit_cli.COMMANDS)


def test_a_command_is_refused_when_its_module_sets_no_handler_or_its_study_is_another():
    subparsers = argparse.ArgumentParser().add_subparsers()
    with pytest.raises(ValueError, match=r"loadtest.studies.soak.command.STUDY is 'soak', not the subcommand 'sok'"):
        Command("sok", "loadtest.studies.soak.command").register(subparsers)
    with pytest.raises(ValueError, match=r"tests.unit.test_cli.arguments sets no handler for 'x'"):
        Command("x", __name__).register(subparsers)


HELP = "a module-shaped command for the test above"


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--flag")


def passes_flags_on(parser: argparse.ArgumentParser) -> bool:
    """Whether unknown flags go on to another program (``serve``: tritonserver; ``genai-perf``: genai-perf)."""
    return any(a.nargs == REMAINDER for a in parser._actions)


def required_values(parser: argparse.ArgumentParser) -> list[str]:
    """Values for the arguments ``parser`` requires, so that only the flag under test is wrong."""
    argv = []
    for action in parser._actions:
        if not (action.required or (not action.option_strings and action.nargs not in ("?", "*", REMAINDER))):
            continue
        argv += value_for(action)
    for group in parser._mutually_exclusive_groups:
        if group.required:
            argv += value_for(group._group_actions[0])
    return argv


def value_for(action: argparse.Action) -> list[str]:
    # a required flag takes a number here; a positional a name or a path, which an existing file is (tritonkit
    # report checks its results.json while parsing)
    value = str(next(iter(action.choices))) if action.choices else "1" if action.option_strings else __file__
    return [action.option_strings[0], value] if action.option_strings else [value]


def refusal(command: str, *argv: str) -> int:
    """Parse only (a command that parsed would run): the exit status of the refusal."""
    with pytest.raises(SystemExit) as exit_info:
        tritonkit_cli.build_parser().parse_args([command, *required_values(SUBCOMMANDS[command]), *argv])
    return exit_info.value.code


@pytest.mark.parametrize("command", SUBCOMMANDS)
def test_help_exits_0_and_shows_the_subcommands_usage(command, capsys):
    with pytest.raises(SystemExit) as exit_info:
        tritonkit_cli.main([command, "--help"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: tritonkit {command} ")


def numeric_flags(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if a.option_strings and a.type in (int, float) and a.nargs is None]


# serve and genai-perf hand the flags they do not know to the program they run (tritonserver, genai-perf).
OWN_FLAGS_ONLY = [c for c, parser in SUBCOMMANDS.items() if not passes_flags_on(parser)]
NUMERIC = [c for c in OWN_FLAGS_ONLY if numeric_flags(SUBCOMMANDS[c])]


@pytest.mark.parametrize("command", OWN_FLAGS_ONLY)
def test_an_unknown_flag_exits_2_with_one_line_naming_it(command, capsys):
    assert refusal(command, "--no-such-flag") == ExitStatus.USAGE
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "--no-such-flag" in err, err


@pytest.mark.parametrize("command", NUMERIC)
def test_a_bad_value_exits_2_with_one_line_naming_the_flag(command, capsys):
    flag = numeric_flags(SUBCOMMANDS[command])[0].option_strings[0]
    assert refusal(command, flag, "many") == ExitStatus.USAGE
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and f"argument {flag}" in err and "'many'" in err, err


def test_the_command_list_is_one_line_per_subcommand(capsys):
    with pytest.raises(SystemExit):
        tritonkit_cli.main(["--help"])
    out = capsys.readouterr().out
    for command in SUBCOMMANDS:
        [line] = [line for line in out.splitlines() if re.match(rf"^\s+{command}\s", line)]
        assert line.split(None, 1)[1].strip(), f"{command}: its help is not on its line"


@pytest.mark.parametrize("command, module", ALIASES.items())
def test_the_python_m_alias_parses_what_the_subcommand_parses(command, module, capsys):
    with pytest.raises(SystemExit) as exit_info:
        found = importlib.import_module(module)
        (found if hasattr(found, "main") else importlib.import_module(f"{module}.command")).main(["--help"])
    assert exit_info.value.code == 0
    alias = capsys.readouterr().out
    assert alias.startswith(f"usage: python -m {module} ")
    flags = {f for a in SUBCOMMANDS[command]._actions if a.help != argparse.SUPPRESS for f in a.option_strings}
    assert set(re.findall(r"(?<![\w-])--?[a-z][a-z0-9-]*", alias)) >= flags


def test_the_exit_table_has_every_status_and_names_only_real_subcommands():
    assert set(EXIT_MEANINGS) == set(ExitStatus)
    named = set(re.findall(r"\b([a-z]+(?:-[a-z]+)+)\b", " ".join(EXIT_MEANINGS.values())))
    assert named <= set(SUBCOMMANDS), named - set(SUBCOMMANDS)


@pytest.mark.parametrize(
    "command, argv, dest, value",
    [
        ("overload", ["--warmup", "1.5"], "warmup_s", 1.5),
        ("soak", ["--warmup", "2"], "warmup_s", 2.0),
        ("bench", ["--warmup", "0"], "warmup_s", 0.0),
        ("first-request", ["--model", "digits", "--warmup", "off"], "model_warmup", "off"),
    ],
)
def test_an_old_warmup_flag_still_works_says_its_new_name_and_is_not_in_help(command, argv, dest, value, capsys):
    args = tritonkit_cli.build_parser().parse_args([command, *argv])
    assert getattr(args, dest) == value
    new = "--model-warmup" if dest == "model_warmup" else "--warmup-s"
    assert capsys.readouterr().err == f"tritonkit {command}: --warmup is deprecated: use {new}\n"
    help_text = SUBCOMMANDS[command].format_help()
    assert new in help_text and not re.search(r"--warmup\b(?!-)", help_text)


@pytest.mark.parametrize("command", ["bench", "soak", "bench-generation"])
def test_the_studies_that_split_the_cpus_take_one_spelling(command):
    args = tritonkit_cli.build_parser().parse_args([command, "--server-cpus", "1", "--client-cpus", "0"])
    assert (args.server_cpus, args.client_cpus, args.split_cpus) == ({1}, {0}, True)
    assert not tritonkit_cli.build_parser().parse_args([command, "--no-split-cpus"]).split_cpus
