"""What kind of model a config serves: the one answer to "is it an ensemble / a Python model / decoupled", read
from the parsed config (never from its text: a model named "my_ensemble" or described as "an ensemble's step" is
not an ensemble), in any form the project meets (``model_config``)."""

from __future__ import annotations

import enum
from typing import Any

from tritonclient.grpc import model_config_pb2 as mc

from export.config import parse_json, to_model_config
from export.spec import ModelSpec

__all__ = ["ModelKind", "model_config", "kind", "is_decoupled", "ensemble_steps"]


class ModelKind(enum.Enum):
    TENSOR = "tensor"
    """One framework model (TorchScript, ONNX, TensorRT ...): it calls no other model."""
    PYTHON = "python"
    """A Python-backend model: it may call any model of the repository (BLS)."""
    ENSEMBLE = "ensemble"
    """A graph of steps, each a call to another model (:func:`ensemble_steps`)."""

    @property
    def calls_others(self) -> bool:
        """Serving it needs other models loaded (for a Python model, any: the whole repository)."""
        return self is not ModelKind.TENSOR


def model_config(config: mc.ModelConfig | ModelSpec | dict[str, Any] | str) -> mc.ModelConfig:
    """A model config in any form the project meets as the ``ModelConfig`` protobuf: the protobuf itself
    (``export.config.parse``), a ``ModelSpec``, or Triton's JSON (``export.config.parse_json``: over HTTP, over gRPC
    or as text). Fields this protobuf does not know are left out (a newer server's, the metadata mark of
    ``loadtest.target.apply.metadata_config``); JSON that is no config raises ``ConfigError``."""
    if isinstance(config, mc.ModelConfig):
        return config
    if isinstance(config, ModelSpec):
        return to_model_config(config)
    return parse_json(config, ignore_unknown_fields=True)


def kind(config: mc.ModelConfig | ModelSpec | dict[str, Any] | str) -> ModelKind:
    """ENSEMBLE for ``platform: "ensemble"`` (or ensemble steps), PYTHON for ``backend: "python"`` (or the
    platform ``python`` a ``ModelSpec`` and the server's metadata give), TENSOR for every other model."""
    parsed = model_config(config)
    if parsed.platform == "ensemble" or parsed.ensemble_scheduling.step:
        return ModelKind.ENSEMBLE
    if parsed.backend == "python" or parsed.platform == "python":
        return ModelKind.PYTHON
    return ModelKind.TENSOR


def is_decoupled(config: mc.ModelConfig | ModelSpec | dict[str, Any] | str) -> bool:
    """The model answers on a stream (``model_transaction_policy { decoupled: true }``)."""
    return model_config(config).model_transaction_policy.decoupled


def ensemble_steps(config: mc.ModelConfig | ModelSpec | dict[str, Any] | str) -> tuple[str, ...]:
    """The models an ensemble's steps call, in step order (a model called twice once); () for any other model."""
    return tuple(dict.fromkeys(step.model_name for step in model_config(config).ensemble_scheduling.step))
