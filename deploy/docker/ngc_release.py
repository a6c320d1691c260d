"""The row of deploy/docker/ngc-releases.toml for one NGC release, and the checks the image builds run on it.

    python3 ngc_release.py 25.10                     prints the row (cuda, driver floor, torch build)
    python3 ngc_release.py 25.10 --requirements triton-requirements.txt --torch-index URL
                                                     also checks the torch pin and the index against the row

Runs inside the NGC images (Python 3.12, standard library only) and in the unit tests. A release that is not
in the table, or a pin that does not fit it, fails with one line that names the table."""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from pathlib import Path

TABLE = Path(__file__).with_name("ngc-releases.toml")
FIELDS = {"triton": str, "pytorch": str, "cuda": str, "driver": int, "torch_tag": str}
HOW = "add its row (docs/production.md, 'Moving to another NGC release')"


class ReleaseError(Exception):
    """One line: what does not fit, and where to change it."""


def releases(table: Path = TABLE) -> dict[str, dict]:
    rows = tomllib.loads(table.read_text())["releases"]
    for release, row in rows.items():
        for field, kind in FIELDS.items():
            if not isinstance(row.get(field), kind):
                raise ReleaseError(f"{table.name}: release {release}: {field} must be a {kind.__name__}")
        if row["torch_tag"] != "cu" + row["cuda"].replace(".", ""):
            raise ReleaseError(
                f"{table.name}: release {release}: torch_tag {row['torch_tag']} is not CUDA {row['cuda']}'s"
            )
    return rows


def row(release: str, table: Path = TABLE) -> dict:
    rows = releases(table)
    if release not in rows:
        known = ", ".join(sorted(rows))
        raise ReleaseError(
            f"NGC_RELEASE {release or '(empty)'} is not in deploy/docker/{table.name} (it has {known}): {HOW}"
        )
    return rows[release]


def torch_pin(requirements: Path) -> str:
    pins = re.findall(r"^torch==(\S+)", requirements.read_text(), re.M)
    if len(pins) != 1:
        raise ReleaseError(f"{requirements.name}: expected one torch==VERSION+TAG line, found {len(pins)}")
    return pins[0]


def check(release: str, requirements: Path | None = None, torch_index: str | None = None) -> dict:
    """The release's row, after checking the torch pin and the index against it."""
    found = row(release)
    tag = found["torch_tag"]
    if requirements is not None:
        version, _, build = torch_pin(requirements).partition("+")
        if not version.startswith(found["pytorch"] + ".") or build != tag:
            raise ReleaseError(
                f"{requirements.name} pins torch=={version}+{build}, NGC {release} needs torch "
                f"{found['pytorch']}.x+{tag} (deploy/docker/{TABLE.name}): change the pin"
            )
    if torch_index is not None and torch_index.rstrip("/").rsplit("/", 1)[-1] != tag:
        raise ReleaseError(f"the torch index {torch_index} does not serve +{tag} wheels, which NGC {release} needs")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("release")
    parser.add_argument("--requirements", type=Path)
    parser.add_argument("--torch-index")
    args = parser.parse_args(argv)
    try:
        found = check(args.release, args.requirements, args.torch_index)
    except (ReleaseError, OSError, tomllib.TOMLDecodeError) as exc:
        print(f"ngc_release: {exc}", file=sys.stderr)
        return 2
    print(" ".join(f"{key}={value}" for key, value in found.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
