"""Apply a candidate config to the running server through model control: no restart, no file written.

Triton's ``load`` API takes a whole model config as JSON and serves it instead of ``config.pbtxt``. A change
goes through the one config model: the served config is read back into a ``ModelSpec``
(``export.config.from_json``), the candidate's ``ServingChanges`` are applied to it, and the result is
written as JSON again (``export.config.to_json``); a config a ``ModelSpec`` cannot hold (a hand-written
ensemble) is refused by name rather than changed blindly. Loading again without a config does not bring the
file's settings back while the files are unchanged (Triton sees nothing new), so ``ServedConfigs`` loads
the config captured before the first change: the one place a command's changes are given back. The served
model keeps its weights; only batching (the queue policy included), instances and warmup change. Loading
blocks until the new config is ready.

A server that restricts its model-config API (the production stacks, ``deploy/security.py``) refuses the
config to a client without the admin key; :func:`served_config` then reads the model's metadata, open to
every inference client, into a config of the same JSON form (:func:`metadata_config`): enough to make
payloads, never enough to change (a variant or tuning on such a server is refused by name).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from deploy import security
from deploy.client import ModelControl, ModelControlError
from export import config as config_io
from export.errors import ExportError
from export.spec import ModelSpec
from loadtest.core.spec import Candidate
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
    _refuse_metadata(config, f"variant {candidate.name!r}")
    try:
        spec = config_io.from_json(config)
    except ExportError as exc:
        raise VariantError(
            f"variant {candidate.name!r}: the served config of {config.get('name')!r} cannot be changed: {exc}"
        ) from None
    return config_io.to_json(changed_spec(spec, candidate))


FROM_METADATA = "tritonkit_from_metadata"
"""Key of a config made from the model's metadata (:func:`metadata_config`); its value says why."""


def served_config(http_url: str, model: str, *, decoupled: bool = False) -> dict[str, Any]:
    """The served config as Triton's JSON; from the model's metadata when the server restricts its config
    API (``decoupled``: what the metadata cannot tell)."""
    client = httpclient.InferenceServerClient(http_url)
    try:
        return _config_or_metadata(
            lambda: client.get_model_config(model), lambda: client.get_model_metadata(model), http_url, model, decoupled
        )
    finally:
        client.close()


def served_config_grpc(grpc_url: str, model: str, *, decoupled: bool = False) -> dict[str, Any]:
    """The served config over gRPC, in the same JSON form as :func:`served_config`'s (dims as numbers)."""
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(grpc_url)
    try:
        return _config_or_metadata(
            lambda: client.get_model_config(model, as_json=True)["config"],
            lambda: client.get_model_metadata(model, as_json=True),
            grpc_url,
            model,
            decoupled,
        )
    finally:
        client.close()


def _config_or_metadata(config: Callable, metadata: Callable, url: str, model: str, decoupled: bool) -> dict:
    try:
        return config()
    except InferenceServerException as exc:
        if not security.is_refusal(exc.message()):
            raise VariantError(f"model {model!r} is not served at {url}: {exc.message()}") from None
    try:
        made = metadata_config(metadata(), decoupled, f"{url} restricts its model-config API")
    except InferenceServerException as exc:
        if security.is_refusal(exc.message()):
            raise VariantError(
                f"the server at {url} refuses both the config and the metadata of {model!r} without the admin key "
                f"({exc.message()}): leave metadata open (deploy/security.py RESTRICTED_APIS), or give the config "
                'in the load settings ("config")'
            ) from None
        raise VariantError(f"model {model!r} is not served at {url}: {exc.message()}") from None
    if (url, model) not in _NOTED:
        _NOTED.add((url, model))
        print(
            f"note: {url} restricts its model-config API: {model!r}'s inputs are read from its metadata, which does "
            f"not say whether it streams: taken as {'decoupled' if decoupled else 'not decoupled'} "
            "(the load settings' decoupled flag)",
            file=sys.stderr,
            flush=True,
        )
    return made


_NOTED: set[tuple[str, str]] = set()
"""(url, model) whose metadata fallback was noted once in this process."""


def metadata_config(metadata: dict[str, Any], decoupled: bool = False, why: str = "") -> dict[str, Any]:
    """A model's metadata (``get_model_metadata``, HTTP or gRPC JSON) as a config in ``get_model_config``'s
    JSON form, for payloads only. The metadata shows a batching model's batch dim as a leading -1 on every
    input and output; that is taken as batching (a model that does not batch but whose tensors all begin with
    a dynamic dim then gets batch-1 requests, which fit it too). It does not say whether the model is
    decoupled (``decoupled`` does) or which inputs are optional (all are sent)."""

    def dims(tensor: dict) -> list[int]:
        return [int(d) for d in tensor.get("shape", [])]

    tensors = [*metadata.get("inputs", []), *metadata.get("outputs", [])]
    batched = bool(tensors) and all(dims(t)[:1] == [-1] for t in tensors)

    def entry(tensor: dict) -> dict[str, Any]:
        datatype = str(tensor.get("datatype", ""))
        return {
            "name": tensor.get("name", ""),
            "data_type": f"TYPE_{'STRING' if datatype == 'BYTES' else datatype}",
            "dims": dims(tensor)[1:] if batched else dims(tensor),
        }

    return {
        "name": metadata.get("name", ""),
        "platform": metadata.get("platform", ""),
        "max_batch_size": 1 if batched else 0,  # the real maximum is not in the metadata; loads send batch 1
        "input": [entry(t) for t in metadata.get("inputs", [])],
        "output": [entry(t) for t in metadata.get("outputs", [])],
        "model_transaction_policy": {"decoupled": bool(decoupled)},
        FROM_METADATA: why or "made from the model's metadata",
    }


def _refuse_metadata(config: dict[str, Any], what: str) -> None:
    """A config made from metadata cannot be changed or read back as a ``ModelSpec``: say so by name."""
    if FROM_METADATA in config:
        raise VariantError(
            f"{what}: {config[FROM_METADATA]} (header {security.KEY_HEADER!r}), and a change of config goes "
            f"through its restricted model-repository API: run variants and tuning on a server of your own"
        )


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
    a config a ``ModelSpec`` cannot hold raises ``export.errors.ConfigError`` naming the field, one the server
    does not give (a restricted config API) ``VariantError``."""
    config = served_config(http_url, model)
    _refuse_metadata(config, f"model {model!r}")
    return config_io.from_json(config)


def ready_models(http_url: str) -> set[str]:
    """Names of the models the server has ready (``deploy.client.is_ready``: the one definition)."""
    try:
        return ModelControl(http_url, timeout_s=60.0).ready_models()
    except ModelControlError as exc:
        raise VariantError(f"cannot list the models at {http_url}: {exc.message}") from None


def load(http_url: str, model: str, config: ModelSpec | dict[str, Any] | None = None) -> None:
    """(Re)load ``model`` with ``config`` (a ``ModelSpec``, or Triton's JSON form as a hand-written ensemble
    config keeps it), or from its ``config.pbtxt`` when None."""
    if isinstance(config, ModelSpec):
        config = config_io.to_json(config)
    control = ModelControl(http_url, timeout_s=600.0, load_timeout_s=600.0)
    try:
        control.load(model, config)
        if not control.is_model_ready(model):
            raise VariantError(f"model {model!r} is not ready after loading")
    except ModelControlError as exc:
        what = "its repository config" if config is None else "the variant's config"
        raise VariantError(f"loading {model!r} with {what} failed: {exc.message}") from None


class ServedConfigs:
    """The configs a command serves in place of the repository's, given back when it ends (``with``, or
    ``restore``). A model's config is captured the first time it is read (``original``) or changed (``load``,
    ``apply``); on exit every model loaded with another config is loaded with its captured config again.
    ``restore=False`` leaves them as they are: a local server that stops with the command."""

    def __init__(self, http_url: str, *, restore: bool = True):
        self.http_url, self.restore_on_exit = http_url, restore
        self.originals: dict[str, dict[str, Any]] = {}
        """Model -> its config before this command changed it."""
        self.changed: set[str] = set()
        """Models loaded with another config, until given theirs back."""

    def __enter__(self) -> ServedConfigs:
        return self

    def __exit__(self, *_: object) -> None:
        if self.restore_on_exit:
            self.restore()

    def original(self, model: str) -> dict[str, Any]:
        """``model``'s config before this command changed it (read from the server the first time)."""
        if model not in self.originals:
            self.originals[model] = served_config(self.http_url, model)
        return self.originals[model]

    def load(self, model: str, config: ModelSpec | dict[str, Any]) -> None:
        """Serve ``config`` for ``model`` (``load``), its original captured first."""
        self.original(model)
        self.changed.add(model)  # before loading: a load that fails half way may leave it changed
        load(self.http_url, model, config)

    def apply(self, candidate: Candidate, model: str) -> str:
        """Serve ``candidate`` of ``model``, its changes made to the original config; returns the name clients
        must call (``apply``)."""
        served = candidate.served_model(model)
        if candidate.applies_to(model) and candidate.changes_config:
            self.load(served, override(self.original(served), candidate))
        return served

    def reset(self, model: str) -> None:
        """``model``'s original config served again, where this command changed it."""
        if model in self.changed:
            load(self.http_url, model, self.originals[model])
            self.changed.discard(model)

    def restore(self) -> None:
        """Every changed model's original config served again."""
        for model in sorted(self.changed):
            self.reset(model)
