"""A served model's inputs as a load generator sees them (:func:`served_model`), and perf_analyzer's
input-data JSON read against them (:func:`read_input_data`) and written from samples (:func:`to_input_data`).

The format (perf_analyzer's ``--input-data FILE.json``): ``{"data": [ENTRY, ...]}``, one entry per request of
batch 1, each naming every required input with one of

- a flat list of values in row-major order: ``"PIXELS": [0, 3, 16, ...]`` (BYTES: a list of strings);
- ``{"content": [...], "shape": [D1, D2]}``: the same with the shape of a dynamic input (batch dim left out);
  ``content`` may also be ``{"b64": "..."}``;
- ``{"b64": "..."}``: the tensor's raw little-endian bytes, base64 (BYTES: each element a 4-byte length and
  its bytes).

Every entry is checked before any load: an input missing or unknown, a value of the wrong datatype, or an
element count that does not fit the shape names the entry index and the input.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import math
import struct
from pathlib import Path
from typing import Any

import numpy as np

from backends.datatypes import NUMPY_DTYPES
from loadtest.errors import PayloadError


@dataclasses.dataclass(frozen=True)
class InputSpec:
    name: str
    datatype: str
    """Triton's spelling without ``TYPE_``: ``FP32``, ``INT64``, ``BYTES`` ..."""
    dims: tuple[int, ...]
    """Without the batch dimension; -1 is dynamic."""
    optional: bool = False


@dataclasses.dataclass(frozen=True)
class ServedModel:
    name: str
    inputs: tuple[InputSpec, ...]
    outputs: tuple[str, ...]
    max_batch_size: int
    decoupled: bool = False

    @property
    def batched(self) -> bool:
        """Requests carry a batch dimension first (``max_batch_size`` > 0)."""
        return self.max_batch_size > 0

    def input(self, name: str) -> InputSpec | None:
        return next((t for t in self.inputs if t.name == name), None)


def served_model(config) -> ServedModel:
    """A served config as :class:`ServedModel`: the server's JSON (``get_model_config``, HTTP; the gRPC
    ``as_json`` form with its ``config`` key), a ``ModelConfig`` protobuf, or a ``ModelSpec``."""
    if isinstance(config, ServedModel):
        return config
    if hasattr(config, "inputs") and hasattr(config, "max_batch_size"):  # export.spec.ModelSpec
        return ServedModel(
            config.name,
            tuple(_input(t.name, t.datatype, t.dims, t.optional) for t in config.inputs),
            tuple(t.name for t in config.outputs),
            int(config.max_batch_size),
        )
    if hasattr(config, "DESCRIPTOR"):  # a protobuf message
        from google.protobuf import json_format

        config = json_format.MessageToDict(config, preserving_proto_field_name=True)
    if not isinstance(config, dict):
        raise PayloadError(f"not a model config: {type(config).__name__}")
    if "config" in config and isinstance(config["config"], dict):
        config = config["config"]
    inputs = tuple(
        _input(t.get("name", ""), str(t.get("data_type", "")), t.get("dims", []), bool(t.get("optional", False)))
        for t in config.get("input", [])
    )
    policy = config.get("model_transaction_policy") or {}
    return ServedModel(
        str(config.get("name", "")),
        inputs,
        tuple(o.get("name", "") for o in config.get("output", [])),
        int(config.get("max_batch_size", 0) or 0),
        bool(policy.get("decoupled", False)),
    )


def _input(name: str, datatype: str, dims, optional: bool) -> InputSpec:
    datatype = datatype.removeprefix("TYPE_")
    datatype = "BYTES" if datatype == "STRING" else datatype
    if datatype not in NUMPY_DTYPES:
        raise PayloadError(f"input {name!r} is {datatype}: load tests send {sorted(NUMPY_DTYPES)}")
    return InputSpec(name, datatype, tuple(int(d) for d in dims), optional)


# -- checking one sample --------------------------------------------------------------------------
def check_sample(sample: dict[str, Any], model: ServedModel, where: str) -> dict[str, np.ndarray]:
    """One batch-1 sample (name -> array) against the config: every required input, no unknown one, a
    datatype that converts without losing meaning, dims that fit. Arrays without the batch dim get it."""
    _check_names(sample, model, where)
    out = {}
    for name, value in sample.items():
        spec = model.input(name)
        array = _as_array(value, spec, f"{where}: input {name!r}")
        if model.batched and array.ndim == len(spec.dims):
            array = array[None]
        dims = array.shape[1:] if model.batched else array.shape
        if (model.batched and array.shape[:1] != (1,)) or not _fits(dims, spec.dims):
            raise PayloadError(
                f"{where}: input {name!r} has shape {list(array.shape)}; the config takes "
                f"{[1] if model.batched else []}{list(spec.dims)}" + (" (batch 1 first)" if model.batched else "")
            )
        out[name] = array
    return out


def _check_names(entry: dict, model: ServedModel, where: str) -> None:
    names = {t.name for t in model.inputs}
    for name in entry:
        if name not in names:
            raise PayloadError(
                f"{where}: {name!r} is not an input of model {model.name!r}; its inputs: {sorted(names)}"
            )
    for spec in model.inputs:
        if not spec.optional and spec.name not in entry:
            raise PayloadError(f"{where}: input {spec.name!r} is missing")


def _fits(dims: tuple[int, ...], config_dims: tuple[int, ...]) -> bool:
    return len(dims) == len(config_dims) and all(c in (-1, d) for d, c in zip(dims, config_dims, strict=True))


def _as_array(value: Any, spec: InputSpec, where: str) -> np.ndarray:
    array = np.asarray(value)
    if spec.datatype == "BYTES":
        if array.dtype.kind not in "OSU":
            raise PayloadError(f"{where}: is BYTES, got {array.dtype} values")
        flat = [v.encode() if isinstance(v, str) else v for v in array.reshape(-1)]
        if not all(isinstance(v, bytes) for v in flat):
            raise PayloadError(f"{where}: is BYTES, got values that are not bytes or str")
        return np.array(flat, dtype=object).reshape(array.shape)
    dtype = np.dtype(NUMPY_DTYPES[spec.datatype])
    kind = array.dtype.kind
    if kind not in "biuf" or (dtype.kind in "biu" and kind == "f") or (dtype.kind == "b" and kind not in "biu"):
        raise PayloadError(f"{where}: is {spec.datatype}, got {array.dtype} values")
    if dtype.kind in "iu" and array.size and kind in "iu":
        info = np.iinfo(dtype)
        if array.min() < info.min or array.max() > info.max:
            raise PayloadError(f"{where}: values {array.min()}..{array.max()} do not fit {spec.datatype}")
    if dtype.kind == "b" and kind in "iu" and not np.isin(array, (0, 1)).all():
        raise PayloadError(f"{where}: is BOOL, got integers other than 0 and 1")
    return array.astype(dtype, copy=False)


# -- perf_analyzer's input-data file --------------------------------------------------------------
def read_input_data(
    path: Path, model: ServedModel, shapes: dict[str, tuple[int, ...]] | None = None
) -> list[dict[str, np.ndarray]]:
    """The file's entries as batch-1 samples, each checked against ``model`` (``shapes``: ``--shape``, for
    entries that give a dynamic input without its shape)."""
    path = Path(path)
    where = f"--input-data {path}"
    try:
        document = json.loads(path.read_text())
    except FileNotFoundError:
        raise PayloadError(f"{where}: no such file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PayloadError(f"{where}: not a JSON file: {exc}") from None
    data = document.get("data") if isinstance(document, dict) else None
    if not isinstance(data, list) or not data:
        raise PayloadError(f'{where}: needs {{"data": [ENTRY, ...]}} with at least one entry')
    samples = []
    for index, entry in enumerate(data):
        at = f"{where}: entry {index}"
        if isinstance(entry, list):
            raise PayloadError(f"{at} is a list: sequence streams are not supported (one object per request)")
        if not isinstance(entry, dict):
            raise PayloadError(f"{at} is {type(entry).__name__}, not an object of inputs")
        _check_names(entry, model, at)
        samples.append(
            {
                name: _tensor(value, model.input(name), model, shapes or {}, f"{at}: input {name!r}")
                for name, value in entry.items()
            }
        )
    return samples


def _tensor(value: Any, spec: InputSpec, model: ServedModel, shapes: dict, where: str) -> np.ndarray:
    shape = None
    if isinstance(value, dict) and "content" in value:
        unknown = set(value) - {"content", "shape"}
        if unknown:
            raise PayloadError(f"{where}: unknown keys {sorted(unknown)} (takes content and shape)")
        shape, value = value.get("shape"), value["content"]
        if shape is not None and (
            not isinstance(shape, list)
            or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)
        ):
            raise PayloadError(f"{where}: shape {shape!r} is not a list of dims")
    shape = tuple(shape) if shape is not None else shapes.get(spec.name, spec.dims)
    if -1 in shape:
        raise PayloadError(
            f"{where}: the config's dims {list(spec.dims)} are dynamic: give the entry's "
            f'"shape" or --shape {spec.name}:D1,D2'
        )
    if not _fits(shape, spec.dims):
        raise PayloadError(f"{where}: shape {list(shape)} does not fit the config's dims {list(spec.dims)}")
    count = int(math.prod(shape))
    if isinstance(value, dict):
        if set(value) != {"b64"} or not isinstance(value["b64"], str):
            raise PayloadError(f'{where}: an object must be {{"b64": "..."}} or {{"content": ..., "shape": ...}}')
        array = _from_b64(value["b64"], spec, count, where)
    elif isinstance(value, list):
        array = _from_list(value, spec, count, where)
    else:
        raise PayloadError(f'{where}: {type(value).__name__} is not a flat list, {{"content": ...}} or {{"b64": ...}}')
    array = array.reshape(shape)
    return array[None] if model.batched else array


def _from_list(values: list, spec: InputSpec, count: int, where: str) -> np.ndarray:
    if any(isinstance(v, (list, dict)) for v in values):
        raise PayloadError(f"{where}: values must be a flat list (row-major), as perf_analyzer takes them")
    if len(values) != count:
        raise PayloadError(f"{where}: {len(values)} values; shape needs {count}")
    dtype = np.dtype(NUMPY_DTYPES[spec.datatype])
    if spec.datatype == "BYTES":
        if not all(isinstance(v, str) for v in values):
            raise PayloadError(f"{where}: is BYTES: values must be strings")
        return np.array([v.encode() for v in values], dtype=object)
    if dtype.kind == "b":
        ok = all(isinstance(v, bool) or (isinstance(v, int) and v in (0, 1)) for v in values)
    elif dtype.kind in "iu":
        ok = all(isinstance(v, int) and not isinstance(v, bool) for v in values)
    else:
        ok = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
    if not ok:
        bad = next(v for v in values if not _value_ok(v, dtype))
        raise PayloadError(f"{where}: is {spec.datatype}, got {json.dumps(bad)}")
    if dtype.kind in "iu" and values:
        info = np.iinfo(dtype)
        if min(values) < info.min or max(values) > info.max:
            raise PayloadError(f"{where}: values {min(values)}..{max(values)} do not fit {spec.datatype}")
    return np.array(values, dtype=dtype)


def _value_ok(value: Any, dtype: np.dtype) -> bool:
    if dtype.kind == "b":
        return isinstance(value, bool) or (isinstance(value, int) and value in (0, 1))
    if isinstance(value, bool):
        return False
    return isinstance(value, int) if dtype.kind in "iu" else isinstance(value, (int, float))


def _from_b64(text: str, spec: InputSpec, count: int, where: str) -> np.ndarray:
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise PayloadError(f"{where}: b64 is not base64: {exc}") from None
    if spec.datatype == "BYTES":
        items, offset = [], 0
        while offset < len(raw):
            if offset + 4 > len(raw):
                raise PayloadError(f"{where}: b64 BYTES must be 4-byte lengths each followed by that many bytes")
            (size,) = struct.unpack_from("<I", raw, offset)
            items.append(raw[offset + 4 : offset + 4 + size])
            offset += 4 + size
            if offset > len(raw):
                raise PayloadError(f"{where}: b64 BYTES element {len(items) - 1} runs past the end")
        if len(items) != count:
            raise PayloadError(f"{where}: {len(items)} BYTES elements; shape needs {count}")
        return np.array(items, dtype=object)
    dtype = np.dtype(NUMPY_DTYPES[spec.datatype]).newbyteorder("<")
    if len(raw) != count * dtype.itemsize:
        raise PayloadError(
            f"{where}: b64 holds {len(raw)} bytes; shape needs {count} {spec.datatype} = {count * dtype.itemsize} bytes"
        )
    return np.frombuffer(raw, dtype=dtype).astype(dtype.newbyteorder("="))


def to_input_data(samples: list[dict[str, np.ndarray]], batched: bool = True) -> dict:
    """perf_analyzer's ``{"data": [...]}`` of batch-1 ``samples`` (``batched``: drop their batch dim).
    Numbers as ``content`` with ``shape``; BYTES as strings when they are UTF-8, otherwise base64."""
    if not samples:
        raise PayloadError("no samples to write as input data")
    data = []
    for sample in samples:
        entry = {}
        for name, array in sample.items():
            array = np.asarray(array)
            item = array[0] if batched else array
            if array.dtype.kind in "OSU":
                entry[name] = _bytes_entry(item)
            else:
                entry[name] = {"content": item.reshape(-1).tolist(), "shape": list(item.shape)}
        data.append(entry)
    return {"data": data}


def _bytes_entry(item: np.ndarray) -> dict:
    values = [v.encode() if isinstance(v, str) else bytes(v) for v in item.reshape(-1)]
    try:
        return {"content": [v.decode() for v in values], "shape": list(item.shape)}
    except UnicodeDecodeError:
        raw = b"".join(struct.pack("<I", len(v)) + v for v in values)
        return {"content": {"b64": base64.b64encode(raw).decode()}, "shape": list(item.shape)}
