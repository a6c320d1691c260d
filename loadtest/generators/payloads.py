"""Request payloads for any served model, from one mechanism: its served config, a perf_analyzer input-data
file, or a function of the user's.

:func:`payloads` gives the batch-1 request inputs (name -> numpy array, the batch dimension first when the
model batches) for a served model, read off its config (the server's JSON, a ``ModelConfig`` protobuf or a
``ModelSpec``) and :class:`PayloadOptions`:

- by default, random values per input from the config's names, datatypes and dims: floats uniform in
  [0, 1), integers in ``int_range`` (``--int-range LO:HI``, LO <= v < HI), BOOL true or false; fresh per
  sample, from a fixed seed. A dynamic dim (-1) takes its size from ``--shape NAME:D1,D2`` (perf_analyzer's
  spelling, the batch dimension left out); BYTES inputs need real data (a file or a function);
- ``--input-data FILE.json``: perf_analyzer's input-data format (:mod:`loadtest.generators.input_data`), so
  one file serves both tools, checked against the config before any load;
- ``--samples FILE.py:FUNC``: a function returning a list of dicts, input name -> numpy array (batch 1).
  The built-in models' real data are such functions beside their builders (``export/zoo/digits.py:
  load_samples``); a catalog entry names its model's (``export/models.toml``: ``samples``), and
  :func:`default_options` picks it up for every variant of that model.

Each problem is a :class:`loadtest.errors.PayloadError` with one line naming the input and the flag to use.
A load generator cycles through the samples, so the server's response cache (off by default) would not
make a run look faster.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import inspect
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from export import catalog
from loadtest.errors import PayloadError
from loadtest.generators.input_data import (
    NUMPY_DTYPES,
    InputSpec,
    ServedModel,
    check_sample,
    read_input_data,
    served_model,
    to_input_data,
)

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_COUNT = 64
INT_RANGE = (0, 100)

__all__ = [
    "PayloadOptions",
    "PayloadError",
    "InputSpec",
    "ServedModel",
    "payloads",
    "input_data_json",
    "served_model",
    "default_options",
    "stack",
    "output_names",
]


@dataclasses.dataclass(frozen=True)
class PayloadOptions:
    """Where a load test's request inputs come from. At most one of ``input_data`` and ``samples``; without
    either, random values from the served config."""

    shapes: dict[str, tuple[int, ...]] = dataclasses.field(default_factory=dict)
    """``--shape NAME:D1,D2`` (repeatable): the shape of an input with dynamic dims, batch dim left out."""
    int_range: tuple[int, int] = INT_RANGE
    """``--int-range LO:HI``: random integers LO <= v < HI."""
    input_data: Path | None = None
    """``--input-data FILE.json``: perf_analyzer's input-data format."""
    samples: str | None = None
    """``--samples FILE.py:FUNC``: a function returning a list of dicts, input name -> numpy array (batch 1)."""
    seed: int = 0
    """Seed of the random values (the same seed, the same payloads)."""
    count: int = DEFAULT_COUNT
    """How many random samples (real data gives as many as it has)."""

    def __post_init__(self) -> None:
        low, high = self.int_range
        if not (isinstance(low, int) and isinstance(high, int)) or low >= high:
            raise PayloadError(f"--int-range {low}:{high}: needs integers LO < HI")
        if self.input_data is not None and self.samples is not None:
            raise PayloadError("give --input-data or --samples, not both")
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 1:
            raise PayloadError(f"payload count={self.count!r} must be an integer >= 1")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise PayloadError(f"payload seed={self.seed!r} must be an integer >= 0")
        for name, dims in self.shapes.items():
            if not dims or any(isinstance(d, bool) or not isinstance(d, int) or d < 1 for d in dims):
                raise PayloadError(f"--shape {name}:{','.join(map(str, dims))}: dims must be integers >= 1")
        if self.input_data is not None:
            object.__setattr__(self, "input_data", Path(self.input_data))

    @property
    def real(self) -> bool:
        """Whether the data comes from a file or a function rather than from the config."""
        return self.input_data is not None or self.samples is not None

    @classmethod
    def from_table(cls, table: dict[str, Any] | None, where: str = "payload") -> PayloadOptions:
        """A campaign's ``payload`` table (or ``TRITONKIT_LOAD``'s ``payload``): ``shape = ["NAME:D1,D2", ...]``,
        ``int_range = "LO:HI"``, ``input_data = "f.json"``, ``samples = "f.py:fn"``, ``seed``, ``count``."""
        if table is None:
            return cls()
        if not isinstance(table, dict):
            raise PayloadError(
                f"{where}: must be a table {{ shape = [...], int_range = ..., input_data = ..., "
                f"samples = ... }}, got {table!r}"
            )
        unknown = set(table) - TABLE_KEYS
        if unknown:
            raise PayloadError(f"{where}: unknown keys {sorted(unknown)}; known: {sorted(TABLE_KEYS)}")
        shapes = table.get("shape", [])
        if isinstance(shapes, str):
            shapes = [shapes]
        try:
            return cls(
                shapes=dict(parse_shape(s, "shape") for s in shapes),
                int_range=parse_int_range(str(table["int_range"]), "int_range") if "int_range" in table else INT_RANGE,
                input_data=Path(table["input_data"]) if table.get("input_data") else None,
                samples=table.get("samples") or None,
                seed=table.get("seed", 0),
                count=table.get("count", DEFAULT_COUNT),
            )
        except PayloadError as exc:
            raise PayloadError(f"{where}: {exc}") from None

    def to_table(self) -> dict[str, Any]:
        """The inverse of :meth:`from_table` (JSON-ready): what a Locust process is told."""
        table: dict[str, Any] = {
            "seed": self.seed,
            "count": self.count,
            "int_range": f"{self.int_range[0]}:{self.int_range[1]}",
        }
        if self.shapes:
            table["shape"] = [f"{name}:{','.join(map(str, dims))}" for name, dims in self.shapes.items()]
        if self.input_data is not None:
            table["input_data"] = str(Path(self.input_data).resolve())
        if self.samples is not None:
            table["samples"] = self.samples
        return table


TABLE_KEYS = frozenset({"shape", "int_range", "input_data", "samples", "seed", "count"})


# -- the payload flags' values (parsed in loadtest.cli.flags) ---------------------------------------
def parse_shape(text: str, flag: str = "--shape") -> tuple[str, tuple[int, ...]]:
    """``input_ids:32`` / ``IMAGE:3,224,224`` -> (name, dims), perf_analyzer's ``--shape`` spelling."""
    name, sep, dims = str(text).rpartition(":")
    try:
        parsed = tuple(int(d) for d in dims.split(","))
    except ValueError:
        parsed = ()
    if not sep or not name or not parsed or any(d < 1 for d in parsed):
        raise PayloadError(f"{flag} {text!r} is not NAME:D1,D2,... with dims >= 1")
    return name, parsed


def parse_int_range(text: str, flag: str = "--int-range") -> tuple[int, int]:
    """``0:1000`` -> (0, 1000)."""
    low, sep, high = str(text).partition(":")
    try:
        bounds = (int(low), int(high))
    except ValueError:
        bounds = None
    if not sep or bounds is None or bounds[0] >= bounds[1]:
        raise PayloadError(f"{flag} {text!r} is not LO:HI with integers LO < HI")
    return bounds


def default_options(model: str, options: PayloadOptions | None = None) -> PayloadOptions:
    """``options`` as given when they name real data; otherwise, for a model of the catalog that names its
    samples function (every variant of it: ``digits_onnx`` too), that function; else ``options`` unchanged."""
    options = options or PayloadOptions()
    if options.real:
        return options
    reference = catalog.default_samples(model)
    return dataclasses.replace(options, samples=reference) if reference else options


# -- payloads -------------------------------------------------------------------------------------
def payloads(config, options: PayloadOptions | None = None) -> list[dict[str, np.ndarray]]:
    """Batch-1 request inputs for a served model (its config: the server's JSON, a ``ModelConfig`` or a
    ``ModelSpec``): random from the config, or the file's or function's data checked against it."""
    model = served_model(config)
    options = options or PayloadOptions()
    unknown = sorted(set(options.shapes) - {t.name for t in model.inputs})
    if unknown:
        raise PayloadError(
            f"--shape {unknown[0]}: model {model.name!r} has no such input; its inputs: "
            f"{[t.name for t in model.inputs]}"
        )
    if options.input_data is not None:
        return read_input_data(options.input_data, model, options.shapes)
    if options.samples is not None:
        return _checked_samples(call_samples(options.samples), model, options.samples)
    return random_payloads(model, options)


def input_data_json(samples: list[dict[str, np.ndarray]], config=None) -> dict:
    """perf_analyzer's ``{"data": [...]}`` form of batch-1 samples (one entry per sample, the batch dim
    dropped: perf_analyzer repeats an entry ``-b`` times). ``config`` says whether the model batches
    (default: it does)."""
    batched = served_model(config).batched if config is not None else True
    return to_input_data(samples, batched)


def random_payloads(model: ServedModel, options: PayloadOptions) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(options.seed)
    shapes = {t.name: _random_shape(t, model, options.shapes) for t in model.inputs if not t.optional}
    for spec in model.inputs:
        if spec.name in shapes:
            _check_int_range(spec, options.int_range)
    return [
        {
            spec.name: _random_array(spec, shapes[spec.name], rng, options.int_range)
            for spec in model.inputs
            if spec.name in shapes
        }
        for _ in range(options.count)
    ]


def _random_shape(spec: InputSpec, model: ServedModel, shapes: dict[str, tuple[int, ...]]) -> tuple[int, ...]:
    if spec.datatype == "BYTES":
        raise PayloadError(
            f"input {spec.name!r} of model {model.name!r} is BYTES: random values cannot stand in "
            f"for it; give real data with --input-data FILE.json or --samples FILE.py:FUNC"
        )
    dims = spec.dims
    if spec.name in shapes:
        dims = shapes[spec.name]
        if len(dims) != len(spec.dims) or any(c != -1 and c != d for c, d in zip(spec.dims, dims, strict=True)):
            raise PayloadError(
                f"--shape {spec.name}:{','.join(map(str, dims))} does not fit the config's dims "
                f"{list(spec.dims)} (batch dim left out)"
            )
    elif -1 in dims:
        example = ",".join("N" if d == -1 else str(d) for d in dims)
        raise PayloadError(
            f"input {spec.name!r} of model {model.name!r} has a dynamic dim (dims {list(dims)}): "
            f"give its size with --shape {spec.name}:{example}"
        )
    return ((1,) if model.batched else ()) + tuple(dims)


def _check_int_range(spec: InputSpec, int_range: tuple[int, int]) -> None:
    dtype = np.dtype(NUMPY_DTYPES[spec.datatype])
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        if int_range[0] < info.min or int_range[1] - 1 > info.max:
            raise PayloadError(
                f"--int-range {int_range[0]}:{int_range[1]} does not fit input {spec.name!r} "
                f"({spec.datatype}: {info.min}..{info.max})"
            )


def _random_array(
    spec: InputSpec, shape: tuple[int, ...], rng: np.random.Generator, int_range: tuple[int, int]
) -> np.ndarray:
    dtype = np.dtype(NUMPY_DTYPES[spec.datatype])
    if dtype.kind == "f":
        return rng.random(shape).astype(dtype)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    return rng.integers(int_range[0], int_range[1], shape).astype(dtype)


# -- samples functions ----------------------------------------------------------------------------
def load_samples_function(reference: str) -> Callable[..., Any]:
    """``FILE.py:FUNC`` -> the function. A relative path is looked up from the working directory, then from
    the project root (catalog entries name ``export/zoo/<builder>.py:load_samples``); a file inside the
    project is imported under its module name, so it shares that module's caches."""
    path_text, sep, name = str(reference).rpartition(":")
    if not sep or not path_text.endswith(".py") or not name.isidentifier():
        raise PayloadError(f"--samples {reference!r} is not FILE.py:FUNC")
    path = Path(path_text)
    if not path.is_absolute() and not path.is_file() and (PROJECT_ROOT / path).is_file():
        path = PROJECT_ROOT / path
    if not path.is_file():
        raise PayloadError(f"--samples {reference!r}: no file {path_text!r}")
    path = path.resolve()
    try:
        module = _import_file(path)
    except Exception as exc:  # noqa: BLE001 - the user's file: any failure is reported in one line
        raise PayloadError(
            f"--samples {reference!r}: importing {path.name} failed: {type(exc).__name__}: {_first_line(exc)}"
        ) from None
    function = getattr(module, name, None)
    if not callable(function):
        raise PayloadError(f"--samples {reference!r}: {path.name} has no function {name!r}")
    return function


def _import_file(path: Path):
    if path.is_relative_to(PROJECT_ROOT):
        parts = path.relative_to(PROJECT_ROOT).with_suffix("").parts
        if parts and all((PROJECT_ROOT.joinpath(*parts[:i]) / "__init__.py").is_file() for i in range(1, len(parts))):
            return importlib.import_module(".".join(parts))
    spec = importlib.util.spec_from_file_location(f"tritonkit_samples_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def call_samples(reference: str, **kwargs: Any) -> list[dict[str, np.ndarray]]:
    """Call ``FILE.py:FUNC`` (with those of ``kwargs`` it takes) and check it returned a list of dicts."""
    function = load_samples_function(reference)
    accepted = inspect.signature(function).parameters
    try:
        result = function(**{k: v for k, v in kwargs.items() if k in accepted})
    except Exception as exc:  # noqa: BLE001 - the user's function
        raise PayloadError(f"--samples {reference!r} raised {type(exc).__name__}: {_first_line(exc)}") from None
    if isinstance(result, tuple):
        result = list(result)
    if not isinstance(result, list) or not result or not all(isinstance(s, dict) for s in result):
        raise PayloadError(
            f"--samples {reference!r} returned {type(result).__name__}"
            f"{' (empty)' if isinstance(result, list) and not result else ''}: it must return a "
            f"non-empty list of dicts, input name -> numpy array (batch 1)"
        )
    return result


def _checked_samples(samples: list[dict[str, Any]], model: ServedModel, reference: str) -> list[dict[str, np.ndarray]]:
    return [check_sample(sample, model, f"--samples {reference!r}: sample {i}") for i, sample in enumerate(samples)]


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [""])[0][:300]


# -- batches and outputs --------------------------------------------------------------------------
def stack(samples: list[dict[str, np.ndarray]], batch: int, offset: int = 0) -> dict[str, np.ndarray]:
    """``batch`` of the batch-1 ``samples`` joined on the batch dim, cycling from ``offset`` (those shaped as
    the first, so samples of different lengths still make a batch): the in-process rows compute on exactly
    what the served rows are sent."""
    first = {name: array.shape for name, array in samples[0].items()}
    alike = [s for s in samples if {n: a.shape for n, a in s.items()} == first]
    picked = [alike[(offset + i) % len(alike)] for i in range(batch)]
    return {name: np.concatenate([item[name] for item in picked]) for name in first}


def real_batch(model: str, batch: int, seq_len: int | None = None, offset: int = 0) -> dict[str, np.ndarray]:
    """``batch`` of a catalog model's own real samples (its ``samples`` function, given ``seq_len`` when it
    takes one), stacked on the batch dim."""
    reference = catalog.default_samples(model)
    if reference is None:
        raise PayloadError(f"model {model!r} names no samples function in export/models.toml: give --samples")
    return stack(call_samples(reference, **({"seq_len": seq_len} if seq_len else {})), batch, offset)


def output_names(config) -> list[str]:
    """The outputs a client asks for, from the served config."""
    return list(served_model(config).outputs)


def element_count(shape) -> int:
    return int(math.prod(shape))
