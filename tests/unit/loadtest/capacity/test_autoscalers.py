"""loadtest/capacity/autoscalers.py: KServe's and Ray Serve's targets at the planned rate per replica by Little's
law, with their intervals; the InferenceService patch; the cost of the plan; and the flags that ask for them."""

import math

import pytest
import yaml

import tritonkit_cli
from loadtest.capacity import autoscalers
from loadtest.capacity import command as capacity_cli
from loadtest.capacity.result import PASS, CapacityResult, Confirmation, Probe
from loadtest.capacity.search import find_capacity
from loadtest.core import slo
from loadtest.core.evidence import Interval
from loadtest.core.measurement import Measurement
from loadtest.core.spec import Slo
from loadtest.core.trials import ArmResult
from tritonkit_errors import ExitStatus

BUDGET = Slo(50.0)
T_2 = 4.302652729911275
"""Student's t at 97.5% with 2 degrees of freedom: 3 trials' 95% interval."""
SPREAD = math.exp(T_2 * math.log(1.25) / math.sqrt(3))
"""The trials' means 8, 10 and 12.5 ms: on the log scale 10 ms times or over 1.25, so their interval is 10 ms
times or over this."""
CAPACITY = Interval(250.0, 240.0, 264.0, 3)


def run(rate: float, mean_ms: float, p50_ms: float = 4.0) -> Measurement:
    return Measurement(rate, p50_ms, 10.0, 0.0, "recorded", server={"queue_ms": 1.0}, mean_ms=mean_ms)


def recorded(*trial_means: float, p50_ms: float = 4.0) -> CapacityResult:
    """Single runs at 100 and 200 req/s (mean 5 and 6 ms) and trials at 400 req/s with these means."""
    arm = ArmResult("400 req/s", [run(400.0, ms, p50_ms) for ms in trial_means])
    confirmation = Confirmation(400.0, arm, slo.verdict(arm.samples(), BUDGET, arm.error_counts()))
    probes = [Probe(r, run(r, ms, p50_ms), "bracket", PASS) for r, ms in ((100.0, 5.0), (200.0, 6.0))]
    return CapacityResult(BUDGET, ExitStatus.OK, probes=probes, confirmations=[confirmation])


@pytest.fixture
def result() -> CapacityResult:
    return recorded(8.0, 10.0, 12.5)


def plan(**fields) -> autoscalers.Plan:
    return autoscalers.Plan(**{"model": "text_embedder", "per_pod_rps": 200.0, "headroom": 0.2, **fields})


def test_the_requests_in_flight_are_the_planned_rate_times_the_mean_latency_read_there(result):
    inflight = autoscalers.in_flight_at(result, 200.0)
    assert inflight.figure == "mean" and inflight.latency_ms.estimate == pytest.approx(6.0)
    assert inflight.requests.estimate == pytest.approx(1.2)  # 200 req/s x 0.006 s
    # Between the runs at 200 (6 ms) and 400 (the trials' mean, 10.17 ms): 300 req/s x 8.08 ms.
    assert autoscalers.in_flight_at(result, 300.0).requests.estimate == pytest.approx(300 * (6 + 30.5 / 3) / 2000)


def test_the_interval_is_the_spread_of_the_nearest_repeated_trials_carried_over_to_the_planned_rate(result):
    inflight = autoscalers.in_flight_at(result, 200.0)
    assert inflight.spread_rate == 400.0 and inflight.latency_ms.trials == 3
    assert inflight.latency_ms.low == pytest.approx(6.0 / SPREAD) and inflight.latency_ms.high == pytest.approx(
        6.0 * SPREAD
    )
    requests = inflight.requests
    assert (requests.low, requests.high) == pytest.approx((1.2 / SPREAD, 1.2 * SPREAD))  # 0.69-2.09
    line = autoscalers.in_flight_line(inflight)
    assert line == (
        "in flight per replica at 200.0 req/s: 1.20 (95% CI 0.69-2.09) by Little's law: 200.0 req/s x the mean "
        f"latency there, 6.000 ms (95% CI {6 / SPREAD:.3f}-{6 * SPREAD:.3f}, the spread of 3 trials at 400 req/s)"
    )


def test_the_kserve_concurrency_target_is_littles_law_rounded_down(result):
    assert [autoscalers.whole(v) for v in (1.2, 2.9999999999999996, 7.99, 0.99, math.nan)] == [1, 3, 7, None, None]
    (concurrency, _) = autoscalers.kserve_targets(autoscalers.in_flight_at(result, 200.0), CAPACITY)
    assert concurrency.metric == "concurrency" and concurrency.target == 1
    assert autoscalers.kserve_line(concurrency) == (
        "KServe scaleMetric concurrency: scaleTarget 1 (95% CI under 1-2), 1.20 in flight rounded down"
    )


def test_the_kserve_rps_target_is_the_planned_rate_rounded_down_within_the_capacity_interval_over_the_headroom(
    result,
):
    lines, _ = autoscalers.lines(result, plan(per_pod_rps=200.9, capacity=CAPACITY))
    # The plan takes the interval's lower bound; its upper, 264 req/s, over 1.2 is 220 per replica.
    assert "KServe scaleMetric rps: scaleTarget 200 (95% CI 200-220), 200.9 req/s per replica rounded down" in lines


def test_the_patch_takes_the_scale_metric_whose_rounding_gives_up_least_concurrency_on_a_tie():
    def target(metric: str, value: float) -> autoscalers.KServeTarget:
        return autoscalers.KServeTarget(metric, Interval(value, value, value, 3))

    assert autoscalers.kserve_choice([target("concurrency", 1.2), target("rps", 200.0)]).metric == "rps"
    assert autoscalers.kserve_choice([target("concurrency", 3.0), target("rps", 150.5)]).metric == "concurrency"
    assert autoscalers.kserve_choice([target("concurrency", 2.0), target("rps", 40.0)]).metric == "concurrency"
    assert autoscalers.kserve_choice([target("concurrency", 0.5), target("rps", 0.8)]) is None


def test_the_ray_serve_target_keeps_one_decimal_rounded_down(result):
    # 2.3 / 0.1 is 22.999999999999996: still 2.3.
    assert [autoscalers.ray_target(v) for v in (2.3, 1.29, 12.0, 0.1, 0.09, math.nan)] == [
        2.3,
        1.2,
        12.0,
        0.1,
        None,
        None,
    ]
    line = autoscalers.ray_line(autoscalers.in_flight_at(result, 200.0))
    assert line == "Ray Serve target_ongoing_requests: 1.2 (95% CI 0.6-2), 1.20 in flight rounded down to 0.1"
    low = autoscalers.ray_line(autoscalers.in_flight_at(result, 5.0))  # 5 req/s x 5 ms: 0.025 in flight
    assert low == "Ray Serve target_ongoing_requests: none, under 0.1 request in flight (0.025)"


def test_without_a_mean_latency_the_p50_is_used_and_the_line_says_so():
    def p50_only(rate: float) -> Measurement:
        return run(rate, math.nan, p50_ms=rate / 50)

    without = find_capacity(p50_only, BUDGET, 100.0, trials=2, log=lambda _: None)
    inflight = autoscalers.in_flight_at(without, 200.0)
    assert inflight.figure == "p50" and inflight.requests.estimate == pytest.approx(200 * 4.0 / 1000)
    line = autoscalers.in_flight_line(inflight)
    assert "x the p50 latency there (no run recorded a mean, which Little's law needs" in line


def test_without_any_latency_one_line_says_so_and_the_rps_target_stays():
    none = recorded(math.nan, math.nan, p50_ms=math.nan)
    for p in none.probes:
        p.measurement.mean_ms = math.nan
    assert autoscalers.in_flight_at(none, 200.0) is None
    lines, patch = autoscalers.lines(none, plan(capacity=CAPACITY))
    assert lines[0] == (
        "in flight per replica: no latency was recorded (no run gave a mean or a p50), so no KServe concurrency "
        "or Ray Serve target"
    )
    assert not any("Ray Serve" in text for text in lines[1:]) and not any("concurrency:" in text for text in lines)
    assert yaml.safe_load(patch)["spec"]["predictor"]["scaleMetric"] == "rps"


def test_without_repeated_trials_the_targets_say_they_have_no_interval():
    single = CapacityResult(BUDGET, ExitStatus.OK, probes=[Probe(200.0, run(200.0, 15.0), "bracket", PASS)])
    inflight = autoscalers.in_flight_at(single, 200.0)
    assert inflight.spread_rate is None and inflight.requests.estimate == pytest.approx(3.0)
    assert autoscalers.in_flight_line(inflight).endswith("15.000 ms (no repeated trials: no interval)")
    (concurrency,) = autoscalers.kserve_targets(inflight, CAPACITY)[:1]
    assert autoscalers.kserve_line(concurrency) == (
        "KServe scaleMetric concurrency: scaleTarget 3 (no interval), 3.00 in flight rounded down"
    )


def test_the_kserve_patch_is_a_merge_patch_of_the_inference_service_named_after_the_model(result):
    lines, patch = autoscalers.lines(result, plan(capacity=CAPACITY, max_replicas=6), kserve_file="isvc.yaml")
    isvc = yaml.safe_load(patch)
    assert isvc == {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": "text-embedder"},  # a DNS-1035 label: no underscore
        "spec": {"predictor": {"minReplicas": 1, "maxReplicas": 6, "scaleMetric": "rps", "scaleTarget": 200}},
    }
    assert (
        "KServe patch (written to isvc.yaml): scaleMetric rps, scaleTarget 200 (rounding down gives up least of the "
        "planned load there), minReplicas 1, maxReplicas 6"
    ) in lines
    # Without --target-rps the plan has no replica count: the patch leaves maxReplicas as it is.
    _, bare = autoscalers.lines(result, plan(capacity=CAPACITY))
    assert "maxReplicas" not in yaml.safe_load(bare)["spec"]["predictor"]


def test_no_whole_target_at_the_planned_load_gives_no_patch(result):
    lines, patch = autoscalers.lines(result, plan(per_pod_rps=0.5), kserve_file="isvc.yaml")  # 0.0025 in flight
    assert patch is None
    assert (
        "KServe patch: none (neither scaleMetric has a whole scaleTarget at the planned load): isvc.yaml not written"
        in lines
    )
    assert "KServe scaleMetric rps: no whole scaleTarget under 1 (0.5 req/s per replica)" in lines


def test_the_cost_per_million_requests_is_the_replicas_price_over_the_requests_an_hour(result):
    # 6 replicas at 3.5 USD/h serving 1000 req/s: 21 USD for 3.6 million requests.
    assert autoscalers.cost_per_million(3.5, 6, 1000.0) == pytest.approx(21 / 3.6)
    assert autoscalers.cost_per_million(3.5, 1, 200.0) == pytest.approx(3.5 / 0.72)
    lines, _ = autoscalers.lines(result, plan(max_replicas=6, target_rps=1000.0), price_per_hour=3.5)
    assert lines[-1] == (
        "cost at 3.5 USD per replica-hour: 5.833 USD per million requests at 1000 req/s (6 replicas, 21 USD/h); "
        "4.861 USD per million requests on one replica at 200.0 req/s"
    )
    lines, _ = autoscalers.lines(result, plan(), price_per_hour=3.5)
    assert lines[-1] == "cost at 3.5 USD per replica-hour: 4.861 USD per million requests on one replica at 200.0 req/s"
    with pytest.raises(ValueError, match="must be > 0 USD per replica-hour"):
        autoscalers.cost_per_million(0.0, 6, 1000.0)


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["--price-per-hour", "0"], "--price-per-hour 0 must be > 0 USD per replica-hour"),
        (["--price-per-hour", "-2.5"], "--price-per-hour -2.5 must be > 0 USD per replica-hour"),
        (["--price-per-hour", "inf"], "--price-per-hour inf must be > 0 USD per replica-hour"),
        (["--price-per-hour", "nan"], "--price-per-hour nan must be > 0 USD per replica-hour"),
        (["--write-patch", "p.yaml", "--write-kserve-patch", "p.yaml"], "--write-kserve-patch p.yaml: the HPA patch"),
    ],
)
def test_a_bad_price_or_kserve_patch_file_exits_2_in_one_line_naming_the_flag(extra, named, capsys):
    assert tritonkit_cli.main(["capacity", "digits", "--slo-p99-ms", "50", *extra]) == ExitStatus.USAGE
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and named in err and err.startswith("capacity: error: ")


def test_the_printed_plan_adds_the_targets_and_the_cost_and_writes_the_kserve_patch(tmp_path):
    def measured(rate: float) -> Measurement:
        p99 = 10.0 if rate <= 400 else 200.0
        return Measurement(rate, p99 / 2, p99, 0.0, "recorded", server={"queue_ms": rate / 100}, mean_ms=4 + rate / 100)

    found = find_capacity(measured, BUDGET, 100.0, trials=2, log=lambda _: None)
    isvc, hpa = tmp_path / "k" / "isvc.yaml", tmp_path / "hpa.yaml"
    args = tritonkit_cli.build_parser().parse_args(
        ["capacity", "digits", "--slo-p99-ms", "50", "--target-rps", "1000", "--price-per-hour", "2"]
        + ["--write-patch", str(hpa), "--write-kserve-patch", str(isvc)]
    )
    capacity_cli.check_arguments(args)
    lines = capacity_cli.plan(found, args)
    assert lines[0].startswith("replicas for 1000 req/s: ") and lines[1].startswith("in flight per replica at ")
    assert lines[2].startswith("KServe scaleMetric concurrency: ") and lines[-2].startswith("HPA target: ")
    assert any(text.startswith("cost at 2 USD per replica-hour: ") for text in lines)
    assert lines[-1].startswith(f"HPA patch written to {hpa}")
    predictor = yaml.safe_load(isvc.read_text())["spec"]["predictor"]
    assert predictor["maxReplicas"] == int(lines[0].split(": ")[1].split(" ")[0])
    assert yaml.safe_load(hpa.read_text())["kind"] == "HorizontalPodAutoscaler"
