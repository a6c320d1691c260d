"""A Python runtime for TorchScript models, so the local server serves the NGC container's configs.

Triton loads this folder as the Python-based backend ``pytorch``: a model configured for the native
libtorch backend (``platform: "pytorch_libtorch"`` or ``backend: "pytorch"``, ``<version>/model.pt``)
loads here unchanged. It follows the native backend's conventions:

* inputs are matched to ``forward`` by argument name, else by ``NAME__<index>``, else by config order;
  outputs by ``NAME__<index>``, else by config order;
* ``max_batch_size > 0`` means dimension 0 is the batch: requests of one shape run as one batch;
* parameters ``INFERENCE_MODE``, ``DISABLE_OPTIMIZED_EXECUTION``, ``INTRA_OP_THREAD_COUNT`` and
  ``INTER_OP_THREAD_COUNT`` are honoured; the rest are reported as ignored at load.

Tensors move between Triton and torch through DLPack (no copy for a single request); a request that
fails gets its own error while the others of the batch succeed.
"""

from __future__ import annotations

import json
import os
import re
from collections import defaultdict
from pathlib import Path

import torch
import triton_python_backend_utils as pb_utils

NAMED_INDEX = re.compile(r"^.+__(\d+)$")
HONOURED_PARAMETERS = {"INFERENCE_MODE", "DISABLE_OPTIMIZED_EXECUTION", "INTRA_OP_THREAD_COUNT", "INTER_OP_THREAD_COUNT"}
TORCH_DTYPES = {
    "TYPE_BOOL": torch.bool, "TYPE_UINT8": torch.uint8, "TYPE_INT8": torch.int8, "TYPE_INT16": torch.int16,
    "TYPE_INT32": torch.int32, "TYPE_INT64": torch.int64, "TYPE_FP16": torch.float16,
    "TYPE_BF16": torch.bfloat16, "TYPE_FP32": torch.float32, "TYPE_FP64": torch.float64,
}


class RequestError(ValueError):
    """Something wrong with one request; answered as INVALID_ARG for that request alone."""


def _flag(value: str) -> bool:
    return value.strip().lower() in ("1", "true", "yes", "on")


def _argument_order(names: list[str], forward_args: list[str], kind: str) -> list[int]:
    """Position of each configured tensor among the model's arguments or results."""
    if kind == "input" and set(names) <= set(forward_args):
        return [forward_args.index(name) for name in names]
    matches = [NAMED_INDEX.match(name) for name in names]
    if all(matches):
        order = [int(m.group(1)) for m in matches]
        if sorted(order) != list(range(len(names))):
            raise ValueError(f"{kind} indices {sorted(order)} of {names} are not 0..{len(names) - 1}")
        return order
    return list(range(len(names)))


class TritonPythonModel:
    def initialize(self, args):
        self.config = json.loads(args["model_config"])
        self.name = args["model_name"]
        params = {k: v.get("string_value", "") for k, v in self.config.get("parameters", {}).items()}
        ignored = sorted(set(params) - HONOURED_PARAMETERS - {"EXECUTION_ENV_PATH"})
        if ignored:
            pb_utils.Logger.log_warn(f"{self.name}: parameters not used by the local runtime: {ignored}")

        self.device = self._device(args["model_instance_kind"], int(args["model_instance_device_id"]))
        self._set_threads(params)
        self.inference_mode = _flag(params.get("INFERENCE_MODE", "true"))
        if _flag(params.get("DISABLE_OPTIMIZED_EXECUTION", "false")):
            torch._C._set_graph_executor_optimize(False)

        filename = self.config.get("default_model_filename") or "model.pt"
        path = Path(args["model_repository"]) / args["model_version"] / filename
        if not path.is_file():
            raise pb_utils.TritonModelException(f"{self.name}: no TorchScript file at {path}")
        self.module = torch.jit.load(str(path), map_location=self.device).eval()

        self.max_batch_size = int(self.config.get("max_batch_size", 0))
        self.inputs = [(t["name"], self._dtype(t)) for t in self.config["input"]]
        self.outputs = [(t["name"], self._dtype(t)) for t in self.config["output"]]
        forward_args = [a.name for a in self.module.forward.schema.arguments][1:]
        if len(forward_args) != len(self.inputs):
            raise pb_utils.TritonModelException(
                f"{self.name}: forward takes {len(forward_args)} inputs {forward_args}, "
                f"the config lists {len(self.inputs)}"
            )
        self.input_positions = _argument_order([n for n, _ in self.inputs], forward_args, "input")
        self.output_positions = _argument_order([n for n, _ in self.outputs], [], "output")

    def _device(self, kind: str, device_id: int) -> torch.device:
        if kind == "GPU":
            if not torch.cuda.is_available():
                raise pb_utils.TritonModelException(f"{self.name}: KIND_GPU instance but torch sees no CUDA device")
            return torch.device("cuda", device_id)
        return torch.device("cpu")

    def _set_threads(self, params: dict) -> None:
        instances = sum(int(g.get("count", 1)) for g in self.config.get("instance_group", [])) or 1
        cores = len(os.sched_getaffinity(0))
        # Each instance is its own process: split the cores so instances x threads <= cores.
        intra = int(params.get("INTRA_OP_THREAD_COUNT") or max(1, cores // instances))
        torch.set_num_threads(intra)
        inter = int(params.get("INTER_OP_THREAD_COUNT") or 1)
        try:
            torch.set_num_interop_threads(inter)
        except RuntimeError:  # already set in this process
            pass

    def _dtype(self, tensor_config: dict) -> torch.dtype:
        dtype = TORCH_DTYPES.get(tensor_config["data_type"])
        if dtype is None:
            raise pb_utils.TritonModelException(
                f"{self.name}: tensor {tensor_config['name']!r} has {tensor_config['data_type']}, "
                f"which the local TorchScript runtime does not support"
            )
        return dtype

    # -- execution ----------------------------------------------------------------------------
    def execute(self, requests):
        responses = [None] * len(requests)
        groups = defaultdict(list)  # requests whose inputs have the same shape run as one batch
        for i, request in enumerate(requests):
            try:
                tensors = self._request_inputs(request)
            except RequestError as exc:
                responses[i] = self._error(exc, pb_utils.TritonError.INVALID_ARG)
                continue
            key = tuple(tuple(t.shape[1:] if self.max_batch_size else t.shape) for t in tensors)
            groups[key if self.max_batch_size else (key, i)].append((i, tensors))
        for members in groups.values():
            self._run_group(members, responses)
        return responses

    def _request_inputs(self, request) -> list[torch.Tensor]:
        tensors = []
        for name, _ in self.inputs:
            tensor = pb_utils.get_input_tensor_by_name(request, name)
            if tensor is None:
                raise RequestError(f"{self.name}: input {name!r} is missing")
            tensors.append(torch.from_dlpack(tensor.to_dlpack()))
        if self.max_batch_size:
            sizes = {t.shape[0] for t in tensors}
            if len(sizes) != 1:
                raise RequestError(f"{self.name}: inputs disagree on the batch size: {sorted(sizes)}")
        return tensors

    def _run_group(self, members, responses) -> None:
        try:
            results = self._forward([tensors for _, tensors in members])
        except Exception as exc:  # noqa: BLE001 - the model's own error goes back to the client
            if len(members) > 1:  # find the request at fault; the others still get answers
                for member in members:
                    self._run_group([member], responses)
                return
            responses[members[0][0]] = self._error(exc, pb_utils.TritonError.INVALID_ARG)
            return
        start = 0
        for i, tensors in members:
            size = tensors[0].shape[0] if self.max_batch_size else None
            outputs = [
                pb_utils.Tensor.from_dlpack(name, (r[start:start + size] if size is not None else r).contiguous())
                for (name, _), r in zip(self.outputs, results)
            ]
            responses[i] = pb_utils.InferenceResponse(output_tensors=outputs)
            start += size or 0

    def _forward(self, batches: list[list[torch.Tensor]]) -> list[torch.Tensor]:
        columns = list(zip(*batches))
        inputs = [cols[0] if len(cols) == 1 else torch.cat(cols) for cols in columns]
        args = [None] * len(inputs)
        for tensor, position in zip(inputs, self.input_positions):
            args[position] = tensor.to(self.device, non_blocking=True)
        context = torch.inference_mode() if self.inference_mode else torch.no_grad()
        with context:
            result = self.module(*args)
        if isinstance(result, torch.Tensor):
            result = (result,)
        elif isinstance(result, dict):
            result = tuple(result.values())
        if len(result) != len(self.outputs):
            raise RuntimeError(f"{self.name}: model returned {len(result)} outputs, the config lists {len(self.outputs)}")
        ordered = [result[p] for p in self.output_positions]
        for (name, dtype), tensor in zip(self.outputs, ordered):
            if tensor.dtype != dtype:
                raise RuntimeError(f"{self.name}: output {name!r} is {tensor.dtype}, the config says {dtype}")
        return ordered

    def _error(self, exc: Exception, code) -> "pb_utils.InferenceResponse":
        return pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc), code))

    def finalize(self):
        self.module = None
