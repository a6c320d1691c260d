"""A Python runtime for TorchScript models, so the local server serves the NGC container's configs.

Triton loads this folder as the Python-based backend ``pytorch``: a model configured for the native
libtorch backend (``platform: "pytorch_libtorch"`` or ``backend: "pytorch"``, ``<version>/model.pt``)
loads here unchanged. It follows the native backend's conventions:

* inputs are matched to ``forward`` by argument name, else by ``NAME__<index>``, else by config order;
  outputs by ``NAME__<index>``, else by config order;
* parameters ``INFERENCE_MODE``, ``DISABLE_OPTIMIZED_EXECUTION``, ``INTRA_OP_THREAD_COUNT`` and
  ``INTER_OP_THREAD_COUNT`` are honoured; the rest are reported as ignored at load;
* ``TORCH_OPS_MODULES`` (comma-separated Python modules, e.g. ``backends.custom_ops``) is imported
  before ``torch.jit.load``, to register the custom ops (``torch.library``) a model calls.

Tensors move between Triton and torch through DLPack (no copy for a single request). A ``KIND_GPU``
instance loads the module on ``cuda:<model_instance_device_id>`` and returns its outputs as CUDA
tensors through DLPack (no host copy in the runtime); with ``FORCE_CPU_ONLY_INPUT_TENSORS: "no"``
(read by the Python backend itself) inputs already in GPU memory arrive there too. Batching and
per-request errors are in ``backends/batching.py``.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import torch
import triton_python_backend_utils as pb_utils

from backends.batching import BatchingModel, flag

NAMED_INDEX = re.compile(r"^.+__(\d+)$")
TORCH_DTYPES = {
    "TYPE_BOOL": torch.bool,
    "TYPE_UINT8": torch.uint8,
    "TYPE_INT8": torch.int8,
    "TYPE_INT16": torch.int16,
    "TYPE_INT32": torch.int32,
    "TYPE_INT64": torch.int64,
    "TYPE_FP16": torch.float16,
    "TYPE_BF16": torch.bfloat16,
    "TYPE_FP32": torch.float32,
    "TYPE_FP64": torch.float64,
}


def argument_order(names: list[str], forward_args: list[str], kind: str) -> list[int]:
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


class TritonPythonModel(BatchingModel):
    honoured_parameters = frozenset(
        {
            "INFERENCE_MODE",
            "DISABLE_OPTIMIZED_EXECUTION",
            "INTRA_OP_THREAD_COUNT",
            "INTER_OP_THREAD_COUNT",
            "TORCH_OPS_MODULES",
            "FORCE_CPU_ONLY_INPUT_TENSORS",
        }
    )

    def load(self, args) -> None:
        self.device = self._device(args["model_instance_kind"], int(args["model_instance_device_id"]))
        torch.set_num_threads(int(self.parameters.get("INTRA_OP_THREAD_COUNT") or self.instance_threads()))
        try:
            torch.set_num_interop_threads(int(self.parameters.get("INTER_OP_THREAD_COUNT") or 1))
        except RuntimeError:  # already set in this process
            pass
        self.inference_mode = flag(self.parameters.get("INFERENCE_MODE", "true"))
        if flag(self.parameters.get("DISABLE_OPTIMIZED_EXECUTION", "false")):
            torch._C._set_graph_executor_optimize(False)

        filename = self.config.get("default_model_filename") or "model.pt"
        path = Path(args["model_repository"]) / args["model_version"] / filename
        if not path.is_file():
            raise pb_utils.TritonModelException(f"{self.name}: no TorchScript file at {path}")
        ops_modules = [m.strip() for m in self.parameters.get("TORCH_OPS_MODULES", "").split(",") if m.strip()]
        for module_name in ops_modules:  # registers the custom ops the TorchScript file calls
            try:
                importlib.import_module(module_name)
            except Exception as exc:  # noqa: BLE001 - any import failure is a load failure, with its cause
                raise pb_utils.TritonModelException(
                    f"{self.name}: TORCH_OPS_MODULES: cannot import {module_name!r}: {type(exc).__name__}: {exc}"
                ) from exc
        try:
            self.module = torch.jit.load(str(path), map_location=self.device).eval()
        except RuntimeError as exc:
            unknown = re.search(r"Unknown builtin op: (\w+::\w+)", str(exc))
            if unknown is None:
                raise
            raise pb_utils.TritonModelException(
                f"{self.name}: {path.name} calls the custom op {unknown.group(1)}, which is not registered; "
                f"name the Python module that registers it in the config parameter TORCH_OPS_MODULES "
                f"(now {ops_modules or 'unset'})"
            ) from exc

        self.output_dtypes = [self._dtype(t) for t in self.config["output"]]
        for t in self.config["input"]:
            self._dtype(t)
        forward_args = [a.name for a in self.module.forward.schema.arguments][1:]
        if len(forward_args) != len(self.inputs):
            raise pb_utils.TritonModelException(
                f"{self.name}: forward takes {len(forward_args)} inputs {forward_args}, "
                f"the config lists {len(self.inputs)}"
            )
        self.input_positions = argument_order(self.inputs, forward_args, "input")
        self.output_positions = argument_order(self.outputs, [], "output")

    def _device(self, kind: str, device_id: int) -> torch.device:
        if kind == "GPU":
            if not torch.cuda.is_available():
                raise pb_utils.TritonModelException(f"{self.name}: KIND_GPU instance but torch sees no CUDA device")
            torch.cuda.set_device(device_id)  # the stub's DLPack exchange uses the current device's stream
            return torch.device("cuda", device_id)
        return torch.device("cpu")

    def _dtype(self, tensor_config: dict) -> torch.dtype:
        dtype = TORCH_DTYPES.get(tensor_config["data_type"])
        if dtype is None:
            raise pb_utils.TritonModelException(
                f"{self.name}: tensor {tensor_config['name']!r} has {tensor_config['data_type']}, "
                f"which the local TorchScript runtime does not support"
            )
        return dtype

    def to_array(self, tensor):
        return torch.from_dlpack(tensor.to_dlpack())

    def from_array(self, name, array):
        return pb_utils.Tensor.from_dlpack(name, array.contiguous())

    def concat(self, arrays):
        return torch.cat(arrays)

    def forward(self, inputs):
        args = [None] * len(inputs)
        for tensor, position in zip(inputs, self.input_positions, strict=True):
            args[position] = tensor.to(self.device, non_blocking=True)
        with torch.inference_mode() if self.inference_mode else torch.no_grad():
            result = self.module(*args)
        if isinstance(result, torch.Tensor):
            result = (result,)
        elif isinstance(result, dict):
            result = tuple(result.values())
        if len(result) != len(self.outputs):
            raise RuntimeError(
                f"{self.name}: model returned {len(result)} outputs, the config lists {len(self.outputs)}"
            )
        ordered = [result[p] for p in self.output_positions]
        for name, dtype, tensor in zip(self.outputs, self.output_dtypes, ordered, strict=True):
            if tensor.dtype != dtype:
                raise RuntimeError(f"{self.name}: output {name!r} is {tensor.dtype}, the config says {dtype}")
        return ordered

    def finalize(self):
        self.module = None
