"""The verdict over replicates of the whole study (issue 37).

One run's verdict (`analysis.regret`) counts only the noise of that run's final trainings: its interval is over
seeds, conditional on the run's own choices (the dense choice, δ, b, silo_fit's study). Replicates of the whole
study measure that noise: each replicate gives one advantage per comparison (each SILO variant against the Oracle's
schedule, not adapting and the best constant, each trained end to end on the evaluation seeds with its choices
fixed on the tuning seeds, every benchmark schedule and the best benchmark), and the advantage over replicates is their mean, with a 95 % t interval on R − 1 df and
the same label rule (`oracle_search.statistics.label`) against the same margin (`margin_per_cycle` × L points).

- `comparisons(r)`: one replicate's comparison frame, `Regret.end_to_end` (the regret on the Oracle's chain,
  `Regret.verdict`, is a per-replicate diagnostic on the tuning seeds, not part of the family).
- `aggregate(per_replicate, margin_per_cycle)`: (verdict over replicates, every replicate's rows).

Over replicates, per comparison: replicates = R, the replicates with a defined advantage (an undefined one, or one
without the comparison's row, is left out and counted in `undefined`); advantage, ci_lo, ci_hi = `mean_interval`
of the R advantages; sd their sample sd; verdict = `label(ci_lo, ci_hi, margin)` (R = 1: no interval, "undefined");
p_value = `statistics.p_value` of the hypothesis the label rests on; holm = whether the label still holds under
Holm's step-down across the table's comparisons at 0.05 ("yes"/"no"; NA for inconclusive and undefined);
bonferroni = the same at 0.05/m per row (m: the rows with a p-value).
The hypothesis each row is tested for is chosen by its own label (a difference for better/worse/inconclusive,
equivalence for equivalent). Holm's theorem assumes the hypotheses fixed in advance, so under that choice its
"yes" is a reading, not a guarantee. Bonferroni's holds whatever chose them: each label's test is two one-sided
tests at 0.025/m, and at any true difference at most two of a row's one-sided claims (better, worse, within the
margin) can be false at once (both sides of 0 when it is 0; one side of 0 and one of the margin when it lies
outside the margin), so a row errs with probability at most 0.05/m and the table at most 0.05. The report says
where the two differ.
replicates_needed = `statistics.replicates_needed` for better, worse and equivalent (Int64, NA where None); for
inconclusive, the smallest decidable plan (`statistics.plans`, NA where none is within `REPLICATE_BUDGET`).
plan_equivalence, power_equivalence, plan_difference, power_difference: `statistics.plans` (NA where no such plan,
or, for the plan, not decidable at the budget; the power is then at the budget).
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from analysis.regret import Regret
from oracle_search.statistics import ALPHA, holm, label, mean_interval, p_value, plans, replicates_needed

COMPARISON_COLUMNS = ["schedule", "versus", "advantage", "ci_lo", "ci_hi", "n", "verdict", "margin"]
REPLICATES_COLUMNS = ["replicate", "schedule", "versus", "advantage", "ci_lo", "ci_hi", "n", "verdict"]
AGGREGATE_COLUMNS = ["schedule", "versus", "advantage", "ci_lo", "ci_hi", "replicates", "verdict", "margin", "holm",
                     "replicates_needed", "undefined", "sd", "p_value", "bonferroni", "plan_equivalence",
                     "power_equivalence", "plan_difference", "power_difference"]
HELD = ("better", "worse", "equivalent")  # the labels Holm can confirm


def comparisons(r: Regret) -> pd.DataFrame:
    """One replicate's comparisons, the verdict's family: the rows of `r.end_to_end` (each SILO variant against the
    held-out references and every benchmark, end to end on the evaluation seeds), columns `COMPARISON_COLUMNS`.
    The regret on the Oracle's chain (`r.verdict`) is read on the tuning seeds that made the choices: a diagnostic,
    never part of the verdict."""
    if r.end_to_end.empty:
        return pd.DataFrame(columns=COMPARISON_COLUMNS)
    return r.end_to_end[COMPARISON_COLUMNS].reset_index(drop=True)


def _margin(rows: pd.DataFrame, margin_per_cycle: float, key: tuple[str, str]) -> float:
    """The comparison's summed margin, the same in every replicate (L is one spec's); refused when replicates
    disagree or when it is not `margin_per_cycle` times a whole number of cycles (the replicates were analysed with
    another margin)."""
    margins = sorted(set(float(m) for m in rows["margin"].dropna()))
    if len(margins) > 1:
        raise ValueError(f"{key}: the replicates' margins differ ({margins}): not one spec's L")
    if not margins:
        return math.nan
    margin = margins[0]
    if margin_per_cycle > 0:
        cycles = margin / margin_per_cycle
        if abs(cycles - round(cycles)) > 1e-9:
            raise ValueError(f"{key}: margin {margin:g} is not {margin_per_cycle:g} per cycle times a whole number of "
                             "cycles: the replicates were analysed with another margin_per_cycle")
    return margin


def aggregate(per_replicate: dict[int, pd.DataFrame],
              margin_per_cycle: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(verdict over replicates, replicates) from each replicate's comparison frame (`comparisons`), keyed by
    replicate. Comparisons in the order they first appear (replicates by key). `margin_per_cycle` must be the one
    the replicates were analysed with; the margin itself is read from their `margin` column."""
    frames = [(k, per_replicate[k]) for k in sorted(per_replicate)]
    stacked = [f[COMPARISON_COLUMNS].assign(replicate=k) for k, f in frames if not f.empty]
    every = (pd.concat(stacked, ignore_index=True) if stacked
             else pd.DataFrame(columns=[*COMPARISON_COLUMNS, "replicate"]))
    replicates = every[REPLICATES_COLUMNS].reset_index(drop=True)
    records = []
    for key, rows in every.groupby(["schedule", "versus"], sort=False):
        values = rows["advantage"].dropna().to_numpy(dtype=float)
        margin = _margin(rows, margin_per_cycle, key)
        if len(values):
            mean, lo, hi = mean_interval(values)
        else:
            mean, lo, hi = (math.nan,) * 3
        verdict = label(lo, hi, margin)
        planned = {p.hypothesis: p for p in plans(values, margin, verdict)}
        need = replicates_needed(values, margin, verdict)
        if verdict == "inconclusive":
            need = min((p.replicates for p in planned.values() if p.replicates is not None), default=None)
        plan_columns = {f"{column}_{h}": (pd.NA if h not in planned else
                                          (planned[h].power if column == "power" else
                                           pd.NA if planned[h].replicates is None else planned[h].replicates))
                        for h in ("equivalence", "difference") for column in ("plan", "power")}
        records.append({"schedule": key[0], "versus": key[1], "advantage": mean, "ci_lo": lo, "ci_hi": hi,
                        "replicates": len(values), "verdict": verdict, "margin": margin, "holm": pd.NA,
                        "replicates_needed": pd.NA if need is None else need,
                        "undefined": len(frames) - len(values),
                        "sd": float(np.std(values, ddof=1)) if len(values) >= 2 else math.nan,
                        "p_value": p_value(values, verdict, margin), "bonferroni": pd.NA, **plan_columns})
    out = pd.DataFrame(records, columns=AGGREGATE_COLUMNS)
    held = holm(out["p_value"].to_numpy(dtype=float))
    out["holm"] = pd.Series([("yes" if h else "no") if v in HELD else pd.NA for v, h in zip(out["verdict"], held)],
                            index=out.index, dtype=object)
    tested = out["p_value"].notna().sum()
    out["bonferroni"] = pd.Series([("yes" if p <= ALPHA / tested else "no") if v in HELD else pd.NA
                                   for v, p in zip(out["verdict"], out["p_value"])], index=out.index, dtype=object)
    for column in ("replicates_needed", "plan_equivalence", "plan_difference"):
        out[column] = out[column].astype("Int64")
    for column in ("power_equivalence", "power_difference"):
        out[column] = pd.to_numeric(out[column], errors="coerce").astype(float)
    for column in ("replicates", "undefined"):
        out[column] = out[column].astype(int)
    for column in ("advantage", "ci_lo", "ci_hi", "margin", "sd", "p_value"):
        out[column] = out[column].astype(float)
    return out, replicates
