"""The tuner end to end against a running server: the space from the served config, each point applied
through model control and measured, the served configs restored, the outcome for the report and the writer.

``tune(options, endpoints)`` is what ``tritonkit tune`` and a campaign's ``[tune]`` step call: the search
screens, the leaders are measured again interleaved (``loadtest.core.trials.run_trials``, one arm a
config, its ``prepare`` applying the config) and ``loadtest.tune.decide`` picks. Nothing is written to the
repository here: ``loadtest.tune.writer`` writes the pick (or prints its diff).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from pathlib import Path

from export import config as config_io
from export import model_kind
from export.errors import ExportError
from export.model_kind import ModelKind
from export.spec import ModelSpec
from loadtest.capacity import search as capacity
from loadtest.core.measurement import Load, Measurement
from loadtest.core.spec import Candidate, Slo
from loadtest.core.trials import Arm, run_trials
from loadtest.errors import TuneError, VariantError
from loadtest.generators import probe
from loadtest.generators import seam as generators
from loadtest.generators.payloads import PayloadOptions
from loadtest.target import apply
from loadtest.target.endpoints import Endpoints
from loadtest.tune import decide
from loadtest.tune import search as search_io
from loadtest.tune.space import Point, SearchSpace, checked_max_batch_size, formats_in, served_point, space_for
from tritonkit_errors import ExitStatus


@dataclasses.dataclass(frozen=True)
class TuneOptions:
    model: str
    """The public model name (its formats are ``<model>_onnx``, ``<model>_fp16``, ... beside it)."""
    slo: Slo
    load: Load
    repository: Path
    budget_s: float = 300.0
    """Wall-clock budget of the screening search (the leaders' trials and the no-pick load search follow)."""
    protocol: str = "grpc"
    strategy: str = "descent"
    max_instances: int = 4
    measurement_ms: int = 2000
    """perf_analyzer's window; Locust runs ``locust_duration_s`` per point."""
    locust_duration_s: float = 10.0
    leaders: int = decide.LEADERS
    """Candidates measured again beside the served config."""
    trials: int = decide.TRIALS
    """Interleaved trials of each leader."""
    min_effect: float = decide.MIN_EFFECT
    """The smallest throughput gain over the served config that replaces it (0.05: 5%)."""
    payload: PayloadOptions = dataclasses.field(default_factory=PayloadOptions)
    """What the requests carry (``loadtest.generators.payloads``): the same for perf_analyzer and Locust."""
    input_data: Path | None = None
    """perf_analyzer's ``--input-data`` JSON, written from ``payload`` once the served config is known."""
    axes: dict[str, tuple] = dataclasses.field(default_factory=dict)
    """Values to search on some axes instead of the generated ones (``batcher``: delays, None = off;
    ``max_batch_size``; ``format``); each checked against the model's limits."""
    work: Path | None = None
    """Where Locust runs keep their files."""
    via: str | None = None
    """An ensemble that calls ``model``: the load goes through it (its requests, raw inputs), so ``model`` is
    tuned at the batches and arrivals the pipeline gives it; the formats searched are the one it calls."""

    @property
    def target(self) -> str:
        """The model the requests address: ``via`` when given, else ``model``."""
        return self.via or self.model


@dataclasses.dataclass
class Outcome:
    options: TuneOptions
    result: search_io.SearchResult
    space: SearchSpace
    generator: str
    limit: int
    """The largest max_batch_size searched (what the export was checked for)."""
    served: dict[str, dict]
    """Served model -> its config (JSON) before the search; restored after it."""
    compared: list[tuple[str, search_io.Trial]] = dataclasses.field(default_factory=list)
    """Named points measured beside the search (a campaign's variants, Model Analyzer's pick)."""
    decision: decide.Decision | None = None

    @property
    def best(self) -> search_io.Trial | None:
        """The pick: a leader better than the served config beyond the noise, or the served config kept."""
        return self.decision.pick if self.decision is not None else self.result.best


def served_spec(endpoints: Endpoints, model: str) -> ModelSpec:
    config = apply.served_config(endpoints.http, model)
    members = sorted(model_kind.ensemble_steps(config))
    if members:
        raise TuneError(
            f"model {model!r} is an ensemble: its own config has no batching or instances to tune; "
            f"tune its members ({', '.join(members)}) at the load the ensemble gives them"
        )
    try:
        return apply.served_spec(endpoints.http, model)
    except ExportError as exc:
        raise TuneError(f"model {model!r}: its served config cannot be tuned: {exc}") from None


class Runner:
    """Applies points to the server and measures them; remembers the configs it changed to restore them."""

    def __init__(self, options: TuneOptions, endpoints: Endpoints, log: Callable[[str], None] = print):
        self.options, self.endpoints, self.log = options, endpoints, log
        self.configs = apply.ServedConfigs(endpoints.http)
        """The served configs it changed, restored by ``restore``."""
        self.specs: dict[str, ModelSpec] = {}
        self.serving: dict[str, Point] = {}
        """Served model -> the point it serves now (its original config's point until one is loaded)."""
        self.refused: dict[Point, str] = {}
        """Points the server would not load, with why."""
        # Both built once: which one a point gets depends on its served model (``generator``).
        self.generators = {
            "perf_analyzer": generators.generator(
                "perf_analyzer",
                endpoints,
                protocol=options.protocol,
                input_data=options.input_data,
                measurement_ms=options.measurement_ms,
            ),
            "locust": generators.generator(
                "locust",
                endpoints,
                protocol=options.protocol,
                work=options.work or Path("reports") / "tune" / options.model / "runs",
                payload=options.payload.to_table(),
                duration_s=options.locust_duration_s,
            ),
        }

    def spec_of(self, served: str, fmt: str = "torchscript/fp32") -> ModelSpec:
        if served not in self.specs:
            self.configs.original(served)
            self.specs[served] = served_spec(self.endpoints, served)
            self.serving[served] = served_point(self.specs[served], fmt)
        return self.specs[served]

    def generator(self, spec: ModelSpec) -> str:
        if self.options.via:  # the requests are the ensemble's (called_format checked it is one)
            return probe.generator_for("ensemble", False, [])
        return probe.generator_for(spec.platform, spec.decoupled, [t.datatype for t in spec.inputs])

    def measure(self, point: Point) -> Measurement:
        """``point`` applied (when it is not served already) and measured once."""
        self.apply(point)
        return self.probe(point)

    def apply(self, point: Point) -> None:
        """Serve ``point`` (loading restarts the instances: only when the config changes); a config the
        server refuses is remembered, and ``probe`` reports it as a failed measurement."""
        served = point.served_model(self.options.model)
        spec = self.spec_of(served, point.format)
        self.refused.pop(point, None)
        if self.serving.get(served) == point:
            return
        try:
            changed = point.changes().apply(spec)
            self.serving.pop(served, None)
            self.configs.load(served, changed)
            self.serving[served] = point
        except (ExportError, VariantError) as exc:
            self.refused[point] = f"config not served: {exc}"

    def probe(self, point: Point, load: Load | None = None) -> Measurement:
        """One measurement of the config served now for ``point`` at ``load`` (the options' by default)."""
        served = point.served_model(self.options.model)
        spec = self.spec_of(served, point.format)
        generator = self.generator(spec)
        load = load or self.options.load
        if point in self.refused or self.serving.get(served) != point:
            return Measurement.failed(generator, self.refused.get(point, "config not served"))
        label = point.label().replace(" ", "").replace("/", "-").replace(",", "_")
        if self.options.via:
            return self.generators[generator].measure(self.options.via, self.options.via, load, label=label)
        return self.generators[generator].measure(self.options.model, served, load, label=label)

    def measure_trials(self, points: list[Point], trials: int) -> dict[Point, list[Measurement]]:
        """Each point ``trials`` times, interleaved (A B C A B C ...), each arm's config applied before its
        trial: the measurements the tuner decides on."""
        arms = [
            Arm(point.label(), functools.partial(self.probe, point), functools.partial(self.apply, point))
            for point in points
        ]
        results = run_trials(arms, trials, log=self.log)
        return {point: results[point.label()].trials for point in points}

    def point_of(self, candidate: Candidate) -> Point | None:
        """A candidate (served variant + serving changes) as a fully specified point, or None when the format
        it asks for is not served."""
        served = candidate.served_model(self.options.model)
        if served not in apply.ready_models(self.endpoints.http):
            return None
        try:
            changed = candidate.changes.apply(self.spec_of(served))
        except ExportError:
            return None
        return served_point(changed, str(candidate.variant))

    def restore(self) -> None:
        """The configs served before the search, for every model it changed (a reload restarts instances)."""
        self.configs.restore()


def formats_served(endpoints: Endpoints, repository: Path, model: str) -> list[str]:
    """The exported formats of ``model`` in the repository that the server has ready (the public one first)."""
    ready = apply.ready_models(endpoints.http)
    found = [fmt for fmt in formats_in(repository, model) if Point(fmt, None, (), 1, 0).served_model(model) in ready]
    if not found and model in ready:
        found = ["torchscript/fp32"]
    return found


def prepare(options: TuneOptions, endpoints: Endpoints, runner: Runner) -> tuple[SearchSpace, Point, int, str]:
    if options.model not in apply.ready_models(endpoints.http):
        raise TuneError(f"model {options.model!r} is not served at {endpoints.http} (is it in {options.repository}?)")
    spec = runner.spec_of(options.model)
    folder = Path(options.repository) / options.model
    limit = checked_max_batch_size(folder, spec) if folder.is_dir() else spec.max_batch_size
    formats = formats_served(endpoints, options.repository, options.model)
    if options.via:
        formats = [called_format(endpoints, options, formats)]
    space, start = space_for(spec, limit, formats, users=options.load.users, max_instances=options.max_instances)
    if options.axes:
        space = restricted(space, options.axes, limit, formats)
    served = {Point(fmt, None, (), 1, 0).served_model(options.model) for fmt in formats} | {options.model}
    floor, callers = ensemble_floor(Path(options.repository), served)
    if floor and "max_batch_size" in space.values:
        sizes = tuple(size for size in space.values["max_batch_size"] if size >= floor)
        if not sizes:
            raise TuneError(
                f"max batch sizes {list(space.values['max_batch_size'])} are all below {floor}, the max batch size "
                f"of {', '.join(callers)}, which calls {options.model}"
            )
        space = dataclasses.replace(space, values={**space.values, "max_batch_size": sizes})
        runner.log(f"tune {options.model}: max_batch_size >= {floor} (what {', '.join(callers)} sends it)")
    return space, start, limit, runner.generator(spec)


def called_format(endpoints: Endpoints, options: TuneOptions, formats: list[str]) -> str:
    """The format of ``options.model`` that the ensemble ``options.via`` calls: the only one a tune through it
    can measure (another format is another model, which the ensemble does not call)."""
    steps = set(model_kind.ensemble_steps(apply.served_config(endpoints.http, options.via)))
    if not steps:
        raise TuneError(f"--via {options.via}: it is not an ensemble; give the pipeline that calls {options.model}")
    called = [fmt for fmt in formats if Point(fmt, None, (), 1, 0).served_model(options.model) in steps]
    if not called:
        raise TuneError(
            f"--via {options.via}: its steps ({', '.join(sorted(steps))}) call no served format of {options.model}"
        )
    return called[0]


def ensemble_floor(repository: Path, served: set[str]) -> tuple[int, list[str]]:
    """The largest max_batch_size of the repository's ensembles with a step calling one of ``served``, and
    their names: Triton refuses to load an ensemble whose max batch size exceeds a member's, so the tuner
    never offers a member less than that. A config that does not parse is no ensemble Triton would load."""
    floor, callers = 0, []
    for path in sorted(repository.glob("*/config.pbtxt")):
        try:
            config = config_io.parse(path)
        except ExportError:
            continue
        if model_kind.kind(config) is not ModelKind.ENSEMBLE or not served & set(model_kind.ensemble_steps(config)):
            continue
        if config.max_batch_size > 0:
            floor = max(floor, config.max_batch_size)
            callers.append(path.parent.name)
    return floor, callers


def restricted(space: SearchSpace, axes: dict[str, tuple], limit: int, formats: list[str]) -> SearchSpace:
    """``space`` with the given axes' values in place of the generated ones."""
    for axis, values in axes.items():
        if axis not in space.values:
            raise TuneError(f"no axis {axis!r} to restrict; axes: {list(space.values)}")
        if not values:
            raise TuneError(f"axis {axis!r}: no values given")
    if any(size > limit or size < 0 for size in axes.get("max_batch_size", ())):
        raise TuneError(
            f"max batch sizes {list(axes['max_batch_size'])} must be in 0..{limit} (what the export was checked for)"
        )
    if any(count < 1 for count in axes.get("instances", ())):
        raise TuneError(f"instance counts {list(axes['instances'])} must be >= 1")
    missing = [f for f in axes.get("format", ()) if f not in formats]
    if missing:
        raise TuneError(f"formats {missing} are not served; served: {formats}")
    delays = [d for d in axes.get("batcher", ()) if d is not None]
    if delays and space.delay_needs_no_policy and any(delays):
        raise TuneError(
            "the model has a queue policy: only a batching delay of 0 is offered (a delay with a "
            "policy stalls Triton 2.51's batcher)"
        )
    return dataclasses.replace(space, values={**space.values, **{a: tuple(v) for a, v in axes.items()}})


def tune(
    options: TuneOptions,
    endpoints: Endpoints,
    *,
    log: Callable[[str], None] = print,
    compare: dict[str, Candidate] | None = None,
) -> Outcome:
    """Search ``options.model``'s configs at ``options.load`` and return every trial; the served configs are
    restored afterwards. ``compare``: named candidates (a campaign's variants) measured beside the search by
    the same generator at the same load; they may win."""
    runner = Runner(options, endpoints, log)
    try:
        space, start, limit, generator = prepare(options, endpoints, runner)
        log(
            f"tune {options.model}: {options.strategy} over {space.grid_size()} configs "
            f"({', '.join(f'{a} {len(v)}' for a, v in space.values.items())}), budget {options.budget_s:g} s, "
            f"{options.load.text()}, {generator}; SLO p99 <= {options.slo.p99_ms:g} ms, errors <= "
            f"{options.slo.max_error_rate:.2%}; max_batch_size <= {limit} (checked by its export)"
        )
        budget = search_io.Budget(options.budget_s)
        result = search_io.run(options.strategy, space, start, runner.measure, options.slo, budget, log=log)
        outcome = Outcome(options, result, space, generator, limit, {})
        for name, candidate in (compare or {}).items():
            point = runner.point_of(candidate)
            if point is None:
                log(f"  ({name}: {candidate.served_model(options.model)} is not served; not compared)")
                continue
            trial = next((t for t in result.trials if t.point == point), None)
            if trial is None:
                trial = search_io.Trial(
                    point, [runner.measure(point)], order=len(result.trials) + len(outcome.compared) + 1
                )
                log(search_io._line(trial, options.slo, trial.order) + f" ({name})")
            outcome.compared.append((name, trial))
        outcome.decision = decided(options, runner, [*result.trials, *(t for _, t in outcome.compared)], result.start)
        result.best = outcome.decision.pick
    finally:
        runner.restore()
    outcome.served = dict(runner.configs.originals)
    return outcome


def decided(
    options: TuneOptions, runner: Runner, pool: list[search_io.Trial], start: search_io.Trial
) -> decide.Decision:
    """The leaders of ``pool`` measured again interleaved and judged; with no pick, where the best one
    meets the budget."""
    chosen = decide.leaders(pool, start, options.slo, options.leaders)
    runner.log(
        f"tune {options.model}: the served config #{start.order} and {len(chosen) - 1} leaders "
        f"({', '.join(f'#{t.order}' for t in chosen[1:]) or 'none'}), {options.trials} trials each, interleaved:"
    )
    decide.confirm(chosen, lambda points: runner.measure_trials(points, options.trials))
    decision = decide.decide(chosen, options.slo, options.min_effect)
    runner.log(decision.text())
    if decision.status is ExitStatus.FAILED and decision.best is not None and decision.best.usable:
        runner.log(f"tune {options.model}: where #{decision.best.order} meets the budget:")
        decision.meets_at = decide.describe_meets_at(decision.best, lower_load(options, runner, decision.best))
        runner.log(decision.meets_at)
    return decision


def lower_load(options: TuneOptions, runner: Runner, best: search_io.Trial, attempts: int = 3) -> str:
    """Where ``best`` meets the budget, as a sentence that says how it was found: the highest open-loop rate
    (``loadtest.capacity.search.find_capacity``, confirmed by ``options.trials`` trials). The search only
    climbs from its start, so it starts at an eighth of the throughput ``best`` reached at the asked load,
    and an eighth of that again when even its first rate misses the budget."""
    runner.apply(best.point)
    start = max(1.0, best.throughput / 8)
    for _ in range(attempts):
        found = capacity.find_capacity(
            lambda rate: runner.probe(best.point, Load(rate=rate)), options.slo, start, trials=options.trials,
            log=runner.log,
        )  # fmt: skip
        if not found.below_start or start <= 1.0:
            break
        start = max(1.0, start / 8)
    return f"{found.sentence()} (loadtest.capacity.search.find_capacity from {start:.0f} req/s)"


def measure_side_by_side(
    options: TuneOptions,
    endpoints: Endpoints,
    points: dict[str, Point],
    rounds: int = decide.TRIALS,
    log: Callable[[str], None] = print,
) -> dict[str, search_io.Trial]:
    """Each named point measured ``rounds`` times, interleaved (a, b, a, b), at the same load: the fair
    comparison of two picks on a shared machine. Each trial's ``confirmed`` holds its measurements."""
    runner = Runner(options, endpoints, log)
    arms = [
        Arm(name, functools.partial(runner.probe, point), functools.partial(runner.apply, point))
        for name, point in points.items()
    ]
    try:
        results = run_trials(arms, rounds, log=log)
    finally:
        runner.restore()
    return {
        name: search_io.Trial(point, [], order=i + 1, confirmed=results[name].trials)
        for i, (name, point) in enumerate(points.items())
    }


def throughput_text(trial: search_io.Trial | None) -> str:
    if trial is None:
        return "-"
    return f"{trial.throughput:.1f} infer/s, p99 {trial.p99_ms:.3f} ms" if not math.isnan(trial.p99_ms) else "-"
