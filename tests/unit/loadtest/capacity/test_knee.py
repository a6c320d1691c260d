"""loadtest/capacity/knee.py: one round's knee (inside the round, censored above and below) and the interval
over rounds."""

import math

import pytest

from loadtest.capacity import knee
from loadtest.capacity.knee import Point, round_knee


def test_the_rates_of_a_round_sit_one_spread_either_side():
    assert knee.sweep_rates(100.0, 0.1) == pytest.approx([90.0, 100.0, 110.0])


@pytest.mark.parametrize("spread", [0.0, 1.0, -0.1])
def test_a_spread_outside_zero_to_one_is_refused(spread):
    with pytest.raises(ValueError, match="spread"):
        knee.sweep_rates(100.0, spread)


def test_the_knee_is_where_the_log_p99_line_meets_the_budget_between_the_last_pass_and_the_first_fail():
    points = [Point(90, 10.0, True), Point(100, 20.0, True), Point(110, 80.0, False)]
    found = round_knee(points, 40.0)
    assert found.rate == pytest.approx(105.0)  # 20 -> 80 ms doubles twice over 10 req/s; 40 ms once: half way
    assert found.censored == ""


def test_a_failing_run_without_a_rising_p99_puts_the_knee_at_the_geometric_middle():
    points = [Point(90, 10.0, True), Point(100, 20.0, True), Point(110, math.nan, False)]
    assert round_knee(points, 40.0).rate == pytest.approx(math.sqrt(100 * 110))


def test_a_round_that_passes_everywhere_is_censored_above_and_extrapolated_at_most_one_spread():
    rising = [Point(90, 10.0, True), Point(100, 20.0, True), Point(110, 30.0, True)]
    found = round_knee(rising, 40.0, 0.1)
    assert found.censored == "above" and 110 < found.rate <= 121
    flat = [Point(90, 10.0, True), Point(100, 10.0, True), Point(110, 10.0, True)]
    assert round_knee(flat, 40.0, 0.1) == knee.RoundKnee(110, "above")  # nothing says where it rises: the top


def test_a_round_that_fails_everywhere_is_censored_below_no_lower_than_one_spread():
    points = [Point(90, 50.0, False), Point(100, 60.0, False), Point(110, 90.0, False)]
    found = round_knee(points, 40.0, 0.1)
    assert found.censored == "below" and found.rate == pytest.approx(81.0)


def test_the_interval_is_over_the_rounds_knees():
    rates = [90.0, 100.0, 110.0]
    rounds = [
        [Point(90, 10.0, True), Point(100, 20.0, True), Point(110, 80.0, False)],  # 105
        [Point(90, 10.0, True), Point(100, 40.0, True), Point(110, 80.0, False)],  # 100
        [Point(90, 20.0, True), Point(100, 80.0, False), Point(110, 90.0, False)],  # 95
        [],  # no usable run: left out
    ]
    found = knee.estimate(rates, rounds, 40.0)
    assert [r.rate for r in found.rounds] == pytest.approx([105.0, 100.0, 95.0])
    assert found.interval.trials == 3 and found.interval.estimate == pytest.approx(100.0)
    assert found.interval.low < 95.0 and found.interval.high > 105.0
    assert found.censored == 0
    assert found.to_dict()["interval"]["trials"] == 3
