"""The load-generator seam: one small interface, ``LoadGenerator``, that perf_analyzer and Locust implement,
and one registry, ``REGISTRY``, from which the generator names the commands accept are derived.

A command builds its generator once (``generator(kind, endpoints, **settings)``) and calls it for every run,
so capacity, the tuner, compare, soak and bench drive either alike and never ask which one they hold. A new
generator is one subclass here with a ``kind`` and an entry in ``REGISTRY``, answering two calls:

- ``measure``: one measurement of one served model at one ``Load``, a ``Measurement`` (its figures,
  the server's counters around it, ``saturated`` when the generator was the bottleneck); how each does it
  stays in ``probe.with_perf_analyzer`` and ``probe.with_locust``;
- ``run``: one run with the client's whole record, a ``RunRecord`` (``ClientStats``: every figure over the
  run and its figures per window; the requests Triton counted as failed), for a study that judges the run's
  course (soak) or reports the client's own figures (bench).

A setting a generator cannot go without is a field without a default whose ``metadata["needs"]`` says what
it is: ``generator`` refuses to build one without it, naming the setting.
"""

from __future__ import annotations

import abc
import dataclasses
import itertools
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import ClassVar

from deploy.client import metrics, model_metric
from loadtest.core.client_stats import ClientStats
from loadtest.core.measurement import Load, Measurement
from loadtest.core.results import ServerStats
from loadtest.core.spec import Scenario
from loadtest.errors import LoadTestError
from loadtest.generators import probe
from loadtest.generators.input_data import read_input_data, served_model
from loadtest.generators.locust.run import measure_run
from loadtest.generators.payloads import PayloadOptions, default_options, payloads
from loadtest.generators.perf_analyzer import windows as perf_windows
from loadtest.target import apply
from loadtest.target.endpoints import Endpoints

PROTOCOLS = ("grpc", "http")


def _silent(*_: object) -> None:
    pass


@dataclasses.dataclass(frozen=True)
class RunRecord:
    """One run's client record (``LoadGenerator.run``)."""

    client: ClientStats
    """Every figure over the run, and per window in ``client.windows`` (``t``, ``length_s``, ``requests``,
    ``failures``, ``p50_ms``, ``p99_ms``)."""
    server_failures: int | None
    """Requests Triton counted as failed over the run."""
    server: ServerStats | None = None
    """Triton's counters around the run, where the generator reads them all (Locust)."""


class LoadGenerator(abc.ABC):
    """What every load generator offers a command. Settings are fixed when it is built; ``measure`` is one run."""

    kind: ClassVar[str]
    """Its name on the command line (``--generator``) and in reports."""
    title: ClassVar[str]
    """Its name in a sentence."""

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

    @abc.abstractmethod
    def run(self, model: str, served: str, load: Load, *, label: str | None = None) -> RunRecord:
        """One run at ``load`` with the client's whole record, figures per window included (their length a
        setting of the generator's); a generator that cannot run ``load`` so refuses it."""

    def _check_protocol(self, protocol: str) -> None:
        if protocol not in PROTOCOLS:
            raise LoadTestError(f"protocol {protocol!r} is not one of {', '.join(PROTOCOLS)}")


@dataclasses.dataclass(frozen=True)
class PerfAnalyzer(LoadGenerator):
    """NVIDIA's perf_analyzer (C++): tensor models. ``input_data``: its ``--input-data`` file; ``payload``:
    ``PayloadOptions.to_table``, the requests ``run`` sends when there is no ``input_data`` (``measure``:
    perf_analyzer's own data then); ``measurement_ms``: its window; ``max_trials``: windows per run at most
    (``run``: exactly, one pass each); ``budget_ms``: what goodput counts against (a finite one writes its
    profile export); ``log``: its command line (``run``)."""

    kind: ClassVar[str] = "perf_analyzer"
    title: ClassVar[str] = "perf_analyzer"
    endpoints: Endpoints
    protocol: str = "grpc"
    budget_ms: float = math.inf
    input_data: Path | None = None
    payload: dict | None = None
    measurement_ms: int = 2000
    max_trials: int = 5
    log: Callable[..., None] = _silent

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

    def run(self, model, served, load, *, label=None) -> RunRecord:
        """``max_trials`` passes of ``measurement_ms`` at an open-loop rate
        (``loadtest.generators.perf_analyzer.windows``), a window per pass. perf_analyzer gives a p99 per pass, not over
        the run: no overall percentiles."""
        if load.rate is None:
            raise LoadTestError("perf_analyzer's windowed run is an open loop: give the load a rate, not users")
        config = apply.served_config(self.endpoints.http, served)
        if self.input_data is not None:
            samples = read_input_data(self.input_data, served_model(config))
        else:
            samples = payloads(config, default_options(served, PayloadOptions.from_table(self.payload)))
        failed_before = model_metric(metrics(self.endpoints.metrics), "nv_inference_request_failure", served)
        url = self.endpoints.url(self.protocol)
        try:
            got = perf_windows.run(
                served,
                url,
                self.protocol,
                load.rate,
                self.max_trials,
                self.measured_s,
                samples,
                log=self.log,
                config=config,
            )
        except perf_windows.PerfWindowsError as exc:
            raise LoadTestError(str(exc)) from None
        failed_after = model_metric(metrics(self.endpoints.metrics), "nv_inference_request_failure", served)
        client = ClientStats(
            requests=got["requests"],
            failures=0,  # perf_analyzer stops at a failed request: a finished run had none
            duration_s=len(got["windows"]) * self.measured_s,
            latency_ms={},
            windows=got["windows"],
        )
        return RunRecord(client, int(failed_after - failed_before))


@dataclasses.dataclass(frozen=True)
class Locust(LoadGenerator):
    """Locust through tritonclient: any model, pipelines and streams too. ``work``: its runs' files (made when
    a run needs it); ``payload``: ``PayloadOptions.to_table``; ``duration_s``: seconds per run, warm-up
    included; ``warmup_s``: the leading seconds ``run`` leaves out (None: ``probe.locust_warmup_s``, which
    ``measure`` always leaves out); ``window_s``: the length of ``run``'s windows (None: Locust's default);
    ``ttft_ms``, ``itl_ms``: stream budgets goodput also counts against (None: none); ``processes``: None for
    one per client CPU; ``log``: its progress (silent: the callers print a line per
    run)."""

    kind: ClassVar[str] = "locust"
    title: ClassVar[str] = "Locust"
    endpoints: Endpoints
    work: Path = dataclasses.field(metadata={"needs": "a folder for its runs' files"})
    protocol: str = "grpc"
    budget_ms: float = math.inf
    ttft_ms: float | None = None
    itl_ms: float | None = None
    payload: dict | None = None
    duration_s: float = 10.0
    warmup_s: float | None = None
    window_s: float | None = None
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
        if self.warmup_s is not None:  # probe.with_locust leaves out its own warm-up
            raise LoadTestError("warmup_s: Locust's measure leaves out probe.locust_warmup_s; give it to run only")
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
            ttft_ms=self.ttft_ms,
            itl_ms=self.itl_ms,
            log=self.log,
        )

    def run(self, model, served, load, *, label=None) -> RunRecord:
        """One Locust run of ``duration_s`` (``generators.locust.run.measure_run``), its files named ``label``."""
        label = label or f"{served}-{next(self._runs)}"
        scenario = load.scenario(
            label,
            model,
            self.protocol,
            self.duration_s,
            probe.locust_warmup_s(self.duration_s) if self.warmup_s is None else self.warmup_s,
            self.processes or max(1, len(probe.client_cpus())),
            self.payload,
        )
        return self.run_scenario(scenario, served, label=label)

    def run_scenario(self, scenario: Scenario, served: str, *, label: str | None = None) -> RunRecord:
        """One Locust run of a whole run spec, as a campaign file gives it (any shape, arrivals, retry,
        processes, payload), its files named ``label``; this generator's protocol and durations are the run
        spec's own."""
        self.work.mkdir(parents=True, exist_ok=True)
        label = label or f"{served}-{next(self._runs)}"
        extra = {"window_s": self.window_s} if self.window_s is not None else None
        client, server = measure_run(scenario, served, self.endpoints, self.work, label, self.log, extra)
        return RunRecord(client, server.failures, server)


REGISTRY: dict[str, type[LoadGenerator]] = {cls.kind: cls for cls in (PerfAnalyzer, Locust)}
GENERATORS = tuple(REGISTRY)
"""The generator names a command accepts."""


def generator(kind: str, endpoints: Endpoints, **settings) -> LoadGenerator:
    """The generator ``kind`` with ``settings``; those it does not take are left out, so a command can build
    whichever its model needs from one set of flags. An unknown kind, or a setting it needs (a field with
    ``metadata["needs"]``) missing or None, is a ``LoadTestError`` naming it."""
    cls = REGISTRY.get(kind)
    if cls is None:
        raise LoadTestError(f"generator {kind!r} is not one of {', '.join(GENERATORS)}")
    fields = [f for f in dataclasses.fields(cls) if f.init and f.name != "endpoints"]
    taken = {f.name: settings[f.name] for f in fields if f.name in settings}
    for field in fields:
        if "needs" in field.metadata and taken.get(field.name) is None:
            raise LoadTestError(f"{field.name}: {cls.title} needs {field.metadata['needs']}")
    return cls(endpoints, **taken)
