"""loadtest.tune.report's plot: a leader's confirmation trials give its error bars (p99 and throughput, 95%)."""

from loadtest.core.measurement import Measurement
from loadtest.tune import report
from loadtest.tune.search import Trial
from loadtest.tune.space import Point

POINT = Point("torchscript/fp32", 1000, (8, 16), 2, 64)


def run(throughput: float, p99: float) -> Measurement:
    return Measurement(throughput, p99 / 2, p99, 0.0, "perf_analyzer", 0.3)


def test_a_leaders_confirmation_trials_give_its_p99_and_throughput_intervals():
    leader = Trial(POINT, [run(9999, 0.1)], order=1, confirmed=[run(4000, 6.0), run(5000, 6.5), run(3200, 7.0)])
    p99, throughput = report.confirmed_intervals(leader)
    assert p99.low < 6.0 and p99.high > 7.0 and p99.trials == 3
    assert throughput.low < 3200 and throughput.high > 5000 and throughput.estimate == (4000 + 5000 + 3200) / 3


def test_a_screened_point_alone_has_no_interval_to_draw():
    assert report.confirmed_intervals(Trial(POINT, [run(9999, 0.1)], order=2)) is None


def test_the_plot_draws_the_leaders_bars_beside_the_screened_points(tmp_path):
    from types import SimpleNamespace

    from loadtest.core.spec import Slo

    leader = Trial(POINT, [run(9999, 0.1)], order=1, confirmed=[run(4000, 6.0), run(5000, 6.5), run(3200, 7.0)])
    screened = Trial(POINT, [run(3000, 8.0)], order=2)
    outcome = SimpleNamespace(
        options=SimpleNamespace(slo=Slo(10.0), model="digits", load=SimpleNamespace(text=lambda: "4 users")),
        result=SimpleNamespace(trials=[leader, screened], best=leader),
        compared=[("as-deployed", leader)],
        generator="perf_analyzer",
    )
    assert report.plot(outcome, tmp_path / "tune.png").read_bytes().startswith(b"\x89PNG")


def test_the_summary_leads_with_the_pick_and_what_decided_it():
    from types import SimpleNamespace

    from tritonkit_errors import ExitStatus

    leader = Trial(POINT, [run(9999, 0.1)], order=1, confirmed=[run(4000, 6.0), run(5000, 6.5)])
    decided = SimpleNamespace(
        best=leader, decision=SimpleNamespace(status=ExitStatus.OK, reason="the served config stays")
    )
    assert (
        report.headline(decided)
        == f"OK: pick #1 {POINT.label()} (4500.0 infer/s, p99 6.250 ms): the served config stays"
    )
    assert report.headline(SimpleNamespace(best=None, decision=None)) == "no pick"
