"""Keep ONNX Runtime's TensorRT engine cache only while it was built from the exported models now served.

    python3 engine_cache.py REPOSITORY CACHE

Compose runs it (service engine-cache) after the export and before Triton, on the trt-engine-cache volume.
ONNX Runtime names a cached engine after the graph's structure, TensorRT's version and the GPU's compute
capability, not after the weights: a model exported again with new weights and the same graph would load
the old engine. So the cache is kept when the repository's manifests (one per exported version: its
fingerprint, files and checks) and the GPU the export ran on are those it was built for, and emptied
otherwise. Standard library only: it runs in the Triton image."""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path

STAMP = ".tritonkit-export"
"""In the cache: the key of the export its engines were built for."""
COMPLETE_MARKER = ".export-complete"  # export/seed.py writes it once every required export passed


class CacheError(Exception):
    """One line: what is wrong, and what to do."""


def export_key(repository: Path) -> str:
    """Changes when any exported version's manifest changes, or the export ran on another GPU."""
    marker = repository / COMPLETE_MARKER
    if not marker.is_file():
        raise CacheError(f"{repository} has no {COMPLETE_MARKER}: run the export first (docker compose up export)")
    try:
        gpu = json.loads(marker.read_text()).get("gpu")
    except json.JSONDecodeError as exc:
        raise CacheError(f"{marker} is not the export's JSON ({exc}): run the export again") from exc
    digest = hashlib.sha256(f"gpu={gpu}\n".encode())
    for manifest in sorted(repository.glob("*/[0-9]*/manifest.json")):
        digest.update(f"{manifest.relative_to(repository)}\0".encode() + manifest.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def refresh(repository: Path, cache: Path) -> str:
    """Empty ``cache`` unless its engines were built for ``repository``'s export; say which it did."""
    key = export_key(repository)
    stamp = cache / STAMP
    if not cache.is_dir():
        raise CacheError(f"{cache} is not a folder: mount the trt-engine-cache volume there")
    if stamp.is_file() and stamp.read_text().strip() == key:
        kept = sum(1 for p in cache.iterdir() if p.name != STAMP)
        return f"engine-cache: kept {kept} files in {cache}, built for this export ({key})"
    removed = 0
    try:
        for path in cache.iterdir():
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
            removed += 1
        stamp.write_text(key + "\n")
    except PermissionError as exc:
        raise CacheError(f"cannot write {cache} ({exc.strerror}): the volume must belong to uid 1000") from exc
    return f"engine-cache: emptied {cache} ({removed} entries): the export changed, engines are built again ({key})"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: engine_cache.py REPOSITORY CACHE", file=sys.stderr)
        return 2
    try:
        print(refresh(Path(args[0]), Path(args[1])))
    except CacheError as exc:
        print(f"engine-cache: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
