"""A study is one shape (loadtest/cli/study.py): a subcommand with its arguments, a run and a report, the
same parser under its ``python -m`` alias; bench, overload, soak and bench-generation are each one."""

import argparse

import pytest

from loadtest.cli.study import Study
from loadtest.studies.bench import command as bench
from loadtest.studies.generation import command as generation
from loadtest.studies.overload import command as overload
from loadtest.studies.soak import command as soak
from tritonkit_errors import ExitStatus


class Echo(Study):
    """Says back what it was given."""

    name = "echo"
    help = "say it back"
    alias = "python -m echo"

    def __init__(self):
        self.reported = []

    def arguments(self, parser):
        parser.add_argument("--words", default="hello")

    def run(self, args):
        return ExitStatus.USAGE if args.words == "" else {"said": args.words}

    def report(self, args, data):
        self.reported.append(data)
        return ExitStatus.FAILED if data["said"] == "no" else ExitStatus.OK


def _subcommand(study: Study) -> argparse.ArgumentParser:
    subparsers = argparse.ArgumentParser(prog="tritonkit").add_subparsers()
    study.register(subparsers)
    return subparsers


def test_a_study_registers_its_subcommand_whose_handler_runs_then_reports():
    echo = Echo()
    subparsers = _subcommand(echo)
    parser = subparsers.choices["echo"]
    assert [a.help for a in subparsers._choices_actions] == ["say it back"]
    assert parser.description == __doc__  # none of its own: its module's docstring
    args = parser.parse_args(["--words", "no"])
    assert args.handler(args) == ExitStatus.FAILED and echo.reported == [{"said": "no"}]
    assert args.handler == echo.command  # the study's own command
    assert echo.main(["--words", "hi"]) == ExitStatus.OK and echo.reported[-1] == {"said": "hi"}
    assert echo.parser().prog == "python -m echo"


def test_a_run_that_stops_with_a_status_is_not_reported():
    echo = Echo()
    assert echo.main(["--words", ""]) == ExitStatus.USAGE and echo.reported == []


@pytest.mark.parametrize(
    "module, name",
    [(bench, "bench"), (overload, "overload"), (soak, "soak"), (generation, "bench-generation")],
)
def test_each_study_is_one_study_whose_module_commands_are_its_own(module, name):
    study = module.STUDY
    assert isinstance(study, Study) and study.name == name
    assert study.alias == f"python -m {module.__name__.removesuffix('.command')}"  # the package's __main__
    assert module.register == study.register and module.main == study.main
    assert module.run_command == study.command
    assert _subcommand(study).choices[name].get_default("handler") == study.command
