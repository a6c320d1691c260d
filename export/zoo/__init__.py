"""Built-in models: each module has ``build() -> ZooModel`` with real weights and real reference data."""

from __future__ import annotations

import importlib

from export.errors import UnknownModelError
from export.zoo.base import ZooModel

BUILDERS = {
    "custom_op_mlp": "export.zoo.custom_op",
    "digits": "export.zoo.digits",
    "efficientnet_lite0": "export.zoo.efficientnet",
    "minilm": "export.zoo.minilm",
    "resnet50": "export.zoo.resnet",
    "smollm2_prefill": "export.zoo.smollm2_prefill",
    "smollm2_decode": "export.zoo.smollm2_decode",
    "smollm2_tiny_prefill": "export.zoo.smollm2_tiny_prefill",
    "smollm2_tiny_decode": "export.zoo.smollm2_tiny_decode",
}


def import_builder(name: str):
    if name not in BUILDERS:
        raise UnknownModelError(f"no built-in model {name!r}; built-in models: {sorted(BUILDERS)}")
    return importlib.import_module(BUILDERS[name])


def build(name: str) -> ZooModel:
    return import_builder(name).build()
