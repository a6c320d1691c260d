"""Eager -> ONNX with dynamic batch (and sequence) axes, checked by ``onnx.checker``, run by ONNX Runtime.

The file is always FP32. On the GPU target an FP16 variant asks Triton's onnxruntime backend for
the TensorRT execution accelerator in FP16 (the config says so); on CPU only FP32 is offered.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from export.errors import FormatUnavailable
from export.formats.registry import PRECISIONS, Format, register

if TYPE_CHECKING:  # torch is imported where it runs, so the registry's readers stay light
    import torch

    from export.variants import Variant
    from export.zoo.base import ZooModel

FORMAT = register(
    Format(
        name="onnx",
        filename="model.onnx",
        platform="onnxruntime_onnx",
        backend="onnxruntime",
        runtime="ONNX Runtime",
        precisions={"cpu": ("fp32",), "gpu": PRECISIONS},
        module=__name__,
        suffix="onnx",
        target_reason="runs through the TensorRT accelerator on a GPU",
        required_on=frozenset({"cpu"}),
        accelerator="tensorrt",
        accelerated_precisions=("fp16", "bf16"),
        rank=2,
    )
)
OPSET = 17


def dynamic_axes(zoo: ZooModel) -> dict[str, dict[int, str]]:
    axes = {}
    for tensor in (*zoo.inputs, *zoo.outputs):
        axes[tensor.name] = {
            0: "batch",
            **{i + 1: f"{tensor.name}_{i + 1}" for i, d in enumerate(tensor.dims) if d == -1},
        }
    return axes


def convert(zoo: ZooModel, variant: Variant, target: Path, device: str = "cpu", max_batch_size: int = 0) -> None:
    import onnx
    import torch

    with torch.no_grad():
        torch.onnx.export(
            zoo.module,
            zoo.example_inputs,
            str(target),
            input_names=[t.name for t in zoo.inputs],
            output_names=[t.name for t in zoo.outputs],
            dynamic_axes=dynamic_axes(zoo),
            opset_version=OPSET,
            dynamo=False,
        )
    onnx.checker.check_model(str(target), full_check=True)


def providers(variant: Variant | None, device: str) -> list:
    if device == "cpu":
        return ["CPUExecutionProvider"]
    import onnxruntime

    available = onnxruntime.get_available_providers()
    if variant is not None and variant.precision == "fp16":
        if "TensorrtExecutionProvider" not in available:
            raise FormatUnavailable(f"onnxruntime here has no TensorrtExecutionProvider (has {available})")
        return [("TensorrtExecutionProvider", {"trt_fp16_enable": True}), "CUDAExecutionProvider"]
    if "CUDAExecutionProvider" not in available:
        raise FormatUnavailable(f"onnxruntime here has no CUDAExecutionProvider (has {available})")
    return ["CUDAExecutionProvider"]


def check_session(asked: list, got: list[str]) -> str:
    """The provider the session really runs on, which must be the one asked first: ONNX Runtime lists a provider
    it was built with (``get_available_providers``) yet falls back, with a warning only, when its libraries
    (CUDA, cuDNN, TensorRT) do not load; a check on that fallback would pass while measuring the CPU."""
    wanted = asked[0][0] if isinstance(asked[0], tuple) else asked[0]
    if not got or got[0] != wanted:
        fell = "fell back to the CPU" if got[:1] == ["CPUExecutionProvider"] else f"runs on {got[:1] or 'nothing'}"
        raise FormatUnavailable(f"onnxruntime's session {fell}: {wanted} did not load here (session providers: {got})")
    return wanted


def load(path: Path, device: str = "cpu", variant: Variant | None = None):
    """``variant`` None: FP32 (the precision picks the GPU's execution provider)."""
    import onnxruntime
    import torch

    asked = providers(variant, device)
    session = onnxruntime.InferenceSession(str(path), providers=asked)
    check_session(asked, session.get_providers())
    names = [i.name for i in session.get_inputs()]

    def run(*inputs: torch.Tensor):
        outputs = session.run(None, {n: x.cpu().numpy() for n, x in zip(names, inputs, strict=True)})
        return tuple(torch.from_numpy(o) for o in outputs)

    return run
