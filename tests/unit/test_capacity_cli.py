"""loadtest/capacity_cli.py without a server: bad arguments and a model that is not in the repository exit 2
with one line naming the bad value, before any server starts."""

import pytest

import tritonkit_cli
from tritonkit_errors import ExitStatus


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["--slo-p99-ms", "0"], "--slo-p99-ms 0 must be > 0 ms"),
        (["--slo-p99-ms", "-5"], "--slo-p99-ms -5 must be > 0 ms"),
        (["--slo-p99-ms", "50", "--trials", "1"], "--trials 1: an interval needs at least 2 trials"),
        (["--slo-p99-ms", "50", "--start-rate", "0"], "--start-rate 0 must be > 0"),
        (["--slo-p99-ms", "50", "--target-rps", "-1"], "--target-rps -1 must be > 0"),
        (["--slo-p99-ms", "50", "--headroom", "-0.5"], "--headroom -0.5 must be >= 0"),
        (["--slo-p99-ms", "50", "--growth", "1"], "--growth 1 must be > 1"),
        (["--slo-p99-ms", "50", "--arrival", "zipf"], "unknown pattern 'zipf'"),
        (["--slo-p99-ms", "50", "--arrival", "ramp:100"], "capacity needs one rate per run"),
        (
            ["--slo-p99-ms", "50", "--arrival", "gamma:0.5", "--generator", "perf_analyzer"],
            "needs --generator locust",
        ),
    ],
)
def test_bad_arguments_exit_2_with_one_line(extra, named, capsys):
    assert tritonkit_cli.main(["capacity", "digits", *extra]) == ExitStatus.USAGE
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and named in err and err.startswith("capacity: error: ")


def test_a_model_not_in_the_repository_exits_2_naming_it(tmp_path, capsys):
    (tmp_path / "digits").mkdir()
    (tmp_path / "digits" / "config.pbtxt").write_text('name: "digits"\n')
    status = tritonkit_cli.main(["capacity", "nosuch", "--slo-p99-ms", "50", "--repository", str(tmp_path)])
    assert status == ExitStatus.USAGE
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "'nosuch' is not in the repository" in err and "['digits']" in err
