"""The served-model specification: one ``ModelSpec`` per served variant, validated on creation.

The config generator, the load-test payloads and the tests all read a ``ModelSpec``; nothing else
re-types tensor names or shapes. Values are checked early and errors name the bad value.
"""

from __future__ import annotations

import dataclasses
import re
import warnings
from typing import Any

from export.errors import SpecError
from export.formats import registry as formats
from export.formats.registry import NON_FORMAT_PLATFORMS, PRECISIONS

# KServe v2 datatype names; the config uses the same names with a TYPE_ prefix (BYTES is TYPE_STRING).
DATATYPES = (
    *("BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64"),
    *("FP16", "BF16", "FP32", "FP64", "BYTES"),
)
INSTANCE_KINDS = ("KIND_CPU", "KIND_GPU", "KIND_AUTO")
TIMEOUT_ACTIONS = ("REJECT", "DELAY")
# Triton's ModelInput.Format: the layout of an image input, read by generic image clients.
FORMATS = ("FORMAT_NONE", "FORMAT_NHWC", "FORMAT_NCHW")


class QueuePolicyWarning(UserWarning):
    """A queue policy with a batching delay: dispatch stalls on Triton releases before mid-2026 (see below)."""


QUEUE_POLICY_DELAY_WARNING = (
    "a queue policy with max_queue_delay_us={delay} > 0: any queue policy turns off the batcher's prefetching, "
    "and then Triton's instance queue merges delayed payloads and loses count of the waiting instances, so "
    "dispatch falls back to a 500 ms poll and throughput collapses under load (triton-inference-server/server "
    "issue 8870, fixed in core after Triton 2.62). Set max_queue_delay_us = 0: with a queue policy the batcher "
    "forms each batch when an instance frees, from whatever has queued meanwhile."
)
MAX_DYNAMIC_DIM = 256
"""Largest size of a dynamic non-batch dimension that TensorRT engines are built for (Torch-TensorRT's
inputs, ONNX Runtime's TensorRT profiles): the text models' sequence, which their tokenizers cut at 256."""


def platforms() -> tuple[str, ...]:
    """The Triton platforms a ``ModelSpec`` may name: each export format's (export/formats/), then Python
    models' and ensembles'."""
    return (*formats.platforms(), *NON_FORMAT_PLATFORMS)


NAME_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
LABELS_FILE = "labels.txt"
"""Where ``ModelSpec.labels`` are written, beside config.pbtxt."""


def _check_name(kind: str, name: str) -> None:
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise SpecError(f"{kind} name {name!r} must match {NAME_PATTERN.pattern}")


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """One input or output tensor as clients see it."""

    name: str
    """Public tensor name; clients depend on it."""
    datatype: str
    """KServe v2 datatype, one of ``DATATYPES``."""
    dims: tuple[int, ...]
    """Shape without the batch dimension; -1 marks a dynamic dimension."""
    optional: bool = False
    """Inputs only: the request may omit it."""
    format: str = "FORMAT_NONE"
    """Inputs only: the layout of an image input as Triton's ``ModelInput.Format`` (``FORMAT_NCHW``: dims are
    channels, height, width; ``FORMAT_NHWC``: height, width, channels), which generic image clients read from
    the model config. Only for numeric inputs of exactly 3 dims (without the batch dim); ``FORMAT_NONE``
    (written as no ``format``) for every other tensor."""

    def __post_init__(self) -> None:
        _check_name("tensor", self.name)
        if self.datatype not in DATATYPES:
            raise SpecError(f"tensor {self.name!r}: datatype {self.datatype!r} is not one of {DATATYPES}")
        object.__setattr__(self, "dims", tuple(int(d) for d in self.dims))
        if not self.dims or any(d == 0 or d < -1 for d in self.dims):
            raise SpecError(f"tensor {self.name!r}: dims {list(self.dims)} must be non-empty, each > 0 or -1")
        if self.format not in FORMATS:
            raise SpecError(f"tensor {self.name!r}: format {self.format!r} is not one of {FORMATS}")
        if self.format != "FORMAT_NONE":
            if len(self.dims) != 3:
                raise SpecError(
                    f"tensor {self.name!r}: format {self.format} is for image inputs of 3 dims "
                    f"(without the batch dim), not dims {list(self.dims)}"
                )
            if self.datatype in ("BYTES", "BOOL"):
                raise SpecError(
                    f"tensor {self.name!r}: format {self.format} needs a numeric datatype, not {self.datatype}"
                )

    @classmethod
    def parse(cls, text: str) -> TensorSpec:
        """``NAME:DTYPE:DIMS[:FORMAT]`` as on the command line, e.g. ``PIXELS:FP32:64``, ``ids:INT64:-1`` or
        ``image:FP32:3,224,224:NCHW`` (FORMAT: ``NCHW`` or ``NHWC``, with or without ``FORMAT_``)."""
        parts = text.split(":")
        if len(parts) not in (3, 4):
            raise SpecError(
                f"tensor spec {text!r} is not NAME:DTYPE:DIMS[:FORMAT] (dims comma-separated, "
                f"-1 dynamic; FORMAT NCHW or NHWC for an image input)"
            )
        name, datatype, dims = parts[:3]
        try:
            shape = tuple(int(d) for d in dims.split(","))
        except ValueError:
            raise SpecError(f"tensor spec {text!r}: dims {dims!r} are not comma-separated integers") from None
        layout = "FORMAT_NONE"
        if len(parts) == 4:
            layout = parts[3].upper()
            layout = layout if layout.startswith("FORMAT_") else f"FORMAT_{layout}"
        return cls(name, datatype.upper(), shape, format=layout)

    @property
    def config_datatype(self) -> str:
        return "TYPE_STRING" if self.datatype == "BYTES" else f"TYPE_{self.datatype}"


def _check_count(where: str, field: str, value: Any, low: int = 0) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise SpecError(f"{where}{field}={value!r} is out of range (an integer >= {low})")


@dataclasses.dataclass(frozen=True)
class QueuePolicy:
    """The dynamic batcher's queue policy (``default_queue_policy``): how many requests may wait, and for how long.

    A refused or timed-out request gets HTTP 503 / gRPC UNAVAILABLE at once instead of waiting out its
    latency budget. A policy that limits nothing is the same as none: ``DynamicBatching`` drops it.
    """

    max_queue_size: int = 0
    """Requests beyond this many waiting are refused at once (UNAVAILABLE); 0 = unbounded."""
    default_timeout_us: int = 0
    """A request waiting longer than this gets ``timeout_action``; 0 = never."""
    timeout_action: str = "REJECT"
    """``REJECT`` a timed-out request (UNAVAILABLE), or ``DELAY`` it behind the others."""
    allow_timeout_override: bool = False
    """Clients may set a shorter timeout per request."""

    def __post_init__(self) -> None:
        _check_count("queue policy: ", "max_queue_size", self.max_queue_size)
        _check_count("queue policy: ", "default_timeout_us", self.default_timeout_us)
        if self.timeout_action not in TIMEOUT_ACTIONS:
            raise SpecError(f"queue policy: timeout_action={self.timeout_action!r} is not one of {TIMEOUT_ACTIONS}")
        if not isinstance(self.allow_timeout_override, bool):
            raise SpecError(f"queue policy: allow_timeout_override={self.allow_timeout_override!r} is not a boolean")

    @property
    def limits(self) -> bool:
        """Whether the policy refuses or times out anything (else Triton's unbounded FIFO is the same)."""
        return bool(self.max_queue_size or self.default_timeout_us or self.allow_timeout_override)

    def replace(self, **changes: Any) -> QueuePolicy:
        return dataclasses.replace(self, **changes)


QUEUE_POLICY_FIELDS = tuple(f.name for f in dataclasses.fields(QueuePolicy))


def shape_ranges(inputs: tuple[TensorSpec, ...], max_batch_size: int) -> list[tuple[tuple[int, ...], ...]]:
    """(min, opt, max) shape per input, as a TensorRT optimisation profile wants them: the batch dimension
    (when ``max_batch_size`` > 0) from 1 to the maximum, opt at half; each dynamic dimension from 1 to
    ``MAX_DYNAMIC_DIM``, opt at half; fixed dimensions as they are."""
    ranges = []
    for tensor in inputs:
        low, opt, high = ([1], [max(max_batch_size // 2, 1)], [max_batch_size]) if max_batch_size > 0 else ([], [], [])
        for d in tensor.dims:
            low.append(1 if d == -1 else d)
            opt.append(MAX_DYNAMIC_DIM // 2 if d == -1 else d)
            high.append(MAX_DYNAMIC_DIM if d == -1 else d)
        ranges.append((tuple(low), tuple(opt), tuple(high)))
    return ranges


@dataclasses.dataclass(frozen=True)
class DynamicBatching:
    """Triton's dynamic batcher: merges requests that arrive close together into one execution."""

    max_queue_delay_us: int = 100
    """How long the first request may wait for others to join its batch."""
    preferred_batch_sizes: tuple[int, ...] = ()
    """Batch sizes the batcher sends at once when it can form them; each <= max_batch_size."""
    preserve_ordering: bool = False
    """Return responses in arrival order."""
    queue_policy: QueuePolicy | None = None
    """Bounds on the queue (see ``QueuePolicy``); None = Triton's unbounded FIFO queue. A policy that limits
    nothing becomes None."""

    @classmethod
    def from_settings(cls, settings: dict[str, Any]) -> DynamicBatching:
        """The ``[model.dynamic_batching]`` table of models.toml: this class's fields and, flat beside them,
        ``QueuePolicy``'s (``max_queue_size``, ``default_timeout_us``, ...)."""
        own = {f.name for f in dataclasses.fields(cls)} - {"queue_policy"}
        unknown = set(settings) - own - set(QUEUE_POLICY_FIELDS)
        if unknown:
            raise SpecError(
                f"dynamic_batching: unknown settings {sorted(unknown)}; known: {sorted(own | set(QUEUE_POLICY_FIELDS))}"
            )
        policy = {k: v for k, v in settings.items() if k in QUEUE_POLICY_FIELDS}
        return cls(
            **{k: v for k, v in settings.items() if k in own}, queue_policy=QueuePolicy(**policy) if policy else None
        )

    @property
    def has_queue_policy(self) -> bool:
        return self.queue_policy is not None

    def __post_init__(self) -> None:
        _check_count("", "max_queue_delay_us", self.max_queue_delay_us)
        object.__setattr__(self, "preferred_batch_sizes", tuple(sorted(int(s) for s in self.preferred_batch_sizes)))
        if any(s < 1 for s in self.preferred_batch_sizes):
            raise SpecError(f"preferred_batch_sizes {list(self.preferred_batch_sizes)} must all be >= 1")
        if self.queue_policy is not None and not isinstance(self.queue_policy, QueuePolicy):
            raise SpecError(f"queue_policy={self.queue_policy!r} is not a QueuePolicy")
        if self.queue_policy is not None and not self.queue_policy.limits:
            object.__setattr__(self, "queue_policy", None)
        if self.has_queue_policy and self.max_queue_delay_us > 0:
            warnings.warn(
                QUEUE_POLICY_DELAY_WARNING.format(delay=self.max_queue_delay_us), QueuePolicyWarning, stacklevel=3
            )

    def replace(self, **changes: Any) -> DynamicBatching:
        return dataclasses.replace(self, **changes)


@dataclasses.dataclass(frozen=True)
class InstanceGroup:
    """Copies of the model that execute in parallel."""

    count: int = 1
    """Number of instances; on the local server each is its own process."""
    kind: str = "KIND_CPU"
    """``KIND_CPU`` | ``KIND_GPU`` | ``KIND_AUTO``."""

    def __post_init__(self) -> None:
        if self.count < 1:
            raise SpecError(f"instance count {self.count} must be >= 1")
        if self.kind not in INSTANCE_KINDS:
            raise SpecError(f"instance kind {self.kind!r} is not one of {INSTANCE_KINDS}")


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """A served model variant: everything its ``config.pbtxt`` says."""

    name: str
    """Model name in the repository and in request URLs."""
    inputs: tuple[TensorSpec, ...]
    """Inputs in the order the model's ``forward`` takes them."""
    outputs: tuple[TensorSpec, ...]
    """Outputs in the order the model returns them."""
    platform: str = "pytorch_libtorch"
    """Triton platform; ``pytorch_libtorch`` runs natively in the NGC container, through backends/pytorch locally.
    ``python`` is a Python model (``backend: "python"`` in the config)."""
    max_batch_size: int = 0
    """Largest batch one request or one merged execution may carry; 0 disables batching."""
    dynamic_batching: DynamicBatching | None = None
    """Dynamic batcher settings; needs ``max_batch_size > 0``."""
    instance_groups: tuple[InstanceGroup, ...] = (InstanceGroup(),)
    """Instance groups."""
    warmup: bool = True
    """Run one request per warmup batch size while loading, so the first client request is not slow."""
    warmup_samples: tuple[str, ...] = ()
    """Hand-written ``model_warmup`` entries, each one ``ModelWarmup`` in protobuf text format, served instead of
    the generated ones: a Python model that decodes images or text needs real bytes (``input_data_file``),
    which random or zero data is not. Empty: the generator's samples (batch 1 and ``max_batch_size``)."""
    parameters: tuple[tuple[str, str], ...] = ()
    """Backend parameters (``key``, ``value``)."""
    precision: str = "fp32"
    """Compute precision of the exported model; I/O stays FP32 (casts are inside the model)."""
    labels: tuple[str, ...] = ()
    """Class names of the first output (index = class id): Triton's classification extension answers
    ``class_count`` requests with them; written to ``labels_file`` beside the config."""
    labels_file: str = ""
    """The first output's ``label_filename``, relative to the model folder: ``labels.txt`` when ``labels`` are
    given. Set without ``labels`` it names a file already in the model folder (a config read back from a
    server carries the file's name, not its lines)."""
    decoupled: bool = False
    """Python models: a request may get any number of responses, then a final flag (streaming); clients use
    gRPC streaming or server-sent events."""
    latest_versions: int | None = 1
    """Version policy: Triton serves the newest N version folders. None writes no policy (Triton's default,
    the newest one), as hand-written configs do."""
    tensorrt_accelerator: bool = False
    """ONNX on GPU: let ONNX Runtime hand the graph to TensorRT, in ``precision``."""
    version: int = 1
    """Version folder the export writes."""
    description: str = ""
    """What this model is, for README and manifests."""

    def __post_init__(self) -> None:
        _check_name("model", self.name)
        if self.platform not in platforms():
            raise SpecError(f"model {self.name!r}: platform {self.platform!r} is not one of {platforms()}")
        if not self.inputs or not self.outputs:
            raise SpecError(f"model {self.name!r} needs at least one input and one output")
        names = [t.name for t in (*self.inputs, *self.outputs)]
        with_format = [t.name for t in self.outputs if t.format != "FORMAT_NONE"]
        if with_format:
            raise SpecError(f"model {self.name!r}: outputs {with_format} have a format; only inputs take one")
        if len(set(names)) != len(names):
            raise SpecError(f"model {self.name!r}: tensor names repeat: {names}")
        if self.max_batch_size < 0:
            raise SpecError(f"model {self.name!r}: max_batch_size={self.max_batch_size} is negative")
        if self.dynamic_batching is not None:
            if self.max_batch_size == 0:
                raise SpecError(f"model {self.name!r}: dynamic batching needs max_batch_size > 0")
            too_big = [s for s in self.dynamic_batching.preferred_batch_sizes if s > self.max_batch_size]
            if too_big:
                raise SpecError(
                    f"model {self.name!r}: preferred_batch_sizes {too_big} exceed max_batch_size={self.max_batch_size}"
                )
        if self.precision not in PRECISIONS:
            raise SpecError(f"model {self.name!r}: precision {self.precision!r} is not one of {PRECISIONS}")
        accelerated = tuple(dict.fromkeys(f.platform for f in formats.entries() if f.accelerator == "tensorrt"))
        if self.tensorrt_accelerator and self.platform not in accelerated:
            raise SpecError(f"model {self.name!r}: the TensorRT accelerator applies to {' or '.join(accelerated)} only")
        if self.version < 1:
            raise SpecError(f"model {self.name!r}: version {self.version} must be >= 1")
        if self.latest_versions is not None:
            _check_count(f"model {self.name!r}: ", "latest_versions", self.latest_versions, low=1)
        if self.decoupled and self.platform != "python":
            raise SpecError(
                f"model {self.name!r}: decoupled needs platform 'python' (a Python model), not {self.platform!r}"
            )
        if self.warmup_samples and not self.warmup:
            raise SpecError(f"model {self.name!r}: warmup_samples need warmup=True")
        if self.labels and not self.labels_file:
            object.__setattr__(self, "labels_file", LABELS_FILE)
        if self.labels_file and ("/" in self.labels_file or self.labels_file.startswith(".")):
            raise SpecError(
                f"model {self.name!r}: labels_file {self.labels_file!r} must be a file name in the model folder"
            )
        object.__setattr__(self, "parameters", tuple(sorted(dict(self.parameters).items())))

    def input(self, name: str) -> TensorSpec:
        for tensor in self.inputs:
            if tensor.name == name:
                return tensor
        raise KeyError(f"model {self.name!r} has no input {name!r}")

    def replace(self, **changes: Any) -> ModelSpec:
        return dataclasses.replace(self, **changes)
