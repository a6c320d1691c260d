"""``tritonkit report results.json``: re-render a campaign's report (summary, plots, CSVs, index.html) from its
``results.json``; ``python -m loadtest.reports`` is the same command."""

from __future__ import annotations

import argparse
from pathlib import Path

from loadtest.cli import flags
from loadtest.core.results import CampaignResult
from loadtest.reports.campaign import write_report
from tritonkit_command import Command
from tritonkit_errors import ExitStatus, alias_parser

HELP = "re-render a campaign's report (summary, plots, CSVs, index.html) from its results.json"
DESCRIPTION = "Regenerate a campaign report from its results.json."


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results", type=_results_file, help="reports/<campaign>/results.json")
    flags.add_out_flag(parser, None, "output folder (default: the json's folder)")
    parser.set_defaults(handler=run_command)


def main(argv: list[str] | None = None) -> int:
    """``python -m loadtest.reports``: the same command as ``tritonkit report``."""
    parser = alias_parser(Command("report", __name__).register, "python -m loadtest.reports")
    return run_command(parser.parse_args(argv))


def _results_file(text: str) -> Path:
    if not Path(text).is_file():
        raise argparse.ArgumentTypeError(f"{text}: no such file")
    return Path(text)


def run_command(args: argparse.Namespace) -> int:
    for path in write_report(CampaignResult.load(args.results), args.out or args.results.parent):
        print(path)
    return ExitStatus.OK
