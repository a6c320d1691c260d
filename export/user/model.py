"""Your own model: ``FILE.py:FACTORY`` plus input specs and output names -> a ``ZooModel`` to export.

The factory is called with no arguments and returns an ``nn.Module``. Inputs bind to ``forward`` by name:
``--input input_ids:...`` is passed as ``input_ids=...``, so a forward with many optional parameters (a
``transformers`` model's ``token_type_ids``, ``use_cache``, ...) gets only those named; keyword-only parameters
bind the same way, and a forward taking ``**kwargs`` also receives names it does not list. When no input name is a
parameter and forward can take that many arguments by position (``forward(self, x)`` given ``--input
features:...``), they are passed in the order given, as before.

What forward returns is flattened to named tensors by ``export.outputs`` (tensor, tuple, dict, ``ModelOutput``,
nested); ``--output`` picks and orders them. Every format exports ``UserModelAdapter``, which takes the inputs by
position (under their names) and returns the chosen outputs as a flat tuple, so TorchScript, ONNX and the parity
check see the same outputs. Output shapes are read off two eager runs at different sizes, so a dimension that
changes with a dynamic input dimension is marked dynamic (-1).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import keyword
from pathlib import Path

import torch
from torch import nn

from export import catalog
from export import outputs as results
from export.errors import SpecError, UserModelError
from export.spec import TensorSpec
from export.user import recorded
from export.variants import Variant
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


_NAMED = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


@dataclasses.dataclass(frozen=True)
class Binding:
    """How the inputs reach ``forward``: by name (keyword arguments) or in the order given."""

    by_name: bool
    parameters: tuple[str, ...] = ()
    """forward's named parameters, for messages."""
    to_kwargs: tuple[str, ...] = ()
    """Input names forward does not list, passed into its ``**kwargs``."""


def bind_inputs(module: nn.Module, inputs: list[TensorSpec], where: str) -> Binding:
    """By name when every input names a parameter (or forward takes ``**kwargs``); in order when none does and
    forward takes that many positional arguments; else a ``SpecError`` listing the parameters."""
    try:
        signature = inspect.signature(module.forward)
    except (TypeError, ValueError):  # a scripted or builtin forward has no Python signature to bind to
        return Binding(by_name=False)
    params = list(signature.parameters.values())
    named = tuple(p.name for p in params if p.kind in _NAMED)
    names = [t.name for t in inputs]
    unknown = tuple(n for n in names if n not in named)
    takes_kwargs = any(p.kind == inspect.Parameter.VAR_KEYWORD for p in params)
    if not unknown or takes_kwargs:
        missing = [p.name for p in params if p.kind in _NAMED and p.default is p.empty and p.name not in names]
        if missing:
            raise SpecError(
                f"{where}: forward's parameter(s) {', '.join(map(repr, missing))} have no default: "
                f"give each an --input NAME:DTYPE:DIMS"
            )
        return Binding(by_name=True, parameters=named, to_kwargs=unknown)
    positional = [p for p in params if p.kind in _POSITIONAL]
    required = [p for p in positional if p.default is p.empty]
    takes_args = any(p.kind == inspect.Parameter.VAR_POSITIONAL for p in params)
    if len(unknown) == len(names) and (takes_args or len(required) <= len(names) <= len(positional)):
        return Binding(by_name=False, parameters=named)
    raise SpecError(
        f"{where}: --input {', '.join(map(repr, unknown))} is not a parameter of forward; "
        f"its parameters are {', '.join(named) or '(none by name)'}"
    )


class UserModelAdapter(nn.Module):
    """The user's module as every format exports it: the inputs by position, the chosen outputs as a flat tuple
    (a single output as a bare tensor, as a plain model returns it). ``adapt`` gives it a ``forward`` whose
    argument names are the inputs', which is how the TorchScript runtimes match a request's inputs."""

    def __init__(self, module: nn.Module, input_names: list[str], by_name: bool, paths: list[tuple]):
        super().__init__()
        self.inner = module
        self.input_names = tuple(input_names)
        self.by_name = by_name
        self.paths = tuple(paths)

    def run(self, *tensors: torch.Tensor):
        if self.by_name:
            result = self.inner(**dict(zip(self.input_names, tensors, strict=True)))
        else:
            result = self.inner(*tensors)
        picked = tuple(results.pick(result, path) for path in self.paths)
        return picked[0] if len(picked) == 1 else picked


def adapt(module: nn.Module, input_names: list[str], by_name: bool, paths: list[tuple]) -> UserModelAdapter:
    arguments = [
        n if n.isidentifier() and not keyword.iskeyword(n) and n != "self" else f"input_{i}"
        for i, n in enumerate(input_names)
    ]
    if len(set(arguments)) != len(arguments):
        arguments = [f"input_{i}" for i in range(len(input_names))]
    listed = ", ".join(arguments)
    namespace: dict = {}
    exec(f"def forward(self, {listed}):\n    return self.run({listed})\n", namespace)  # noqa: S102 - identifiers only
    adapter_type = type("UserModel", (UserModelAdapter,), {"forward": namespace["forward"]})
    return adapter_type(module, input_names, by_name, paths).eval()


def load_user_model(reference: str, name: str | None, inputs: list[TensorSpec], outputs: list[str]) -> ZooModel:
    """``outputs`` (``--output``) may be empty: then every tensor the model returns is an output."""
    if not name:
        raise SpecError("--model-file needs --name")
    if not inputs:
        raise SpecError("--model-file needs at least one --input NAME:DTYPE:DIMS")
    factory = load_factory(reference)
    try:
        module = factory()
    except Exception as exc:
        raise UserModelError(f"{reference} raised {type(exc).__name__}: {exc}") from None
    if not isinstance(module, nn.Module):
        raise UserModelError(f"{reference} returned {type(module).__name__}, not a torch.nn.Module")
    module.eval()
    binding = bind_inputs(module, inputs, reference)
    generator = torch.Generator().manual_seed(0)
    small = tuple(random_tensor(t, 2, 5, generator) for t in inputs)
    large = tuple(random_tensor(t, 3, 7, generator) for t in inputs)
    raw = UserModelAdapter(module, [t.name for t in inputs], binding.by_name, [()])  # the whole result
    try:
        with torch.no_grad():
            first, second = raw.run(*small), raw.run(*large)
    except Exception as exc:
        passed = (
            f" ({', '.join(map(repr, binding.to_kwargs))} went into forward's **kwargs; its named parameters "
            f"are {', '.join(binding.parameters)})"
            if binding.to_kwargs
            else ""
        )
        raise UserModelError(
            f"{reference}: the model fails on inputs {' '.join(map(_spelled, inputs))}: {type(exc).__name__}: "
            f"{exc}{passed}"
        ) from None
    selection = results.select(first, list(outputs), reference)
    output_specs = tuple(_output_spec(reference, n, p, first, second) for n, p in selection.outputs)
    if selection.left_out or not outputs:
        left = f"; left out: {selection.left_out_line()}" if selection.left_out else ""
        print(f"{name}: outputs {', '.join(selection.names)}{left}", flush=True)
    adapter = adapt(module, [t.name for t in inputs], binding.by_name, [p for _, p in selection.outputs])
    return ZooModel(
        name=name,
        module=adapter,
        inputs=tuple(inputs),
        outputs=output_specs,
        example_inputs=small,
        random_inputs=lambda batch, seq, gen: tuple(random_tensor(t, batch, seq or 6, gen) for t in inputs),
        reference_inputs=large,
        seq_lengths=(3, 9) if any(-1 in t.dims for t in inputs) else (),
        tolerances={"fp32": Tolerance(atol=1e-4, rtol=1e-4), "fp16": Tolerance(atol=5e-2, rtol=5e-2)},
        description=f"user model from {reference}",
    )


def _output_spec(reference: str, name: str, path: tuple, first, second) -> TensorSpec:
    """The output at ``path`` of the runs at batch 2 and 3: dims that differ between them are dynamic."""
    a = results.pick(first, path)
    try:
        b = results.pick(second, path)
    except (KeyError, IndexError, TypeError):
        b = None
    if not isinstance(b, torch.Tensor) or a.dim() != b.dim():
        raise UserModelError(
            f"{reference}: output {name!r} changes from {tuple(a.shape)} to "
            f"{tuple(b.shape) if isinstance(b, torch.Tensor) else type(b).__name__} with the batch size"
        )
    if a.dim() < 2 or (a.shape[0], b.shape[0]) != (2, 3):
        raise SpecError(
            f"{reference}: output {name!r} has shape {tuple(a.shape)} at batch 2 and {tuple(b.shape)} at batch 3; "
            f"an output needs the batch as its first dim and at least one more (--output picks the outputs)"
        )
    dims = tuple(-1 if da != db else da for da, db in zip(a.shape[1:], b.shape[1:], strict=True))
    return TensorSpec(name, _datatype(a.dtype), dims)


def _spelled(spec: TensorSpec) -> str:
    return f"{spec.name}:{spec.datatype}:{','.join(map(str, spec.dims))}"


def _datatype(dtype: torch.dtype) -> str:
    for name, candidate in _TORCH_DTYPES.items():
        if candidate == dtype:
            return name
    raise SpecError(f"output dtype {dtype} has no Triton datatype")


def user_entry(
    reference: str, name: str | None, inputs: list[TensorSpec], outputs: list[str], repository: Path
) -> tuple[catalog.CatalogEntry, object, dict]:
    """A --model-file export. Its serving settings are those recorded by its last export (or ``tritonkit
    tune``) of the same file, else the defaults; the serving flags given override them."""
    path, _, factory = reference.rpartition(":")
    if path.endswith(".py") and Path(path).is_file():
        reference = f"{Path(path).resolve()}:{factory}"
    model = load_user_model(reference, name, inputs, outputs)
    previous = recorded.read(repository / model.name)
    kept = previous if previous and previous.get("model_file") == reference else None
    settings = dict(kept["settings"]) if kept else dict(recorded.DEFAULT_SETTINGS)
    if kept:
        print(
            f"{model.name}: serving settings from its last export"
            + (" (tuned)" if kept.get("tuned") else "")
            + "; serving flags override them",
            flush=True,
        )
    record = {
        "model_file": reference,
        "name": model.name,
        "inputs": [f"{t.name}:{t.datatype}:{','.join(map(str, t.dims))}" for t in model.inputs],
        "outputs": [t.name for t in model.outputs],
    }
    if kept and kept.get("tuned"):
        record["tuned"] = kept["tuned"]
    entry = catalog.CatalogEntry(model.name, reference, {"cpu": (Variant("torchscript"),), "gpu": ()}, settings)
    return entry, model, record
