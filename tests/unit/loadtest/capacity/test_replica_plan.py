"""loadtest/capacity/replica_plan.py: the replica arithmetic and a metric read between the runs around a rate."""

import math

import pytest

from loadtest.capacity.replica_plan import metric_at, replicas
from loadtest.capacity.search import CapacityError


@pytest.mark.parametrize(
    ("target", "per_replica", "headroom", "expected"),
    [
        (1000.0, 300.0, 0.2, 5),  # ceil(1200 / 300) = 4, + 1
        (1000.0, 301.0, 0.2, 5),  # ceil(3.99) = 4, + 1
        (1000.0, 299.0, 0.2, 6),  # ceil(4.01) = 5, + 1
        (100.0, 40.0, 0.2, 4),  # 120 / 40 is 3 exactly, not 3.0000000000000004
        (10.0, 500.0, 0.0, 2),  # one replica serves it, one spare
    ],
)
def test_replicas_serve_the_target_at_the_lower_bound_with_headroom_plus_one(target, per_replica, headroom, expected):
    assert replicas(target, per_replica, headroom) == expected


@pytest.mark.parametrize(
    ("target", "per_replica", "headroom"),
    [(0.0, 100.0, 0.2), (100.0, 0.0, 0.2), (100.0, math.nan, 0.2), (100.0, 100.0, -0.1), (math.inf, 100.0, 0.2)],
)
def test_replicas_refuse_bad_input(target, per_replica, headroom):
    with pytest.raises(CapacityError):
        replicas(target, per_replica, headroom)


def test_a_metric_is_read_at_a_rate_between_the_runs_around_it():
    points = [(100.0, 1.0), (200.0, 3.0), (200.0, 5.0), (400.0, math.nan)]
    assert metric_at(points, 150.0) == pytest.approx(2.5)  # the two trials at 200 averaged: 4
    assert metric_at(points, 50.0) == 1.0 and metric_at(points, 900.0) == 4.0
    assert math.isnan(metric_at([], 100.0))
