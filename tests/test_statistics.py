"""The one t interval (oracle_search/statistics.py): numbers worked out by hand, both sidednesses, and the seeds a
comparison would need."""
from __future__ import annotations

import math

import numpy as np
import pytest

from oracle_search.statistics import half_width, mean_interval, seeds_needed, zero_spread

T975_2 = 4.302652729911275  # t(0.975, 2), from a table
T95_2 = 2.919985580355516  # t(0.95, 2)


def test_two_sided_interval_by_hand():
    """d = [1, 2, 3]: mean 2, sd 1, half-width t(0.975, 2)/√3."""
    mean, lo, hi = mean_interval([1.0, 2.0, 3.0])
    assert (mean, lo, hi) == pytest.approx((2, 2 - T975_2 / math.sqrt(3), 2 + T975_2 / math.sqrt(3)))


def test_one_sided_bounds_use_the_one_sided_quantile():
    """One-sided at 0.95: t(0.95, 2) = 2.920 < t(0.975, 2) = 4.303, so the bounds are tighter than two-sided."""
    mean, lo, hi = mean_interval([1.0, 2.0, 3.0], 0.95, "one")
    assert (lo, hi) == pytest.approx((2 - T95_2 / math.sqrt(3), 2 + T95_2 / math.sqrt(3)))


def test_fewer_than_two_values_have_no_interval():
    assert mean_interval([4.0])[0] == 4.0 and all(math.isnan(x) for x in mean_interval([4.0])[1:])
    assert math.isnan(half_width(1.0, 1))


def test_half_width_broadcasts_and_leaves_n_below_two_empty():
    got = half_width(np.array([1.0, 1.0, 2.0]), np.array([1, 3, 3]))
    assert math.isnan(got[0]) and got[1:] == pytest.approx([T975_2 / math.sqrt(3), 2 * T975_2 / math.sqrt(3)])


def test_seeds_needed_by_brute_force_and_its_edges():
    """d = [−3, −7, −2]: mean −4, sd √7; n' = 5 gives (2.776 + 0.941)·√7/√5 = 4.40 > 4, n' = 6 gives 3.77 < 4."""
    assert seeds_needed([-3.0, -7.0, -2.0]) == 6
    assert seeds_needed([1.0, -1.0]) is None  # no effect
    assert seeds_needed([0.4, 0.4, 0.4]) is None and zero_spread([0.4, 0.4, 0.4])  # no spread to go on
    assert not zero_spread([0.4]) and not zero_spread([0.4, 0.5])
    assert seeds_needed([0.01, -0.02, 0.015]) is None  # would need more than 1000 seeds
