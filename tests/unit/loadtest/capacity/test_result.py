"""loadtest/capacity/result.py: the answer of a search on a recorded curve: the rate a replica plan
counts on, the one sentence, the results.json form, and the capacity when the verdict passed only below the
knee's rounds."""

import dataclasses

import pytest

from loadtest.capacity.knee import RoundKnee
from loadtest.capacity.search import find_capacity
from loadtest.core.measurement import Measurement
from loadtest.core.spec import Slo
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


def _stream(rate: float, ttft: float = 5.0) -> Measurement:
    return m(rate, 5.0, ttft_p99_ms=ttft, itl_p99_ms=1.5, output_token_throughput=16 * rate)


def test_a_streamed_models_answer_states_every_budget_and_its_ttft_itl_and_tokens_per_second():
    ttft_rises = lambda r: _stream(r, 5.0 if r <= 400 else 50.0)  # noqa: E731
    result = find_capacity(ttft_rises, Slo(1000.0, ttft_ms=20.0), 100.0, trials=2, log=quiet)
    assert result.status is ExitStatus.OK
    sentence = result.sentence()
    assert sentence.startswith("p99 <= 1000 ms, p99 TTFT <= 20 ms holds up to ")
    assert sentence.endswith(f"; at {result.rate:g} req/s: p99 TTFT 5.000 ms, p99 ITL 1.500 ms, tokens/s 6400.0")
    streams = result.to_dict()["streams"]
    assert streams["rate"] == result.rate and streams["ttft_p99_ms"]["estimate"] == pytest.approx(5.0)
    assert set(streams) == {"rate", "ttft_p99_ms", "itl_p99_ms", "output_token_throughput"}
    assert result.to_dict()["probes"][0]["ttft_p99_ms"] == 5.0


def test_a_tensor_models_answer_has_no_stream_figures():
    raw = find_capacity(Curve(), BUDGET, 20.0, trials=2, log=quiet).to_dict()
    assert "streams" not in raw and "ttft_p99_ms" not in raw["probes"][0]
    assert "TTFT" not in find_capacity(Curve(), BUDGET, 20.0, trials=2, log=quiet).sentence()


def test_a_ttft_budget_no_rate_meets_is_named_with_the_lowest_rates_ttft():
    result = find_capacity(lambda r: _stream(r, 80.0), Slo(1000.0, ttft_ms=20.0), 20.0, trials=2, log=quiet)
    assert result.status is ExitStatus.FAILED and result.probes[0].outcome == "p99 TTFT over budget"
    sentence = result.sentence()
    assert sentence.startswith("no rate meets p99 <= 1000 ms, p99 TTFT <= 20 ms: the lowest probed, 20 req/s, had p99")
    assert ", p99 TTFT 80.000 ms (95% CI 80.000-80.000, 2 trials)" in sentence  # its trials' TTFT


def test_when_no_round_crossed_the_budget_the_answer_is_a_lower_bound_not_the_throughputs_interval():
    """Every round passed at every rate: the knee lies above them. The throughput at the confirmed rate is steady
    to a fraction of a per cent under a constant-rate generator, which says nothing of how far the capacity moves
    between runs: the answer says "at least" and names that interval for what it is."""
    result = find_capacity(Curve(), BUDGET, 20.0, trials=3, log=quiet)
    result.knee = dataclasses.replace(result.knee, rounds=[RoundKnee(r.rate, "above") for r in result.knee.rounds])
    assert result.knee_above and not result.knee_applies
    sentence = result.sentence("constant-rate arrivals (perf_analyzer)")
    assert sentence.startswith(f"p99 <= 50 ms holds up to at least {result.throughput.estimate:.1f} req/s (95% CI ")
    assert f"the throughput of 3 trials at {result.rate:g} req/s offered; no round at " in sentence
    assert "crossed the budget: the knee lies above" in sentence


def test_rounds_that_cross_below_and_above_the_rates_still_locate_the_knee_and_the_plan_takes_its_lower_bound():
    """Seen with perf_analyzer on digits under 10 ms: the p99 wandered across the budget between 2,304 and 2,816
    req/s, three rounds crossing below the lowest rate and two not by the highest. The knee's interval is wide,
    and it, not the throughput at the confirmed rate (steady to 0.03%), is the answer a plan may count on."""
    result = find_capacity(Curve(), BUDGET, 20.0, trials=3, log=quiet)
    low, high = result.knee.rates[0] * 0.9, result.knee.rates[-1] * 1.1
    rounds = [RoundKnee(low, "below"), RoundKnee(high, "above"), RoundKnee(low, "below")]
    result.knee = dataclasses.replace(result.knee, rounds=rounds)
    assert result.knee_applies and not result.knee_above and result.capacity is result.knee.interval
    assert result.plan_rate == min(result.knee.interval.low, result.confirmed.throughput.estimate)
    sentence = result.sentence()
    assert "at least" not in sentence
    assert f"2 rounds crossed the budget below {result.knee.rates[0]:g} req/s" in sentence
    assert f"1 round did not cross it by {result.knee.rates[-1]:g} req/s" in sentence
