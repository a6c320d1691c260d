"""``smollm2_tiny_decode``: see export/zoo/smollm.py (one module per builder, as export/zoo/__init__.py imports
them)."""

from export.zoo.smollm import build_tiny_decode as build

__all__ = ["build"]
