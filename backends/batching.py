"""What every project runtime backend does around the model call, written once.

A runtime (backends/pytorch, backends/onnxruntime) supplies how to load the model, how to turn a
Triton tensor into its own array type and back, and the forward call. This base class does the
rest, the way Triton's native backends do it: requests whose inputs have the same shape run as one
batch, outputs are split back per request, and a request that fails gets its own error while the
others of its batch are answered.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict

import triton_python_backend_utils as pb_utils

from backends.messages import client_message


class RequestError(ValueError):
    """Something wrong with one request; answered as INVALID_ARG for that request alone."""


def flag(value: str) -> bool:
    return value.strip().lower() in ("1", "true", "yes", "on")


def invalid(exc: Exception, model: str = ""):
    """A response carrying ``exc`` as this request's INVALID_ARG error, in one short line (``client_message``)."""
    message = client_message(exc, model)
    return pb_utils.InferenceResponse(error=pb_utils.TritonError(message, pb_utils.TritonError.INVALID_ARG))


def gather(requests, name: str, parse, errors: tuple[type[Exception], ...]):
    """Parse every item of input ``name`` across ``requests`` so a batch step can run on all at once.

    Returns (responses, items, owners): a request whose item raises one of ``errors`` already has its
    error response; ``owners`` lists (request index, item count) for the others, in ``items`` order.
    """
    responses, items, owners = [None] * len(requests), [], []
    for i, request in enumerate(requests):
        try:
            raw = pb_utils.get_input_tensor_by_name(request, name).as_numpy().reshape(-1)
            parsed = [parse(r if isinstance(r, bytes) else bytes(r)) for r in raw]
        except errors as exc:
            responses[i] = invalid(exc)
            continue
        items.extend(parsed)
        owners.append((i, len(parsed)))
    return responses, items, owners


def scatter(owners):
    """(request index, slice of the batch) for each owner of :func:`gather`."""
    start = 0
    for i, count in owners:
        yield i, slice(start, start + count)
        start += count


class BatchingModel:
    """Subclasses implement ``load``, ``to_array``, ``from_array``, ``concat`` and ``forward``."""

    honoured_parameters: frozenset[str] = frozenset()

    def initialize(self, args):
        self.config = json.loads(args["model_config"])
        self.name = args["model_name"]
        self.parameters = {k: v.get("string_value", "") for k, v in self.config.get("parameters", {}).items()}
        ignored = sorted(set(self.parameters) - self.honoured_parameters - {"EXECUTION_ENV_PATH"})
        if ignored:
            pb_utils.Logger.log_warn(f"{self.name}: parameters not used by the local runtime: {ignored}")
        self.max_batch_size = int(self.config.get("max_batch_size", 0))
        self.inputs = [t["name"] for t in self.config["input"]]
        self.outputs = [t["name"] for t in self.config["output"]]
        self.load(args)

    def instance_threads(self) -> int:
        """Cores per instance: each instance is its own process, so instances x threads <= cores."""
        instances = sum(int(g.get("count", 1)) for g in self.config.get("instance_group", [])) or 1
        return max(1, len(os.sched_getaffinity(0)) // instances)

    # -- to implement ---------------------------------------------------------------------------
    def load(self, args) -> None:
        raise NotImplementedError

    def to_array(self, tensor):
        raise NotImplementedError

    def from_array(self, name: str, array):
        raise NotImplementedError

    def concat(self, arrays: list):
        raise NotImplementedError

    def forward(self, inputs: list) -> list:
        """Batched inputs in config order -> outputs in config order."""
        raise NotImplementedError

    # -- Triton entry point ---------------------------------------------------------------------
    def execute(self, requests):
        responses = [None] * len(requests)
        groups = defaultdict(list)
        for i, request in enumerate(requests):
            try:
                arrays = self._request_inputs(request)
            except RequestError as exc:
                responses[i] = self.error(exc)
                continue
            shapes = tuple(tuple(a.shape[1:] if self.max_batch_size else a.shape) for a in arrays)
            groups[shapes if self.max_batch_size else (shapes, i)].append((i, arrays))
        for members in groups.values():
            self._run_group(members, responses)
        return responses

    def _request_inputs(self, request) -> list:
        arrays = []
        for name in self.inputs:
            tensor = pb_utils.get_input_tensor_by_name(request, name)
            if tensor is None:
                raise RequestError(f"{self.name}: input {name!r} is missing")
            arrays.append(self.to_array(tensor))
        if self.max_batch_size and len({a.shape[0] for a in arrays}) != 1:
            raise RequestError(
                f"{self.name}: inputs disagree on the batch size: {sorted({a.shape[0] for a in arrays})}"
            )
        return arrays

    def _run_group(self, members, responses) -> None:
        try:
            columns = list(zip(*(arrays for _, arrays in members), strict=True))
            results = self.forward([c[0] if len(c) == 1 else self.concat(list(c)) for c in columns])
            if len(results) != len(self.outputs):
                raise RuntimeError(
                    f"{self.name}: model returned {len(results)} outputs, the config lists {len(self.outputs)}"
                )
        except Exception as exc:  # noqa: BLE001 - the model's own error goes back to the client
            if len(members) > 1:  # find the request at fault; the others still get answers
                for member in members:
                    self._run_group([member], responses)
                return
            responses[members[0][0]] = self.error(exc)
            return
        start = 0
        for i, arrays in members:
            size = arrays[0].shape[0] if self.max_batch_size else None
            outputs = [
                self.from_array(name, r[start : start + size] if size is not None else r)
                for name, r in zip(self.outputs, results, strict=True)
            ]
            responses[i] = pb_utils.InferenceResponse(output_tensors=outputs)
            start += size or 0

    def error(self, exc: Exception):
        return invalid(exc, self.name)
