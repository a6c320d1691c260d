"""tritonkit floor without a server: its flags refused in one line, the target's three answers, and the report."""

import math

import pytest

import tritonkit_cli
from loadtest.core.evidence import Interval
from loadtest.studies.floor import command as floor
from tritonkit_errors import ExitStatus


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["--rates", "0"], "every rate must be > 0"),
        (["--rates", "fast"], "numbers of requests/s"),
        (["--generators", "wrk"], "give one or more of perf_analyzer, locust"),
        (["--protocols", "udp"], "give one or more of grpc, http"),
        (["--trials", "1"], "--trials 1: an interval needs at least 2 trials"),
        (["--duration", "0.5"], "--duration 0.5 must be at least 1 s"),
        (["--repository", "/no/such/folder"], "model 'digits' is not in the repository /no/such/folder"),
    ],
)
def test_bad_flags_are_one_line_and_exit_2(extra, named, capsys):
    try:
        status = tritonkit_cli.main(["floor", "digits", *extra])
    except SystemExit as exc:  # refused by the parser
        status = exc.code
    assert status == ExitStatus.USAGE
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and named in err


def test_the_target_is_met_within_its_interval_missed_beyond_it_and_else_inconclusive():
    assert floor.target_verdict(Interval(0.1, 0.05, 0.25, 3)) == "met"
    assert floor.target_verdict(Interval(0.6, 0.45, 0.75, 3)) == "missed"
    assert floor.target_verdict(Interval(0.3, 0.1, 0.5, 3)) == "inconclusive"
    assert floor.target_verdict(Interval(0.1, 0.1, 0.1, 1)).startswith("inconclusive: fewer than 2")


def test_the_report_has_a_row_per_arm_and_per_pair():
    iv = Interval(0.5, 0.4, 0.6, 3).to_dict()
    names = ("p50_ms", "p99_ms", "floor_p50_ms", "floor_p99_ms", "floor_mean_ms")
    arm = {"usable": 3, "intervals": {k: iv for k in names}}
    nan = Interval(math.nan, math.nan, math.nan, 0).to_dict()
    data = {
        "model": "digits",
        "command": "tritonkit floor digits",
        "date": "2026-12-04",
        "commit": "abc1234",
        "trials": 3,
        "duration_s": 6.0,
        "arms": {"perf_analyzer grpc 20/s": arm, "locust grpc 20/s": arm | {"usable": 2}},
        "pairs": [{"generator": "locust", "protocol": "grpc", "rate": 20.0, "p50_minus_reference_ms": nan}],
    }
    data["pairs"][0]["target"] = "inconclusive"
    text = floor.markdown(data)
    assert "| perf_analyzer grpc 20/s | 3 | 0.500 (0.400-0.600) |" in text
    assert "| locust | grpc | 20/s | n/a | inconclusive |" in text
    assert "(2026-12-04, commit abc1234)" in text


def test_perf_analyzers_three_stable_windows_last_the_runs_duration_in_every_command():
    from loadtest.generators.perf_analyzer import profile_export

    assert profile_export.stable_window_ms(6.0) * profile_export.STABILITY_WINDOWS == 6000
    assert profile_export.stable_window_ms(0.01) == 100  # perf_analyzer's shortest sensible window


def test_the_printed_floor_is_the_traced_p50_and_p99_or_untraced_the_mean():
    nan = Interval(math.nan, math.nan, math.nan, 0).to_dict()
    traced = {
        "floor_p50_ms": Interval(0.5, 0.4, 0.6, 3).to_dict(),
        "floor_p99_ms": Interval(0.9, 0.8, 1.0, 3).to_dict(),
        "floor_mean_ms": Interval(0.55, 0.5, 0.6, 3).to_dict(),
    }
    assert floor.arm_floor_text(traced) == "floor p50 0.500 (0.400-0.600) ms, p99 0.900 (0.800-1.000) ms"
    untraced = traced | {"floor_p50_ms": nan, "floor_p99_ms": nan}
    assert floor.arm_floor_text(untraced) == "floor mean 0.550 (0.500-0.600) ms (no trace: Triton's means)"
