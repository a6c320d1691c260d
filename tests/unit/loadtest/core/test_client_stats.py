"""loadtest/core/client_stats.py: the project's one percentile rule (nearest rank) on plain sequences. Its
agreement with the HDR histograms' ``value_at`` is in test_latency.py."""

import numpy as np
import pytest

from loadtest.core.client_stats import nearest_rank, percentile, percentiles


def test_a_percentile_is_the_smallest_value_with_at_least_p_percent_at_or_below_it():
    one_to_100 = list(range(1, 101))
    assert percentile(one_to_100, 99) == 99
    assert percentile(one_to_100, 99.5) == 100
    assert percentile(one_to_100, 50) == 50
    assert percentile([1, 2, 3, 4], 50) == 2  # the lower middle value, not their mean
    assert percentile([1, 2, 3, 4], 50.1) == 3
    assert percentiles([3, 1, 2], (33.3, 33.4, 66.7, 90)) == [1, 2, 3, 3]  # unsorted input, ranks 1 2 3 3


def test_p0_is_the_minimum_and_p100_the_maximum():
    values = np.random.default_rng(0).lognormal(0, 1, 999)
    assert percentiles(values, (0, 100)) == [values.min(), values.max()]
    assert percentiles([5.0], (0, 50, 100)) == [5.0, 5.0, 5.0]


def test_the_rank_survives_floating_point_rounding():
    assert 99.9 * 41000 / 100 > 40959  # the float product lands just above the rank
    assert nearest_rank(99.9, 41000) == 40959
    assert percentile(np.arange(1, 41001), 99.9) == 40959


def test_no_values_or_a_percentile_outside_0_to_100_is_a_clear_error():
    with pytest.raises(ValueError, match="no values"):
        percentile([], 50)
    with pytest.raises(ValueError, match="not between 0 and 100"):
        percentile([1.0], 100.5)
    with pytest.raises(ValueError, match="not between 0 and 100"):
        nearest_rank(-1, 10)
