"""tritonkit_errors.py: one exception root, one subclass per folder, every error module's classes below it."""

import ast
import importlib
import inspect
import sys

import pytest

from tritonkit_errors import ExitStatus, TritonkitError

FOLDERS = {"export": "ExportError", "deploy": "DeployError", "loadtest": "LoadTestError"}


@pytest.mark.parametrize("folder, base", FOLDERS.items())
def test_each_folder_has_one_base_under_the_root_and_its_errors_under_it(folder, base):
    module = importlib.import_module(f"{folder}.errors")
    root = getattr(module, base)
    assert root.__bases__ == (TritonkitError,)
    errors = [
        c
        for _, c in inspect.getmembers(module, inspect.isclass)
        if issubclass(c, Exception) and c.__module__ == module.__name__
    ]
    assert len(errors) >= 2
    for error in errors:
        assert issubclass(error, root), f"{error.__name__} is not a {base}"


def test_the_root_imports_nothing_of_the_project_so_no_package_import_can_cycle_through_it():
    tree = ast.parse(inspect.getsource(importlib.import_module("tritonkit_errors")))
    imported = [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
    imported += [node.module or "." for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    assert [name for name in imported if name.split(".")[0] not in sys.stdlib_module_names] == []


def test_every_exit_status_is_in_the_command_lines_table():
    from tritonkit_cli import EXIT_STATUS

    for status in ExitStatus:
        assert f"\n  {int(status)}  " in EXIT_STATUS, f"{status!r} is not in tritonkit --help's exit status table"


def test_errors_keep_the_builtin_bases_callers_catch():
    from deploy.errors import ServerError
    from deploy.security import InsecureServerError
    from export.errors import ConfigError, SpecError, UnknownModelError

    assert issubclass(ServerError, RuntimeError) and issubclass(InsecureServerError, ValueError)
    assert issubclass(SpecError, ValueError) and issubclass(UnknownModelError, KeyError)
    assert ConfigError("bad", field="input[0].reshape").field == "input[0].reshape"
