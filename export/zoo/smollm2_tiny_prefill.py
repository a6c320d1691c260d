"""``smollm2_tiny_prefill``: see export/zoo/smollm.py (one module per builder, as export/zoo/__init__.py imports
them)."""

from export.zoo.smollm import build_tiny_prefill as build

__all__ = ["build"]
