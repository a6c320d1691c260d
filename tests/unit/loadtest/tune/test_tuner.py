"""loadtest.tune.tuner's decision step without a server: the leaders are measured again interleaved through
the runner, and with no pick the best candidate is named with the load at which it meets the budget (its
capacity, ``loadtest.capacity.search``)."""

from pathlib import Path

from loadtest.core.measurement import Load, Measurement
from loadtest.core.spec import Slo
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
    """Stands in for tuner.Runner: each point's throughput and p99 at the asked load, a little spread by trial;
    at an open-loop rate, every point keeps up and its p99 is 5 ms + 1 ms per 100 req/s."""

    def __init__(self, figures: dict[Point, dict[int, tuple[float, float]]]):
        self.figures, self.lines, self.asked, self.serving = figures, [], [], None

    def log(self, line: str) -> None:
        self.lines.append(line)

    def _trials(self, point: Point, users: int, trials: int) -> list[Measurement]:
        throughput, p99 = self.figures[point][users]
        return [run(throughput * (1 + 0.01 * k), p99 + 0.1 * k) for k in range(trials)]

    def measure_trials(self, points: list[Point], trials: int) -> dict[Point, list[Measurement]]:
        self.asked.append(("trials", tuple(points), trials))
        return {point: self._trials(point, 16, trials) for point in points}

    def apply(self, point: Point) -> None:
        self.serving = point

    def probe(self, point: Point, load: Load) -> Measurement:
        assert point == self.serving and load.rate is not None
        self.asked.append(("rate", point))
        return run(load.rate, 5.0 + load.rate / 100)


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
            NO_DELAY: {16: (4500, 15.0)},
        }
    )
    start, pool = screened()
    decision = tuner.decided(options(10.0), runner, pool, start)
    assert decision.pick is None and decision.status is ExitStatus.FAILED
    assert decision.best.point == NO_DELAY and set(runner.asked[1:]) == {("rate", NO_DELAY)}
    # Its capacity: p99 reaches the 10 ms budget at 500 req/s; the search brackets from 4500 / 4 req/s down.
    assert decision.meets_at.startswith("best candidate #2") and "p99 <= 10 ms holds up to" in decision.meets_at
    rate = float(decision.meets_at.split("holds up to ")[1].split(" req/s")[0])
    assert 400 <= rate <= 500


def test_a_model_an_ensemble_calls_is_never_offered_a_max_batch_size_below_the_ensembles(tmp_path):
    ensemble = 'name: "{name}"\nplatform: "ensemble"\nmax_batch_size: 32\nensemble_scheduling {{ {steps} }}\n'
    configs = {
        "embedder": ensemble.format(
            name="embedder", steps='step { model_name: "tokenize" } step { model_name: "minilm" }'
        ),
        "other": ensemble.format(name="other", steps='step { model_name: "tokenize" }'),
        "minilm": 'name: "minilm"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 32\n',
    }
    for name, text in configs.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.pbtxt").write_text(text)
    assert tuner.ensemble_floor(tmp_path, {"minilm", "minilm_onnx"}) == (32, ["embedder"])
    assert tuner.ensemble_floor(tmp_path, {"minilm_onnx"}) == (0, [])
    assert tuner.ensemble_floor(tmp_path, {"digits"}) == (0, [])
