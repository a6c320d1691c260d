"""The load-generator seam: one small interface, ``LoadGenerator``, that perf_analyzer and Locust implement,
and one registry, ``REGISTRY``, from which the generator names the commands accept are derived.

A command builds its generator once (``generator(kind, endpoints, **settings)``) and calls ``measure`` for
every run, so capacity, the tuner and compare drive either alike and never ask which one they hold. A new
generator is one subclass here with a ``kind`` and an entry in ``REGISTRY``: it runs one measurement of one
served model at one ``Load`` and answers a ``probe.Measurement`` (its figures, the server's counters around
it, ``saturated`` when the generator was the bottleneck). How each does its work stays in
``probe.with_perf_analyzer`` and ``probe.with_locust``.
"""

from __future__ import annotations

import abc
import dataclasses
import itertools
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import ClassVar

from loadtest.drive.target import Endpoints
from loadtest.errors import LoadTestError
from loadtest.measure import probe
from loadtest.measure.probe import Load, Measurement

PROTOCOLS = ("grpc", "http")


def _silent(*_: object) -> None:
    pass


class LoadGenerator(abc.ABC):
    """What every load generator offers a command. Settings are fixed when it is built; ``measure`` is one run."""

    kind: ClassVar[str]
    """Its name on the command line (``--generator``) and in reports."""

    @property
    @abc.abstractmethod
    def measured_s(self) -> float:
        """Seconds of load one run's figures cover (its warm-up left out)."""

    @abc.abstractmethod
    def measure(
        self, model: str, served: str, load: Load, *, label: str | None = None, request_intervals: Path | None = None
    ) -> Measurement:
        """One run at ``load`` against ``served`` (a served name of the public ``model``); ``label`` names the
        run's files where it keeps any; ``request_intervals``: an open loop's schedule, for a generator that
        plays one (others refuse it)."""

    def _check_protocol(self, protocol: str) -> None:
        if protocol not in PROTOCOLS:
            raise LoadTestError(f"protocol {protocol!r} is not one of {', '.join(PROTOCOLS)}")


@dataclasses.dataclass(frozen=True)
class PerfAnalyzer(LoadGenerator):
    """NVIDIA's perf_analyzer (C++): tensor models. ``input_data``: its ``--input-data`` file;
    ``measurement_ms``: its window; ``max_trials``: windows per run at most; ``budget_ms``: what goodput
    counts against (a finite one writes its profile export)."""

    kind: ClassVar[str] = "perf_analyzer"
    endpoints: Endpoints
    protocol: str = "grpc"
    budget_ms: float = math.inf
    input_data: Path | None = None
    measurement_ms: int = 2000
    max_trials: int = 5

    def __post_init__(self) -> None:
        self._check_protocol(self.protocol)

    @property
    def measured_s(self) -> float:
        return self.measurement_ms / 1000

    def measure(self, model, served, load, *, label=None, request_intervals=None) -> Measurement:
        return probe.with_perf_analyzer(
            self.endpoints,
            served,
            load,
            protocol=self.protocol,
            input_data=self.input_data,
            measurement_ms=self.measurement_ms,
            max_trials=self.max_trials,
            budget_ms=self.budget_ms,
            request_intervals=request_intervals,
        )


@dataclasses.dataclass(frozen=True)
class Locust(LoadGenerator):
    """Locust through tritonclient: any model, pipelines and streams too. ``work``: its runs' files (made when
    a run needs it); ``payload``: ``PayloadOptions.to_table``; ``duration_s``: seconds per run, warm-up
    included; ``processes``: None for one per client CPU; ``log``: its progress (silent: the callers print a
    line per run)."""

    kind: ClassVar[str] = "locust"
    endpoints: Endpoints
    work: Path
    protocol: str = "grpc"
    budget_ms: float = math.inf
    payload: dict | None = None
    duration_s: float = 10.0
    processes: int | None = None
    log: Callable[..., None] = _silent
    _runs: Iterator[int] = dataclasses.field(
        default_factory=lambda: itertools.count(1), init=False, compare=False, repr=False
    )

    def __post_init__(self) -> None:
        self._check_protocol(self.protocol)

    @property
    def measured_s(self) -> float:
        return self.duration_s - probe.locust_warmup_s(self.duration_s)

    def measure(self, model, served, load, *, label=None, request_intervals=None) -> Measurement:
        if request_intervals is not None:
            raise LoadTestError("request_intervals is perf_analyzer's schedule: Locust takes the load's arrivals")
        self.work.mkdir(parents=True, exist_ok=True)
        return probe.with_locust(
            self.endpoints,
            model,
            served,
            load,
            self.work,
            label or f"{served}-{next(self._runs)}",
            protocol=self.protocol,
            duration_s=self.duration_s,
            processes=self.processes,
            payload=self.payload,
            budget_ms=self.budget_ms,
            log=self.log,
        )


REGISTRY: dict[str, type[LoadGenerator]] = {cls.kind: cls for cls in (PerfAnalyzer, Locust)}
GENERATORS = tuple(REGISTRY)
"""The generator names a command accepts."""


def generator(kind: str, endpoints: Endpoints, **settings) -> LoadGenerator:
    """The generator ``kind`` with ``settings``; those it does not take are left out, so a command can build
    whichever its model needs from one set of flags. An unknown kind, or a setting it needs and lacks, is a
    ``LoadTestError`` naming it."""
    cls = REGISTRY.get(kind)
    if cls is None:
        raise LoadTestError(f"generator {kind!r} is not one of {', '.join(GENERATORS)}")
    fields = {f.name for f in dataclasses.fields(cls) if f.init} - {"endpoints"}
    taken = {name: value for name, value in settings.items() if name in fields}
    if kind == Locust.kind and taken.get("work") is None:
        raise LoadTestError("work: Locust needs a folder for its runs' files")
    return cls(endpoints, **taken)
