"""Apply a config variant to the running server through model control: no restart, no file written.

Triton's ``load`` API takes a whole model config as JSON and serves it instead of ``config.pbtxt``. Loading
again without a config does not bring the file's settings back while the files are unchanged (Triton sees
nothing new), so ``restore`` loads the config captured before the first change. The served model keeps its
weights; only batching (the queue policy included), instances and warmup change. Loading blocks until the new config is ready.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from loadtest.campaign import Variant
from loadtest.errors import VariantError


def override(config: dict[str, Any], variant: Variant) -> dict[str, Any]:
    """``config`` (Triton's JSON form, as ``get_model_config`` returns it) with the variant's changes."""
    new = copy.deepcopy(config)
    if variant.max_batch_size is not None:
        new["max_batch_size"] = variant.max_batch_size
    if variant.dynamic_batching is False:
        new.pop("dynamic_batching", None)
    elif (variant.dynamic_batching or variant.max_queue_delay_us is not None or variant.preferred_batch_sizes is not None
          or variant.has_queue_policy_change):
        batcher = new.setdefault("dynamic_batching", {})
        if variant.max_queue_delay_us is not None:
            batcher["max_queue_delay_microseconds"] = variant.max_queue_delay_us
        if variant.preferred_batch_sizes is not None:
            batcher["preferred_batch_size"] = list(variant.preferred_batch_sizes)
        if variant.has_queue_policy_change:
            _override_queue_policy(batcher, variant)
    if variant.instances is not None:
        groups = new.get("instance_group") or [{"kind": "KIND_CPU"}]
        new["instance_group"] = [{**groups[0], "count": variant.instances}]
    if variant.warmup is False:
        new.pop("model_warmup", None)
    limit = new.get("max_batch_size", 0)
    if "dynamic_batching" in new:
        if not limit:
            raise VariantError(f"variant {variant.name!r}: dynamic batching needs max_batch_size > 0")
        sizes = new["dynamic_batching"].get("preferred_batch_size", [])
        too_big = [s for s in sizes if s > limit]
        if too_big:
            raise VariantError(f"variant {variant.name!r}: preferred_batch_sizes {too_big} exceed "
                               f"max_batch_size={limit}")
    # A warmup sample larger than the batch limit would fail the load.
    new["model_warmup"] = [w for w in new.get("model_warmup", []) if w.get("batch_size", 1) <= max(limit, 1)]
    if not new["model_warmup"]:
        new.pop("model_warmup")
    return new


def _override_queue_policy(batcher: dict[str, Any], variant: Variant) -> None:
    """``default_queue_policy`` with the variant's values; removed when it no longer limits anything."""
    policy = dict(batcher.get("default_queue_policy") or {})
    if variant.max_queue_size is not None:
        policy["max_queue_size"] = variant.max_queue_size
    if variant.default_timeout_us is not None:
        policy["default_timeout_microseconds"] = variant.default_timeout_us
    if variant.timeout_action is not None:
        policy["timeout_action"] = variant.timeout_action
    # Triton's JSON writes the uint64 timeout as a string or a number, depending on the path it took.
    if not int(policy.get("max_queue_size", 0)) and not int(policy.get("default_timeout_microseconds", 0)) \
            and not policy.get("allow_timeout_override", False):
        batcher.pop("default_queue_policy", None)
    else:
        policy.setdefault("timeout_action", "REJECT")
        batcher["default_queue_policy"] = policy


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


def apply(http_url: str, variant: Variant, model: str, original: dict[str, Any] | None = None) -> str:
    """Serve ``variant`` of ``model``; returns the name clients must call (e.g. ``digits_onnx``).
    ``original``: the config to change (default: what the server serves now)."""
    served = variant.served_model(model)
    config = original if original is not None else served_config(http_url, served)
    if not (variant.applies_to(model) and variant.changes_config):
        return served
    load(http_url, served, override(config, variant))
    return served


def load(http_url: str, model: str, config: dict[str, Any] | None = None) -> None:
    """(Re)load ``model`` with ``config``, or from its ``config.pbtxt`` when None."""
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
