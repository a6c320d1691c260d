"""Serving changes: what the command line, a load campaign or the tuner changes in a served model's config.

A ``ServingChanges`` names only what changes (``None`` keeps the model's value) and is checked when it is
made; ``apply`` returns the changed ``ModelSpec``, which validates the combination (a preferred batch size
above the new max_batch_size, a batcher without batching). Read a served config with
``export.config.from_json``, apply, and write or load the result with ``to_model_config``/``to_json``::

    spec = config.from_json(client.get_model_config("digits"))
    changed = ServingChanges(max_queue_delay_us=0, default_timeout_us=100_000).apply(spec)
    client.load_model("digits", config=json.dumps(config.to_json(changed)))
"""

from __future__ import annotations

import dataclasses
from typing import Any

from export.errors import SpecError
from export.spec import (
    INSTANCE_KINDS,
    QUEUE_POLICY_FIELDS,
    TIMEOUT_ACTIONS,
    DynamicBatching,
    InstanceGroup,
    ModelSpec,
    QueuePolicy,
)

BATCHER_FIELDS = ("max_queue_delay_us", "preferred_batch_sizes", *QUEUE_POLICY_FIELDS)
"""Changes that need (and add, where there is none) the dynamic batcher."""
ADDED_BATCHER = DynamicBatching(max_queue_delay_us=0)
"""A batcher added to a model without one: what Triton makes of an empty ``dynamic_batching { }``."""


@dataclasses.dataclass(frozen=True)
class ServingChanges:
    """Changes to a model's serving settings; each field left ``None`` keeps the model's value."""

    max_batch_size: int | None = None
    """New largest batch (>= 0; 0 turns batching off, so it needs ``dynamic_batching=False`` too)."""
    dynamic_batching: bool | None = None
    """False removes the dynamic batcher; True keeps it or adds one with Triton's defaults (no delay, no
    preferred sizes), as does any batching change on a model without a batcher."""
    max_queue_delay_us: int | None = None
    """How long the first request of a batch waits for others (>= 0)."""
    preferred_batch_sizes: tuple[int, ...] | None = None
    """Batch sizes the batcher sends at once (each >= 1 and <= max_batch_size); () clears them."""
    instances: int | None = None
    """Instance count (>= 1): the model then has one instance group, of the first group's kind."""
    instance_kind: str | None = None
    """``KIND_CPU`` | ``KIND_GPU`` | ``KIND_AUTO`` for that one group."""
    warmup: bool | None = None
    """Warm the model up while it loads (the samples follow the new max_batch_size)."""
    max_queue_size: int | None = None
    """Queue policy (``QueuePolicy.max_queue_size``), merged into the model's policy; 0 = unbounded."""
    default_timeout_us: int | None = None
    """Queue policy (``QueuePolicy.default_timeout_us``); 0 = never. A merged policy that limits nothing (size
    and timeout 0, no override) is removed."""
    timeout_action: str | None = None
    """Queue policy (``QueuePolicy.timeout_action``): ``REJECT`` or ``DELAY``."""
    allow_timeout_override: bool | None = None
    """Queue policy (``QueuePolicy.allow_timeout_override``)."""

    def __post_init__(self) -> None:
        for field, low in (
            ("max_batch_size", 0),
            ("max_queue_delay_us", 0),
            ("instances", 1),
            ("max_queue_size", 0),
            ("default_timeout_us", 0),
        ):
            value = getattr(self, field)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < low):
                raise SpecError(f"{field}={value!r} is out of range (an integer >= {low})")
        for field in ("dynamic_batching", "warmup", "allow_timeout_override"):
            value = getattr(self, field)
            if value is not None and not isinstance(value, bool):
                raise SpecError(f"{field}={value!r} is not true or false")
        if self.timeout_action is not None and self.timeout_action not in TIMEOUT_ACTIONS:
            raise SpecError(f"timeout_action={self.timeout_action!r} is not one of {TIMEOUT_ACTIONS}")
        if self.instance_kind is not None and self.instance_kind not in INSTANCE_KINDS:
            raise SpecError(f"instance_kind={self.instance_kind!r} is not one of {INSTANCE_KINDS}")
        if self.preferred_batch_sizes is not None:
            sizes = self.preferred_batch_sizes
            if (
                isinstance(sizes, (str, bytes))
                or not all(isinstance(s, int) and not isinstance(s, bool) for s in sizes)
                or any(s < 1 for s in sizes)
            ):
                raise SpecError(f"preferred_batch_sizes={sizes!r} must be integers >= 1")
            object.__setattr__(self, "preferred_batch_sizes", tuple(sorted(sizes)))
        if self.dynamic_batching is False:
            given = [f for f in BATCHER_FIELDS if getattr(self, f) is not None]
            if given:
                raise SpecError(f"{', '.join(given)} change the dynamic batcher, but dynamic_batching=False removes it")

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> ServingChanges:
        """From a table such as a campaign variant's; an unknown key is refused by name."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(values) - known
        if unknown:
            raise SpecError(f"unknown serving changes {sorted(unknown)}; known: {sorted(known)}")
        if isinstance(values.get("preferred_batch_sizes"), list):
            values = {**values, "preferred_batch_sizes": tuple(values["preferred_batch_sizes"])}
        return cls(**values)

    @property
    def changed(self) -> tuple[str, ...]:
        """The fields this changes, in declaration order."""
        return tuple(f.name for f in dataclasses.fields(self) if getattr(self, f.name) is not None)

    def __bool__(self) -> bool:
        return bool(self.changed)

    def apply(self, spec: ModelSpec) -> ModelSpec:
        """``spec`` with these changes; a combination the spec refuses raises ``SpecError`` naming the value."""
        values: dict[str, Any] = {}
        if self.max_batch_size is not None:
            values["max_batch_size"] = self.max_batch_size
            if spec.warmup_samples:  # a hand-written sample larger than the new limit would fail the load
                kept = tuple(s for s in spec.warmup_samples if _batch_size(s) <= max(self.max_batch_size, 1))
                values["warmup_samples"] = kept
                values["warmup"] = spec.warmup and bool(kept)
        if self.warmup is not None:
            values["warmup"] = self.warmup
            if not self.warmup:
                values["warmup_samples"] = ()
        if self.dynamic_batching is False:
            values["dynamic_batching"] = None
        elif self.dynamic_batching or any(getattr(self, f) is not None for f in BATCHER_FIELDS):
            values["dynamic_batching"] = self._batching(spec.dynamic_batching or ADDED_BATCHER)
        if self.instances is not None or self.instance_kind is not None:
            first = spec.instance_groups[0] if spec.instance_groups else InstanceGroup()
            values["instance_groups"] = (
                InstanceGroup(count=self.instances or first.count, kind=self.instance_kind or first.kind),
            )
        return spec.replace(**values)

    def _batching(self, batching: DynamicBatching) -> DynamicBatching:
        values: dict[str, Any] = {}
        if self.max_queue_delay_us is not None:
            values["max_queue_delay_us"] = self.max_queue_delay_us
        if self.preferred_batch_sizes is not None:
            values["preferred_batch_sizes"] = self.preferred_batch_sizes
        policy = {f: getattr(self, f) for f in QUEUE_POLICY_FIELDS if getattr(self, f) is not None}
        if policy:
            values["queue_policy"] = (batching.queue_policy or QueuePolicy()).replace(**policy)
        return batching.replace(**values)


def apply_changes(spec: ModelSpec, changes: ServingChanges | dict[str, Any]) -> ModelSpec:
    """``spec`` with ``changes`` (a ``ServingChanges`` or its fields as a dict)."""
    if isinstance(changes, dict):
        changes = ServingChanges.from_dict(changes)
    return changes.apply(spec)


def _batch_size(sample: str) -> int:
    """The ``batch_size`` of one hand-written warmup sample (protobuf text)."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2 as mc

    return text_format.Parse(sample, mc.ModelWarmup()).batch_size or 1
