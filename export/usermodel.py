"""Your own model: ``FILE.py:FACTORY`` plus input specs and output names -> a ``ZooModel`` to export.

The factory is called with no arguments and must return an ``nn.Module`` whose ``forward`` takes the
inputs in the order given. Output shapes are read off two eager runs at different sizes, so a
dimension that changes with a dynamic input dimension is marked dynamic (-1).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch
from torch import nn

from export.errors import SpecError, UserModelError
from export.spec import TensorSpec
from export.zoo.base import Tolerance, ZooModel

_TORCH_DTYPES = {
    "FP32": torch.float32,
    "FP16": torch.float16,
    "FP64": torch.float64,
    "BF16": torch.bfloat16,
    "INT64": torch.int64,
    "INT32": torch.int32,
    "INT16": torch.int16,
    "INT8": torch.int8,
    "UINT8": torch.uint8,
    "BOOL": torch.bool,
}


def random_tensor(spec: TensorSpec, batch: int, dynamic: int, generator: torch.Generator) -> torch.Tensor:
    shape = (batch, *[dynamic if d == -1 else d for d in spec.dims])
    dtype = _TORCH_DTYPES[spec.datatype]
    if dtype.is_floating_point:
        return torch.randn(shape, generator=generator).to(dtype)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=generator).bool()
    return torch.randint(0, 100, shape, generator=generator).to(dtype)


def load_factory(reference: str):
    path_text, sep, factory_name = reference.rpartition(":")
    if not sep or not path_text.endswith(".py") or not factory_name:
        raise SpecError(f"--model-file {reference!r} is not FILE.py:FACTORY")
    path = Path(path_text)
    if not path.is_file():
        raise SpecError(f"--model-file: no file {str(path)!r}")
    spec = importlib.util.spec_from_file_location(f"user_model_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise UserModelError(f"{path} failed to import: {type(exc).__name__}: {exc}") from None
    factory = getattr(module, factory_name, None)
    if not callable(factory):
        raise SpecError(f"--model-file: {path} has no callable {factory_name!r}")
    return factory


def load_user_model(reference: str, name: str | None, inputs: list[TensorSpec], outputs: list[str]) -> ZooModel:
    if not name:
        raise SpecError("--model-file needs --name")
    if not inputs or not outputs:
        raise SpecError("--model-file needs at least one --input NAME:DTYPE:DIMS and one --output NAME")
    factory = load_factory(reference)
    try:
        module = factory()
    except Exception as exc:
        raise UserModelError(f"{reference} raised {type(exc).__name__}: {exc}") from None
    if not isinstance(module, nn.Module):
        raise UserModelError(f"{reference} returned {type(module).__name__}, not a torch.nn.Module")
    module.eval()
    generator = torch.Generator().manual_seed(0)
    small = tuple(random_tensor(t, 2, 5, generator) for t in inputs)
    large = tuple(random_tensor(t, 3, 7, generator) for t in inputs)
    try:
        with torch.no_grad():
            first, second = _as_tuple(module(*small)), _as_tuple(module(*large))
    except Exception as exc:
        raise UserModelError(
            f"{reference}: the model fails on inputs {[str(t) for t in inputs]}: {type(exc).__name__}: {exc}"
        ) from None
    if not all(isinstance(t, torch.Tensor) for t in (*first, *second)):
        raise UserModelError(f"{reference}: forward must return tensors, got {[type(t).__name__ for t in first]}")
    if len(first) != len(outputs):
        raise SpecError(f"{reference}: the model returns {len(first)} outputs, --output names {len(outputs)}")
    if len(first) != len(second) or any(a.dim() != b.dim() for a, b in zip(first, second, strict=True)):
        raise UserModelError(
            f"{reference}: the outputs' number or rank changes with the batch size: "
            f"{[tuple(t.shape) for t in first]} vs {[tuple(t.shape) for t in second]}"
        )
    output_specs = tuple(
        TensorSpec(
            out_name,
            _datatype(a.dtype),
            tuple(-1 if da != db else da for da, db in zip(a.shape[1:], b.shape[1:], strict=True)),
        )
        for out_name, a, b in zip(outputs, first, second, strict=True)
    )
    return ZooModel(
        name=name,
        module=module,
        inputs=tuple(inputs),
        outputs=output_specs,
        example_inputs=small,
        random_inputs=lambda batch, seq, gen: tuple(random_tensor(t, batch, seq or 6, gen) for t in inputs),
        reference_inputs=large,
        seq_lengths=(3, 9) if any(-1 in t.dims for t in inputs) else (),
        tolerances={"fp32": Tolerance(atol=1e-4, rtol=1e-4), "fp16": Tolerance(atol=5e-2, rtol=5e-2)},
        description=f"user model from {reference}",
    )


def _as_tuple(result) -> tuple[torch.Tensor, ...]:
    return (result,) if isinstance(result, torch.Tensor) else tuple(result)


def _datatype(dtype: torch.dtype) -> str:
    for name, candidate in _TORCH_DTYPES.items():
        if candidate == dtype:
            return name
    raise SpecError(f"output dtype {dtype} has no Triton datatype")
