"""Apply a candidate config to the running server through model control: no restart, no file written.

Triton's ``load`` API takes a whole model config as JSON and serves it instead of ``config.pbtxt``. A change
goes through the one config model: the served config is read back into a ``ModelSpec``
(``export.config.from_json``), the candidate's ``ServingChanges`` are applied to it, and the result is
written as JSON again (``export.config.to_json``); a config a ``ModelSpec`` cannot hold (a hand-written
ensemble) is refused by name rather than changed blindly. Loading again without a config does not bring the
file's settings back while the files are unchanged (Triton sees nothing new), so ``restore`` loads the
config captured before the first change. The served model keeps its weights; only batching (the queue
policy included), instances and warmup change. Loading blocks until the new config is ready.
"""

from __future__ import annotations

import json
from typing import Any

import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from export import config as config_io
from export.errors import ExportError
from export.spec import ModelSpec
from loadtest.campaign import Candidate
from loadtest.errors import VariantError


def changed_spec(spec: ModelSpec, candidate: Candidate) -> ModelSpec:
    """``spec`` with the candidate's serving changes; a combination the spec refuses (a preferred size above
    max_batch_size, a batcher without batching) raises ``VariantError`` naming the candidate."""
    try:
        return candidate.changes.apply(spec)
    except ExportError as exc:
        raise VariantError(f"variant {candidate.name!r}: {exc}") from None


def override(config: dict[str, Any], candidate: Candidate) -> dict[str, Any]:
    """``config`` (Triton's JSON form, as ``get_model_config`` returns it) with the candidate's changes, by way
    of its ``ModelSpec``: the JSON ``load_model`` takes."""
    try:
        spec = config_io.from_json(config)
    except ExportError as exc:
        raise VariantError(
            f"variant {candidate.name!r}: the served config of {config.get('name')!r} cannot be changed: {exc}"
        ) from None
    return config_io.to_json(changed_spec(spec, candidate))


def served_config(http_url: str, model: str) -> dict[str, Any]:
    client = httpclient.InferenceServerClient(http_url)
    try:
        return client.get_model_config(model)
    except InferenceServerException as exc:
        raise VariantError(f"model {model!r} is not served at {http_url}: {exc.message()}") from None
    finally:
        client.close()


def served_config_grpc(grpc_url: str, model: str) -> dict[str, Any]:
    """The served config over gRPC, in the same JSON form as :func:`served_config`'s (dims as numbers)."""
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(grpc_url)
    try:
        return client.get_model_config(model, as_json=True)["config"]
    except InferenceServerException as exc:
        raise VariantError(f"model {model!r} is not served at {grpc_url}: {exc.message()}") from None
    finally:
        client.close()


def apply(http_url: str, candidate: Candidate, model: str, original: dict[str, Any] | None = None) -> str:
    """Serve ``candidate`` of ``model``; returns the name clients must call (e.g. ``digits_onnx``).
    ``original``: the config to change (default: what the server serves now)."""
    served = candidate.served_model(model)
    config = original if original is not None else served_config(http_url, served)
    if not (candidate.applies_to(model) and candidate.changes_config):
        return served
    load(http_url, served, override(config, candidate))
    return served


def served_spec(http_url: str, model: str) -> ModelSpec:
    """What the server serves for ``model``, read back into a ``ModelSpec`` (``export.config.from_json``);
    a config a ``ModelSpec`` cannot hold raises ``export.errors.ConfigError`` naming the field."""
    return config_io.from_json(served_config(http_url, model))


def ready_models(http_url: str) -> set[str]:
    """Names of the models the server has ready."""
    client = httpclient.InferenceServerClient(http_url)
    try:
        index = client.get_model_repository_index()
    except InferenceServerException as exc:
        raise VariantError(f"cannot list the models at {http_url}: {exc.message()}") from None
    finally:
        client.close()
    return {entry["name"] for entry in index if entry.get("state") == "READY"}


def load(http_url: str, model: str, config: ModelSpec | dict[str, Any] | None = None) -> None:
    """(Re)load ``model`` with ``config`` (a ``ModelSpec``, or Triton's JSON form as a hand-written ensemble
    config keeps it), or from its ``config.pbtxt`` when None."""
    if isinstance(config, ModelSpec):
        config = config_io.to_json(config)
    client = httpclient.InferenceServerClient(http_url, network_timeout=600.0, connection_timeout=600.0)
    try:
        client.load_model(model, config=json.dumps(config) if config is not None else None)
        if not client.is_model_ready(model):
            raise VariantError(f"model {model!r} is not ready after loading")
    except InferenceServerException as exc:
        what = "its repository config" if config is None else "the variant's config"
        raise VariantError(f"loading {model!r} with {what} failed: {exc.message()}") from None
    finally:
        client.close()


def restore(http_url: str, originals: dict[str, dict[str, Any]]) -> None:
    """Back to the configs served before: ``originals`` maps model -> its config captured then."""
    for model, config in sorted(originals.items()):
        load(http_url, model, config)
