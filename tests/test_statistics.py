"""The one t interval (oracle_search/statistics.py): numbers worked out by hand, both sidednesses, the seeds a
comparison would need, the one label rule, and the statistics over replicates (sd bound, Holm, p-values, the
replicates a comparison would need)."""
from __future__ import annotations

import math

import numpy as np
import pytest

import pandas as pd

from oracle_search.statistics import (MARGIN_PER_CYCLE, MAX_SEEDS, half_width, holm, label, mean_interval, p_value,
                                      replicates_needed, sd_upper, seeds_needed, zero_spread)

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


# --- the one label rule -------------------------------------------------------------------------------------------

def test_label_on_each_side_of_every_boundary():
    """margin 1: equivalent iff −1 ≤ lo and hi ≤ 1 (inclusive); else better iff lo > 0, worse iff hi < 0
    (strict)."""
    assert MARGIN_PER_CYCLE == 0.5
    eps = 1e-9
    assert label(-1.0, 0.5, 1.0) == "equivalent"  # lo exactly −margin: inside
    assert label(-1.0 - eps, 0.5, 1.0) == "inconclusive"  # just outside, and it holds 0
    assert label(-0.5, 1.0, 1.0) == "equivalent"  # hi exactly +margin: inside
    assert label(-0.5, 1.0 + eps, 1.0) == "inconclusive"
    assert label(0.0, 1.5, 1.0) == "inconclusive"  # lo = 0 exactly: not better
    assert label(eps, 1.5, 1.0) == "better"
    assert label(-1.5, 0.0, 1.0) == "inconclusive"  # hi = 0 exactly: not worse
    assert label(-1.5, -eps, 1.0) == "worse"
    # both hold: the interval excludes 0 and lies inside ±margin; equivalent wins
    assert label(0.2, 0.8, 1.0) == label(0.2, 1.0, 1.0) == label(-1.0, -0.2, 1.0) == "equivalent"
    assert label(0.2, 1.0 + eps, 1.0) == "better" and label(-1.0 - eps, -0.2, 1.0) == "worse"
    # a degenerate interval at 0 with margin 0 is inside [0, 0] (inclusive)
    assert label(0.0, 0.0, 0.0) == "equivalent" and label(0.0, eps, 0.0) == "inconclusive"
    for lo, hi in ((math.nan, 1.0), (-1.0, math.nan), (pd.NA, 1.0), (None, None)):
        assert label(lo, hi, 1.0) == "undefined"


# --- over replicates ----------------------------------------------------------------------------------------------

def test_sd_upper_by_hand():
    """χ² with 2 df is exponential with mean 2: χ²(0.2, 2) = −2·ln 0.8 = 0.44629, factor √(2/0.44629) =
    2.11694. χ² with 1 df is z²: χ²(0.2, 1) = z(0.6)² = 0.253347² = 0.064185, factor √(1/0.064185) = 3.94715."""
    assert sd_upper(1.0, 3) == pytest.approx(math.sqrt(2 / (-2 * math.log(0.8)))) == pytest.approx(2.11694, abs=1e-5)
    assert sd_upper(1.5, 3) == pytest.approx(1.5 * 2.11694, abs=1e-4)
    assert sd_upper(1.0, 2) == pytest.approx(3.94715, abs=1e-5)
    assert sd_upper(2.0, 3, confidence=0.5) > 2.0 - 1e-12  # the median bound is ≈ sd (χ²(0.5, 2) = 2 ln 2 = 1.386)
    assert math.isnan(sd_upper(1.0, 1)) and math.isnan(sd_upper(math.nan, 3))


def test_holm_step_down_and_nan_p_values():
    """[0.01, 0.04, 0.03], m = 3: sorted 0.01 ≤ 0.05/3 = 0.0167 yes; 0.03 ≤ 0.05/2 = 0.025 no: stop, so 0.04 is
    not rejected either though 0.04 ≤ 0.05. A NaN is no hypothesis: [0.01, NaN, 0.04] has m = 2: 0.01 ≤ 0.025,
    0.04 ≤ 0.05: both (with m = 3, 0.04 would face 0.025). Bounds inclusive: [0.025, 0.05] both rejected."""
    assert holm([0.01, 0.04, 0.03]) == [True, False, False]
    assert holm([0.01, math.nan, 0.04]) == [True, False, True]
    assert holm([0.01, 0.04, 0.04]) == [True, False, False]  # 0.04 > 0.025 for the first 0.04
    assert holm([0.025, 0.05]) == [True, True]
    assert holm([math.nan, math.nan]) == [False, False] and holm([]) == []
    assert holm([0.04], alpha=0.05) == [True] and holm([0.04], alpha=0.01) == [False]


def test_p_value_agrees_with_the_interval_at_its_boundary():
    """d = [1, 2, 3]: mean 2, se 1/√3, interval 2 ∓ 4.3027/√3 = [−0.4841, 4.4841].
    t-test: t = 2√3 = 3.4641; with 2 df, P(T > t) = (1 − t/√(t² + 2))/2, so p = 1 − 3.4641/√14 = 0.07418
    > 0.05, as the interval holds 0. TOST with margin = hi = 4.4841: p_upper = P(T ≤ (2 − 4.4841)·√3 = −4.3027)
    = 0.025, p = 2·0.025 = 0.05 exactly at the label's inclusive boundary; a wider margin gives p < 0.05 (equivalent), a
    narrower p > 0.05 (the label is then inconclusive). Shifting d so lo = 0 exactly gives the t-test p = 0.05."""
    d = [1.0, 2.0, 3.0]
    mean, lo, hi = mean_interval(d)
    assert p_value(d, "inconclusive", 1.0) == pytest.approx(1 - 2 * math.sqrt(3) / math.sqrt(14)) == \
        pytest.approx(0.07418, abs=1e-5)
    assert p_value(d, "better", 1.0) == p_value(d, "inconclusive", 1.0)  # one test for the three difference labels
    assert label(lo, hi, hi) == "equivalent" and p_value(d, "equivalent", hi) == pytest.approx(0.05)
    assert label(lo, hi, hi + 0.01) == "equivalent" and p_value(d, "equivalent", hi + 0.01) < 0.05
    assert label(lo, hi, hi - 0.01) == "inconclusive" and p_value(d, "equivalent", hi - 0.01) > 0.05
    shifted = [x - lo for x in d]  # lo = 0 exactly (up to rounding): not better, p = 0.05
    assert mean_interval(shifted)[1] == pytest.approx(0, abs=1e-12)
    assert p_value(shifted, "inconclusive", 1.0) == pytest.approx(0.05)
    # mean 10 far above margin 1: p_upper = P(T ≤ 9·√3) ≈ 1, 2·p_upper ≈ 2, capped at 1
    assert p_value([9.0, 10.0, 11.0], "equivalent", 1.0) == 1.0


def test_p_value_edges():
    """Undefined or one value: NaN. Zero spread: the test degenerates, 0 when the label holds, else 1."""
    assert math.isnan(p_value([1.0, 2.0], "undefined", 1.0)) and math.isnan(p_value([1.0], "better", 1.0))
    assert p_value([0.4, 0.4, 0.4], "equivalent", 0.5) == 0.0 and p_value([0.4, 0.4, 0.4], "better", 0.5) == 0.0
    assert p_value([0.4, 0.4, 0.4], "equivalent", 0.3) == 1.0 and p_value([0.0, 0.0], "inconclusive", 1.0) == 1.0


def test_replicates_needed_for_a_label_to_reproduce():
    """better, d = [1, 2, 3]: mean 2, sd 1, sd' = 2.11694 (above), so the first n with
    (t(0.975, n−1) + t(0.80, n−1))/√n < 2/2.11694 = 0.94476:
    n = 10: (2.2622 + 0.8834)/√10 = 0.99471, no; n = 11: (2.2281 + 0.8791)/√11 = 0.93686, yes: 11.
    d = [3, 4, 5]: mean 4, bound 4/2.11694 = 1.88952: n = 3: (4.3027 + 1.0607)/√3 = 3.0965; n = 4: (3.1824 +
    0.9785)/2 = 2.0805; n = 5: (2.7764 + 0.9410)/√5 = 1.6625 < 1.88952: 5."""
    assert replicates_needed([1.0, 2.0, 3.0], 1.0, "better") == 11
    assert replicates_needed([-1.0, -2.0, -3.0], 1.0, "worse") == 11  # |mean|
    assert replicates_needed([3.0, 4.0, 5.0], 1.0, "better") == 5
    # the brute-force search the docstring states, stepped here with scipy's t directly
    from scipy import stats
    bound = 2 / (1.0 * math.sqrt(2 / stats.chi2.ppf(0.2, 2)))
    assert next(n for n in range(2, 1001)
                if (stats.t.ppf(0.975, n - 1) + stats.t.ppf(0.8, n - 1)) / math.sqrt(n) < bound) == 11


def test_replicates_needed_to_show_equivalence():
    """inconclusive/equivalent: the first n with (t(0.975, n−1) + t(0.90, n−1))·sd'/√n ≤ margin.
    d = [−0.1, 0, 0.1]: sd 0.1, sd' = 0.211694, margin 1: bound 1/0.211694 = 4.72381; n = 2: (12.7062 +
    3.0777)/√2 = 11.161, no; n = 3: (4.3027 + 1.8856)/√3 = 3.5728 ≤ 4.72381: 3 (for either label).
    d = [1, 2, 3], margin 1: bound 1/2.11694 = 0.47238; n = 49: (2.01063 + 1.29944)/7 = 0.47287, no; n = 50:
    (2.00958 + 1.29907)/√50 = 0.46791, yes: 50."""
    assert replicates_needed([-0.1, 0.0, 0.1], 1.0, "equivalent") == 3
    assert replicates_needed([-0.1, 0.0, 0.1], 1.0, "inconclusive") == 3
    assert replicates_needed([1.0, 2.0, 3.0], 1.0, "inconclusive") == 50


def test_replicates_needed_edges():
    assert replicates_needed([0.4, 0.4, 0.4], 1.0, "equivalent") is None  # sd 0: nothing to plan with
    assert replicates_needed([0.4], 1.0, "better") is None  # no sd
    assert replicates_needed([1.0, 2.0, 3.0], 1.0, "undefined") is None
    assert replicates_needed([1.0, 2.0, 3.0], 0.01, "inconclusive") is None  # beyond MAX_SEEDS
    assert replicates_needed([0.01, -0.02, 0.015], 1.0, "better") is None
    assert MAX_SEEDS == 1000


def test_one_runs_lower_bound_on_replicates_uses_its_seed_level_standard_error():
    from oracle_search.statistics import replicates_lower_estimate

    # n = 3 seeds with sd 1: half-width = t(0.975, 2)/√3 = 4.3027/1.7321 = 2.4841, so se = 1/√3 = 0.5774.
    # Equivalence within ±3 at se 0.5774: n = 2: (12.706 + 3.078)·0.5774/√2 = 6.44 > 3; n = 3: (4.303 + 1.886)·0.5774/√3
    # = 2.06 <= 3, so 3.
    half = 4.302652729911275 / 3 ** 0.5
    assert replicates_lower_estimate(-half, half, 3, 3.0, "inconclusive") == 3
    # A label shown at mean 2: the same search against |mean| with the 80 % one-sided quantile (1.061 at 2 df):
    # n = 3: (4.303 + 1.061)·0.5774/√3 = 1.79 < 2 -> 3; n = 2: (12.706 + 1.376)·0.5774/√2 = 5.75 -> no.
    assert replicates_lower_estimate(2 - half, 2 + half, 3, 0.5, "better") == 3
    assert replicates_lower_estimate(float("nan"), 1.0, 3, 3.0, "inconclusive") is None


# --- plans that can succeed (issue 52) ----------------------------------------------------------------------------

def _simulated_power(hypothesis: str, n: int, mean: float, sd: float, margin: float, draws: int = 40_000) -> float:
    """The same chance by brute force: draw n normal replicates, build the label's 95 % interval, count."""
    rng = np.random.default_rng(5)
    x = rng.normal(mean, sd, (draws, n))
    m, half = x.mean(axis=1), half_width(x.std(axis=1, ddof=1), n)
    lo, hi = m - half, m + half
    hit = (lo > 0) | (hi < 0) if hypothesis == "difference" else (lo >= -margin) & (hi <= margin)
    return float(hit.mean())


@pytest.mark.parametrize("hypothesis, n, mean, sd, margin", [
    ("difference", 9, 3.19, 2.97, 3.0), ("difference", 38, 3.84, 8.24, 3.0), ("difference", 4, 0.0, 1.0, 1.0),
    ("equivalence", 35, 1.44, 3.17, 3.0), ("equivalence", 3, 0.0, 0.21, 1.0), ("equivalence", 82, 3.84, 8.24, 3.0)])
def test_power_agrees_with_a_simulation_of_the_interval(hypothesis, n, mean, sd, margin):
    """`power` (a noncentral t; the TOST probability integrated over the sample sd) against 40,000 simulated
    studies: within 4 binomial standard errors. The last case is the issue's: base seed 0's SILO (paper) vs LR
    warmup planned for equivalence at 0 (82 replicates) has power 0.002 at its observed +3.84."""
    from oracle_search.statistics import power

    exact = power(hypothesis, n, mean, sd, margin)
    simulated = _simulated_power(hypothesis, n, mean, sd, margin)
    assert abs(exact - simulated) <= 4 * math.sqrt(max(exact * (1 - exact), 1e-4) / 40_000) + 1e-3, (exact, simulated)
    if hypothesis == "difference" and mean == 0:
        assert exact == pytest.approx(0.05, abs=1e-9)  # at no difference, the size of the test


# Base seed 0's replicates (benchmarks/results/replicates-2026-11-27/seed0-R3, tables/replicates.csv of the report
# over them): the advantage of each of replicates 1, 2, 3.
PAPER_VS_WARMUP = [-0.6000000000000014, 6.633333333333333, 5.5]
FIT_VS_WARMUP = [3.9222222222222243, 4.066666666666667, 1.5666666666666667]


def test_an_inconclusive_row_outside_the_margin_is_planned_for_a_difference_with_its_power():
    """+3.84 and +3.19 with margin 3: the mean lies outside the margin, so the plan is a difference at the observed
    mean, the smallest n with power ≥ 0.80 there (38 and 9), with that power beside it; the old plan, equivalence
    at 0 (82 and 13), has power 0.002 and 0.015 at the observed mean."""
    from oracle_search.statistics import plans, power, sd_upper

    for values, n, old in ((PAPER_VS_WARMUP, 38, 82), (FIT_VS_WARMUP, 9, 13)):
        [plan] = plans(values, 3.0, "inconclusive")
        assert (plan.hypothesis, plan.replicates, plan.at) == ("difference", n, pytest.approx(np.mean(values)))
        assert 0.80 <= plan.power < 0.82 and plan.power == power("difference", n, plan.at, plan.sd, 3.0)
        assert power("difference", n - 1, plan.at, plan.sd, 3.0) < 0.80  # the smallest such n
        assert replicates_needed(values, 3.0, "inconclusive") == old  # what the report used to plan
        assert power("equivalence", old, float(np.mean(values)), plan.sd, 3.0) < 0.02
    assert sd_upper(np.std(FIT_VS_WARMUP, ddof=1), 3) == pytest.approx(plans(FIT_VS_WARMUP, 3.0, "inconclusive")[0].sd)


def test_an_inconclusive_row_inside_the_margin_gets_both_plans_and_the_budget_says_not_decidable():
    """Mean −0.01 inside margin 3 (base seed 0, SILO (fit) vs not adapting: −2.14, +2.59, −0.47): equivalence at
    the observed mean in 33 replicates; a difference of 0.01 cannot be shown within 50: not decidable at this
    budget (replicates None), its power at 50 replicates beside it (about the test's size, 0.05)."""
    from oracle_search.statistics import REPLICATE_BUDGET, plans

    values = [-2.1413604287075763, 2.587618614940245, -0.4683283054883323]
    equivalence, difference = plans(values, 3.0, "inconclusive")
    assert equivalence.hypothesis == "equivalence" and equivalence.replicates == 33 and equivalence.power >= 0.80
    assert difference.hypothesis == "difference" and difference.replicates is None and REPLICATE_BUDGET == 50
    assert difference.power == pytest.approx(0.05, abs=0.01) and difference.budget == 50
    assert plans(values, 3.0, "better") == [] and plans([1.0, 1.0, 1.0], 3.0, "inconclusive") == []


def test_an_interval_touching_the_margin_gives_p_at_most_alpha_not_a_hair_above():
    """d = [1, 2, 3] and margin = its interval's upper end: in floating point the TOST p came out
    0.05000000000000004, above the 0.05 Holm compares it with. Within `MARGIN_TOLERANCE` (1e-12) of the margin
    the interval touches it: equivalent, p ≤ 0.05; 1e-9 beyond it is outside."""
    from oracle_search.statistics import ALPHA, MARGIN_TOLERANCE

    d = [1.0, 2.0, 3.0]
    _, lo, hi = mean_interval(d)
    assert MARGIN_TOLERANCE == 1e-12 and ALPHA == 0.05
    assert p_value(d, "equivalent", hi) <= 0.05 and holm([p_value(d, "equivalent", hi)]) == [True]
    assert label(lo, hi + 5e-13, hi) == "equivalent" and label(lo, hi + 1e-9, hi) == "inconclusive"
    assert p_value(d, "equivalent", hi - 1e-9) > ALPHA
