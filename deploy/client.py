"""Thin helpers over Triton's APIs: inference and metrics over ``tritonclient`` (either protocol), and the one
model-control client (:class:`ModelControl`, on ``tritonclient``'s HTTP client) every command uses to list,
load, unload and reload models.

``tritonclient`` is imported where it is used, so importing this module (``tritonkit --help``, the supervisor's
module) stays light."""

from __future__ import annotations

import functools
import json
import re
import time
import urllib.request
from collections.abc import Callable
from http.client import HTTPException
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

PROTOCOLS = ("http", "grpc")


@functools.cache
def _modules() -> dict[str, Any]:
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    return {"http": httpclient, "grpc": grpcclient}


def connect(protocol: str, url: str):
    """An ``InferenceServerClient`` for ``http`` or ``grpc`` at ``host:port``."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol {protocol!r} is not one of {PROTOCOLS}")
    return _modules()[protocol].InferenceServerClient(url)


def infer(
    client, model: str, inputs: dict[str, np.ndarray], outputs: list[str] | None = None, **kwargs
) -> dict[str, np.ndarray]:
    """Send numpy arrays by name; return the requested (default: all) outputs as numpy arrays."""
    import numpy as np
    from tritonclient.utils import np_to_triton_dtype

    modules = _modules()
    module = modules["grpc"] if isinstance(client, modules["grpc"].InferenceServerClient) else modules["http"]
    request = []
    for name, array in inputs.items():
        array = np.asarray(array)
        tensor = module.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
        tensor.set_data_from_numpy(array)
        request.append(tensor)
    wanted = [module.InferRequestedOutput(name) for name in outputs] if outputs else None
    result = client.infer(model, request, outputs=wanted, **kwargs)
    names = outputs or [o["name"] if isinstance(o, dict) else o.name for o in _response_outputs(result)]
    return {name: result.as_numpy(name) for name in names}


def _response_outputs(result):
    response = result.get_response()
    return response["outputs"] if isinstance(response, dict) else response.outputs


def metrics(url: str) -> dict[tuple[str, frozenset], float]:
    """Triton's Prometheus metrics as {(sample name, labels): value}."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            # The parser appends _total to counters; Triton's names (nv_inference_count) have none.
            name = family.name if sample.name == f"{family.name}_total" else sample.name
            samples[(name, frozenset(sample.labels.items()))] = sample.value
    return samples


def model_metric(samples: dict, name: str, model: str) -> float:
    """Sum of one metric over the versions of one model."""
    return sum(v for (n, labels), v in samples.items() if n == name and ("model", model) in labels)


# -- model control ----------------------------------------------------------------------------------
READY = "READY"
RELOAD_PARAMETER = "TRITONKIT_RELOAD"
"""Config parameter that makes each reload's config differ from the served one (see :meth:`ModelControl.reload`)."""


def is_ready(entry: dict[str, Any]) -> bool:
    """The one definition of ready for an entry of the repository index: its ``state`` is ``READY``.

    Triton 2.51 (``TRITONSERVER_ServerModelIndex``) gives a model it has never loaded by name only, with no
    version and no state, and a model it has loaded once per version with that version's state
    (``UNAVAILABLE`` after an unload or a failed load, ``LOADING``, ``READY``); asked with ``ready: true``, it
    lists only the versions whose state is ``READY``. A missing state is therefore a model not loaded."""
    return entry.get("state") == READY


class ModelControlError(RuntimeError):
    """A model-control call failed: ``what`` names the call and its model, ``message`` is Triton's own error on one
    line (or why the server could not be reached), ``status`` the HTTP status (None when no answer came)."""

    def __init__(self, what: str, message: str, status: int | None = None):
        self.what, self.message, self.status = what, message, status
        super().__init__(f"{what}: HTTP {status}: {message}" if status else f"{what}: {message}")


class ModelControl:
    """Triton's model-repository API through ``tritonclient``'s HTTP client, every call with a timeout: the index,
    which models are ready, a model's config, load (optionally with a config), unload and reload. ``headers``:
    the admin key when the server restricts these APIs (``deploy/security.py``)."""

    def __init__(
        self,
        http_url: str,
        timeout_s: float = 10.0,
        load_timeout_s: float = 300.0,
        headers: dict[str, str] | None = None,
    ):
        self.url, self.base = http_url, f"http://{http_url}"
        self.timeout_s, self.load_timeout_s = timeout_s, load_timeout_s
        self.headers = dict(headers) if headers else None

    def _call(self, what: str, request: Callable[[Any], Any], timeout_s: float | None = None) -> Any:
        """``request(client)``, its answer read within ``timeout_s`` (default ``self.timeout_s``); any failure a
        ``ModelControlError`` naming ``what``."""
        import tritonclient.http as httpclient
        from tritonclient.utils import InferenceServerException

        # A client per call: tritonclient's is not thread-safe, and each call has its own network timeout.
        try:
            with httpclient.InferenceServerClient(
                self.url, connection_timeout=self.timeout_s, network_timeout=timeout_s or self.timeout_s
            ) as client:
                return request(client)
        except InferenceServerException as exc:
            status, body = exc.status(), exc.debug_details()  # body: an answer that is not Triton's JSON error
            message = one_line(body[:300] if body else exc.message() or str(exc))
            raise ModelControlError(what, message, int(status) if status and status.isdigit() else None) from None
        except (OSError, HTTPException) as exc:  # refused, unreachable, timed out, closed without an answer
            raise ModelControlError(what, f"cannot reach {self.base}: {exc}") from None
        except ValueError as exc:  # an answer that is not JSON
            raise ModelControlError(what, f"{self.base} answered with no JSON: {exc}") from None

    def index(self) -> list[dict[str, Any]]:
        """The repository index: one entry per model version Triton knows, ``name`` and (once loaded) ``version``,
        ``state`` and ``reason``."""
        return self._call("the repository index", lambda c: c.get_model_repository_index(headers=self.headers))

    def ready_models(self) -> set[str]:
        """Names of the models with a version ready (:func:`is_ready`)."""
        return {m["name"] for m in self.index() if is_ready(m)}

    def is_model_ready(self, model: str) -> bool:
        """Whether ``model`` answers requests now (``/v2/models/<model>/ready``); a server that does not answer
        raises."""
        return self._call(f"the readiness of {model!r}", lambda c: c.is_model_ready(model, headers=self.headers))

    def config(self, model: str) -> dict[str, Any]:
        """The config ``model`` serves, as Triton's JSON."""
        return self._call(f"the config of {model!r}", lambda c: c.get_model_config(model, headers=self.headers))

    def load(self, model: str, config: dict[str, Any] | None = None) -> None:
        """(Re)load ``model``: with ``config`` (Triton's JSON form) in place of its ``config.pbtxt``, else from
        its files. Returns once Triton has loaded it (a failed load raises with Triton's reason)."""
        text = None if config is None else json.dumps(config)
        self._call(
            f"loading {model!r}", lambda c: c.load_model(model, headers=self.headers, config=text), self.load_timeout_s
        )

    def unload(self, model: str, unload_dependents: bool = False) -> None:
        self._call(
            f"unloading {model!r}",
            lambda c: c.unload_model(model, headers=self.headers, unload_dependents=unload_dependents),
            self.load_timeout_s,
        )

    def reload(self, model: str) -> None:
        """Load ``model`` again with the config it serves now: new instances, then the swap.

        Triton skips a load whose config equals the one served, so the config carries one more parameter,
        ``TRITONKIT_RELOAD`` (a fresh value each time; backends ignore it).
        """
        config = self.config(model)
        config.setdefault("parameters", {})[RELOAD_PARAMETER] = {"string_value": str(time.time_ns())}
        self.load(model, config)


def one_line(reason: str) -> str:
    """Triton's error or load-failure reason without the Python backend's stack ("At:" and the frames), on one
    line."""
    reason = re.split(r"\n\s*At:\s*\n", reason, maxsplit=1)[0]
    return " ".join(reason.split()) or "no reason given"
