"""loadtest/capacity/command.py without a server: bad arguments (a stream budget for a tensor model among them) and a
model that is not in the repository exit 2 with one line naming the bad value, before any server starts; the
arrival patterns perf_analyzer plays, and the request-intervals schedules it plays them from."""

import argparse

import numpy as np
import pytest

import tritonkit_cli
from loadtest.capacity import command as capacity_cli
from loadtest.core.measurement import Measurement
from loadtest.generators.arrivals import parse_arrival
from tritonkit_errors import ExitStatus


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["--slo-p99-ms", "50", "--trials", "1"], "--trials 1: an interval needs at least 2 trials"),
        (["--slo-p99-ms", "50", "--start-rate", "0"], "--start-rate 0 must be > 0"),
        (["--slo-p99-ms", "50", "--target-rps", "-1"], "--target-rps -1 must be > 0"),
        (["--slo-p99-ms", "50", "--headroom", "-0.5"], "--headroom -0.5 must be >= 0"),
        (["--slo-p99-ms", "50", "--growth", "1"], "--growth 1 must be > 1"),
        (["--slo-p99-ms", "50", "--arrival", "zipf"], "unknown pattern 'zipf'"),
        (["--slo-p99-ms", "50", "--arrival", "ramp:100"], "capacity needs one rate per run"),
        (
            ["--slo-p99-ms", "50", "--arrival", "ramp:100", "--generator", "perf_analyzer"],
            "capacity needs one rate per run",
        ),
    ],
)
def test_bad_arguments_exit_2_with_one_line(extra, named, capsys):
    assert tritonkit_cli.main(["capacity", "digits", *extra]) == ExitStatus.USAGE
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and named in err and err.startswith("capacity: error: ")


@pytest.mark.parametrize("value", ["0", "-5", "soon"])
def test_a_p99_budget_that_is_not_a_number_above_0_exits_2_in_one_line_naming_it(value, capsys):
    with pytest.raises(SystemExit) as done:
        tritonkit_cli.main(["capacity", "digits", "--slo-p99-ms", value])
    assert done.value.code == ExitStatus.USAGE
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"argument --slo-p99-ms: '{value}' " in err


@pytest.mark.parametrize("flag", ["--slo-ttft-ms", "--slo-itl-ms"])
def test_a_stream_budget_for_a_tensor_model_is_refused_in_one_line_naming_the_flag(flag, capsys):
    status = tritonkit_cli.main(["capacity", "digits", "--slo-p99-ms", "50", flag, "500"])
    assert status == ExitStatus.USAGE
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert err.startswith(f"capacity: error: {flag}: digits is not a streamed (decoupled) model")


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["--slo-ttft-ms", "0"], "argument --slo-ttft-ms: '0' "),
        (["--slo-itl-ms", "inf"], "argument --slo-itl-ms: 'inf' "),
        (["--slo-itl-ms", "40", "--generator", "perf_analyzer"], "--slo-itl-ms: streams are measured by Locust"),
    ],
)
def test_a_bad_stream_budget_for_a_streamed_model_exits_2_naming_it(extra, named, capsys):
    try:  # a value argparse refuses exits from the parser; one the command refuses is its return
        status = tritonkit_cli.main(["capacity", "text_generator", "--slo-p99-ms", "5000", *extra])
    except SystemExit as done:
        status = done.code
    assert status == ExitStatus.USAGE
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and named in err


def test_the_stream_budgets_of_a_streamed_model_are_accepted():
    args = tritonkit_cli.build_parser().parse_args(
        ["capacity", "text_generator", "--slo-p99-ms", "5000", "--slo-ttft-ms", "300", "--slo-itl-ms", "40"]
    )
    capacity_cli.check_arguments(args)
    capacity_cli.check_stream_budgets(args, {"name": "text_generator", "model_transaction_policy": {"decoupled": True}})
    with pytest.raises(ValueError, match="^--slo-ttft-ms: text_generator is not a streamed"):
        capacity_cli.check_stream_budgets(args, {"name": "text_generator"})


def test_a_model_not_in_the_repository_exits_2_naming_it(tmp_path, capsys):
    (tmp_path / "digits").mkdir()
    (tmp_path / "digits" / "config.pbtxt").write_text('name: "digits"\n')
    status = tritonkit_cli.main(["capacity", "nosuch", "--slo-p99-ms", "50", "--repository", str(tmp_path)])
    assert status == ExitStatus.USAGE
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "'nosuch' is not in the repository" in err and "['digits']" in err


def _parsed(*extra: str) -> argparse.Namespace:
    return tritonkit_cli.build_parser().parse_args(["capacity", "digits", "--slo-p99-ms", "50", *extra])


@pytest.mark.parametrize("spec", ["poisson", "gamma:0.5"])
def test_perf_analyzer_takes_a_one_rate_arrival_pattern(spec):
    args = _parsed("--generator", "perf_analyzer", "--arrival", spec)
    assert capacity_cli.check_arguments(args).name == spec.partition(":")[0]
    # No --arrival: Poisson for Locust, and perf_analyzer keeps its constant rate (no pattern was asked for).
    assert _parsed("--generator", "perf_analyzer").arrival is None
    assert capacity_cli.check_arguments(_parsed()).name == "poisson"


def _intervals_us(path) -> np.ndarray:
    return np.array([int(line) for line in path.read_text().splitlines()])


def test_a_schedule_spans_the_run_at_the_rate_asked_and_each_run_at_a_rate_plays_its_own_draw(tmp_path):
    at = capacity_cli.request_schedules(parse_arrival("gamma:0.5"), 50.0, tmp_path / "a")
    gaps = _intervals_us(at(40.0))
    assert len(gaps) >= 50 * 40 and gaps.sum() >= 50e6
    assert len(gaps) / (gaps.sum() / 1e6) == pytest.approx(40.0, rel=1e-4)  # perf_analyzer's mean rate
    # gamma with burstiness 0.5: gaps spread sqrt(2) times their mean, where Poisson's spread 1 time
    assert gaps.std() / gaps.mean() == pytest.approx(2**0.5, rel=0.15)
    first = (tmp_path / "a" / "40rps-1.txt").read_text()
    assert at(40.0).name == "40rps-2.txt" and (tmp_path / "a" / "40rps-2.txt").read_text() != first
    again = capacity_cli.request_schedules(parse_arrival("gamma:0.5"), 50.0, tmp_path / "b")
    assert again(40.0).read_text() == first  # a rerun plays the same draws
    assert at(44.0).read_text() != first
    poisson = _intervals_us(capacity_cli.request_schedules(parse_arrival("poisson"), 50.0, tmp_path / "c")(40.0))
    assert poisson.std() / poisson.mean() == pytest.approx(1.0, rel=0.15)


def _measurement(p99_floor: float) -> Measurement:
    return Measurement(20.0, 2.0, 4.0, 0.0, "locust", floor_ms={"p50": 1.0, "p99": p99_floor})


def test_a_budget_within_the_generators_floor_is_refused_naming_the_floor_and_the_way_out(capsys):
    floor: dict = {}
    measure = capacity_cli.floor_guard(lambda rate: _measurement(3.0), 10.0, "locust", floor)
    with pytest.raises(
        capacity_cli.BudgetInFloor,
        match="budget within the generator's floor: locust's own p99 is "
        "3.00 ms of the 10 ms budget .over 25%. at 20 req/s; use --generator perf_analyzer",
    ):
        measure(20.0)
    assert floor == {"rate": 20.0, "p50": 1.0, "p99": 3.0}


def test_the_floor_is_read_once_from_the_first_run_that_has_one():
    floor: dict = {}
    runs = iter([Measurement.failed("locust", "boom"), _measurement(1.0), _measurement(9.0)])
    measure = capacity_cli.floor_guard(lambda rate: next(runs), 10.0, "perf_analyzer", floor)
    measure(20.0), measure(40.0), measure(80.0)  # the third run's floor is a loaded one's: not the floor
    assert floor == {"rate": 40.0, "p50": 1.0, "p99": 1.0}


def test_an_untraced_servers_mean_floor_over_a_quarter_of_the_budget_is_refused_too(capsys):
    floor: dict = {}
    untraced = Measurement(20.0, 2.0, 4.0, 0.0, "perf_analyzer", floor_ms={"mean": 0.3})
    measure = capacity_cli.floor_guard(lambda rate: untraced, 1.0, "perf_analyzer", floor)
    with pytest.raises(capacity_cli.BudgetInFloor, match="perf_analyzer's own mean is 0.30 ms of the 1 ms budget"):
        measure(10.0)
    assert (
        "generator floor at 10 req/s: mean 0.300 ms (client minus Triton's own time, no trace"
        in capsys.readouterr().out
    )


def test_the_round_after_the_verdict_is_on_unless_the_user_skips_it():
    assert _parsed().late_round is True
    assert _parsed("--no-late-round").late_round is False
