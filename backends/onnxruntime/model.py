"""A Python runtime for ONNX models, so the local server serves configs written for Triton's
native ``onnxruntime`` backend (``platform: "onnxruntime_onnx"``, ``<version>/model.onnx``).

The NGC container runs the same config with its native backend. Here the ``onnxruntime`` package
runs it: inputs and outputs are matched by name as in the native backend, ``intra_op_thread_count``
and ``inter_op_thread_count`` are honoured (default: the instance's share of the cores), and a
``KIND_GPU`` instance uses CUDA, with TensorRT when the config asks for the TensorRT accelerator.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime
import triton_python_backend_utils as pb_utils

from backends.batching import BatchingModel


class TritonPythonModel(BatchingModel):
    honoured_parameters = frozenset({"intra_op_thread_count", "inter_op_thread_count"})

    def load(self, args) -> None:
        filename = self.config.get("default_model_filename") or "model.onnx"
        path = Path(args["model_repository"]) / args["model_version"] / filename
        if not path.is_file():
            raise pb_utils.TritonModelException(f"{self.name}: no ONNX file at {path}")
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = int(self.parameters.get("intra_op_thread_count") or self.instance_threads())
        options.inter_op_num_threads = int(self.parameters.get("inter_op_thread_count") or 1)
        self.session = onnxruntime.InferenceSession(str(path), options, providers=self._providers(args))
        model_inputs = {i.name for i in self.session.get_inputs()}
        model_outputs = {o.name for o in self.session.get_outputs()}
        missing = [n for n in self.inputs if n not in model_inputs] + [
            n for n in self.outputs if n not in model_outputs
        ]
        if missing:
            raise pb_utils.TritonModelException(
                f"{self.name}: config tensors {missing} are not in the ONNX model "
                f"(inputs {sorted(model_inputs)}, outputs {sorted(model_outputs)})"
            )

    def _providers(self, args) -> list:
        if args["model_instance_kind"] != "GPU":
            return ["CPUExecutionProvider"]
        device = {"device_id": int(args["model_instance_device_id"])}
        accelerators = self.config.get("optimization", {}).get("execution_accelerators", {})
        for accelerator in accelerators.get("gpu_execution_accelerator", []):
            if accelerator.get("name") == "tensorrt":
                parameters = accelerator.get("parameters", {})
                fp16 = parameters.get("precision_mode", "FP32") == "FP16"
                # trt_* keys (engine and timing caches, shape profiles) are ONNX Runtime's own option names,
                # as in Triton's onnxruntime backend.
                passed = {k: v for k, v in parameters.items() if k.startswith("trt_")}
                return [
                    ("TensorrtExecutionProvider", {**device, **passed, "trt_fp16_enable": fp16}),
                    ("CUDAExecutionProvider", device),
                ]
        return [("CUDAExecutionProvider", device)]

    def to_array(self, tensor):
        return tensor.as_numpy()

    def from_array(self, name, array):
        return pb_utils.Tensor(name, np.ascontiguousarray(array))

    def concat(self, arrays):
        return np.concatenate(arrays)

    def forward(self, inputs):
        return self.session.run(self.outputs, dict(zip(self.inputs, inputs, strict=True)))

    def finalize(self):
        self.session = None
