"""Oracle intervals per (seed, cycle) and pooled over seeds, on hand-made result rows."""
from __future__ import annotations

import pandas as pd
import pytest

from analysis.intervals import count_inside, interval, pooled_intervals, seed_intervals


def row(method: str, stage: str, seed: int, cycle: int, max_lr: float, val_acc: float, **kw) -> dict:
    return {"method": method, "stage": stage, "seed": seed, "cycle": cycle, "density": 100 * 0.8**cycle,
            "max_lr": max_lr, "val_acc": val_acc, "test_acc": val_acc, "diverged": False, "selected": False, **kw}


def grid(seed: int, cycle: int, accs: dict[float, float], stage: str = "grid") -> list[dict]:
    return [row("oracle", stage, seed, cycle, lr, a) for lr, a in accs.items()]


def acc(values: dict[float, float]) -> pd.Series:
    return pd.Series(values)


def test_interval_is_the_grid_values_within_half_a_point_of_the_best():
    got = interval(acc({0.16: 60.0, 0.01: 70.0, 0.02: 79.6, 0.04: 80.0, 0.08: 79.5}))
    assert got == {"best_max_lr": 0.04, "best_val_acc": 80.0, "lo": 0.02, "hi": 0.08, "contiguous": True,
                   "n_grid": 5, "n_inside": 3}


def test_interval_boundary_is_inclusive_despite_float_rounding():
    got = interval(acc({0.01: 79.6, 0.02: 80.1, 0.04: 79.59}))
    assert (got["lo"], got["hi"], got["n_inside"]) == (0.01, 0.02, 2)


def test_non_contiguous_interval_is_flagged():
    got = interval(acc({0.01: 79.8, 0.02: 75.0, 0.04: 80.0, 0.08: 70.0}))
    assert (got["lo"], got["hi"], got["contiguous"], got["n_inside"]) == (0.01, 0.04, False, 2)


def test_ties_go_to_the_smaller_max_lr():
    got = interval(acc({0.08: 80.0, 0.02: 80.0, 0.04: 79.0}))
    assert got["best_max_lr"] == 0.02
    assert (got["lo"], got["hi"]) == (0.02, 0.08)


def test_tolerance_is_a_parameter():
    got = interval(acc({0.01: 79.0, 0.02: 80.0, 0.04: 78.5}), tol=1.0)
    assert (got["lo"], got["hi"]) == (0.01, 0.02)


def test_seed_intervals_skip_diverged_and_other_methods_and_average_repeats():
    rows = grid(0, 0, {0.01: 70.0, 0.02: 80.0, 0.04: 79.0})
    rows += [row("oracle", "grid", 0, 0, 0.64, 99.0, diverged=True),
             row("constant", "final", 0, 0, 0.32, 99.0),
             row("oracle", "refine", 0, 0, 0.04, 81.5)]  # repeat of 0.04: mean 80.25 beats 0.02
    got = seed_intervals(pd.DataFrame(rows)).iloc[0]
    assert got["best_max_lr"] == 0.04 and got["best_val_acc"] == pytest.approx(80.25)
    assert (got["lo"], got["hi"], got["n_grid"]) == (0.02, 0.04, 3)
    assert pd.isna(got["inside"]) and pd.isna(got["silo_max_lr"])


def test_seed_intervals_one_row_per_seed_and_cycle_with_density():
    rows = grid(0, 0, {0.01: 70.0, 0.02: 80.0}) + grid(1, 0, {0.01: 80.0, 0.02: 70.0})
    rows += grid(0, 1, {0.01: 70.0, 0.02: 80.0})
    got = seed_intervals(pd.DataFrame(rows))
    assert list(zip(got["seed"], got["cycle"], got["best_max_lr"])) == [(0, 0, 0.02), (0, 1, 0.02), (1, 0, 0.01)]
    assert got["density"].tolist() == pytest.approx([100.0, 80.0, 100.0])


def test_pooled_uses_the_seed_mean_of_values_every_seed_trained():
    rows = grid(0, 0, {0.01: 80.0, 0.02: 79.0, 0.04: 70.0}) + grid(1, 0, {0.01: 76.0, 0.02: 79.4, 0.04: 78.0})
    rows += grid(1, 0, {0.03: 99.0}, stage="refine")  # only seed 1 trained 0.03: left out of the pool
    got = pooled_intervals(pd.DataFrame(rows)).iloc[0]
    # means: 0.01 -> 78.0, 0.02 -> 79.2, 0.04 -> 74.0
    assert got["best_max_lr"] == 0.02 and got["best_val_acc"] == pytest.approx(79.2)
    assert (got["lo"], got["hi"], got["n_grid"], got["n_seeds"]) == (0.02, 0.02, 3, 2)


def test_pooled_matches_grid_values_computed_separately_per_seed():
    rows = grid(0, 0, {0.1 + 0.2: 80.0, 0.6: 70.0}) + grid(1, 0, {0.3: 80.0, 0.6: 70.0})
    got = pooled_intervals(pd.DataFrame(rows)).iloc[0]
    assert got["n_grid"] == 2 and got["best_max_lr"] == pytest.approx(0.3)


def test_silo_inside_flags_are_inclusive_and_counted():
    rows = grid(0, 0, {0.01: 70.0, 0.02: 80.0, 0.04: 79.8, 0.08: 60.0})
    rows += grid(0, 1, {0.01: 70.0, 0.02: 80.0, 0.04: 79.8, 0.08: 60.0})
    rows += grid(0, 2, {0.01: 70.0, 0.02: 80.0})
    rows += [row("silo", "final", 0, 0, 0.04, 80.0), row("silo", "final", 0, 1, 0.05, 80.0),
             row("silo", "fit", 0, 2, 0.02, 80.0)]  # fit rows are not SILO's final max_lr
    pooled = pooled_intervals(pd.DataFrame(rows))
    assert pooled["inside"].tolist()[:2] == [True, False]
    assert pd.isna(pooled["inside"].iloc[2])
    assert pooled["silo_max_lr"].tolist()[:2] == [0.04, 0.05]
    assert count_inside(pooled) == (1, 2)
