"""Theorem 1's bound and the implied learning rate, checked against an independent erf inverse."""
from __future__ import annotations

import math

import numpy as np
import pytest

from analysis.theory import activation_bound, silo_curve, theory_lr


def erfinv_bisect(y: float) -> float:
    lo, hi = 0.0, 10.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if math.erf(mid) < y else (lo, mid)
    return (lo + hi) / 2


def bound(sx: float, sw: float, d: int, p: float, k: float) -> float:
    kept = (1 - p) ** k
    x = erfinv_bisect(1 - kept)
    return sw**2 + d * sx**2 * sw**2 * (kept + math.sqrt(4 / math.pi) * x * math.exp(-x * x))


@pytest.mark.parametrize("sx, sw, d, p, k", [(1.0, 1.0, 1, 0.2, 0), (1.0, 1.0, 1, 0.2, 3), (0.5, 2.0, 40, 0.2, 7),
                                             (2.0, 0.1, 784, 0.5, 4), (1.3, 0.7, 10, 0.2, 2.5)])
def test_bound_matches_independent_computation(sx, sw, d, p, k):
    assert activation_bound(sx, sw, d, p, k) == pytest.approx(bound(sx, sw, d, p, k), rel=1e-9)


def test_dense_bound_is_sigma_w_squared_times_one_plus_d_sigma_x_squared():
    assert activation_bound(0.5, 2.0, 40, 0.2, 0) == pytest.approx(4.0 * (1 + 40 * 0.25))


def test_normalised_rate_starts_at_one_and_rises_monotonically():
    alpha = theory_lr(np.arange(21), 0.2, sigma_x=1.0, sigma_w=1.0, d=40)
    assert alpha[0] == pytest.approx(1.0)
    assert np.all(np.diff(alpha) > 0)
    expected = [math.sqrt(bound(1.0, 1.0, 40, 0.2, 0) / bound(1.0, 1.0, 40, 0.2, k)) for k in range(21)]
    assert alpha == pytest.approx(expected, rel=1e-9)


def test_rate_saturates_at_the_bias_only_limit_when_nearly_everything_is_pruned():
    # (1-p)^k underflows 1 - (1-p)^k to 1.0 here; erfinv(1.0) would make the bound NaN.
    assert theory_lr(300, 0.2, sigma_x=1.0, sigma_w=1.0, d=40) == pytest.approx(math.sqrt(41.0))


def test_silo_curve_is_algorithm_1_per_cycle():
    # max_lr(m) = eps for m <= q, else delta / (1 + (g / (1 - g))^-beta) + eps with g = 1 - (1 - p)^(m - q),
    # worked out per cycle for eps = 0.05, delta = 0.2, q = 1, beta = 4, p = 0.2.
    curve = silo_curve(range(5), epsilon=0.05, delta=0.2, q=1, beta=4.0, rate=0.2)
    ratios = {2: 0.2 / 0.8, 3: 0.36 / 0.64, 4: 0.488 / 0.512}  # g / (1 - g) at m - q = 1, 2, 3
    expected = [0.05, 0.05, *(0.2 / (1 + r**-4) + 0.05 for r in ratios.values())]
    assert curve.tolist() == pytest.approx(expected, rel=1e-12)
    assert curve[2] == pytest.approx(0.2 / 257 + 0.05)  # (1/4)^-4 = 256
    later = silo_curve(range(5), epsilon=0.05, delta=0.2, q=3, beta=4.0, rate=0.2)
    assert later.tolist() == pytest.approx([0.05] * 4 + [0.2 / 257 + 0.05])
