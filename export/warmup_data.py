"""Real warmup data for the pipelines' Python models, so an ensemble's first request meets no cold member.

Triton runs a model's ``model_warmup`` samples while it loads, before the server reports ready. Random or
zero data cannot warm ``preprocess`` or ``tokenize``: an empty string is not an image and not a text, and a
failing warmup sample fails the load. So their samples read real data from ``<model>/warmup/<file>``,
which Triton takes as one element's raw request data: for a BYTES element, a 4-byte little-endian length
and then the bytes. This module writes those files (committed with the models):

* ``preprocess/warmup/IMAGE_jpeg`` and ``IMAGE_png``: scikit-image's coffee photo as a JPEG the resize
  shrinks, as for a real upload, and as a small PNG (the decoders of both formats are loaded and run;
  a photo compresses badly as PNG, so that one stays small);
* ``tokenize/warmup/TEXT``: an English sentence.

``postprocess`` warms with Triton's random logits (its ``TOP_K`` is optional) and needs no file.

Run: ``python -m export.warmup_data [--repository model_repository]``.
"""

from __future__ import annotations

import argparse
import io
import struct
import sys
from pathlib import Path

FOLDER = "warmup"
"""Triton's fixed name for the folder of warmup data, inside the model's folder."""
SENTENCE = "A man is playing a guitar on stage, and the crowd sings along."
PHOTO_SIZES = {"JPEG": (400, 266), "PNG": (160, 106)}
"""Width x height of the warmup photos."""


def serialize(element: bytes) -> bytes:
    """One BYTES element in Triton's raw layout: 4-byte little-endian length, then the bytes."""
    return struct.pack("<I", len(element)) + element


def deserialize(raw: bytes) -> bytes:
    """The inverse of :func:`serialize` for one element; refuses anything else."""
    if len(raw) < 4 or struct.unpack("<I", raw[:4])[0] != len(raw) - 4:
        raise ValueError("not one BYTES element in Triton's layout (4-byte length, then that many bytes)")
    return raw[4:]


def photo(fmt: str) -> bytes:
    import skimage.data
    from PIL import Image

    image = Image.fromarray(skimage.data.coffee()).resize(PHOTO_SIZES[fmt], Image.BILINEAR)
    buffer = io.BytesIO()
    image.save(buffer, fmt, **({"quality": 90} if fmt == "JPEG" else {}))
    return buffer.getvalue()


def files() -> dict[str, bytes]:
    """``<model>/warmup/<name>`` -> the serialized element."""
    return {
        f"preprocess/{FOLDER}/IMAGE_jpeg": serialize(photo("JPEG")),
        f"preprocess/{FOLDER}/IMAGE_png": serialize(photo("PNG")),
        f"tokenize/{FOLDER}/TEXT": serialize(SENTENCE.encode("utf-8")),
    }


def write(repository: Path) -> list[Path]:
    written = []
    for relative, data in files().items():
        path = Path(repository) / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    from export.cli import DEFAULT_REPOSITORY

    parser = argparse.ArgumentParser(prog="python -m export.warmup_data", description=__doc__.split("\n")[0])
    parser.add_argument("--repository", type=Path, default=DEFAULT_REPOSITORY)
    args = parser.parse_args(argv)
    for path in write(args.repository):
        print(f"wrote {path} ({path.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
