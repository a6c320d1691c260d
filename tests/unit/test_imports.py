"""The project's import graph, read statically with ``ast`` (nothing is imported): no import cycles, the
top-level packages import one way (``PACKAGE_LAYERS``; docs/architecture.md), the Python models in
``model_repository/`` import only ``backends/``, the layers of ``loadtest/`` import one way (see
``loadtest/__init__.py``), and inside ``loadtest/`` a project module is imported inside a function only where
that defers a heavy package."""

from __future__ import annotations

import ast
import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

PROJECT_ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("backends", "deploy", "export", "loadtest", "tritonkit")
SINGLE_MODULES = ("tritonkit_cli", "tritonkit_command", "tritonkit_errors")
PYTHON_MODELS = "model_repository/*/[0-9]*/model.py"
"""The repository's Python models, named ``model_repository.<model>.<version>.model`` in the graph."""

PACKAGE_LAYERS = {
    "tritonkit_errors": 0,
    "tritonkit_command": 0,
    "backends": 1,
    "export": 2,
    "deploy": 3,
    "loadtest": 4,
    "tritonkit": 5,
    "tritonkit_cli": 5,
}
"""The top-level packages by layer (docs/architecture.md): a module may import its own layer and those below,
never one above. A package's ``__main__`` module is an entry point (``python -m deploy`` = ``tritonkit serve``)
that nothing imports, so it may import any layer."""
PYTHON_MODEL_IMPORTS = frozenset({"backends"})
"""All a Python model of ``model_repository/`` may import from the project: its stub has backends/ on its path
and needs nothing heavier."""

HEAVY = frozenset(
    {
        "fastapi",
        "gevent",
        "geventhttpclient",
        "grpc",
        "locust",
        "matplotlib",
        "onnx",
        "onnxruntime",
        "onnxscript",
        "sentence_transformers",
        "scipy",
        "skimage",
        "sklearn",
        "starlette",
        "tensorrt",
        "tokenizers",
        "torch",
        "torch_tensorrt",
        "transformers",
        "tritonclient",
        "uvicorn",
    }
)
"""Third-party packages slow or large enough to import only when used."""

LAYERS = (
    ("loadtest.errors", 0),
    ("loadtest.core", 0),
    ("loadtest.target", 1),
    ("loadtest.generators", 2),
    ("loadtest.probes", 3),
    ("loadtest.reports", 4),
    ("loadtest.cli", 5),
    ("loadtest.capacity", 6),
    ("loadtest.studies", 6),
    ("loadtest.tune", 7),
    ("loadtest.campaign", 8),
)
"""loadtest's folders by layer (see ``loadtest/__init__.py``): a module may import its own layer and those below,
never one above."""
COMMAND_LAYER = 9
"""A folder's ``command`` module (its command line) and ``__main__`` (its ``python -m`` alias) sit above every
layer: they may import any folder, and nothing but another command imports them."""
COMMAND_MODULES = ("command", "__main__")
STUDIES = "loadtest.studies"
"""Each folder under it is one study; no study imports another."""


@dataclasses.dataclass(frozen=True)
class Import:
    importer: str
    imported: str
    """A project module, or the top-level name of a third-party one."""
    line: int
    in_function: bool
    project: bool


# --- reading the graph ---------------------------------------------------------------------------


def project_sources(root: Path = PROJECT_ROOT) -> dict[str, str]:
    """Module name -> source of every project module."""
    sources = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            sources[".".join(parts)] = path.read_text()
    for name in SINGLE_MODULES:
        sources[name] = (root / f"{name}.py").read_text()
    for path in sorted(root.glob(PYTHON_MODELS)):
        sources[".".join(path.relative_to(root).with_suffix("").parts)] = path.read_text()
    return sources


def _resolve(name: str, modules: set[str]) -> str | None:
    """The project module ``name`` runs (the longest project prefix), or None for a third-party name."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in modules:
            return ".".join(parts[:end])
    return None


def _is_package(name: str, sources: dict[str, str]) -> bool:
    return any(other.startswith(name + ".") for other in sources)


def _type_checking_only(test: ast.expr) -> bool:
    """``if TYPE_CHECKING:`` / ``if typing.TYPE_CHECKING:``."""
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_of(name: str, source: str, sources: dict[str, str]) -> list[Import]:
    """Every import statement that runs in module ``name`` (not those under ``if TYPE_CHECKING:``), each
    imported module named once per statement."""
    modules = set(sources)
    found: list[Import] = []

    def add(target: str, node: ast.AST, in_function: bool) -> None:
        module = _resolve(target, modules)
        found.append(Import(name, module or target.split(".")[0], node.lineno, in_function, module is not None))

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking_only(child.test):
                for other in child.orelse:  # the body never runs: annotations only
                    visit(ast.Module(body=[other], type_ignores=[]), in_function)
                continue
            inside = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                for alias in child.names:
                    add(alias.name, child, inside)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:  # relative: from the importer's package
                    package = name if _is_package(name, sources) else name.rpartition(".")[0]
                    anchor = package.split(".")[: len(package.split(".")) - (child.level - 1)]
                    base = ".".join(anchor + ([base] if base else []))
                if base == "__future__":
                    continue
                targets = {f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in child.names}
                for target in sorted(targets):
                    add(target, child, inside)
            visit(child, inside)

    visit(ast.parse(source), False)
    return found


def graph(sources: dict[str, str]) -> dict[str, list[Import]]:
    return {name: imports_of(name, source, sources) for name, source in sources.items()}


# --- the checks ----------------------------------------------------------------------------------


def cycles(edges: dict[str, list[Import]]) -> list[list[str]]:
    """Each import cycle among project modules (function-level imports included), as ``[a, b, ..., a]``:
    one per strongly connected component (Tarjan's algorithm)."""
    successors = {m: sorted({i.imported for i in imps if i.project and i.imported != m}) for m, imps in edges.items()}
    for m, imps in edges.items():
        if any(i.project and i.imported == m for i in imps):
            successors[m] = [m, *successors[m]]
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in successors.get(node, []):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in successors.get(node, []):
                components.append(component)

    for node in sorted(successors):
        if node not in index:
            connect(node)
    return [_path_through(sorted(c), successors) for c in components]


def _path_through(component: list[str], successors: dict[str, list[str]]) -> list[str]:
    """A cycle from the component's first module back to it, staying inside the component."""
    start, members = component[0], set(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        node = frontier.pop(0)
        for nxt in successors[node]:
            if nxt == start:
                return paths[node] + [start]
            if nxt in members and nxt not in paths:
                paths[nxt] = paths[node] + [nxt]
                frontier.append(nxt)
    raise AssertionError(f"no cycle through {start} in {component}")


def layer_of(module: str) -> int | None:
    if module.startswith("loadtest.") and module.rpartition(".")[2] in COMMAND_MODULES:
        return COMMAND_LAYER
    for prefix, layer in LAYERS:
        if module == prefix or module.startswith(prefix + "."):
            return layer
    return None


def study_of(module: str) -> str | None:
    if not module.startswith(STUDIES + "."):
        return None
    return module[len(STUDIES) + 1 :].split(".")[0]


def layer_violations(edges: dict[str, list[Import]]) -> list[str]:
    """loadtest modules outside every layer, imports pointing up a layer, and studies importing each other."""
    problems = []
    for module, imps in sorted(edges.items()):
        if not module.startswith("loadtest."):
            continue
        mine = layer_of(module)
        if mine is None:
            problems.append(f"{module} is in no layer of loadtest (tests/unit/test_imports.py LAYERS)")
            continue
        for imp in imps:
            theirs = layer_of(imp.imported) if imp.project else None
            if theirs is not None and theirs > mine:
                problems.append(f"{module}:{imp.line} imports {imp.imported}, a higher layer")
            elif study_of(module) and study_of(imp.imported) and study_of(module) != study_of(imp.imported):
                problems.append(f"{module}:{imp.line} imports {imp.imported}: one study imports another")
    return problems


def _entry_point(module: str) -> bool:
    return module.rpartition(".")[2] == "__main__"


def package_violations(edges: dict[str, list[Import]]) -> list[str]:
    """Modules outside every layer, imports pointing up a layer of ``PACKAGE_LAYERS``, Python models importing
    more than backends/, and imports of a ``__main__`` module (the entry points the layer rule lets through)."""
    problems = []
    for module, imps in sorted(edges.items()):
        package = module.split(".")[0]
        mine = PACKAGE_LAYERS.get(package)
        if package == "model_repository":
            problems += [
                f"{module}:{imp.line} imports {imp.imported}: a Python model imports only "
                f"{', '.join(sorted(PYTHON_MODEL_IMPORTS))}"
                for imp in imps
                if imp.project and imp.imported.split(".")[0] not in PYTHON_MODEL_IMPORTS
            ]
            continue
        if mine is None:
            problems.append(f"{module} is in no layer of the project (tests/unit/test_imports.py PACKAGE_LAYERS)")
            continue
        for imp in imps:
            if not imp.project:
                continue
            if _entry_point(imp.imported):
                problems.append(f"{module}:{imp.line} imports {imp.imported}, an entry point")
                continue
            theirs = imp.imported.split(".")[0]
            if not _entry_point(module) and PACKAGE_LAYERS.get(theirs, -1) > mine:
                problems.append(
                    f"{module}:{imp.line} imports {imp.imported}, a higher layer ({theirs} is above {package})"
                )
    return problems


def heavy_modules(edges: dict[str, list[Import]]) -> set[str]:
    """Project modules whose import (module level, through other project modules and their parent
    packages) imports a heavy third-party package."""
    heavy = set()
    for start in edges:
        seen, todo = set(), [start]
        while todo:
            module = todo.pop()
            if module in seen or module not in edges:
                continue
            seen.add(module)
            parts = module.split(".")
            todo += [".".join(parts[:end]) for end in range(1, len(parts))]  # its packages run first
            for imp in edges[module]:
                if imp.in_function:
                    continue
                if not imp.project and imp.imported in HEAVY:
                    heavy.add(start)
                    todo.clear()
                    break
                if imp.project:
                    todo.append(imp.imported)
    return heavy


def lazy_project_imports(edges: dict[str, list[Import]]) -> list[str]:
    """Function-level imports of project modules inside loadtest/ that defer nothing heavy."""
    heavy = heavy_modules(edges)
    return [
        f"{module}:{imp.line} imports {imp.imported} inside a function; import it at the top of the module"
        for module, imps in sorted(edges.items())
        if module == "loadtest" or module.startswith("loadtest.")
        for imp in imps
        if imp.in_function and imp.project and imp.imported not in heavy
    ]


# --- the project ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def project() -> dict[str, list[Import]]:
    return graph(project_sources())


def test_the_project_has_no_import_cycle(project):
    assert cycles(project) == []


def test_the_top_level_packages_import_one_way_and_python_models_only_backends(project):
    assert package_violations(project) == []


def test_every_top_level_package_and_module_is_in_a_layer():
    """A new top-level package or module cannot escape the layer test: it must be given a layer here."""
    found = {p.name for p in PROJECT_ROOT.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    found |= {p.stem for p in PROJECT_ROOT.glob("*.py")}
    assert found - {"tests"} == set(PACKAGE_LAYERS) == set(PACKAGES) | set(SINGLE_MODULES)


def test_loadtest_layers_import_one_way_and_no_study_imports_another(project):
    assert layer_violations(project) == []


def argparse_outside_commands(edges: dict[str, list[Import]]) -> list[str]:
    """loadtest modules that import argparse but are neither in ``loadtest.cli`` nor a folder's command module."""
    return sorted(
        module
        for module, imps in edges.items()
        if module.startswith("loadtest.")
        and not module.startswith("loadtest.cli.")
        and module.rpartition(".")[2] not in COMMAND_MODULES
        and any(not i.project and i.imported == "argparse" for i in imps)
    )


def test_only_the_command_line_folder_and_command_modules_of_loadtest_import_argparse(project):
    assert argparse_outside_commands(project) == []
    assert argparse_outside_commands(
        graph({"loadtest.core.slo": "import argparse\n", "loadtest.tune.command": "import argparse\n"})
    ) == ["loadtest.core.slo"]


def test_loadtest_imports_project_modules_at_the_top_unless_that_defers_a_heavy_package(project):
    assert lazy_project_imports(project) == []


def test_tritonkit_help_imports_neither_torch_nor_matplotlib():
    """The one dynamic check here: the command line's parser (every subcommand's module) stays light."""
    probe = (
        "import sys, tritonkit_cli\n"
        "try:\n    tritonkit_cli.main(['--help'])\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in ('torch', 'matplotlib', 'locust', 'sklearn') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=PROJECT_ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.splitlines()[-1] == "[]"


def test_the_graph_reads_the_project(project):
    """The walk sees the real layout: every loadtest layer, imports in both places, torch as heavy."""
    assert {layer_of(m) for m in project if m.startswith("loadtest.")} == {*range(COMMAND_LAYER + 1)}
    assert any(i.imported == "loadtest.generators.locust.run" for i in project["loadtest.generators.saturation"])
    assert "export.zoo.digits" in heavy_modules(project) and "loadtest.core.spec" not in heavy_modules(project)
    assert any(i.in_function and i.imported == "export.zoo.efficientnet" for i in project["export.zoo.pipelines"])
    assert {"tritonkit.demo", "tritonkit.gpu.state", "tritonkit_errors", "deploy.__main__"} <= set(project)
    assert any(i.imported == "backends.batching" for i in project["model_repository.postprocess.1.model"])
    assert any(i.project and i.imported == "tritonkit_errors" for i in project["export.errors"])


# --- each check can fail -------------------------------------------------------------------------


def test_a_cycle_is_found_and_named():
    sources = {
        "export": "",
        "export.a": "import export.b\n",
        "export.b": "def f():\n    from export import c\n",
        "export.c": "from export.a import thing\n",
        "export.d": "import export.a\n",
    }
    assert cycles(graph(sources)) == [["export.a", "export.b", "export.c", "export.a"]]
    assert cycles(graph({"deploy.x": "import deploy.x\n"})) == [["deploy.x", "deploy.x"]]
    assert cycles(graph({**sources, "export.c": ""})) == []
    annotations_only = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from export.a import thing\n"
    assert cycles(graph({**sources, "export.c": annotations_only})) == []


def test_a_lower_layer_importing_a_higher_one_is_named_with_both_modules():
    sources = {
        "loadtest.core.spec": "",
        "loadtest.generators.locust.users": "from loadtest.core.latency import Recorder\n",
        "loadtest.core.latency": "from loadtest.generators.locust import users\nfrom loadtest.core.spec import Slo\n",
    }
    assert layer_violations(graph(sources)) == [
        "loadtest.core.latency:1 imports loadtest.generators.locust.users, a higher layer"
    ]
    assert layer_violations(
        graph(
            {
                "loadtest.studies.soak.command": "from loadtest.studies.overload.report import ms_text\n",
                "loadtest.studies.overload.command": "from loadtest.studies.overload import report\n",
                "loadtest.studies.overload.report": "",
            }
        )
    ) == ["loadtest.studies.soak.command:1 imports loadtest.studies.overload.report: one study imports another"]
    outside = {"loadtest.helpers": "", "loadtest.campaign.command": "import loadtest.helpers\n"}
    assert layer_violations(graph(outside)) == [
        "loadtest.helpers is in no layer of loadtest (tests/unit/test_imports.py LAYERS)"
    ]


def test_a_command_imports_any_layer_and_only_a_command_imports_it():
    sources = {
        "loadtest.cli.flags": "",
        "loadtest.generators.perf_analyzer.perf": "",
        "loadtest.generators.perf_analyzer.command": "from loadtest.cli import flags\n"
        "from loadtest.generators.perf_analyzer import perf\n",
        "loadtest.generators.perf_analyzer.__main__": "from loadtest.generators.perf_analyzer.command import main\n",
    }
    assert layer_violations(graph(sources)) == []
    uses_command = {**sources, "loadtest.tune.tuner": "from loadtest.generators.perf_analyzer import command\n"}
    assert layer_violations(graph(uses_command)) == [
        "loadtest.tune.tuner:1 imports loadtest.generators.perf_analyzer.command, a higher layer"
    ]
    main_code_uses_flags = {**sources, "loadtest.generators.perf_analyzer.perf": "from loadtest.cli import flags\n"}
    assert layer_violations(graph(main_code_uses_flags)) == [
        "loadtest.generators.perf_analyzer.perf:1 imports loadtest.cli.flags, a higher layer"
    ]


def test_a_package_importing_a_higher_one_is_named_with_both_modules():
    sources = {
        "tritonkit_errors": "",
        "backends.batching": "import numpy\n",
        "export.config": "from tritonkit_errors import TritonkitError\n",
        "export.warmup_data": "from deploy.server import DEFAULT_REPOSITORY\n",
        "export.zoo": "import torch\n",
        "deploy.server": "from export import config\n",
        "deploy.showcase": "import os\ndef run():\n    from loadtest.campaign.command import CAMPAIGNS\n",
        "deploy.__main__": "from tritonkit_cli import main\n",  # an entry point: allowed
        "loadtest.campaign.command": "from deploy import server\n",
        "tritonkit_cli": "from tritonkit import demo\n",
        "tritonkit.demo": "from loadtest.campaign.command import CAMPAIGNS\n",
        "model_repository.postprocess.1.model": "import numpy\nimport export.zoo\nfrom backends.batching import x\n",
    }
    assert package_violations(graph(sources)) == [
        "deploy.showcase:3 imports loadtest.campaign.command, a higher layer (loadtest is above deploy)",
        "export.warmup_data:1 imports deploy.server, a higher layer (deploy is above export)",
        "model_repository.postprocess.1.model:2 imports export.zoo: a Python model imports only backends",
    ]
    fixed = {**sources, "export.warmup_data": "from export.cli import DEFAULT_REPOSITORY\n", "export.cli": ""}
    fixed |= {"deploy.showcase": "", "model_repository.postprocess.1.model": "from backends.batching import x\n"}
    assert package_violations(graph(fixed)) == []
    assert package_violations(
        graph({"deploy.__main__": "", "loadtest.campaign.command": "import deploy.__main__\n"})
    ) == ["loadtest.campaign.command:1 imports deploy.__main__, an entry point"]
    assert package_violations(graph({"scripts.tool": "import os\n"})) == [
        "scripts.tool is in no layer of the project (tests/unit/test_imports.py PACKAGE_LAYERS)"
    ]


def test_a_function_level_import_of_a_light_project_module_is_named():
    sources = {
        "loadtest.core.spec": "import tomllib\n",
        "export.zoo": "import torch\n",
        "export.zoo.digits": "import numpy\n",
        "loadtest.generators.payloads": "def f():\n    from loadtest.core.spec import Slo\n"
        "def g():\n    from export.zoo.digits import split\n"
        "def h():\n    import torch\n",
    }
    assert lazy_project_imports(graph(sources)) == [
        "loadtest.generators.payloads:2 imports loadtest.core.spec inside a function; import it at the top of the "
        "module"
    ]
    assert heavy_modules(graph(sources)) == {"export.zoo", "export.zoo.digits"}  # its package imports torch
