"""The one selection rule (b, the paper's interval, the "not shown worse" and "shown within 0.5" sets, the
"inside" rule, what to train next) on hand-made curves whose answers are worked out by hand in each test."""
from __future__ import annotations

import math
import statistics

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from oracle_search.schema import results_frame
from oracle_search.curve import Curve, DuplicateRows
from oracle_search.selection import (bracket, choose, dense_best, in_set, lr_key, next_values,
                                     noise_excluded, shown_within, unimodal)


def rows(accs: dict[float, list[float]], diverged: set[tuple[float, int]] = frozenset()) -> list[dict]:
    """One row per (max_lr, seed): accs maps max_lr to the validation accuracy of seeds 0, 1, ..."""
    return [{"max_lr": lr, "seed": s, "val_acc": a, "diverged": (lr, s) in diverged}
            for lr, per_seed in accs.items() for s, a in enumerate(per_seed)]


def curve(accs: dict[float, list[float]], diverged: set[tuple[float, int]] = frozenset()) -> Curve:
    return Curve.from_rows(rows(accs, diverged))


def flags(choice, which: str = "noise_inside") -> dict[float, bool]:
    return dict(zip(choice.values, getattr(choice, which)))


# b = 0.1 (mean 81). 0.2 is 0.7 points worse on every seed give or take 0.1: shown worse, excluded.
# 0.05 is 0.8 points worse on average but by -0.2, 0.8 and 1.8 points: not shown worse, inside.
ISSUE = {0.025: [70.0, 71.0, 72.0], 0.05: [80.2, 80.2, 80.2], 0.1: [80.0, 81.0, 82.0], 0.2: [79.4, 80.3, 81.2],
         0.4: [60.0, 61.0, 62.0]}


def test_noise_aware_interval_keeps_a_noisy_worse_value_and_drops_a_consistently_worse_one():
    choice = choose(curve(ISSUE))
    assert choice.best == 0.1 and choice.best_acc == pytest.approx(81.0)
    assert choice.n_seeds == 3
    assert flags(choice) == {0.025: False, 0.05: True, 0.1: True, 0.2: False, 0.4: False}
    assert (choice.noise_lo, choice.noise_hi, choice.noise_contiguous) == (0.05, 0.1, True)
    # The paper's interval knows only seed means: both are more than 0.5 points worse.
    assert flags(choice, "inside") == {0.025: False, 0.05: False, 0.1: True, 0.2: False, 0.4: False}
    assert (choice.lo, choice.hi, choice.contiguous) == (0.1, 0.1, True)


def test_the_issue_values_by_hand():
    t = stats.t.ppf(0.95, 2)
    consistent = [0.6, 0.7, 0.8]  # d_s for 0.2
    noisy = [-0.2, 0.8, 1.8]  # d_s for 0.05
    lower = [statistics.mean(d) - t * statistics.stdev(d) / math.sqrt(3) for d in (consistent, noisy)]
    assert lower == pytest.approx([0.7 - t * 0.1 / math.sqrt(3), 0.8 - t / math.sqrt(3)])
    assert lower[0] > 0.5 > lower[1]
    assert noise_excluded(np.array(consistent)) and not noise_excluded(np.array(noisy))


def test_t_quantile_worked_example_at_the_boundary():
    # d = (m - 1, m, m + 1): sd = 1, so v is excluded exactly when m - t(0.95, 2) / sqrt(3) > 0.5.
    t = stats.t.ppf(0.95, 2)
    assert t == pytest.approx(2.919986, abs=1e-6)  # the printed t-table value
    threshold = 0.5 + t / math.sqrt(3)  # 0.5 + 2.919986 / 1.732051
    assert threshold == pytest.approx(2.185855, abs=1e-6)
    for m, excluded in ((2.19, True), (2.18, False)):
        d = np.array([m - 1, m, m + 1])
        assert noise_excluded(d) is excluded
        choice = choose(curve({0.1: [80.0, 80.0, 80.0], 0.2: list(80.0 - d)}))
        assert flags(choice) == {0.1: True, 0.2: not excluded}
    # A normal quantile or the population sd would exclude m = 2.18 too, and a two-sided 95 % bound would keep
    # m = 2.19: the boundary pins the one-sided t bound with the sample sd.
    assert 2.18 - stats.norm.ppf(0.95) / math.sqrt(3) > 0.5
    assert 2.18 - t * np.std([1.18, 2.18, 3.18]) / math.sqrt(3) > 0.5
    assert 2.19 - stats.t.ppf(0.975, 2) / math.sqrt(3) < 0.5


def test_tolerance_and_confidence_are_parameters():
    d = np.array([1.1, 1.2, 1.3])  # mean 1.2, sd 0.1: lower bound 1.2 - 0.1686 = 1.031
    assert noise_excluded(d, tolerance=1.0) and not noise_excluded(d, tolerance=1.05)
    assert not noise_excluded(d, tolerance=1.0, confidence=0.999)  # t(0.999, 2) = 22.3: bound 1.2 - 1.29


def test_one_seed_noise_aware_equals_the_papers_interval():
    accs = {0.01: [70.0], 0.02: [79.5], 0.04: [80.0], 0.08: [79.49], 0.16: [79.8], 0.32: [60.0]}
    choice = choose(curve(accs))
    # 0.5 points worse is inside (inclusive), 0.51 is not; 0.16 lies beyond the excluded 0.08.
    assert flags(choice, "inside") == {0.01: False, 0.02: True, 0.04: True, 0.08: False, 0.16: True, 0.32: False}
    assert choice.noise_inside == choice.inside
    assert (choice.lo, choice.hi, choice.contiguous) == (0.02, 0.16, False)
    assert (choice.noise_lo, choice.noise_hi, choice.noise_contiguous) == (0.02, 0.16, False)
    assert math.isnan(choice.best_se)


def test_noise_aware_interval_contains_the_papers_and_b_on_random_curves():
    rng = np.random.default_rng(7)
    grid = [0.01 * 2**i for i in range(7)]
    for n in (1, 2, 3, 5):
        for _ in range(20):
            centre = rng.uniform(0.02, 0.3)
            accs = {lr: list(80 - 3 * math.log2(lr / centre) ** 2 + rng.normal(0, 1.0, n)) for lr in grid}
            choice = choose(curve(accs))
            got = flags(choice)
            assert got[choice.best] and flags(choice, "inside")[choice.best]
            assert all(got[v] for v, inside in zip(choice.values, choice.inside) if inside)
            assert choice.noise_lo <= choice.lo <= choice.best <= choice.hi <= choice.noise_hi
            if n == 1:
                assert choice.noise_inside == choice.inside


def test_b_is_inside_even_when_its_seeds_disagree_wildly():
    choice = choose(curve({0.1: [60.0, 100.0], 0.2: [79.0, 79.0]}))
    assert choice.best == 0.1 and flags(choice) == {0.1: True, 0.2: True}
    assert choice.best_se == pytest.approx(20.0)  # sd 28.28 / sqrt(2)


def test_ties_go_to_the_smaller_max_lr_even_after_float_rounding():
    choice = choose(curve({0.08: [80.0, 80.0], 0.02: [80.1, 79.9], 0.04: [79.0, 79.0]}))
    assert choice.best == 0.02
    assert (choice.lo, choice.hi) == (0.02, 0.08)
    # The same three accuracies in another seed order: 0.3's mean comes out 1.4e-14 higher, still a tie.
    tie = curve({0.2: [82.3, 77.7, 89.9], 0.3: [77.7, 89.9, 82.3]})
    assert tie.mean()[0.3] > tie.mean()[0.2]
    assert tie.best == 0.2


def test_a_value_some_seed_diverged_on_is_never_best_nor_inside():
    accs = {0.05: [79.0, 79.0, 79.0], 0.1: [80.0, 80.0, 80.0], 0.2: [90.0, 90.0, 90.0], 0.4: [79.9, 79.9, 79.9]}
    choice = choose(curve(accs, diverged={(0.2, 1)}))
    assert choice.best == 0.1
    assert flags(choice)[0.2] is False and flags(choice, "inside")[0.2] is False
    assert (choice.lo, choice.hi, choice.contiguous) == (0.1, 0.4, False)
    assert (choice.noise_lo, choice.noise_hi, choice.noise_contiguous) == (0.1, 0.4, False)  # 0.05: d = 1, 1, 1
    assert choose(curve({0.1: [80.0], 0.2: [90.0]}, diverged={(0.1, 0), (0.2, 0)})) is None


def test_values_not_trained_by_every_seed_are_never_b_and_in_no_set():
    """A value some seeds trained (one the racing rule dropped) is listed, so it bounds the sets, but it is never b
    and never a member, however good its seeds were."""
    table = rows({0.1: [80.0, 80.0, 80.0], 0.2: [79.9, 79.9, 79.9]})
    c = Curve.from_rows(table)  # the control: without 0.15, 0.1 and 0.2 form one contiguous interval
    assert choose(c).inside == (True, True) and in_set(0.15, choose(c).values, choose(c).inside)
    table += [{"max_lr": 0.15, "seed": s, "val_acc": 95.0, "diverged": False} for s in (0, 2)]
    c = Curve.from_rows(table)
    assert c.trained == [0.1, 0.2] and c.tried == [0.1, 0.15, 0.2] and c.n_seeds == 3
    choice = choose(c)
    assert choice.best == 0.1 and choice.values == (0.1, 0.15, 0.2)
    assert choice.inside == (True, False, True) and choice.noise_inside == (True, False, True)
    assert not choice.contiguous and not in_set(0.12, choice.values, choice.inside)


def test_a_repeated_value_is_refused_naming_the_rows_and_values_computed_apart_compare_equal():
    table = rows({0.1 + 0.2: [80.0, 80.0], 0.6: [79.0, 79.0]})
    c = Curve.from_rows(pd.DataFrame(table))  # the control: one row per (max_lr, seed) is a curve
    assert c.trained == [0.3, 0.6] and c.mean().to_dict() == pytest.approx({0.3: 80.0, 0.6: 79.0})
    table += [{"max_lr": 0.3, "seed": 0, "val_acc": 78.0, "diverged": False}]  # seed 0's 0.3 again
    with pytest.raises(DuplicateRows, match=r"(?s)2 rows share \(max_lr, seed\).*0\.3 +0 +80\.0.*0\.3 +0 +78\.0"):
        Curve.from_rows(pd.DataFrame(table))
    assert lr_key(0.1 + 0.2) == 0.3 and lr_key(0.028284271247) == 0.0282843


def test_unimodal():
    def series(values: dict[float, float]) -> pd.Series:
        return pd.Series(values).sort_index()

    assert unimodal(series({0.01: 70.0, 0.02: 80.0, 0.04: 75.0, 0.08: 75.5}), 0.02)  # rise 0.5: within tolerance
    assert not unimodal(series({0.01: 70.0, 0.02: 80.0, 0.04: 75.0, 0.08: 75.6}), 0.02)  # rises again on the right
    assert not unimodal(series({0.01: 76.0, 0.02: 75.0, 0.04: 80.0}), 0.04)  # ... on the left
    assert unimodal(series({0.01: 76.0, 0.02: 75.0, 0.04: 80.0}), 0.04, tolerance=1.0)
    assert not choose(curve({0.01: [76.0], 0.02: [75.0], 0.04: [80.0]})).unimodal
    assert choose(curve({0.01: [74.0], 0.02: [75.0], 0.04: [80.0], 0.08: [70.0]})).unimodal


GRID = [0.01, 0.02, 0.04, 0.08, 0.16]


def test_bracket_keeps_grid_values_within_a_factor_of_the_previous_choice():
    assert bracket(GRID + [0.32, 0.64], 0.08) == [0.02, 0.04, 0.08, 0.16, 0.32]  # both ends inclusive
    assert bracket(GRID, 0.1) == [0.04, 0.08, 0.1, 0.16]  # an off-grid choice is kept too
    assert bracket(GRID, 0.1, width=2.0) == [0.08, 0.1, 0.16]
    assert bracket(GRID, 0.01) == [0.01, 0.02, 0.04]
    assert bracket(GRID, 0.1 * 0.8) == [0.02, 0.04, 0.08, 0.16]  # 0.08000000000000002 is the grid's 0.08


def test_next_values_widens_when_b_is_the_last_value_trained():
    choice = choose(curve({0.02: [70.0], 0.04: [80.0]}))
    # Upward: the next coarse-grid value; downward: the midpoint sqrt(0.02 * 0.04) towards the excluded 0.02.
    assert next_values(choice, GRID) == [lr_key(math.sqrt(0.02 * 0.04)), 0.08]
    assert next_values(choose(curve({0.04: [80.0]})), GRID) == [0.02, 0.08]


def test_next_values_widens_when_an_interval_edge_is_the_last_value_trained():
    choice = choose(curve({0.02: [70.0], 0.04: [80.0], 0.08: [79.8]}))
    assert (choice.lo, choice.hi) == (0.04, 0.08)
    assert next_values(choice, GRID) == [0.0282843, 0.16]


def test_next_values_halves_gaps_wider_than_five_percent_and_stops_when_resolved():
    def accs(below: float, above: float) -> dict[float, list[float]]:
        return {0.01: [60.0], below: [70.0], 0.04: [79.8], 0.08: [80.0], above: [70.0], 0.16: [60.0]}

    assert next_values(choose(curve(accs(0.039, 0.082))), GRID) == []  # 2.5 % on both sides: resolved
    assert next_values(choose(curve(accs(0.0381, 0.0839))), GRID) == []  # 4.75 % and 4.9 %
    assert next_values(choose(curve(accs(0.0379, 0.082))), GRID) == [lr_key(math.sqrt(0.0379 * 0.04))]
    assert next_values(choose(curve(accs(0.039, 0.0841))), GRID) == [lr_key(math.sqrt(0.08 * 0.0841))]
    assert next_values(choose(curve(accs(0.039, 0.082))), GRID, resolution=0.02) == [
        lr_key(math.sqrt(0.039 * 0.04)), lr_key(math.sqrt(0.08 * 0.082))]


def test_next_values_leaves_an_edge_at_the_grids_end_open():
    choice = choose(curve({0.01: [50.0], 0.02: [60.0], 0.04: [70.0], 0.08: [75.0], 0.16: [80.0]}))
    assert next_values(choice, GRID) == [lr_key(math.sqrt(0.08 * 0.16))]
    choice = choose(curve({0.01: [80.0], 0.02: [79.9], 0.04: [60.0]}))
    assert next_values(choice, GRID) == [lr_key(math.sqrt(0.02 * 0.04))]


def test_next_values_resolves_both_intervals_edges():
    choice = choose(curve(ISSUE))  # paper [0.1, 0.1], noise-aware [0.05, 0.1]
    assert next_values(choice, sorted(ISSUE)) == [
        lr_key(math.sqrt(0.025 * 0.05)), lr_key(math.sqrt(0.05 * 0.1)), lr_key(math.sqrt(0.1 * 0.2))]


def test_dense_best_is_the_oracles_seed_mean_best_at_cycle_zero():
    table = results_frame(
        [{"method": "oracle", "stage": "grid", "seed": s, "cycle": 0, "max_lr": lr, "val_acc": a}
         for s, accs in enumerate(({0.02: 80.0, 0.04: 79.0}, {0.02: 78.0, 0.04: 79.5})) for lr, a in accs.items()]
        + [{"method": "oracle", "stage": "grid", "seed": 0, "cycle": 1, "max_lr": 0.08, "val_acc": 99.0},
           {"method": "constant", "stage": "tune", "seed": 0, "cycle": 0, "max_lr": 0.16, "val_acc": 99.0}])
    assert dense_best(table) == 0.04  # means 79.0 and 79.25
    assert dense_best(table[table["method"] != "oracle"]) is None


# b = 0.2 (mean 80). 0.1: d = [0.1, 0.2, 0.3] → 0.2 + t(0.95, 2)·0.1/√3 = 0.2 + 2.92·0.0577 = 0.369 < 0.5: shown
# within. 0.4: d = [−0.6, 0.4, 1.4] → mean 0.4 inside the paper's interval, but 0.4 + 2.92/√3 = 2.09: not shown
# within. 0.8: d = [0.45, 0.45, 0.45] → 0.45 + 0 < 0.5: shown within. 1.6 diverged on seed 2: in no set.
STRICT = {0.05: [70.0, 70.0, 70.0], 0.1: [79.9, 79.8, 79.7], 0.2: [80.0, 80.0, 80.0], 0.4: [80.6, 79.6, 78.6],
          0.8: [79.55, 79.55, 79.55], 1.6: [80.0, 80.0, 80.0]}


def test_shown_within_is_an_equivalence_test_inside_the_paper_interval():
    choice = choose(curve(STRICT, diverged={(1.6, 2)}))
    assert choice.best == 0.2
    assert flags(choice, "within") == {0.05: False, 0.1: True, 0.2: True, 0.4: False, 0.8: True, 1.6: False}
    assert flags(choice, "inside") == {0.05: False, 0.1: True, 0.2: True, 0.4: True, 0.8: True, 1.6: False}
    assert flags(choice, "noise_inside") == {0.05: False, 0.1: True, 0.2: True, 0.4: True, 0.8: True, 1.6: False}
    assert (choice.strict_lo, choice.strict_hi) == (0.1, 0.8)
    t = stats.t.ppf(0.95, 2)
    assert 0.2 + t * 0.1 / math.sqrt(3) < 0.5 < 0.4 + t * 1.0 / math.sqrt(3)
    assert shown_within(np.array([0.1, 0.2, 0.3])) and not shown_within(np.array([-0.6, 0.4, 1.4]))
    assert not shown_within(np.array([0.5, 0.5, 0.5]))  # strict: exactly 0.5 is not within
    assert not shown_within(np.array([0.0]))  # one seed shows nothing


def test_one_seed_strict_set_is_b_alone():
    choice = choose(curve({0.1: [79.9], 0.2: [80.0], 0.4: [79.0]}))
    assert flags(choice, "within") == {0.1: False, 0.2: True, 0.4: False}
    assert flags(choice, "noise_inside") == {0.1: True, 0.2: True, 0.4: False}  # the paper's interval


def test_inside_a_set_means_a_member_or_between_two_adjacent_members():
    values, members = [0.1, 0.2, 0.4, 0.8, 1.6], [True, True, False, True, True]
    assert in_set(0.1, values, members) and in_set(0.15, values, members)
    assert in_set(0.2 * (1 + 1e-12), values, members)  # float rounding of a computed max_lr
    assert not in_set(0.4 * (1 + 1e-7), values, members)  # equal to 0.4 at 6 significant digits, as trained
    assert in_set(0.8 * (1 + 1e-5), values, members)  # 0.800008: strictly between 0.8 and 1.6
    assert not in_set(0.4, values, members)  # an excluded trained value inside [lo, hi] is not inside
    assert not in_set(0.3, values, members) and not in_set(0.6, values, members)  # next to a non-member
    assert in_set(1.0, values, members) and in_set(1.6, values, members)
    assert not in_set(0.05, values, members) and not in_set(3.2, values, members)
    # The STRICT curve: 0.3 and 0.6 sit next to 0.4, which was not shown within, though [lo, hi] = [0.1, 0.8].
    choice = choose(curve(STRICT, diverged={(1.6, 2)}))
    assert not in_set(0.3, choice.values, choice.within) and in_set(0.15, choice.values, choice.within)
    assert in_set(0.3, choice.values, choice.inside) and not in_set(1.2, choice.values, choice.inside)
