"""Configs as a real tritonserver 2.51 served them (``get_model_config`` over HTTP), recorded in
``tests/data/configs/served_tritonserver_2.51.json``: what the code that reads a served config gets."""

from __future__ import annotations

import copy
import json
from functools import lru_cache
from pathlib import Path

SERVED = Path(__file__).resolve().parent / "data" / "configs" / "served_tritonserver_2.51.json"


@lru_cache(maxsize=1)
def _recorded() -> dict:
    return json.loads(SERVED.read_text())


def served_config(model: str) -> dict:
    """A fresh copy of ``model``'s recorded served config."""
    return copy.deepcopy(_recorded()[model])
