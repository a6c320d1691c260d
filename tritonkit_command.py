"""The shape of a ``tritonkit`` subcommand, and the one list of them (``tritonkit_cli.COMMANDS``) the command line,
its ``--help`` and the tests derive from.

A subcommand lives in one module, which defines ``register(subparsers)``: it adds a parser named after the
subcommand, with a one-line ``help`` and ``set_defaults(handler=...)``, a function of the parsed arguments that
answers a ``tritonkit_errors.ExitStatus``. A study's module gets ``register`` from its ``Study``
(``loadtest/cli/study.py``). ``Command`` names that module without importing it, so the list costs nothing until
the parser is built; where the module is also run as ``python -m ALIAS`` (an old path kept), ``alias`` names it.
Adding a command is one module and one ``Command`` line in ``tritonkit_cli.COMMANDS``.
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
        """Adds ``tritonkit <name>`` to ``subparsers`` through its module; the parser it added."""
        before = set(subparsers.choices)
        self.load().register(subparsers)
        added = [name for name in subparsers.choices if name not in before]
        if added != [self.name]:
            raise ValueError(f"{self.module}.register added {added}, not the one subcommand {self.name!r}")
        return subparsers.choices[self.name]
