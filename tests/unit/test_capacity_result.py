"""loadtest/measure/capacity_result.py: the answer of a search on a recorded curve: the rate a replica plan
counts on, the one sentence, the results.json form, and the capacity when the verdict passed only below the
knee's rounds."""

from loadtest.measure.capacity import find_capacity
from tests.capacity_samples import BUDGET, Curve, m, quiet
from tritonkit_errors import ExitStatus


def test_a_replica_is_planned_at_the_lower_of_the_knees_bound_and_the_confirmed_throughput():
    result = find_capacity(Curve(), BUDGET, 20.0, trials=3, log=quiet)
    expected = min(result.knee.interval.low, result.confirmed.throughput.estimate)
    assert result.plan_rate == expected


def test_the_sentence_names_the_budget_the_interval_the_rounds_and_the_arrivals():
    result = find_capacity(Curve(), BUDGET, 20.0, trials=3, log=quiet)
    sentence = result.sentence("Poisson arrivals")
    iv = result.capacity
    assert sentence.startswith(
        f"p99 <= 50 ms holds up to {iv.estimate:.1f} req/s (95% CI {iv.low:.1f}-{iv.high:.1f}, the knee of 3 rounds"
    )
    assert f"verdict pass at {result.rate:g} req/s" in sentence
    assert sentence.endswith("on this server, for Poisson arrivals")
    assert "at least" not in sentence


def test_results_serialise_every_probe_and_trial():
    result = find_capacity(Curve(), BUDGET, 20.0, trials=2, log=quiet)
    raw = result.to_dict()
    assert raw["status"] == 0 and len(raw["probes"]) == len(result.probes)
    assert len(raw["confirmations"][0]["trials"]) == 2
    assert raw["capacity"]["trials"] == 2 and len(raw["knee"]["rounds"]) == 2
    assert raw["plan_rate"] == result.plan_rate


def test_after_a_step_down_below_the_rounds_the_capacity_is_the_throughput_where_the_verdict_passed():
    calls = iter(range(10**6))

    def measure(rate):  # the search passes up to 400 req/s; later, everything at 360 req/s and above fails
        return m(rate, 10.0 if next(calls) < 4 and rate <= 400 or rate < 350 else 90.0)

    result = find_capacity(measure, BUDGET, 100.0, trials=2, log=quiet, warmup_runs=0)
    assert result.status is ExitStatus.OK and round(result.rate) == 324
    assert not result.knee_applies and result.capacity == result.throughput
    assert "the verdict passed only below the knee's rounds at 360/400/440 req/s" in result.sentence()
