"""The test suite's own layout, read statically with ``ast``: no file under ``tests/`` imports a test module
(shared helpers live in ``tests/*.py`` helper modules and ``conftest.py`` fixtures), and every unit test file is
named after the project module it tests: ``tests/unit/loadtest/`` mirrors ``loadtest/`` by path
(``tests/unit/loadtest/tune/test_command.py`` tests ``loadtest/tune/command.py``), and a file directly in
``tests/unit/`` is named after a module of another package."""

from __future__ import annotations

import ast
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("backends", "deploy", "export", "loadtest", "tritonkit")

CROSS_CUTTING = {
    # Named after what they check, which is no single Python module:
    "cli": "tritonkit's whole command line (tritonkit_cli.py and every subcommand's parser, the make-target table)",
    "compose": "docker-compose.yml and deploy/docker: YAML and Dockerfiles, not Python",
    "k8s": "deploy/k8s: Kubernetes manifests, not Python",
    "k8s_scaling": "deploy/k8s, continued: autoscaling, disruption budget, the Locust pods",
    "k8s_stages": "deploy/k8s, continued: the export stage, the GPU pin, the monitoring objects",
    "imports": "the import graph of every project module",
    "docs": "README.md and docs/: their links, anchors, make targets and length, not Python",
    "test_layout": "this file: the layout of tests/ itself",
    "limits": "the size limits of backends/generation.py, imaging.py and text.py against the committed configs",
    "gpu_target_agreement": "export's GPU target (catalog, pipeline, config) against the images that load it",
    "export_volume": "the export under the containers' rules: export's cache, staging, cli and variants together",
    "smollm_fp16": "export/zoo/smollm.py's FP16 steps, apart from test_smollm.py: the real model needs CUDA",
}
"""Unit test files (``test_<name>.py``) named after no module, each with the reason."""


# --- no test module imports another ---------------------------------------------------------------


def _is_test_module(dotted: str) -> bool:
    return dotted.rpartition(".")[2].startswith("test_")


def _module_of(path: Path, root: Path) -> str:
    return ".".join(path.relative_to(root).with_suffix("").parts)


def imports_of_test_modules(root: Path = PROJECT_ROOT) -> list[str]:
    """``path:line imports module`` for each import, in any file under ``tests/``, of a test module
    (``test_*``), absolute or relative, whole or ``from package import test_x``."""
    found = []
    for path in sorted((root / "tests").rglob("*.py")):
        package = _module_of(path, root).rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(anchor + ([base] if base else []))
                targets = [base] if _is_test_module(base) else [f"{base}.{alias.name}" for alias in node.names]
            found += [
                f"{path.relative_to(root)}:{node.lineno} imports {target}"
                for target in targets
                if _is_test_module(target)
            ]
    return found


# --- unit test files are named after a module ----------------------------------------------------


MIRRORED = "loadtest"
"""The package whose unit tests mirror its folders under ``tests/unit/<package>/``."""


def module_names(root: Path = PROJECT_ROOT) -> set[str]:
    """The names a unit test file directly in ``tests/unit/`` may take after ``test_``: each module's name outside
    ``MIRRORED`` (a package's folder name), and, where a name is not unique, the module with its packages in front,
    joined by ``_`` (``export/cli.py``: ``cli``, ``export_cli``)."""
    names = {path.stem for path in root.glob("*.py")}
    for package in PACKAGES:
        if package == MIRRORED:
            continue
        for path in (root / package).rglob("*.py"):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            if parts[-1] == "__main__":
                continue
            names |= {"_".join(parts[start:]) for start in range(len(parts))}
    return names


def unmirrored(root: Path = PROJECT_ROOT) -> list[str]:
    """Test files under ``tests/unit/<MIRRORED>/`` whose path names no module: ``.../tune/test_command.py`` needs
    ``<MIRRORED>/tune/command.py`` (or a package ``command/``)."""
    tests = root / "tests" / "unit" / MIRRORED
    found = []
    for path in sorted(tests.rglob("test_*.py")):
        folder = root / MIRRORED / path.parent.relative_to(tests)
        name = path.stem.removeprefix("test_")
        if not ((folder / f"{name}.py").is_file() or (folder / name / "__init__.py").is_file()):
            found.append(f"{path.relative_to(root)} names no module in {folder.relative_to(root)}/")
    return found


def misnamed(root: Path = PROJECT_ROOT, allowed: dict[str, str] = CROSS_CUTTING) -> list[str]:
    """Unit test files directly in ``tests/unit/`` named after no module outside ``MIRRORED`` and not allowed;
    allow-list entries that name no file."""
    names = module_names(root)
    stems = {path.stem.removeprefix("test_") for path in (root / "tests" / "unit").glob("test_*.py")}
    return [f"tests/unit/test_{stem}.py names no project module" for stem in sorted(stems - names - set(allowed))] + [
        f"allow-list entry {stem!r}: no tests/unit/test_{stem}.py" for stem in sorted(set(allowed) - stems)
    ]


# --- the project ---------------------------------------------------------------------------------


def test_no_test_module_imports_another():
    assert imports_of_test_modules() == []


def test_every_unit_test_file_is_named_after_a_module():
    assert misnamed() == []


def test_the_unit_tests_of_loadtest_mirror_its_folders():
    assert unmirrored() == []


def test_the_checks_read_the_project():
    assert {"export_cli", "export", "zoo", "tritonkit_cli", "gpu_check"} <= module_names()
    assert "__main__" not in module_names() and "" not in module_names()
    assert "tune_command" not in module_names()  # loadtest's tests are named by path
    assert len(list((PROJECT_ROOT / "tests" / "unit" / MIRRORED).rglob("test_*.py"))) > 50


# --- each check can fail -------------------------------------------------------------------------


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_an_import_of_a_test_module_is_named_in_each_form(tmp_path):
    root = _tree(
        tmp_path,
        {
            "tests/__init__.py": "",
            "tests/helpers.py": "X = 1\n",
            "tests/unit/conftest.py": "",
            "tests/unit/test_a.py": "from tests.unit.test_b import X\nfrom .test_c import y\nfrom . import test_d\n"
            "import tests.functional.test_e\nfrom tests.helpers import X\nfrom . import conftest\n",
            "tests/functional/test_f.py": "def f():\n    from ..unit.test_a import g\n",
            "tests/helpers2.py": "from tests.unit import test_a, conftest\n",
        },
    )
    assert imports_of_test_modules(root) == [
        "tests/functional/test_f.py:2 imports tests.unit.test_a",
        "tests/helpers2.py:1 imports tests.unit.test_a",
        "tests/unit/test_a.py:1 imports tests.unit.test_b",
        "tests/unit/test_a.py:2 imports tests.unit.test_c",
        "tests/unit/test_a.py:3 imports tests.unit.test_d",
        "tests/unit/test_a.py:4 imports tests.functional.test_e",
    ]
    assert (
        imports_of_test_modules(_tree(tmp_path / "clean", {"tests/unit/test_a.py": "from tests.helpers import X\n"}))
        == []
    )


def test_a_unit_test_file_named_after_no_module_is_named(tmp_path):
    root = _tree(
        tmp_path,
        {
            "tool.py": "",
            "export/__init__.py": "",
            "export/cli.py": "",
            "export/zoo/__init__.py": "",
            "loadtest/tune/command.py": "",
            "deploy/__main__.py": "",
            "tests/unit/test_tool.py": "",
            "tests/unit/test_export_cli.py": "",
            "tests/unit/test_tune_command.py": "",  # loadtest's: named by path under tests/unit/loadtest/
            "tests/unit/test_zoo.py": "",
            "tests/unit/test_export.py": "",
            "tests/unit/test_pieces.py": "",
            "tests/unit/test_main.py": "",
            "tests/unit/test_k8s.py": "",
        },
    )
    assert misnamed(root, {"k8s": "manifests"}) == [
        "tests/unit/test_main.py names no project module",
        "tests/unit/test_pieces.py names no project module",
        "tests/unit/test_tune_command.py names no project module",
    ]
    assert misnamed(root, {"k8s": "manifests", "main": "x", "pieces": "y", "tune_command": "w", "gone": "z"}) == [
        "allow-list entry 'gone': no tests/unit/test_gone.py"
    ]


def test_a_loadtest_unit_test_file_whose_path_names_no_module_is_named(tmp_path):
    root = _tree(
        tmp_path,
        {
            "loadtest/tune/command.py": "",
            "loadtest/studies/bench/__init__.py": "",
            "tests/unit/loadtest/tune/test_command.py": "",
            "tests/unit/loadtest/studies/test_bench.py": "",  # a package
            "tests/unit/loadtest/test_command.py": "",  # not at loadtest/'s top
            "tests/unit/loadtest/capacity/test_command.py": "",  # no such folder
        },
    )
    assert unmirrored(root) == [
        "tests/unit/loadtest/capacity/test_command.py names no module in loadtest/capacity/",
        "tests/unit/loadtest/test_command.py names no module in loadtest/",
    ]
