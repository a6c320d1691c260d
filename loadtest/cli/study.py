"""A study is one shape: a ``tritonkit`` subcommand with its arguments, a run and a report.

``tritonkit bench``, ``overload``, ``soak`` and ``bench-generation`` are each one ``Study`` subclass in their module,
``STUDY``, whose instance gives the module's ``register`` (what ``tritonkit_command.Command`` calls), ``run_command``
and ``main`` (the ``python -m`` alias, the same parser). A new study is one class: its ``name``, ``help`` and ``alias``;
``arguments`` (its flags, from the shared groups of ``loadtest.cli.flags`` where it shares them); ``run`` (checks the
arguments, measures, and answers the data, or an exit status where it stopped); ``report`` (writes its files through
``loadtest.reports.writer.save_report`` and prints, answering the exit status); then one ``Command`` line in
``tritonkit_cli.COMMANDS``. docs/architecture.md has a worked example.
"""

from __future__ import annotations

import abc
import argparse
import sys
from typing import Any, ClassVar

from tritonkit_command import add_parser
from tritonkit_errors import alias_parser


class Study(abc.ABC):
    """One study's command. ``description``: its ``--help`` text (None: its module's docstring)."""

    name: ClassVar[str]
    """The subcommand: ``tritonkit <name>``."""
    help: ClassVar[str]
    """Its line in ``tritonkit --help``."""
    alias: ClassVar[str]
    """Its ``python -m`` path."""
    description: ClassVar[str | None] = None
    epilog: ClassVar[str | None] = None

    @abc.abstractmethod
    def arguments(self, parser: argparse.ArgumentParser) -> None:
        """Adds the study's flags to its parser."""

    @abc.abstractmethod
    def run(self, args: argparse.Namespace) -> Any:
        """Checks ``args`` and measures: the data ``report`` takes, or an ``ExitStatus`` where it stopped (bad
        arguments, a server that failed)."""

    @abc.abstractmethod
    def report(self, args: argparse.Namespace, data: Any) -> int:
        """Writes and prints what ``run`` measured; the command's exit status."""

    def command(self, args: argparse.Namespace) -> int:
        """The subcommand: ``run``, then ``report`` unless the run stopped with a status."""
        data = self.run(args)
        return int(data) if isinstance(data, int) else self.report(args, data)

    def register(self, subparsers) -> argparse.ArgumentParser:
        """Adds ``tritonkit <name>`` to ``subparsers``."""
        module = sys.modules[type(self).__module__]
        description = module.__doc__ if self.description is None else self.description
        parser = add_parser(subparsers, self.name, help=self.help, description=description, epilog=self.epilog)
        self.arguments(parser)
        parser.set_defaults(handler=self.command)
        return parser

    def parser(self) -> argparse.ArgumentParser:
        """The ``python -m`` alias's parser: the subcommand's, under ``alias``."""
        return alias_parser(self.register, self.alias)

    def main(self, argv: list[str] | None = None) -> int:
        return self.command(self.parser().parse_args(argv))
