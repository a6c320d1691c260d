"""loadtest.tune.search on recorded measurements: the descent finds the grid's best in fewer runs, stops
within its budget, never ranks a saturated run, and re-measures the leaders."""

import json
import math
from pathlib import Path

import pytest

from loadtest.core.measurement import Measurement
from loadtest.core.spec import Slo
from loadtest.tune import report, search
from loadtest.tune.search import Budget, Trial, coordinate_descent, grid
from loadtest.tune.space import OFF, Point, SearchSpace, space_for
from tests.served import served_config

DATA = Path(__file__).resolve().parents[3] / "data" / "tune"
RECORDED = DATA / "digits_grid.json"
"""`tritonkit tune digits --strategy grid` on the local server: every point of a small space measured by
perf_analyzer at 16 users (see the file's `command`)."""


class FakeClock:
    """Time advances only when a measurement "runs" (``cost`` seconds each)."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Replay:
    """``measure(point)`` from a recorded table; counts the calls."""

    def __init__(self, table: dict[Point, Measurement], clock: FakeClock | None = None, cost: float = 10.0):
        self.table, self.clock, self.cost, self.calls = table, clock, cost, []

    def __call__(self, point: Point) -> Measurement:
        self.calls.append(point)
        if self.clock is not None:
            self.clock.now += self.cost
        return self.table[point]


def ok(throughput: float, p99: float, **kwargs) -> Measurement:
    return Measurement(throughput, p99 / 2, p99, 0.0, "perf_analyzer", generator_cpu=0.3, **kwargs)


def synthetic() -> tuple[SearchSpace, Point, dict[Point, Measurement]]:
    """A space like digits' with a made-up but shaped response: batching without delay and two or three
    instances is best; long delays blow the p99 budget; ONNX is a bit faster."""
    spec = __import__("export.config", fromlist=["from_json"]).from_json(served_config("digits"))
    space, start = space_for(spec, 64, ["torchscript/fp32", "onnx/fp32"], users=16)
    table = {}
    for p in space.points():
        base = 3000.0 * (1.1 if p.format == "onnx/fp32" else 1.0)
        batching = 1.0 if p.batcher is OFF else 1.6 - p.batcher / 5000
        instances = {1: 0.7, 2: 1.0, 3: 1.05, 4: 0.95}[p.instances]
        preferred = 1.02 if p.preferred == (8,) else 1.0
        size = 1.0 if p.max_batch_size >= 16 else 0.9
        throughput = base * batching * instances * preferred * size
        p99 = 2.0 + (p.batcher or 0) / 400 + (3 if p.batcher is OFF else 0)
        table[p] = ok(throughput, p99)
    return space, start, table


def best_in(table: dict[Point, Measurement], slo: Slo) -> Point:
    return max((p for p, m in table.items() if m.usable and m.p99_ms <= slo.p99_ms), key=lambda p: table[p].throughput)


def test_descent_finds_the_best_of_a_synthetic_grid_in_far_fewer_runs():
    space, start, table = synthetic()
    slo = Slo(5.0)
    measure = Replay(table)
    result = coordinate_descent(space, start, measure, slo, Budget(1e9))
    assert result.best.point == best_in(table, slo)
    assert len(measure.calls) < len(table) / 5, (len(measure.calls), len(table))
    assert result.grid_size == len(table) and result.stopped == "converged"


def test_the_budget_stops_the_search_before_a_run_that_would_not_fit():
    space, start, table = synthetic()
    clock = FakeClock()
    measure = Replay(table, clock, cost=10.0)
    result = coordinate_descent(space, start, measure, Slo(5.0), Budget(95.0, clock=clock))
    assert result.stopped == "budget"
    assert clock.now <= 95.0 and len(measure.calls) == 9  # the tenth would end at 100 s
    assert result.measurements == len(measure.calls)


def test_a_saturated_run_is_kept_but_never_ranked():
    space, start, table = synthetic()
    slo = Slo(5.0)
    winner = best_in(table, slo)
    table[winner] = ok(table[winner].throughput * 3, 1.0, saturated="its CPU at 97% of its cores")
    measure = Replay(table)
    result = coordinate_descent(space, start, measure, slo, Budget(1e9))
    assert winner in {t.point for t in result.trials}  # tried and reported
    assert result.best.point != winner
    marked = next(t for t in result.trials if t.point == winner)
    assert not marked.usable and marked.violations(slo) == ["generator saturated: its CPU at 97% of its cores"]
    assert search.score(marked, slo) < search.score(result.best, slo)


def test_nothing_meeting_the_slo_gives_no_pick_and_walks_towards_lower_latency():
    space, start, table = synthetic()
    result = coordinate_descent(space, start, Replay(table), Slo(0.5), Budget(1e9))
    assert result.best is None
    lowest = min(result.trials, key=lambda t: t.p99_ms)
    assert lowest.p99_ms == min(m.p99_ms for m in table.values())


def test_a_leaders_figures_and_verdict_come_from_its_interleaved_trials_alone():
    start = Point("torchscript/fp32", 0, (), 2, 64)
    screened = Trial(start, [ok(9000, 1.0)])
    assert screened.throughput == 9000 and screened.meets(Slo(5.0))  # one probe: pass or fail on its value
    screened.confirmed = [ok(100, 4.0), ok(300, 4.9), ok(200, 4.3)]
    assert screened.throughput == 200 and math.isclose(screened.p99_ms, (4.0 + 4.9 + 4.3) / 3)
    # The mean p99 is under 5 ms, but three trials that spread leave its interval straddling the budget.
    assert screened.verdict(Slo(5.0)).verdict.value == "inconclusive" and not screened.meets(Slo(5.0))
    assert screened.violations(Slo(5.0))[0].startswith("inconclusive: p99")
    assert screened.verdict(Slo(10.0)).verdict.value == "pass"


def test_the_error_rate_limit_is_part_of_meeting_the_slo():
    trial = Trial(Point("torchscript/fp32", 0, (), 2, 64), [Measurement(900, 1.0, 2.0, 0.02, "perf_analyzer", 0.3)])
    assert not trial.meets(Slo(5.0)) and "error rate" in trial.violations(Slo(5.0))[0]
    assert trial.meets(Slo(5.0, max_error_rate=0.05))


def recorded():
    raw = json.loads(RECORDED.read_text())
    # Each point as the grid run ranked it: the median throughput and worst p99 of its measurements.
    table = {
        t.point: Measurement(
            t.throughput,
            t.measurements[0].p50_ms,
            t.p99_ms,
            t.error_rate,
            "perf_analyzer",
            t.measurements[0].generator_cpu,
        )
        for t in report.load_trials(raw)
    }
    values = {axis: tuple(tuple(v) if isinstance(v, list) else v for v in vs) for axis, vs in raw["space"].items()}
    space = SearchSpace(values)
    # The served config (1 ms delay, sizes 8-64, 2 instances) is outside the recorded axes: start the replay at
    # the grid's nearest point.
    start = Point("torchscript/fp32", 1000, (8,), 2, 64)
    assert start in space.points()
    return raw, space, start, table


def test_the_recorded_grid_is_a_whole_grid():
    raw, space, start, table = recorded()
    assert raw["strategy"] == "grid" and raw["generator"] == "perf_analyzer"
    assert set(space.points()) <= set(table) and len(table) >= 30
    assert sum(m.usable for m in table.values()) >= len(table) * 0.8


def test_descent_finds_the_best_of_the_recorded_grid_in_fewer_runs():
    raw, space, start, table = recorded()
    slo = Slo(raw["slo"]["p99_ms"], raw["slo"]["max_error_rate"])
    measure = Replay(table)
    result = coordinate_descent(space, start, measure, slo, Budget(1e9))
    feasible = sorted((m.throughput for m in table.values() if m.usable and m.p99_ms <= slo.p99_ms), reverse=True)
    assert result.best is not None and result.best.meets(slo)
    # The recording is noisy (a shared machine: the same config measured twice in that run differed by up to a
    # third), and its single best is a spike among neighbours that all miss the budget: the descent must land on
    # one of the grid's top configs, within 10% of the best, in under half the grid's runs.
    assert result.best.throughput in feasible[:4] and result.best.throughput >= 0.9 * feasible[0]
    assert len(measure.calls) < len(space.points()) / 2, (len(measure.calls), len(space.points()))


def test_the_descent_starts_anywhere_on_the_recorded_grid_and_ends_meeting_the_slo():
    raw, space, _, table = recorded()
    slo = Slo(raw["slo"]["p99_ms"], raw["slo"]["max_error_rate"])
    for start in space.points()[::5]:
        measure = Replay(table)
        result = coordinate_descent(space, start, measure, slo, Budget(1e9))
        assert result.best is not None, start
        assert len(measure.calls) < len(space.points()) / 2, start


def test_grid_measures_every_point_once():
    space, start, table = synthetic()
    measure = Replay(table)
    result = grid(space, start, measure, Slo(5.0), Budget(1e9))
    assert len(measure.calls) == len(set(measure.calls)) == len(table)
    assert result.best.point == best_in(table, Slo(5.0))


def test_a_bad_strategy_or_budget_is_refused():
    with pytest.raises(ValueError, match="strategy 'random'"):
        search.run("random")
    with pytest.raises(ValueError, match="budget"):
        Budget(0)
    assert math.isnan(Trial(Point("onnx/fp32", 0, (), 1, 8), [Measurement.failed("perf_analyzer", "x")]).p99_ms)
