"""loadtest.tune.compare without running Model Analyzer: its pick as a point, and the side-by-side table,
whose SLO column is the one SLO rule (``slo.verdict``) over each pick's trials."""

import math

from loadtest.core.measurement import Measurement
from loadtest.core.spec import Slo
from loadtest.tune import compare
from loadtest.tune.analyzer.profile import AnalyzerPick
from loadtest.tune.search import Trial
from loadtest.tune.space import Point

PICK = AnalyzerPick(
    model="digits",
    config_name="digits_config_2",
    max_batch_size=8,
    instance_count=2,
    dynamic_batching={"max_queue_delay_us": 500, "preferred_batch_sizes": [8, 4]},
    concurrency=16,
    throughput_infer_s=3188.0,
    p99_ms=4.72,
)


def run(throughput: float, p99: float, errors: float = 0.0) -> Measurement:
    return Measurement(throughput, p99 / 2, p99, errors, "perf_analyzer", 0.3)


def pick(point: Point, *measurements: Measurement, order: int = 1) -> Trial:
    return Trial(point, [], order=order, confirmed=list(measurements))


def test_the_pick_is_a_point_of_the_public_format():
    assert compare.point_of(PICK) == Point("torchscript/fp32", 500, (4, 8), 2, 8)
    unbatched = AnalyzerPick(**{**PICK.__dict__, "dynamic_batching": None})
    assert compare.point_of(unbatched).batcher is None


def test_side_by_side_shows_both_picks_each_run_and_the_ratio():
    ours = pick(Point("torchscript/fp32", 0, (), 2, 64), run(8000, 4.0), run(8400, 4.1))
    theirs = pick(compare.point_of(PICK), run(4000, 4.6), run(4200, 4.9), order=2)
    side = compare.SideBySide(ours, theirs, PICK.__dict__, slo=Slo(5.0))
    assert math.isclose(side.ratio(), 8200 / 4100)
    text = side.text()
    assert "tritonkit tune" in text and "Model Analyzer" in text and "8000 / 8400" in text and "2.00x" in text
    assert "3188.0 infer/s" in text  # MA's own figure, beside ours
    assert side.to_dict()["ratio"] == 2.0 and "| pick |" in side.markdown()
    # Both p99 means are under 5 ms, but two trials of 4.6 and 4.9 ms leave an interval that straddles it.
    ours_row, theirs_row = side.rows()
    assert ours_row[-1] == "pass" and theirs_row[-1].startswith("inconclusive: p99")
    assert side.comparison().verdict.value == "better" and "B is better" in text


def test_the_side_by_side_verdict_holds_the_error_rate_limit_too():
    slo = Slo(5.0, max_error_rate=0.01)
    ours = pick(Point("torchscript/fp32", 0, (), 2, 64), run(8000, 4.0, 0.05), run(8400, 4.1, 0.052))
    theirs = pick(compare.point_of(PICK), run(4000, 4.0, 0.001), run(4200, 4.1, 0.001), order=2)
    ours_row, theirs_row = compare.SideBySide(ours, theirs, PICK.__dict__, slo=slo).rows()
    assert ours_row[-1].startswith("fail: error rate") and theirs_row[-1] == "pass"


def test_no_pick_says_why():
    side = compare.SideBySide(None, None, None, error="no config meets p99 <= 5 ms", slo=Slo(5.0))
    assert "no config meets" in side.text() and math.isnan(side.ratio()) and side.to_dict()["ratio"] is None


def test_the_side_by_side_pairs_trials_by_round_when_each_side_lost_a_different_round():
    """Round 2 is unusable on our side and round 3 on theirs: rounds 1 and 4 pair, as they ran (filtering each
    side apart would pair our round 3 with their round 2, and our round 4 with their round 4 by luck alone)."""
    hot = Measurement(1.0, 9.0, 20.0, 0.0, "perf_analyzer", 0.99, saturated="its CPU at 99% of its cores")
    point = Point("torchscript/fp32", 0, (), 2, 64)
    ours = pick(point, run(1000, 4.0), hot, run(3000, 4.0), run(1100, 4.0))
    theirs = pick(point, run(900, 4.0), run(2000, 4.0), hot, run(1000, 4.0))
    found = compare.SideBySide(ours, theirs, None).comparison()
    assert found is not None and found.a.trials == 2
    assert math.isclose(found.change.estimate, math.expm1((math.log(1000 / 900) + math.log(1100 / 1000)) / 2))
