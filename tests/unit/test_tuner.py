"""loadtest.tune.tuner's decision step without a server: the leaders are measured again interleaved through
the runner, and with no pick the best candidate is named with the load at which it meets the budget."""

from pathlib import Path

from loadtest.campaign import Slo
from loadtest.measure.probe import Load, Measurement
from loadtest.tune import tuner
from loadtest.tune.search import Trial
from loadtest.tune.space import Point
from tritonkit_errors import ExitStatus

SERVED = Point("torchscript/fp32", 1000, (8, 16), 2, 64)
NO_DELAY = Point("torchscript/fp32", 0, (), 2, 64)
ONNX = Point("onnx/fp32", 0, (), 2, 64)


def run(throughput: float, p99: float) -> Measurement:
    return Measurement(throughput, p99 / 2, p99, 0.0, "perf_analyzer", 0.3)


class FakeRunner:
    """Stands in for tuner.Runner: each point's throughput and p99 by load, a little spread by trial."""

    def __init__(self, figures: dict[Point, dict[int, tuple[float, float]]]):
        self.figures, self.lines, self.asked = figures, [], []

    def log(self, line: str) -> None:
        self.lines.append(line)

    def _trials(self, point: Point, users: int, trials: int) -> list[Measurement]:
        throughput, p99 = self.figures[point][users]
        return [run(throughput * (1 + 0.01 * k), p99 + 0.1 * k) for k in range(trials)]

    def measure_trials(self, points: list[Point], trials: int) -> dict[Point, list[Measurement]]:
        self.asked.append(("trials", tuple(points), trials))
        return {point: self._trials(point, 16, trials) for point in points}

    def measure_at(self, point: Point, load: Load, trials: int) -> list[Measurement]:
        self.asked.append(("at", point, load.users))
        return self._trials(point, load.users, trials)


def options(p99_ms: float) -> tuner.TuneOptions:
    return tuner.TuneOptions("digits", Slo(p99_ms), Load(users=16), Path("model_repository"), trials=3, leaders=1)


def screened() -> tuple[Trial, list[Trial]]:
    start = Trial(SERVED, [run(3000, 6.0)], order=1)
    return start, [start, Trial(NO_DELAY, [run(3500, 5.0)], order=2), Trial(ONNX, [run(100, 9.0)], order=3)]


def test_the_leaders_are_measured_again_interleaved_and_a_clear_winner_is_picked():
    runner = FakeRunner({SERVED: {16: (3000, 6.0)}, NO_DELAY: {16: (4500, 5.0)}})
    start, pool = screened()
    decision = tuner.decided(options(10.0), runner, pool, start)
    assert runner.asked == [("trials", (SERVED, NO_DELAY), 3)]  # the served config and the one leader
    assert decision.pick.point == NO_DELAY and decision.status is ExitStatus.OK
    assert len(decision.pick.confirmed) == 3


def test_no_pick_names_the_best_candidate_and_a_load_at_which_it_meets_the_budget():
    runner = FakeRunner(
        {
            SERVED: {16: (3000, 20.0)},
            NO_DELAY: {16: (4500, 15.0), 8: (4000, 11.0), 4: (3000, 7.0)},
        }
    )
    start, pool = screened()
    decision = tuner.decided(options(10.0), runner, pool, start)
    assert decision.pick is None and decision.status is ExitStatus.FAILED
    assert decision.best.point == NO_DELAY
    assert runner.asked[1:] == [("at", NO_DELAY, 8), ("at", NO_DELAY, 4)]
    assert decision.meets_at.startswith("best candidate #2") and "meets the budget at 4 users" in decision.meets_at
