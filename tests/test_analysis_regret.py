"""tables/regret.csv and tables/verdict.csv on hand-made results tables (docs/design.md, "Regret and controls").
Every expected number below is worked out by hand in the comments, from the definition, not by the code."""
from __future__ import annotations

import math

import pandas as pd
import pytest

from analysis.regret import analyse
from oracle_search.compared import completion_targets, last_cycle, oracle_curves
from oracle_search.curve import DuplicateRows
from oracle_search.schema import results_frame
from oracle_rows import oracle_rows

T2 = 4.302652729911275  # t(0.975, 2)
T1 = 12.706204736174707  # t(0.975, 1)
X = 0.1 * 2 ** 0.25  # a quarter of the way from 0.1 to 0.2 in ln x (0.189 of the way in x)


def regret_table(df):
    return analyse(df).regret


def verdict_table(df):
    return analyse(df).verdict


def end_to_end(df):
    return analyse(df).end_to_end


oracle = oracle_rows


def final(method: str, lrs: dict[int, float], test: dict[int, list[float]] | None = None,
          diverged=frozenset()) -> list[dict]:
    """A method's final chains on evaluation seeds 10, 11, 12: max_lr per cycle, test accuracy per seed."""
    test = test or {s: [70.0] * len(lrs) for s in (10, 11, 12)}
    return [{"experiment": "t", "method": method, "stage": "final", "seed": s, "cycle": c, "density": 100 * 0.8**c,
             "max_lr": lr, "val_acc": 70.0, "test_acc": test[s][c], "selected": True,
             "diverged": (c, s) in diverged} for s in test for c, lr in lrs.items() if c < len(test[s])]


def seeds(*values: float) -> dict[int, float]:
    return dict(enumerate(values))


# Seeds 0, 1, 2 run cycles 0..2. Seed 3's chain stops after cycle 1 (it is not in S): its wild numbers and its
# divergence at 0.4 must change nothing.
CYCLES = {
    0: (0.2, {0.05: {**seeds(50, 50, 50), 3: 99}, 0.1: {**seeds(80, 81, 82), 3: 10},
              0.2: {**seeds(82, 83, 84), 3: 10}, 0.4: {**seeds(81, 81, 81), 3: 10}}),
    # 0.8 diverged on seed 1: not complete, so 0.6 lies above the largest complete value (0.4).
    1: (0.2, {0.1: {**seeds(78, 79, 80), 3: 99}, 0.2: {**seeds(80, 80, 83), 3: 10},
              0.4: {**seeds(79, 82, 82), 3: 10}, 0.8: seeds(10, 10, 10)}),
    # 0.3 diverged on seed 0: nothing between 0.2 and 0.4 is defined. 0.15 trained by seed 0 only, not diverged:
    # it does not stop interpolation between 0.1 and 0.2.
    2: (0.4, {0.1: seeds(70, 71, 72), 0.15: {0: 99}, 0.2: seeds(74, 75, 76), 0.3: seeds(10, 10, 10),
              0.4: seeds(75, 77, 76)}),
}
DIVERGED = {(1, 0.8, 1), (2, 0.3, 0), (1, 0.4, 3)}
SILO_PAPER = {0: 0.2, 1: 0.2, 2: X}
SILO_FIT = {0: 0.1, 1: 0.6, 2: 0.25}

# The leave-one-out Oracle a_s(b^(−s)) per seed, by hand:
# cycle 0: without any one seed 0.2 has the best mean: [82, 83, 84].
# cycle 1: without s0 (0.1 79.5, 0.2 81.5, 0.4 82) → 0.4; without s1 (79, 81.5, 80.5) → 0.2; without s2 (78.5,
#          80, 80.5) → 0.4: a_0(0.4), a_1(0.2), a_2(0.4) = [79, 80, 82].
# cycle 2: without s0 (0.2 75.5, 0.4 76.5), s1 (75, 75.5), s2 (74.5, 76): 0.4 always: [75, 77, 76].
# a_s(X) at cycle 2: a(0.1) + 0.25·(a(0.2) − a(0.1)) = [71, 72, 73] (linear in x it would be 0.189 of the way).
# constant_dense = 0.2 (chained at cycle 0). constant_best: 0.05 is undefined at cycles 1-2 (below 0.1);
# Σ_{m=1,2} mean: 0.1 → 79 + 71 = 150, 0.2 → 81 + 75 = 156, 0.4 → 81 + 76 = 157: 0.4.


def table(**extra) -> pd.DataFrame:
    rows = oracle(CYCLES, DIVERGED) + final("silo_paper", SILO_PAPER) + final("silo_fit", SILO_FIT)
    return results_frame(rows + extra.get("rows", []))


def ci(mean: float, sd: float, n: int, t: float) -> tuple[float, float]:
    return mean - t * sd / math.sqrt(n), mean + t * sd / math.sqrt(n)


def test_s_excludes_a_seed_whose_chain_misses_a_cycle():
    curves = oracle_curves(table())
    assert curves.seeds == [0, 1, 2] and curves.last == 2 and curves.chained0 == 0.2


def test_interpolation_in_ln_x_and_divergence_between_and_above_complete_values():
    cycles = oracle_curves(table()).cycles
    assert cycles[2].at(X).tolist() == pytest.approx([71, 72, 73], abs=1e-9)
    assert cycles[2].at(0.25) is None  # 0.3 between 0.2 and 0.4 diverged on seed 0
    assert cycles[1].at(0.6) is None  # above the largest complete value 0.4 (0.8 diverged on seed 1)
    assert cycles[1].at(0.05) is None  # below the smallest complete value
    assert cycles[1].at(0.4).tolist() == [79, 82, 82]  # seed 3's divergence at 0.4 does not count


def test_regret_per_schedule_and_cycle():
    got = regret_table(table())
    assert list(got.columns) == ["schedule", "cycle", "max_lr", "regret", "ci_lo", "ci_hi", "n"]
    assert got["n"].eq(3).all()
    by = got.set_index(["schedule", "cycle"])
    assert list(dict.fromkeys(got["schedule"])) == ["silo_paper", "silo_fit", "constant_dense", "constant_best"]
    assert by["max_lr"].loc["constant_dense"].tolist() == [0.2, 0.2, 0.2]
    assert by["max_lr"].loc["constant_best"].tolist() == [0.4, 0.4, 0.4]
    # silo_paper: d = [0, 0, 0]; [79,80,82] − [80,80,83] = [−1, 0, −1] (sd √(1/3)); [75,77,76] − [71,72,73] =
    # [4, 5, 3] (sd 1).
    expect = {("silo_paper", 0): (0.0, (0.0, 0.0)), ("silo_paper", 1): (-2 / 3, ci(-2 / 3, math.sqrt(1 / 3), 3, T2)),
              ("silo_paper", 2): (4.0, ci(4, 1, 3, T2)),
              # constant_dense: cycle 2 [75,77,76] − [74,75,76] = [1, 2, 0]
              ("constant_dense", 2): (1.0, ci(1, 1, 3, T2)),
              # constant_best: [82,83,84] − 81 = [1,2,3]; [79,80,82] − [79,82,82] = [0,−2,0]; 0 at cycle 2
              ("constant_best", 0): (2.0, ci(2, 1, 3, T2)), ("constant_best", 1): (-2 / 3, ci(-2 / 3, math.sqrt(4 / 3), 3, T2)),
              ("constant_best", 2): (0.0, (0.0, 0.0)),
              # silo_fit at 0.1 on cycle 0: [2, 2, 2]
              ("silo_fit", 0): (2.0, (2.0, 2.0))}
    for key, (regret, (lo, hi)) in expect.items():
        assert by.loc[key, "regret"] == pytest.approx(regret, abs=1e-9), key
        assert (by.loc[key, "ci_lo"], by.loc[key, "ci_hi"]) == pytest.approx((lo, hi), abs=1e-9), key
    # silo_fit is undefined at cycle 1 (above) and cycle 2 (a diverged value between): max_lr kept, regret empty.
    for cycle, lr in ((1, 0.6), (2, 0.25)):
        assert by.loc[("silo_fit", cycle), "max_lr"] == lr
        assert by.loc[("silo_fit", cycle), ["regret", "ci_lo", "ci_hi"]].isna().all()


def test_verdict_decisive_inconclusive_and_undefined():
    got = verdict_table(table())
    assert list(got.columns) == ["schedule", "versus", "advantage", "ci_lo", "ci_hi", "n", "verdict", "margin",
                                 "seeds_needed"]
    assert got["n"].eq(3).all()
    assert got["margin"].eq(1.0).all()  # 0.5 points per compared cycle × L = 2, on every row (undefined ones too)
    by = got.set_index(["schedule", "versus"])
    # silo_paper − constant_dense: cycle 1 same value; cycle 2 [71,72,73] − [74,75,76]: adv = [−3,−3,−3].
    row = by.loc[("silo_paper", "constant_dense")]
    assert (row.advantage, row.ci_lo, row.ci_hi, row.verdict) == (pytest.approx(-3), pytest.approx(-3),
                                                                  pytest.approx(-3), "worse")
    assert pd.isna(row.seeds_needed)  # zero spread: no power to compute (the report says "zero spread")
    # silo_paper − oracle: −R_s = −([−1,0,−1] + [4,5,3]) = [−3,−5,−2]: mean −10/3, sd √(7/3).
    row = by.loc[("silo_paper", "oracle")]
    assert row.advantage == pytest.approx(-10 / 3)
    assert (row.ci_lo, row.ci_hi) == pytest.approx(ci(-10 / 3, math.sqrt(7 / 3), 3, T2))
    assert row.verdict == "inconclusive"  # [−7.13, +0.46]: holds 0, and is not inside ±1
    # silo_paper − constant_best: [1,−2,1] + [−4,−5,−3] = [−3,−7,−2]: mean −4, sd √7. seeds_needed by hand:
    # n' = 5: (2.776 + 0.941)·√7/√5 = 4.40 > 4; n' = 6: (2.571 + 0.920)·√7/√6 = 3.77 < 4.
    row = by.loc[("silo_paper", "constant_best")]
    assert row.advantage == pytest.approx(-4)
    assert (row.ci_lo, row.ci_hi) == pytest.approx(ci(-4, math.sqrt(7), 3, T2))
    assert row.verdict == "inconclusive" and row.seeds_needed == 6
    # silo_fit is undefined at cycles 1 and 2: every verdict undefined, nothing else given.
    for versus in ("oracle", "constant_dense", "constant_best"):
        row = by.loc[("silo_fit", versus)]
        assert row.verdict == "undefined"
        assert pd.isna(row.advantage) and pd.isna(row.ci_lo) and pd.isna(row.ci_hi) and pd.isna(row.seeds_needed)


def test_a_constant_schedule_through_the_verdict_control():
    """A SILO variant that keeps 0.4 at every cycle is constant_best itself: advantage exactly 0, its interval
    [0, 0] inside ±1 (margin 0.5 × L = 2): equivalent, no seeds_needed; and against the Oracle
    −R_s(0.4) = −([0,−2,0] + [0,0,0]) = [0, 2, 0]."""
    df = results_frame(oracle(CYCLES, DIVERGED) + final("silo_fit", {0: 0.4, 1: 0.4, 2: 0.4}))
    by = verdict_table(df).set_index(["schedule", "versus"])
    row = by.loc[("silo_fit", "constant_best")]
    assert (row.advantage, row.ci_lo, row.ci_hi, row.verdict, row.margin) == (0, 0, 0, "equivalent", 1.0)
    assert pd.isna(row.seeds_needed)
    row = by.loc[("silo_fit", "oracle")]
    assert row.advantage == pytest.approx(2 / 3) and row.verdict == "inconclusive"
    assert (row.ci_lo, row.ci_hi) == pytest.approx(ci(2 / 3, math.sqrt(4 / 3), 3, T2))
    # constant_dense (0.2): [80,80,83] − ... adv = (a(0.4) − a(0.2)) summed: [−1,2,−1] + [1,2,0] = [0,4,−1].
    row = by.loc[("silo_fit", "constant_dense")]
    assert row.advantage == pytest.approx(1) and row.verdict == "inconclusive"
    assert (row.ci_lo, row.ci_hi) == pytest.approx(ci(1, math.sqrt(7), 3, T2))


def test_one_seed_leaves_regret_and_verdict_undefined():
    """n = 1: no leave-one-out Oracle (regret empty), every verdict undefined with empty CIs and seeds_needed.
    constant_best on seed 0 alone (0.15 left out; 0.8 is complete at cycle 1 but above 0.4 at cycle 2):
    0.2 → 80 + 74 = 154 and 0.4 → 79 + 75 = 154 tie: the smaller, 0.2."""
    one = {c: (b, {lr: {0: v[0]} for lr, v in accs.items() if 0 in v and lr != 0.15}) for c, (b, accs) in CYCLES.items()}
    df = results_frame(oracle(one, DIVERGED) + final("silo_paper", SILO_PAPER))
    regret = regret_table(df)
    assert regret["n"].eq(1).all() and regret[["regret", "ci_lo", "ci_hi"]].isna().all().all()
    assert regret.set_index("schedule").loc["constant_best", "max_lr"].tolist() == [0.2, 0.2, 0.2]
    verdict = verdict_table(df).set_index("versus")
    assert verdict["verdict"].eq("undefined").all() and verdict["n"].eq(1).all()
    assert verdict[["ci_lo", "ci_hi", "seeds_needed"]].isna().all().all()
    assert pd.isna(verdict.loc["oracle", "advantage"])
    # Against a constant the Oracle cancels, so the advantage is still given: cycle 2, a_0(X) − a_0(0.2) = 71 − 74.
    assert verdict.loc["constant_dense", "advantage"] == pytest.approx(-3)


def test_end_to_end_pairs_evaluation_seeds_and_leaves_out_diverged_chains():
    """silo_paper − warmup per seed, Σ over cycles 1..2 of test accuracy: seed 10 (79−78)+(77−75) = 3, seed 11
    (80−79)+(76−76) = 1, seed 12 diverged at cycle 2 (left out, counted): mean 2, sd √2, n 2.
    silo_fit = warmup + 1 at cycles 1 and 2 on every seed: [2, 2, 2], better, with zero spread (no seeds_needed)."""
    warm = {10: [80, 78, 75], 11: [81, 79, 76], 12: [80, 77, 74]}
    paper = {10: [80, 79, 77], 11: [81, 80, 76], 12: [80, 77, 74]}
    fit = {s: [a[0], a[1] + 1, a[2] + 1] for s, a in warm.items()}
    lrs = {0: 0.2, 1: 0.2, 2: 0.2}
    df = results_frame(oracle(CYCLES, DIVERGED) + final("warmup", lrs, warm)
                       + final("silo_paper", lrs, paper, diverged={(2, 12)}) + final("silo_fit", lrs, fit))
    by = end_to_end(df).set_index("schedule")
    row = by.loc["silo_paper"]
    assert row.versus == "warmup" and row.n == 2 and row.diverged == 1 and row.versus_diverged == 0
    assert row.advantage == pytest.approx(2)
    assert (row.ci_lo, row.ci_hi) == pytest.approx(ci(2, math.sqrt(2), 2, T1))
    assert row.verdict == "inconclusive" and row.seeds == "10 11"
    row = by.loc["silo_fit"]
    assert (row.n, row.advantage, row.ci_lo, row.ci_hi, row.verdict) == (
        3, pytest.approx(2), pytest.approx(2), pytest.approx(2), "better")  # [2, 2] is not inside ±1
    assert row.margin == 1.0  # 0.5 × L = 2, L the Oracle's last cycle
    assert pd.isna(row.seeds_needed)  # zero spread


def e2e_table() -> pd.DataFrame:
    """The end-to-end rows above: silo_fit = warmup + 1 at cycles 1 and 2 on seeds 10-12, so its per-seed advantage
    is exactly [2, 2, 2] (integers: no rounding), CI [2, 2]."""
    warm = {10: [80, 78, 75], 11: [81, 79, 76], 12: [80, 77, 74]}
    fit = {s: [a[0], a[1] + 1, a[2] + 1] for s, a in warm.items()}
    lrs = {0: 0.2, 1: 0.2, 2: 0.2}
    return results_frame(oracle(CYCLES, DIVERGED) + final("warmup", lrs, warm) + final("silo_fit", lrs, fit))


def test_equivalent_within_a_run_at_the_margin_and_just_outside():
    """CI [2, 2] over L = 2 cycles. margin_per_cycle 1.0: margin 1.0 × 2 = 2.0, hi = 2 ≤ 2 (bounds inclusive) and
    lo = 2 ≥ −2: equivalent, which wins over better (lo > 0 holds too); no seeds_needed. margin_per_cycle 0.999:
    margin 1.998 < hi = 2: just outside, so better. The default 0.5: margin 1, better (as above)."""
    row = analyse(e2e_table(), margin_per_cycle=1.0).end_to_end.set_index("schedule").loc["silo_fit"]
    assert (row.ci_lo, row.ci_hi, row.margin, row.verdict) == (2, 2, 2.0, "equivalent")
    assert pd.isna(row.seeds_needed)
    row = analyse(e2e_table(), margin_per_cycle=0.999).end_to_end.set_index("schedule").loc["silo_fit"]
    assert (row.margin, row.verdict) == (pytest.approx(1.998), "better")
    r = analyse(e2e_table())
    assert r.margin_per_cycle == 0.5 and r.end_to_end.set_index("schedule").loc["silo_fit", "verdict"] == "better"


def test_equivalent_within_a_run_on_the_oracle_chain():
    """silo_fit keeping 0.4 against constant_dense (0.2): adv = [0, 4, −1] (above), mean 1, sd √7, half-width
    t(0.975, 2)·√7/√3 = 4.3027·1.5275 = 6.572: CI [−5.572, +7.572]. margin_per_cycle 4: margin 8 ≥ 7.572 and
    −8 ≤ −5.572: equivalent (seeds_needed empty). margin_per_cycle 3.7: margin 7.4 < 7.572: inconclusive, and the
    seeds that would exclude 0 are given. The label applies to the Oracle and both controls alike; the margin is
    on every row, undefined ones too."""
    df = results_frame(oracle(CYCLES, DIVERGED) + final("silo_fit", {0: 0.4, 1: 0.4, 2: 0.4}))
    lo, hi = ci(1, math.sqrt(7), 3, T2)
    assert (lo, hi) == pytest.approx((-5.572, 7.572), abs=1e-3)
    wide = analyse(df, margin_per_cycle=4).verdict.set_index(["schedule", "versus"])
    assert wide["margin"].eq(8.0).all()
    row = wide.loc[("silo_fit", "constant_dense")]
    assert (row.advantage, row.verdict) == (pytest.approx(1), "equivalent") and pd.isna(row.seeds_needed)
    # against the Oracle: [0, 2, 0], CI 2/3 ± 4.3027·√(4/3)/√3 = [−2.202, +3.535], inside ±8 too
    assert wide.loc[("silo_fit", "oracle"), "verdict"] == "equivalent"
    narrow = analyse(df, margin_per_cycle=3.7).verdict.set_index(["schedule", "versus"])
    row = narrow.loc[("silo_fit", "constant_dense")]
    assert (row.margin, row.verdict) == (pytest.approx(7.4), "inconclusive") and not pd.isna(row.seeds_needed)


def test_no_oracle_rows_give_empty_tables():
    df = results_frame(final("silo_paper", SILO_PAPER))
    assert regret_table(df).empty and verdict_table(df).empty


def test_no_pruning_cycle_leaves_the_verdict_undefined():
    """L = 0: cycle 0 is shown in regret.csv but never summed, so there is nothing to compare."""
    dense = (0.2, {lr: {s: a for s, a in accs.items() if s < 3} for lr, accs in CYCLES[0][1].items()})
    df = results_frame(oracle({0: dense}) + final("silo_paper", {0: 0.2}))  # b^(−s) = 0.2 for every s
    assert regret_table(df).set_index("schedule").loc["silo_paper", "regret"] == pytest.approx(0)
    assert verdict_table(df)["verdict"].eq("undefined").all()


def test_no_pruning_cycle_has_no_best_constant():
    """L = 0: constant_best would be an empty sum, so it is None (not the smallest value): its regret row has no
    max_lr and its verdict is undefined. The control: with cycles 1..2 the same rows give 0.4."""
    dense = (0.2, {lr: {s: a for s, a in accs.items() if s < 3} for lr, accs in CYCLES[0][1].items()})
    df = results_frame(oracle({0: dense}) + final("silo_paper", {0: 0.2}))
    r = analyse(df)
    assert r.last == 0 and r.schedules["constant_best"] == {}
    assert pd.isna(r.regret.set_index("schedule").loc["constant_best", "max_lr"])
    assert r.verdict.set_index("versus").loc["constant_best", "verdict"] == "undefined"
    assert analyse(table()).schedules["constant_best"] == {0: 0.4, 1: 0.4, 2: 0.4}


def test_a_duplicate_oracle_row_on_the_chain_is_refused_not_averaged():
    """Two current Oracle rows of one (cycle, max_lr, seed) with different accuracies: the analysis names them."""
    rows = oracle(CYCLES, DIVERGED)
    again = dict(next(r for r in rows if r["cycle"] == 1 and r["max_lr"] == 0.4 and r["seed"] == 0))
    again.update(val_acc=again["val_acc"] - 5, key="again")  # not the value chained forward: the chain goes on
    with pytest.raises(DuplicateRows, match=r"(?s)share \(max_lr, seed\).*0\.4 +0 "):
        analyse(results_frame(rows + [again]))
    analyse(results_frame(rows))  # the control: the same table without the copy is analysed


def test_silo_seeds_that_disagree_on_max_lr_are_refused():
    lrs = {0: 0.2, 1: 0.2, 2: 0.4}
    rows = oracle(CYCLES, DIVERGED) + final("silo_paper", lrs)
    rows[-1] = {**rows[-1], "max_lr": 0.3}  # one seed's last cycle at another max_lr
    with pytest.raises(ValueError, match="silo_paper's final rows use several max_lr at cycle"):
        analyse(results_frame(rows))


def test_the_last_cycle_is_one_rule():
    """L is the Oracle's last current cycle; the end-to-end comparison sums over the same cycles even when another
    method's chains go further; without Oracle rows it is the table's last cycle."""
    df = results_frame(oracle(CYCLES, DIVERGED) + final("silo_paper", {0: 0.2, 1: 0.2, 2: 0.2, 3: 0.2}))
    assert last_cycle(df) == 2 == analyse(df).last
    assert last_cycle(results_frame(final("silo_paper", {0: 0.2, 1: 0.2}))) == 1


def test_completion_targets_name_the_values_the_verdict_needs():
    """Racing left 0.8 with one seed at cycle 1. SILO (paper) at 0.6 lies between 0.4 (complete, in the paper
    interval) and 0.8: the verdict needs 0.8 complete, and the midpoint √(0.4·0.8) = 0.565685 resolves whether 0.6
    is inside. At cycle 0 SILO sits on 0.4, complete: nothing. constant_dense (0.4) and constant_best (0.4, the
    only value complete at cycle 1 besides 0.2) need nothing either. The control: with 0.8 complete on every seed,
    only the midpoint is asked for (0.8 is 1 point behind: outside, so the gap is still undecided)."""
    cycles = {0: (0.4, {0.2: [80, 81, 82], 0.4: [81, 82, 83]}),
              1: (0.4, {0.2: [80, 81, 82], 0.4: [82, 83, 84], 0.8: {0: 81.0}})}
    rows = oracle(cycles) + final("silo_paper", {0: 0.4, 1: 0.6})
    assert completion_targets(results_frame(rows)) == {1: [0.565685, 0.8]}
    cycles[1][1][0.8] = [81.0, 82.0, 83.0]
    assert completion_targets(results_frame(oracle(cycles) + final("silo_paper", {0: 0.4, 1: 0.6}))) == {1: [0.565685]}


def test_completion_targets_reach_a_max_lr_beyond_where_the_walk_stopped():
    """The walk tried 0.2 to 0.8 at cycle 1; SILO (paper) sits at 0.142, below all of them (base seed 100's cycle 3
    in the racing-told issue). Without the grid nothing can bracket it, and its comparison would be undefined; with
    the grid, the grid value next below it inside the exhaustive Oracle's bracket of cycle 0's b (0.4: ×4 reaches
    down to 0.1) is asked for, so it can be interpolated as after an exhaustive Oracle. With no bracket, the whole
    grid is the reach: the same value here. A max_lr below the bracket's reach gets nothing, as exhaustive has
    nothing there either."""
    cycles = {0: (0.4, {0.1: [78, 79, 80], 0.2: [80, 81, 82], 0.4: [81, 82, 83]}),
              1: (0.4, {0.2: [80, 81, 82], 0.4: [82, 83, 84], 0.8: [81, 82, 83]})}
    grid = [0.025, 0.05, 0.1, 0.2, 0.4, 0.8]
    rows = results_frame(oracle(cycles) + final("silo_paper", {0: 0.4, 1: 0.142}))
    assert completion_targets(rows) == {}
    assert completion_targets(rows, grid) == {1: [0.1]} == completion_targets(rows, grid, use_bracket=False)
    far = results_frame(oracle(cycles) + final("silo_paper", {0: 0.4, 1: 0.06}))
    assert completion_targets(far, grid) == {} and completion_targets(far, grid, use_bracket=False) == {1: [0.05]}


def tune(method: str, peaks: dict[float, list[float]]) -> list[dict]:
    """A benchmark's cycle-0 tuning rows on tuning seeds 0, 1, 2: {peak: validation accuracy per seed}."""
    return [{"experiment": "t", "method": method, "stage": "tune", "seed": s, "cycle": 0, "density": 100.0,
             "max_lr": lr, "val_acc": acc, "test_acc": acc, "selected": False}
            for lr, accs in peaks.items() for s, acc in enumerate(accs)]


def test_the_best_benchmark_is_chosen_on_the_tuning_seeds_alone():
    """Tuning scores (the seed-mean cycle-0 validation accuracy of each benchmark's best peak): cosine 0.2 → 85,
    constant 0.1 → 84 (0.2 → 83), LR warmup, the Oracle's own schedule, its cycle-0 curve: 0.2 → 83. So cosine,
    however its evaluation seeds went (here worse than constant's on every seed)."""
    from analysis.regret import best_benchmark, tuning_scores
    lrs = {0: 0.2, 1: 0.2, 2: 0.2}
    rows = (oracle(CYCLES, DIVERGED) + tune("cosine", {0.1: [80, 80, 80], 0.2: [84, 85, 86]})
            + tune("constant", {0.1: [84, 84, 84], 0.2: [83, 83, 83]})
            + final("cosine", lrs, {s: [60.0] * 3 for s in (10, 11, 12)}) + final("constant", lrs))
    df = results_frame([{**r, "schedule": "warmup"} if r["method"] == "oracle" else r for r in rows])
    assert tuning_scores(df) == {"constant": 84.0, "warmup": 83.0, "cosine": 85.0}
    assert best_benchmark(df) == "cosine"


def test_cosine_beating_silo_on_held_out_seeds_is_what_the_verdict_says():
    """Three replicates of a hand-made table. Per replicate r, on evaluation seeds 10-12, cosine's test accuracy
    exceeds silo_paper's by 1 + r/2 points at cycles 1 and 2 (cycle 0 equal): silo_paper − cosine = −(2 + r) per
    seed, so the replicates' advantages are −3, −4, −5: mean −4, sd 1, CI −4 ± t(0.975, 2)/√3 = [−6.484, −1.516],
    wholly below −margin (−1): worse, and worse than the margin. Against the Oracle's schedule (the same accuracy
    as silo_paper's) the advantage is 0 with zero spread: equivalent. The best benchmark is cosine (its tuning
    score is the highest), so that row says worse too."""
    from analysis.replicates import aggregate, comparisons
    lrs = {0: 0.2, 1: 0.2, 2: 0.2}
    silo = {s: [80.0, 78.0, 75.0] for s in (10, 11, 12)}
    per = {}
    for r in (1, 2, 3):
        cos = {s: [80.0, 78.0 + 1 + r / 2, 75.0 + 1 + r / 2] for s in (10, 11, 12)}
        rows = (oracle(CYCLES, DIVERGED) + tune("cosine", {0.2: [90, 90, 90]}) + tune("constant", {0.2: [80] * 3})
                + final("silo_paper", lrs, silo) + final("oracle_schedule", lrs, silo) + final("cosine", lrs, cos)
                + final("constant", lrs))
        per[r] = comparisons(analyse(results_frame(rows)))
    verdict, _ = aggregate(per, 0.5)
    by = verdict.set_index(["schedule", "versus"])
    row = by.loc[("silo_paper", "cosine")]
    assert row.advantage == pytest.approx(-4) and row.verdict == "worse" and row.replicates == 3
    assert (row.ci_lo, row.ci_hi) == pytest.approx((-4 - T2 / math.sqrt(3), -4 + T2 / math.sqrt(3)))
    assert by.loc[("silo_paper", "best_benchmark"), "verdict"] == "worse"
    assert by.loc[("silo_paper", "oracle_schedule"), "verdict"] == "equivalent"
    # the regret on the Oracle's chain is not part of the family
    assert not set(verdict["versus"]) & {"oracle"}
    assert set(verdict["versus"]) == {"oracle_schedule", "constant", "cosine", "best_benchmark"}
