"""The Oracle's choice and both intervals per cycle (seed means) and per seed, against each SILO variant, read
from hand-made results tables through `oracle_search.schema.results_frame`."""
from __future__ import annotations

import pandas as pd
import pytest

from analysis.intervals import count_inside, oracle_intervals, seed_intervals
from oracle_search.schema import results_frame
from oracle_rows import oracle_rows


chain = oracle_rows


def silo(method: str, lrs: dict[int, float], seeds=(10, 11), **params) -> list[dict]:
    return [{"method": method, "stage": "final", "seed": s, "cycle": c, "density": 100 * 0.8**c, "max_lr": lr,
             "val_acc": 70.0, "test_acc": 70.0, "selected": True, **params} for s in seeds for c, lr in lrs.items()]


# Cycle 0 is the example: b = 0.1; 0.05 is 0.8 points worse with noisy paired differences (inside the
# noise-aware interval), 0.2 is 0.7 points worse with consistent ones (outside); both outside the paper's.
CYCLE0 = (0.1, {0.025: [70.0, 71.0, 72.0], 0.05: [80.2, 80.2, 80.2], 0.1: [80.0, 81.0, 82.0],
                0.2: [79.4, 80.3, 81.2], 0.4: [60.0, 61.0, 62.0]})
# Cycle 1: b = 0.2; 0.1 is 0.4 points worse (both intervals); 0.4 is 0.9 points worse but noisy (noise-aware only).
CYCLE1 = (0.2, {0.05: [60.0, 60.0, 60.0], 0.1: [79.6, 79.6, 79.6], 0.2: [80.0, 80.0, 80.0],
                0.4: [80.1, 79.1, 78.1]})


def table() -> pd.DataFrame:
    return results_frame(chain({0: CYCLE0, 1: CYCLE1}) + silo("silo_paper", {0: 0.05, 1: 0.2})
                         + silo("silo_fit", {0: 0.2, 1: 0.4, 2: 0.5}))


def test_oracle_intervals_per_cycle_on_seed_means():
    got = oracle_intervals(table()).set_index("cycle")
    assert got.index.tolist() == [0, 1]
    assert got["best_max_lr"].tolist() == [0.1, 0.2]
    assert got["best_val_acc"].tolist() == pytest.approx([81.0, 80.0])
    assert got["best_se"].tolist() == pytest.approx([1 / 3**0.5, 0.0])
    assert list(zip(got["lo"], got["hi"])) == [(0.1, 0.1), (0.1, 0.2)]
    assert list(zip(got["noise_lo"], got["noise_hi"])) == [(0.05, 0.1), (0.1, 0.4)]
    assert got["n_seeds"].tolist() == [3, 3] and got["n_values"].tolist() == [5, 4]
    assert got["values"].tolist() == ["0.025 0.05 0.1 0.2 0.4", "0.05 0.1 0.2 0.4"]
    assert got["density"].tolist() == pytest.approx([100.0, 80.0])


def test_each_silo_variant_against_both_intervals():
    got = oracle_intervals(table()).set_index("cycle")
    assert got["silo_paper_max_lr"].tolist() == [0.05, 0.2]
    assert got["silo_paper_inside"].tolist() == [False, True]
    assert got["silo_paper_noise_inside"].tolist() == [True, True]
    assert got["silo_fit_max_lr"].tolist() == [0.2, 0.4]  # its cycle 2 has no Oracle cycle to judge against
    assert got["silo_fit_inside"].tolist() == [False, False]
    assert got["silo_fit_noise_inside"].tolist() == [False, True]
    assert count_inside(got, "silo_paper_inside") == (1, 2)
    assert count_inside(got, "silo_fit_noise_inside") == (1, 2)
    assert count_inside(got, "silo_other_inside") == (0, 0)


def test_silo_flags_are_missing_where_silo_has_no_final_row():
    df = results_frame(chain({0: CYCLE0, 1: CYCLE1}) + silo("silo_paper", {1: 0.1}))
    got = oracle_intervals(df).set_index("cycle")
    assert pd.isna(got.loc[0, "silo_paper_inside"]) and pd.isna(got.loc[0, "silo_paper_noise_inside"])
    assert bool(got.loc[1, "silo_paper_inside"]) and count_inside(got, "silo_paper_inside") == (1, 1)
    assert not any(c.startswith("silo_fit") for c in got)


def test_interval_edges_are_inclusive_for_silo_within_float_rounding():
    df = results_frame(chain({0: CYCLE0}) + silo("silo_paper", {0: 0.1 * (1 + 1e-12)})
                       + silo("silo_fit", {0: 0.05 * (1 - 1e-12)}))
    got = oracle_intervals(df).iloc[0]
    assert bool(got["silo_paper_inside"]) and bool(got["silo_fit_noise_inside"])


def test_seed_intervals_are_each_seeds_own_n_equals_one_choice():
    got = seed_intervals(table()).set_index(["seed", "cycle"])
    assert got.index.tolist() == [(s, c) for s in range(3) for c in (0, 1)]
    # Seed 0 alone picks 0.05 at cycle 0 (80.2 against 80.0) and 0.4 at cycle 1 (80.1 against 80.0).
    assert got["best_max_lr"].tolist() == [0.05, 0.4, 0.1, 0.2, 0.1, 0.2]
    assert list(zip(got.loc[0, "lo"], got.loc[0, "hi"])) == [(0.05, 0.1), (0.1, 0.4)]
    assert (got["lo"] == got["noise_lo"]).all() and (got["hi"] == got["noise_hi"]).all()
    assert (got["n_seeds"] == 1).all()
    assert got.loc[(0, 0), "silo_paper_inside"] and not got.loc[(2, 0), "silo_paper_inside"]


def test_diverged_values_and_values_some_seed_lacks_stay_out_of_the_pooled_choice():
    rows = chain({0: CYCLE0}, diverged={(0, 0.4, 2)})
    rows += [r | {"max_lr": 0.15, "val_acc": 99.0, "selected": False} for r in chain({0: CYCLE0})
             if r["max_lr"] == 0.1 and r["seed"] < 2]  # only two of three seeds trained 0.15
    got = oracle_intervals(results_frame(rows)).iloc[0]
    # 0.15 is listed (it bounds the sets, as a value the racing rule dropped does) but is never b
    assert got["best_max_lr"] == 0.1 and got["values"] == "0.025 0.05 0.1 0.15 0.2 0.4"
    div = results_frame(chain({0: (0.1, {0.1: [80.0, 80.0], 0.2: [95.0, 95.0]})}, diverged={(0, 0.2, 0)}))
    got = oracle_intervals(div).iloc[0]
    assert (got["best_max_lr"], got["noise_lo"], got["noise_hi"]) == (0.1, 0.1, 0.1)


def test_no_oracle_rows_give_an_empty_frame_with_the_columns():
    got = oracle_intervals(results_frame(silo("silo_paper", {0: 0.1})))
    assert got.empty and {"cycle", "best_max_lr", "noise_lo", "noise_hi", "noise_contiguous"} <= set(got.columns)
