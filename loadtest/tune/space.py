"""What the tuner may change in a served model, read from its config and the limits of its export.

A :class:`Point` is one config: which exported format serves (``digits``, ``digits_onnx``,
``digits_fp16``), the dynamic batcher (off, or on with a queue delay), its preferred batch sizes, the
instance count and max_batch_size. :func:`space_for` builds the axes from the served ``ModelSpec``: the
batcher off and delays from 0 up, preferred sizes none and a few near the load, 1..N instances, and
max_batch_size never above what the export was checked for (its manifest's ``max_batch_size``). A model
with a queue policy keeps its batcher and the policy, and is only offered delay 0 (a delay with a policy
stalls Triton 2.51's batcher; see ``export.spec.QUEUE_POLICY_DELAY_WARNING``); ``--delays-us off`` still
asks for the batcher off.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from pathlib import Path

from export.changes import ServingChanges
from export.spec import ModelSpec
from export.variants import TARGETS, Variant

AXES = ("batcher", "instances", "format", "preferred", "max_batch_size")
"""The order the coordinate descent walks them: the batching delay first (the largest effect on latency)."""
DELAYS_US = (0, 100, 500, 1000, 2000)
MAX_INSTANCES = 4
FORMATS = tuple(
    Variant.parse(v) for v in ("torchscript/fp32", "torchscript/fp16", "onnx/fp32", "onnx/fp16", "torch-tensorrt/fp16")
)
"""Exported formats the tuner looks for beside the model (the repository decides which exist)."""
OFF = None


@dataclasses.dataclass(frozen=True, order=True)
class Point:
    format: str
    """``FORMAT/PRECISION`` of the exported variant that serves (``onnx/fp32`` -> ``<model>_onnx``)."""
    batcher: int | None
    """None: no dynamic batcher; else its ``max_queue_delay_us``."""
    preferred: tuple[int, ...]
    """Preferred batch sizes; () = none (the batcher sends what has queued)."""
    instances: int
    max_batch_size: int

    def served_model(self, model: str) -> str:
        return Variant.parse(self.format).model_name(model)

    def changes(self) -> ServingChanges:
        """The point as serving changes over the served format's config (its queue policy is kept)."""
        if self.batcher is OFF:
            return ServingChanges(dynamic_batching=False, instances=self.instances, max_batch_size=self.max_batch_size)
        return ServingChanges(
            dynamic_batching=True,
            max_queue_delay_us=self.batcher,
            preferred_batch_sizes=self.preferred,
            instances=self.instances,
            max_batch_size=self.max_batch_size,
        )

    def label(self) -> str:
        batcher = "no batcher" if self.batcher is OFF else f"delay {self.batcher} us"
        preferred = ("pref " + ",".join(map(str, self.preferred))) if self.preferred else "pref -"
        return f"{self.format:<17} {batcher:<13} {preferred:<12} x{self.instances} mbs {self.max_batch_size}"

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "preferred": list(self.preferred)}

    @classmethod
    def from_dict(cls, raw: dict) -> Point:
        return cls(
            raw["format"], raw["batcher"], tuple(raw["preferred"]), int(raw["instances"]), int(raw["max_batch_size"])
        )


@dataclasses.dataclass(frozen=True)
class SearchSpace:
    values: dict[str, tuple]
    """Axis -> the values tried on it (see ``AXES``)."""
    axes: tuple[str, ...] = AXES
    delay_needs_no_policy: bool = False
    """The model has a queue policy: only delay 0 (kept by ``normalise``)."""

    def normalise(self, point: Point) -> Point | None:
        """The point as it will be served, or None when it is not a valid config: without a batcher the
        preferred sizes mean nothing (so they are dropped); a preferred size above max_batch_size is refused."""
        if point.max_batch_size == 0 and point.batcher is not OFF:
            return None
        if point.batcher is OFF:
            return dataclasses.replace(point, preferred=())
        if any(size > point.max_batch_size for size in point.preferred):
            return None
        return point

    def points(self) -> list[Point]:
        """Every distinct valid point (the full grid)."""
        seen: dict[Point, None] = {}
        for combo in itertools.product(*(self.values[a] for a in AXES)):
            point = self.normalise(Point(**dict(zip(AXES, combo, strict=True))))
            if point is not None:
                seen.setdefault(point)
        return list(seen)

    def grid_size(self) -> int:
        return len(self.points())

    def to_dict(self) -> dict:
        return {axis: [list(v) if isinstance(v, tuple) else v for v in values] for axis, values in self.values.items()}


class SpaceError(ValueError):
    """The model cannot be tuned as asked (no batching limit known, no exported format)."""


def checked_max_batch_size(folder: Path, spec: ModelSpec) -> int:
    """The largest batch the export was checked for: its manifest's ``max_batch_size`` (what parity ran at);
    the served config's when the model has no manifest (a hand-written model)."""
    versions = sorted((p for p in Path(folder).iterdir() if p.is_dir() and p.name.isdigit()), key=lambda p: int(p.name))
    for version in reversed(versions):
        manifest = version / "manifest.json"
        if manifest.is_file():
            try:
                return int(json.loads(manifest.read_text())["max_batch_size"])
            except (KeyError, ValueError, TypeError):
                break
    return spec.max_batch_size


def formats_in(repository: Path, model: str) -> list[str]:
    """The ``FORMAT/PRECISION`` of each exported variant of ``model`` present in the repository (a folder
    with a config.pbtxt under the variant's name); the plain name counts as ``torchscript/fp32``."""
    found = []
    for variant in FORMATS:
        if (
            any(_fits(variant, t) for t in TARGETS)
            and (Path(repository) / variant.model_name(model) / "config.pbtxt").is_file()
        ):
            found.append(str(variant))
    return found


def _fits(variant: Variant, target: str) -> bool:
    try:
        variant.check_target(target)
        return True
    except ValueError:
        return False


def preferred_options(spec: ModelSpec, limit: int, users: int | None) -> list[tuple[int, ...]]:
    """None, the served sizes, and single sizes near what the load can form: the clients in flight (``users``)
    and half of them; for an open-loop load, a quarter and a half of the limit."""
    options: list[tuple[int, ...]] = [()]
    if spec.dynamic_batching is not None and spec.dynamic_batching.preferred_batch_sizes:
        options.append(tuple(s for s in spec.dynamic_batching.preferred_batch_sizes if s <= limit))
    near = (users // 2, users) if users else (limit // 4, limit // 2)
    for size in near:
        size = min(max(1, size), limit)
        if size > 1 and (size,) not in options:
            options.append((size,))
    return [o for o in options if o is not None and (o or o == ())]


def batch_size_options(spec: ModelSpec, limit: int) -> list[int]:
    """The checked limit, then halves of it down to 4, plus the served value: at most five."""
    sizes = [limit]
    while sizes[-1] // 2 >= 4 and len(sizes) < 4:
        sizes.append(sizes[-1] // 2)
    if 0 < spec.max_batch_size <= limit and spec.max_batch_size not in sizes:
        sizes.append(spec.max_batch_size)
    return sorted(set(sizes), reverse=True)


def served_point(spec: ModelSpec, fmt: str) -> Point:
    """The config ``spec`` serves as a point."""
    batching = spec.dynamic_batching
    groups = spec.instance_groups
    instances = sum(g.count for g in groups) if groups else 1
    return Point(
        fmt,
        None if batching is None else batching.max_queue_delay_us,
        () if batching is None else tuple(batching.preferred_batch_sizes),
        instances,
        spec.max_batch_size,
    )


def space_for(
    spec: ModelSpec,
    limit: int,
    formats: list[str],
    *,
    users: int | None = None,
    max_instances: int = MAX_INSTANCES,
    current_format: str = "torchscript/fp32",
) -> tuple[SearchSpace, Point]:
    """The search space around ``spec`` (the served config of the model's public format) and its start point.

    ``limit``: the largest max_batch_size allowed (see ``checked_max_batch_size``); ``formats``: the exported
    formats to compare (see ``formats_in``).
    """
    if not formats:
        raise SpaceError(f"model {spec.name!r}: no exported format found to serve")
    if max_instances < 1:
        raise SpaceError(f"max_instances={max_instances} must be >= 1")
    start = served_point(spec, current_format)
    policy = spec.dynamic_batching is not None and spec.dynamic_batching.queue_policy is not None
    if limit <= 0:  # a model that does not batch: only formats and instances
        batchers: list = [OFF]
        preferred: list = [()]
        sizes = [0]
    else:
        delays = [0] if policy else sorted({*DELAYS_US, *([start.batcher] if start.batcher is not OFF else [])})
        # Turning the batcher off would drop its queue policy, the model's overload protection, which a
        # search at one load cannot weigh: a model with a policy keeps its batcher.
        batchers = delays if policy else [OFF, *delays]
        preferred = preferred_options(spec, limit, users)
        sizes = batch_size_options(spec, limit)
    if start.batcher is not OFF and start.batcher not in batchers:  # a delayed queue policy as deployed
        batchers.append(start.batcher)
    instances = sorted({*range(1, max_instances + 1), start.instances})
    values = {
        "batcher": tuple(batchers),
        "instances": tuple(instances),
        "format": tuple(formats),
        "preferred": tuple(dict.fromkeys([*preferred, start.preferred])),
        "max_batch_size": tuple(dict.fromkeys([*sizes, start.max_batch_size])),
    }
    space = SearchSpace(values, delay_needs_no_policy=policy)
    return space, space.normalise(start) or start
