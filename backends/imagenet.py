"""The 1000 ImageNet-1k class names in class-id order (``data/imagenet_labels.txt``), without torch.

Read by the ``postprocess`` Python model (it names the top-k classes at serving time) and by
export/zoo/efficientnet.py (the labels its export writes beside the config), so both name a class the same way.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

LABELS_FILE = Path(__file__).resolve().parent / "data" / "imagenet_labels.txt"
CLASSES = 1000


@lru_cache(maxsize=1)
def labels() -> tuple[str, ...]:
    """The class names, ``labels()[i]`` naming class ``i``."""
    names = tuple(LABELS_FILE.read_text(encoding="utf-8").splitlines())
    if len(names) != CLASSES:
        raise ValueError(f"{LABELS_FILE} has {len(names)} lines, not {CLASSES}")
    return names
