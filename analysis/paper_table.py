"""Test accuracy as the paper prints it: methods × the densities λ you choose, mean ± std, as Markdown and LaTeX.

Over replicates the unit is a replicate (each replicate's mean over its evaluation seeds; the Oracle's over its
tuning seeds' chains), so the std is the spread between whole studies; in one run the unit is a seed. A chain that
diverged is left out of its unit (never averaged; `tables.per_seed_accuracy`), and n says how many units remain.

- `units(frames, unit)`: one row per (method, cycle, unit) with its accuracy; unit "seed" or "replicate".
- `summary(units)`: per (method, cycle): density, mean, std, n and the 95 % t interval of the mean.
- `pick(summary, densities)`: the cycles whose λ are the ones asked for (ValueError naming the ones that are not).
- `paper_table(summary, densities, over)`: the paper's format, mean ± std, best mean in bold.
- `interval_table(summary, over)`: every density, mean ± std beside the 95 % interval."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from analysis.select import densities as cycle_densities, label, methods
from analysis.tables import Table, accuracy_stats, fmt_density, per_seed_accuracy
from oracle_search.compared import final_rows
from oracle_search.statistics import mean_interval

UNITS = ["method", "cycle", "density", "unit", "acc"]
SUMMARY = ["method", "cycle", "density", "mean", "std", "n", "ci_lo", "ci_hi"]


def units(frames: dict[str, pd.DataFrame], unit: str) -> pd.DataFrame:
    """`unit` "seed": every seed of every table is a unit (one run). "replicate": each table (name -> table, the
    replicates of one study) is one unit, its mean over its seeds."""
    if unit not in ("seed", "replicate"):
        raise ValueError(f"unit: 'seed' or 'replicate', not {unit!r}")
    records = []
    one = unit == "seed"
    for name, df in frames.items():
        lam = cycle_densities(df)
        for m in methods(df):
            rows = final_rows(df, m)
            if rows.empty:
                continue
            if one:
                acc = per_seed_accuracy(rows)[0].stack().dropna()  # (cycle, seed) -> accuracy
                records += [(m, int(c), float(lam[c]), str(s), float(a)) for (c, s), a in acc.items()]
            else:
                mean = accuracy_stats(rows)["mean"].dropna()
                records += [(m, int(c), float(lam[c]), name, float(a)) for c, a in mean.items()]
    return pd.DataFrame(records, columns=UNITS)


def summary(found: pd.DataFrame) -> pd.DataFrame:
    """Per (method, cycle), in the order the methods first appear: the mean over units, their sample std, n and
    the 95 % t interval of the mean (NaN std and interval with one unit)."""
    records = []
    for (m, c), group in found.groupby(["method", "cycle"], sort=False):
        values = group["acc"].to_numpy(dtype=float)
        mean, lo, hi = mean_interval(values)  # NaN bounds with one unit
        records.append({"method": m, "cycle": int(c), "density": float(group["density"].iloc[0]), "mean": mean,
                        "std": float(np.std(values, ddof=1)) if len(values) >= 2 else math.nan, "n": len(values),
                        "ci_lo": lo, "ci_hi": hi})
    return pd.DataFrame(records, columns=SUMMARY)


def pick(data: pd.DataFrame, wanted: list[float] | None) -> list[int]:
    """The cycles at the densities asked for, in the order asked (all cycles when None). A density matches a
    cycle's λ when it is that λ as the report prints it (3 significant figures) or within 0.5 % of it."""
    lam = data.drop_duplicates("cycle").set_index("cycle")["density"].sort_index()
    if wanted is None:
        return list(lam.index)
    cycles, missing = [], []
    for x in wanted:
        hit = [c for c, v in lam.items() if fmt_density(v) == fmt_density(x) or abs(x - v) <= 0.005 * v]
        (cycles.append(hit[0]) if hit else missing.append(f"{x:g}"))
    if missing:
        raise ValueError(f"no cycle at λ = {', '.join(missing)} %; the densities are "
                         f"{', '.join(fmt_density(v) for v in lam)}")
    return cycles


def _cells(data: pd.DataFrame, cycles: list[int], cell) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Methods × cycles of `cell(row)`, and the best mean per column flagged."""
    lam = data.drop_duplicates("cycle").set_index("cycle")["density"]
    by = data.set_index(["method", "cycle"])
    names = list(dict.fromkeys(data["method"]))
    columns = [f"λ = {fmt_density(lam[c])} %" for c in cycles]
    cells = pd.DataFrame([[label(m), *(cell(by.loc[(m, c)]) if (m, c) in by.index else "–" for c in cycles)]
                          for m in names], columns=["Method", *columns])
    means = pd.DataFrame([[by.loc[(m, c), "mean"] if (m, c) in by.index else np.nan for c in cycles]
                          for m in names]).round(2)
    bold = pd.DataFrame(False, index=cells.index, columns=cells.columns)
    bold.iloc[:, 1:] = means.eq(means.max(axis=0), axis=1).to_numpy()
    return cells, bold


def _std(row: pd.Series) -> str:
    return f"{row['mean']:.2f}" if pd.isna(row["std"]) else f"{row['mean']:.2f} ± {row['std']:.2f}"


def _ns(data: pd.DataFrame) -> str:
    ns = sorted(set(int(n) for n in data["n"]))
    return f"n = {ns[0]}" if len(ns) == 1 else f"n = {ns[0]}–{ns[-1]}"


def paper_table(data: pd.DataFrame, wanted: list[float] | None = None, over: str = "replicates") -> Table:
    """The paper's format: early-stop test accuracy (%), mean ± std over `over` at the densities `wanted` (all when
    None), the best mean per density in bold."""
    cycles = pick(data, wanted)
    shown = data[data["cycle"].isin(cycles)]
    cells, bold = _cells(data, cycles, _std)
    line = (f"Early-stop test accuracy (%), mean ± sample std over {over} ({_ns(shown)}; a diverged chain is left "
            "out, never averaged), in the paper's format; the best mean per density in bold.")
    return Table("paper", "Test accuracy in the paper's format (mean ± std)", cells, shown, line, bold)


def _interval(row: pd.Series) -> str:
    if pd.isna(row["ci_lo"]):
        return _std(row)
    return f"{_std(row)} [{row['ci_lo']:.2f}, {row['ci_hi']:.2f}]"


def interval_table(data: pd.DataFrame, over: str = "replicates") -> Table:
    """Every density: mean ± std over `over`, and beside it the 95 % t interval of the mean."""
    cycles = pick(data, None)
    cells, _ = _cells(data, cycles, _interval)
    line = (f"Early-stop test accuracy (%) over {over} ({_ns(data)}): mean ± sample std, then the 95 % t interval "
            f"of the mean in brackets. The Oracle's accuracy is on its tuning "
            "seeds' chains (it selects on validation), every other method's on evaluation seeds. "
            "tables/paper.md and tables/paper.tex hold the mean ± std alone, as the paper prints it "
            "(`oracle-search paper-table` chooses the densities).")
    return Table("accuracy_over", f"Test accuracy over the {over}", cells, data, line)
