"""A user's pre- or post-processing function as a pipeline step, the same in the server and at export time.

``tritonkit export --preprocess FILE.py:FUNC`` (and ``--postprocess``) serves the function as a Python model
in front of (behind) the exported model. The function takes the step's inputs as keyword arguments, numpy
arrays with the batch first (BYTES as object arrays of ``bytes``), and returns a dict of output name -> array
(numpy, torch, lists; a ``transformers`` ``BatchEncoding`` is a dict too), or, for a single output, the array
itself. Extra keys are ignored, so a tokenizer may return ``token_type_ids`` the model does not take.

This module needs neither torch nor Triton: the served step (``backends/user_step_model.py``) and the export's
end-to-end check (``export/user/pipeline.py``) both call :func:`run`, so what the export checks is what serves.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

from backends.datatypes import NUMPY_DTYPES


class StepError(ValueError):
    """The function, or what it returned, cannot serve as the step; the message names which and why."""


@dataclasses.dataclass(frozen=True)
class Declared:
    """One output the step must return: its name, KServe datatype and dims without the batch dim."""

    name: str
    datatype: str
    dims: tuple[int, ...]


def load_function(path: Path, name: str, module_name: str) -> Callable:
    """``name`` from the Python file ``path``, imported as ``module_name``."""
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise StepError(f"{path} is not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses and pickling inside the file look it up
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001 - the user's import error, named
        sys.modules.pop(module_name, None)
        raise StepError(f"{path.name} failed to import: {type(exc).__name__}: {_first_line(exc)}") from None
    function = getattr(module, name, None)
    if not callable(function):
        raise StepError(f"{path.name} has no function {name!r}")
    return function


def parameters(function: Callable, available: list[str], where: str) -> list[str]:
    """The tensors ``function`` takes, by parameter name, out of ``available``; all of them for ``**kwargs``."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        raise StepError(f"{where}: its parameters cannot be read; write it as a Python function") from None
    params = list(signature.parameters.values())
    if any(p.kind == inspect.Parameter.VAR_KEYWORD for p in params):
        return list(available)
    named = [p for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    unknown = [p.name for p in named if p.default is p.empty and p.name not in available]
    if unknown or any(p.kind in (p.POSITIONAL_ONLY, p.VAR_POSITIONAL) for p in params):
        raise StepError(
            f"{where}: parameter(s) {', '.join(map(repr, unknown)) or 'by position'} name no tensor; each "
            f"parameter is a tensor's name, one of {', '.join(available)}"
        )
    taken = [p.name for p in named if p.name in available]
    if not taken:
        raise StepError(f"{where}: takes none of the tensors {', '.join(available)} (parameters are tensor names)")
    return taken


def run(
    function: Callable, inputs: Mapping[str, np.ndarray], outputs: list[Declared], where: str
) -> dict[str, np.ndarray]:
    """Call ``function`` on one batch and return each declared output as an array of its datatype whose first
    dim is the batch; anything else is a ``StepError`` naming ``where`` and the inputs."""
    batch = next(iter(inputs.values())).shape[0] if inputs else None
    try:
        returned = function(**inputs)
    except Exception as exc:  # noqa: BLE001 - the user's error goes back to the client, named
        raise StepError(
            f"{where} failed on input {', '.join(inputs)}: {type(exc).__name__}: {_first_line(exc)}"
        ) from None
    if isinstance(returned, Mapping) or (hasattr(returned, "keys") and hasattr(returned, "__getitem__")):
        given = {key: returned[key] for key in returned.keys()}  # noqa: SIM118 - BatchEncoding is no Mapping
    elif len(outputs) == 1:
        given = {outputs[0].name: returned}
    else:
        raise StepError(
            f"{where} returned {type(returned).__name__}; return a dict with {', '.join(o.name for o in outputs)}"
        )
    missing = [o.name for o in outputs if o.name not in given]
    if missing:
        raise StepError(
            f"{where} returned no {', '.join(map(repr, missing))} (it returned {', '.join(map(str, given)) or 'none'})"
        )
    return {o.name: _as_declared(given[o.name], o, batch, where) for o in outputs}


def _as_declared(value, declared: Declared, batch: int | None, where: str) -> np.ndarray:
    if hasattr(value, "detach"):  # a torch tensor, without importing torch
        value = value.detach().cpu().numpy()
    try:
        if declared.datatype == "BYTES":
            array = np.array(value, dtype=np.object_)
            array = np.vectorize(lambda v: v if isinstance(v, bytes) else str(v).encode("utf-8"), otypes=[object])(
                array
            )
        else:
            array = np.asarray(value, dtype=NUMPY_DTYPES[declared.datatype])
    except (TypeError, ValueError) as exc:
        raise StepError(
            f"{where}: output {declared.name!r} is not {declared.datatype}: {type(exc).__name__}: {exc}"
        ) from None
    expected = ("batch", *declared.dims) if batch is not None else declared.dims
    fits = array.ndim == len(expected) and all(
        e in ("batch", -1) or e == got for e, got in zip(expected, array.shape, strict=False)
    )
    if batch is not None and fits:
        fits = array.shape[0] == batch
    if not fits:
        raise StepError(
            f"{where}: output {declared.name!r} has shape {list(array.shape)}; the step declares "
            f"{[batch if e == 'batch' else e for e in expected]} (-1: any size; the batch first)"
        )
    return array


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else "(no message)"
