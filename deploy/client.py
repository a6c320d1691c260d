"""Thin helpers over ``tritonclient`` used by the demo and the tests: one call, either protocol."""

from __future__ import annotations

import urllib.request

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from prometheus_client.parser import text_string_to_metric_families
from tritonclient.utils import np_to_triton_dtype

PROTOCOLS = ("http", "grpc")
_MODULES = {"http": httpclient, "grpc": grpcclient}


def connect(protocol: str, url: str):
    """An ``InferenceServerClient`` for ``http`` or ``grpc`` at ``host:port``."""
    if protocol not in _MODULES:
        raise ValueError(f"protocol {protocol!r} is not one of {PROTOCOLS}")
    return _MODULES[protocol].InferenceServerClient(url)


def infer(
    client, model: str, inputs: dict[str, np.ndarray], outputs: list[str] | None = None, **kwargs
) -> dict[str, np.ndarray]:
    """Send numpy arrays by name; return the requested (default: all) outputs as numpy arrays."""
    module = grpcclient if isinstance(client, grpcclient.InferenceServerClient) else httpclient
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
