"""The verdict over replicates of the whole study (analysis/replicates.py) on hand-made per-replicate frames: every
expected number is worked out by hand in the comments."""
from __future__ import annotations

import math

import pandas as pd
import pytest

from analysis.regret import analyse
from analysis.replicates import AGGREGATE_COLUMNS, REPLICATES_COLUMNS, aggregate, comparisons
from oracle_rows import oracle_rows
from oracle_search.schema import results_frame
from oracle_search.statistics import label, mean_interval

T2 = 4.302652729911275  # t(0.975, 2)
T1 = 12.706204736174707  # t(0.975, 1)
MARGIN = 1.0  # 0.5 per cycle × L = 2

# Per comparison, the advantage of each of replicates 0, 1, 2 (NaN: undefined in that replicate).
ADVANTAGES = {
    ("silo_paper", "oracle"): [1.0, 2.0, 3.0],
    ("silo_paper", "constant_dense"): [-0.1, 0.0, 0.1],
    ("silo_fit", "oracle"): [3.0, 4.0, 5.0],
    ("silo_fit", "warmup"): [math.nan, 2.0, 4.0],
    ("silo_fit", "constant_best"): [1.5, math.nan, math.nan],
}


def replicate(k: int, margin: float = MARGIN) -> pd.DataFrame:
    """Replicate k's comparison frame: its own interval (advantage ± 1 over n = 3 seeds, or empty when undefined)
    and its own label, which the replicates frame keeps as it is."""
    rows = []
    for (schedule, versus), values in ADVANTAGES.items():
        a = values[k]
        lo, hi = (a - 1, a + 1) if not math.isnan(a) else (math.nan, math.nan)
        rows.append({"schedule": schedule, "versus": versus, "advantage": a, "ci_lo": lo, "ci_hi": hi, "n": 3,
                     "verdict": label(lo, hi, margin), "margin": margin})
    return pd.DataFrame(rows)


def test_the_verdict_over_replicates_by_hand():
    """Per comparison, over the replicates with a defined advantage:
    - silo_paper/oracle [1, 2, 3]: mean 2, sd 1, 2 ∓ 4.3027/√3 = [−0.484, 4.484]: holds 0, not inside ±1:
      inconclusive. p (t-test, 2 df, P(T > t) = (1 − t/√(t² + 2))/2): t = 2√3, p = 1 − 2√3/√14 = 0.07418.
      The mean 2 lies outside the margin 1, so the data point to a difference (planned at 0 for equivalence, it
      would be 50 replicates, `tests/test_statistics.py`). sd' = 2.11694; the two-sided t-test's exact power at
      mean 2 (noncentral t, ncp = 2·√n/sd'): n = 10: ncp 2.9876, t(0.975, 9) = 2.2622, power 0.75776; n = 11:
      ncp 3.1334, t(0.975, 10) = 2.2281, power 0.80581 ≥ 0.80: 11.
    - silo_paper/constant_dense [−0.1, 0, 0.1]: mean 0, sd 0.1, ∓ 0.43027/√3 = [−0.248, 0.248] inside ±1:
      equivalent. TOST: (0 + 1)/(0.1/√3) = 10√3 = 17.3205, P(T > 17.3205) = (1 − 17.3205/√302)/2 = 0.0016584 on
      both sides, p = 2·0.0016584 = 0.0033168. Replicates: sd' = 0.211694, bound 4.72381; n = 2: 11.161; n = 3:
      (4.3027 + 1.8856)/√3 = 3.5728: 3.
    - silo_fit/oracle [3, 4, 5]: mean 4, sd 1, [1.516, 6.484]: better. p: t = 4√3, p = 1 − 4√3/√50 = 0.020204.
      Replicates to reproduce it: bound 4/2.11694 = 1.88952; n = 4: 2.0805; n = 5: (2.7764 + 0.9410)/√5 =
      1.6625: 5.
    - silo_fit/warmup [—, 2, 4]: replicate 0 undefined (left out, counted): R = 2, mean 3, sd √2,
      3 ∓ 12.7062·√2/√2 = [−9.706, 15.706]: inconclusive. p with 1 df, P(T > t) = 1/2 − atan(t)/π: t = 3,
      p = 1 − 2·atan(3)/π = 0.204833. Mean 3 outside the margin 1: a difference, sd' = √2·3.94715 = 5.58212,
      power at mean 3 first ≥ 0.80 at n = 30 (0.8119; planned at 0 for equivalence it was 330).
    - silo_fit/constant_best [1.5, —, —]: R = 1: no interval, undefined, no p, 2 undefined.
    Holm over the 4 defined p-values (0.0033, 0.0202, 0.0742, 0.2048): 0.0033 ≤ 0.05/4 = 0.0125 yes; 0.0202 ≤
    0.05/3 = 0.0167 no: stop. So equivalent holds under Holm ("yes"), better does not ("no"); inconclusive and
    undefined get no Holm answer (NA)."""
    verdict, replicates = aggregate({k: replicate(k) for k in (2, 0, 1)}, 0.5)  # keys in any order
    assert list(verdict.columns) == AGGREGATE_COLUMNS
    assert AGGREGATE_COLUMNS[:10] == ["schedule", "versus", "advantage", "ci_lo", "ci_hi", "replicates", "verdict",
                                      "margin", "holm", "replicates_needed"]
    by = verdict.set_index(["schedule", "versus"])
    assert list(by.index) == list(ADVANTAGES)  # in the order they first appear
    assert by["margin"].eq(MARGIN).all()
    expect = {
        ("silo_paper", "oracle"): (2, 2 - T2 / math.sqrt(3), 2 + T2 / math.sqrt(3), 3, "inconclusive", pd.NA, 11, 0,
                                   1.0, 1 - 2 * math.sqrt(3) / math.sqrt(14)),
        ("silo_paper", "constant_dense"): (0, -0.1 * T2 / math.sqrt(3), 0.1 * T2 / math.sqrt(3), 3, "equivalent",
                                           "yes", 3, 0, 0.1, 1 - 10 * math.sqrt(3) / math.sqrt(302)),
        ("silo_fit", "oracle"): (4, 4 - T2 / math.sqrt(3), 4 + T2 / math.sqrt(3), 3, "better", "no", 5, 0, 1.0,
                                 1 - 4 * math.sqrt(3) / math.sqrt(50)),
        ("silo_fit", "warmup"): (3, 3 - T1, 3 + T1, 2, "inconclusive", pd.NA, 30, 1, math.sqrt(2),
                                 1 - 2 * math.atan(3) / math.pi),
    }
    for key, (mean, lo, hi, r, word, held, need, undefined, sd, p) in expect.items():
        row = by.loc[key]
        assert (row.advantage, row.ci_lo, row.ci_hi, row.sd, row.p_value) == pytest.approx((mean, lo, hi, sd, p)), key
        assert (row.replicates, row.verdict, row.undefined) == (r, word, undefined), key
        assert (pd.isna(row.holm) and held is pd.NA) or row.holm == held, key
        assert (pd.isna(row.replicates_needed) and need is pd.NA) or row.replicates_needed == need, key
    assert (by.loc[("silo_paper", "oracle"), "ci_lo"], by.loc[("silo_paper", "oracle"), "ci_hi"]) == pytest.approx(
        (-0.484, 4.484), abs=1e-3)
    assert by.loc[("silo_paper", "constant_dense"), "p_value"] == pytest.approx(0.0033168, abs=1e-7)
    # The plans: difference only where the mean lies outside the margin, with the power at the observed mean.
    row = by.loc[("silo_paper", "oracle")]
    assert pd.isna(row.plan_equivalence) and pd.isna(row.power_equivalence)
    assert row.plan_difference == 11 and row.power_difference == pytest.approx(0.80581, abs=1e-5)
    assert by.loc[("silo_fit", "warmup"), "plan_difference"] == 30
    # An equivalent row keeps its plan at 0 (3, as before) and says its power at the observed mean (0, here).
    row = by.loc[("silo_paper", "constant_dense")]
    assert row.plan_equivalence == 3 and pd.isna(row.plan_difference) and 0.8 < row.power_equivalence < 1
    # Bonferroni at 0.05/4 = 0.0125: the equivalence (0.0033) holds, the better (0.0202) does not, as under Holm.
    assert pd.isna(by.loc[("silo_paper", "oracle"), "bonferroni"])  # inconclusive: nothing to keep
    assert by.loc[("silo_paper", "constant_dense"), "bonferroni"] == "yes"
    assert by.loc[("silo_fit", "oracle"), "bonferroni"] == "no"
    row = by.loc[("silo_fit", "constant_best")]
    assert (row.advantage, row.replicates, row.verdict, row.undefined) == (1.5, 1, "undefined", 2)
    assert pd.isna(row.ci_lo) and pd.isna(row.ci_hi) and pd.isna(row.holm) and pd.isna(row.p_value)
    assert pd.isna(row.replicates_needed) and pd.isna(row.sd)
    assert str(verdict["replicates_needed"].dtype) == "Int64"
    # Every replicate's rows, as they came, replicates in order.
    assert list(replicates.columns) == REPLICATES_COLUMNS
    assert replicates["replicate"].tolist() == [k for k in (0, 1, 2) for _ in ADVANTAGES]
    mine = replicates.set_index(["replicate", "schedule", "versus"])
    assert mine.loc[(1, "silo_fit", "oracle"), "verdict"] == "better"  # [3, 5] excludes 0, not inside ±1
    assert mine.loc[(0, "silo_fit", "warmup"), "verdict"] == "undefined"


def test_one_replicate_has_no_interval_but_keeps_its_own_label():
    """R = 1: the mean is the replicate's advantage, the interval over replicates is empty and every verdict over
    replicates undefined (no Holm, no p, no replicates_needed); the replicates frame keeps the run's labels."""
    verdict, replicates = aggregate({7: replicate(2)}, 0.5)
    assert verdict["verdict"].eq("undefined").all()
    assert verdict[["ci_lo", "ci_hi", "p_value", "sd"]].isna().all().all()
    assert verdict["holm"].isna().all() and verdict["replicates_needed"].isna().all()
    assert verdict.set_index(["schedule", "versus"]).loc[("silo_fit", "oracle"), "advantage"] == 5
    assert replicates["replicate"].eq(7).all()
    assert replicates.set_index(["schedule", "versus"]).loc[("silo_fit", "oracle"), "verdict"] == "better"
    assert verdict["undefined"].tolist() == [0, 0, 0, 0, 1]  # constant_best is NaN in replicate 2


def test_an_equivalence_that_touches_the_margin_and_holm_with_one_hypothesis():
    """[1, 2, 3] with margin hi = 2 + 4.3027/√3 = 4.4841: inside (inclusive), equivalent; TOST p = 2·0.025 = 0.05,
    the one defined hypothesis, so Holm's bound is 0.05/1 and the label holds: p ≤ 0.05 exactly, not
    0.05000000000000004 (floating point puts the interval's own hi a hair outside; `statistics.MARGIN_TOLERANCE`),
    and holm "yes"."""
    hi = mean_interval([1.0, 2.0, 3.0])[2]  # = 2 + T2/√3, as the aggregate computes it
    frames = {k: pd.DataFrame([{"schedule": "silo_fit", "versus": "oracle", "advantage": a, "ci_lo": math.nan,
                                "ci_hi": math.nan, "n": 1, "verdict": "undefined", "margin": hi}])
              for k, a in enumerate([1.0, 2.0, 3.0])}
    verdict, _ = aggregate(frames, hi / 2)  # margin_per_cycle × 2 cycles
    row = verdict.iloc[0]
    assert hi == pytest.approx(2 + T2 / math.sqrt(3))
    assert row.verdict == "equivalent" and row.p_value == pytest.approx(0.05) and row.p_value <= 0.05
    assert row.holm == "yes" and row.bonferroni == "yes"
    # just outside: inconclusive, and Holm has no say
    narrower = {k: f.assign(margin=hi - 1e-6) for k, f in frames.items()}
    row = aggregate(narrower, (hi - 1e-6) / 2)[0].iloc[0]
    assert row.verdict == "inconclusive" and pd.isna(row.holm) and row.p_value > 0.05


def test_replicates_that_disagree_on_the_margin_are_refused():
    frames = {0: replicate(0), 1: replicate(1, margin=1.5)}  # L = 2 and L = 3: not one spec
    with pytest.raises(ValueError, match="margins differ"):
        aggregate(frames, 0.5)
    with pytest.raises(ValueError, match="another margin_per_cycle"):
        aggregate({0: replicate(0, margin=1.0)}, 0.3)  # 1.0 is not 0.3 × a whole number of cycles


def test_no_rows_give_empty_frames():
    verdict, replicates = aggregate({0: pd.DataFrame(columns=REPLICATES_COLUMNS[1:] + ["margin"])}, 0.5)
    assert verdict.empty and list(verdict.columns) == AGGREGATE_COLUMNS
    assert replicates.empty and list(replicates.columns) == REPLICATES_COLUMNS


def test_comparisons_are_the_end_to_end_family_alone():
    """A two-cycle run (L = 1): SILO (paper) keeps 0.1, the Oracle chains 0.1 and 0.2; LR warmup's final chains.
    comparisons(r) is r.end_to_end's one row (the family end to end: only LR warmup has final chains here), with
    the columns aggregate reads, margin 0.5 × 1; the Oracle-chain regret (r.verdict: against the Oracle and both
    controls, on the tuning seeds) is a diagnostic and never enters it."""
    cycles = {0: (0.1, {0.1: [80.0, 81.0, 82.0], 0.2: [79.0, 80.0, 81.0]}),
              1: (0.2, {0.1: [78.0, 79.0, 80.0], 0.2: [79.0, 80.0, 82.0]})}
    final = [{"experiment": "t", "method": m, "stage": "final", "seed": s, "cycle": c, "density": 100 * 0.8**c,
              "max_lr": 0.1, "val_acc": 70.0, "test_acc": 70.0 + (m == "silo_paper") * c * s, "selected": True}
             for m in ("silo_paper", "warmup") for s in (10, 11, 12) for c in (0, 1)]
    r = analyse(results_frame(oracle_rows(cycles) + final))
    assert len(r.verdict) == 3  # the diagnostic is still computed
    got = comparisons(r)
    assert list(got.columns) == ["schedule", "versus", "advantage", "ci_lo", "ci_hi", "n", "verdict", "margin"]
    assert list(zip(got["schedule"], got["versus"])) == [("silo_paper", "warmup")]
    assert got["margin"].eq(0.5).all()
    # end to end, cycle 1 only: SILO (paper)'s test accuracy 70 + seed against LR warmup's 70: [10, 11, 12], mean 11
    assert got.iloc[0]["advantage"] == pytest.approx(11)
    verdict, replicates = aggregate({0: got, 1: got}, 0.5)
    assert verdict["replicates"].eq(2).all() and len(replicates) == 2
