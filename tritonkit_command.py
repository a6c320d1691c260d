"""The shape of a ``tritonkit`` subcommand, and the one list of them (``tritonkit_cli.COMMANDS``) the command line,
its ``--help`` and the tests derive from.

A subcommand lives in one module, which defines ``HELP`` (its line in ``tritonkit --help``), optionally
``DESCRIPTION`` (default: the module's docstring) and ``EPILOG``, and ``arguments(parser)``: its flags and
``set_defaults(handler=...)``, a function of the parsed arguments that answers a ``tritonkit_errors.ExitStatus``.
A study's module has its ``STUDY`` instead (``loadtest/cli/study.py``). ``Command`` names that module without
importing it, so the list costs nothing until the parser is built, and builds the parser (``register``); where
the module is also run as ``python -m ALIAS`` (an old path kept), ``alias`` names it. Adding a command is one
module and one ``Command`` line in ``tritonkit_cli.COMMANDS``.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
from types import ModuleType


@dataclasses.dataclass(frozen=True)
class Command:
    name: str
    """``tritonkit <name>``."""
    module: str
    """The module whose ``register(subparsers)`` adds it."""
    alias: str | None = None
    """Its ``python -m`` path, where it keeps one: a module with ``main``, or a package whose ``__main__`` runs its
    ``command`` module's."""

    def load(self) -> ModuleType:
        return importlib.import_module(self.module)

    def register(self, subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
        """Adds ``tritonkit <name>`` to ``subparsers`` from its module: a study's ``STUDY`` (``loadtest/cli/study.py``),
        else the module's ``HELP`` (its line in ``tritonkit --help``), ``DESCRIPTION`` (default: its docstring),
        ``EPILOG`` (default: none) and ``arguments(parser)`` (its flags and ``set_defaults(handler=...)``)."""
        module = self.load()
        study = getattr(module, "STUDY", None)
        if study is not None:
            if study.name != self.name:
                raise ValueError(f"{self.module}.STUDY is {study.name!r}, not the subcommand {self.name!r}")
            return study.register(subparsers)
        parser = add_parser(
            subparsers,
            self.name,
            help=module.HELP,
            description=getattr(module, "DESCRIPTION", None) or module.__doc__,
            epilog=getattr(module, "EPILOG", None),
        )
        module.arguments(parser)
        if parser.get_default("handler") is None:
            raise ValueError(f"{self.module}.arguments sets no handler for {self.name!r}")
        return parser


def add_parser(
    subparsers: argparse._SubParsersAction, name: str, *, help: str, description: str | None, epilog: str | None
) -> argparse.ArgumentParser:
    """The parser of one subcommand, as every subcommand's is made: its line of help, its description and epilog
    printed as written."""
    return subparsers.add_parser(
        name, help=help, description=description, epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter
    )
