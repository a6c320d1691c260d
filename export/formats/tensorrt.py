"""Eager -> traced on the device -> Torch-TensorRT, saved as TorchScript for Triton's libtorch backend (GPU only).

Needs CUDA and the ``torch_tensorrt`` package (the NGC PyTorch container has both). The batch
dimension is dynamic through ``Input(min_shape, opt_shape, max_shape)``; text models also get a
dynamic sequence length. Where CUDA or torch_tensorrt is missing, ``FormatUnavailable`` says which.

The module is traced first, as the TorchScript export does: ``compile(ir="ts")`` given a plain
``nn.Module`` runs ``torch.jit.script`` on it, and a Hugging Face BERT (minilm) does not script.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from export.errors import FormatUnavailable
from export.formats import torchscript
from export.formats.registry import Format, register
from export.spec import shape_ranges

if TYPE_CHECKING:  # torch is imported where it runs, so the registry's readers stay light
    from export.variants import Variant
    from export.zoo.base import ZooModel

FORMAT = register(
    Format(
        name="torch-tensorrt",
        filename="model.pt",
        platform="pytorch_libtorch",
        backend="pytorch",
        runtime="Torch-TensorRT (TorchScript on CUDA)",
        precisions={"gpu": ("fp16", "fp32")},
        module=__name__,
        suffix="trt",
        target_reason="builds TensorRT engines for a GPU",
        rank=1,
    )
)


def _toolchain():
    import torch

    if not torch.cuda.is_available():
        raise FormatUnavailable("Torch-TensorRT needs a CUDA device and torch sees none")
    try:
        import torch_tensorrt
    except ImportError:
        raise FormatUnavailable(
            "the torch_tensorrt package is not installed (the NGC PyTorch container has it)"
        ) from None
    return torch_tensorrt


def input_ranges(zoo: ZooModel, max_batch_size: int) -> list[tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]]:
    """(min, opt, max) shapes per input: batch 1..max (opt at half), dynamic dims 1..MAX_DYNAMIC_DIM (opt at half)."""
    return shape_ranges(zoo.inputs, max(max_batch_size, 1))


def convert(zoo: ZooModel, variant: Variant, target: Path, device: str = "cuda", max_batch_size: int = 1) -> None:
    import torch

    torch_tensorrt = _toolchain()
    dtypes = {"FP32": torch.float32, "INT64": torch.int64, "INT32": torch.int32, "FP16": torch.float16}
    inputs = [
        torch_tensorrt.Input(min_shape=low, opt_shape=opt, max_shape=high, dtype=dtypes[t.datatype])
        for t, (low, opt, high) in zip(zoo.inputs, input_ranges(zoo, max_batch_size), strict=True)
    ]
    precisions = {torch.float32} | ({torch.half} if variant.precision == "fp16" else set())
    module = zoo.module.to(device).eval()
    try:
        # FP32 weights: TensorRT picks FP16 kernels itself from enabled_precisions, and I/O stays FP32.
        traced = torchscript.trace(module, tuple(x.to(device) for x in zoo.example_inputs), freeze=False)
        compiled = torch_tensorrt.compile(
            traced, ir="ts", inputs=inputs, enabled_precisions=precisions, truncate_long_and_double=True
        )
        torch.jit.save(compiled, str(target))
    finally:
        zoo.module.to("cpu")


def load(path: Path, device: str = "cuda", variant: Variant | None = None):
    import torch

    _toolchain()
    module = torch.jit.load(str(path), map_location="cuda").eval()

    def run(*inputs: torch.Tensor):
        with torch.no_grad():
            return module(*[x.to("cuda") for x in inputs])

    return run
