"""What the pipeline flags of ``tritonkit export`` ask for (``export/user/pipeline.py``), and the Python steps'
specs: shared by the writer and the in-process run (``export/user/pipeline_run.py``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from backends import user_steps
from backends.datatypes import NUMPY_DTYPES
from export.errors import SpecError, UserModelError
from export.spec import DynamicBatching, ModelSpec, TensorSpec

STEP_DELAY_US = 1000
"""The steps' batching window, as the built-in pipelines' Python models have."""


@dataclasses.dataclass(frozen=True)
class Step:
    kind: str  # preprocess | postprocess
    reference: str  # FILE.py:FUNC as given
    path: Path
    function_name: str

    @classmethod
    def parse(cls, kind: str, reference: str) -> Step:
        path_text, sep, function_name = reference.rpartition(":")
        if not sep or not path_text.endswith(".py") or not function_name:
            raise SpecError(f"--{kind} {reference!r} is not FILE.py:FUNC")
        path = Path(path_text)
        if not path.is_file():
            raise SpecError(f"--{kind} {reference!r}: no file {path_text!r}")
        return cls(kind, reference, path.resolve(), function_name)

    def load(self, model_name: str):
        try:
            return user_steps.load_function(self.path, self.function_name, f"user_{self.kind}_{model_name}")
        except user_steps.StepError as exc:
            raise UserModelError(f"--{self.kind} {self.reference}: {exc}") from None

    @property
    def copied_name(self) -> str:
        """The file's name in the step's version folder (``model.py`` is the step's own)."""
        return "user_model.py" if self.path.name == "model.py" else self.path.name


@dataclasses.dataclass(frozen=True)
class PipelinePlan:
    """What the pipeline flags asked for, checked before anything is exported."""

    name: str | None
    preprocess: Step | None
    postprocess: Step | None
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    samples: dict[str, str]  # NAME -> TEXT or @FILE, as given


def sample_array(spec: TensorSpec, value: str, batched: bool) -> np.ndarray:
    """One request's value of ``spec`` from ``--pipeline-sample`` (batch 1 when ``batched``)."""
    where = f"--pipeline-sample {spec.name}"
    if spec.datatype == "BYTES":
        if any(d not in (1, -1) for d in spec.dims):
            raise SpecError(f"{where}: a sample is one value; {spec.name} has dims {list(spec.dims)}")
        data = _read(where, value[1:]) if value.startswith("@") else value.encode("utf-8")
        array = np.array([data], dtype=np.object_).reshape((1,) * (len(spec.dims) + batched))
        return array
    try:
        array = np.load(_at(where, value[1:])) if value.startswith("@") else np.array(value.split(","), float)
        array = array.astype(NUMPY_DTYPES[spec.datatype])
    except (ValueError, OSError) as exc:
        raise SpecError(f"{where}: {exc}") from None
    if array.ndim == 1 and len(spec.dims) == 1 and spec.dims[0] in (-1, array.size):
        array = array.reshape(spec.dims[0] if spec.dims[0] != -1 else -1)
    if batched and array.ndim == len(spec.dims):
        array = array[np.newaxis]
    fits = array.ndim == len(spec.dims) + batched and all(
        d in (-1, n) for d, n in zip(spec.dims, array.shape[batched:], strict=True)
    )
    if not fits:
        raise SpecError(f"{where}: shape {list(array.shape)} does not fit dims {list(spec.dims)}")
    return array


def _at(where: str, path_text: str) -> Path:
    path = Path(path_text)
    if not path.is_file():
        raise SpecError(f"{where}: no file {path_text!r}")
    return path


def _read(where: str, path_text: str) -> bytes:
    return _at(where, path_text).read_bytes()


def warmup_samples(spec: ModelSpec, warm: dict[str, np.ndarray]) -> tuple[str, ...]:
    """``model_warmup`` at batch 1 and the largest batch, each input read from ``warmup/<input>``."""
    sizes = sorted({1, spec.max_batch_size}) if spec.max_batch_size else [0]
    samples = []
    for size in sizes:
        sample = mc.ModelWarmup(name=f"sample_batch_{size}", batch_size=size, count=1)
        for tensor in spec.inputs:
            shape = warm[tensor.name].shape[1:] if spec.max_batch_size else warm[tensor.name].shape
            value = sample.inputs[tensor.name]
            value.data_type = mc.DataType.Value(tensor.config_datatype)
            value.dims.extend(shape)
            value.input_data_file = tensor.name
        samples.append(text_format.MessageToString(sample, as_one_line=True))
    return tuple(samples)


def step_spec(name: str, inputs, outputs, max_batch_size: int, step: Step, warm) -> ModelSpec:
    spec = ModelSpec(
        name=name,
        inputs=tuple(dataclasses.replace(t, optional=False) for t in inputs),
        outputs=tuple(dataclasses.replace(t, format="FORMAT_NONE", optional=False) for t in outputs),
        platform="python",
        max_batch_size=max_batch_size,
        dynamic_batching=DynamicBatching(max_queue_delay_us=STEP_DELAY_US) if max_batch_size else None,
        parameters=(("FUNCTION", f"{step.copied_name}:{step.function_name}"), ("STEP", step.kind)),
        latest_versions=None,
    )
    return spec.replace(warmup_samples=warmup_samples(spec, warm))
