"""The Oracle's choice and its sets per cycle (on seed means) and per seed, against each SILO variant's max_lr.
All decisions come from `oracle_search.selection`, the drivers' own rule."""
from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.select import densities
from oracle_search.compared import oracle_trials, silo_max_lr_by_cycle, silo_methods
from oracle_search.selection import TOLERANCE, Choice, Curve, choose, in_set

_KEYS = ["best_max_lr", "best_val_acc", "best_se", "lo", "hi", "contiguous", "noise_lo", "noise_hi",
         "noise_contiguous", "strict_lo", "strict_hi", "n_strict", "n_seeds", "n_values", "values", "unimodal",
         "lo_resolution", "hi_resolution", "noise_lo_resolution", "noise_hi_resolution"]
# Per SILO variant M: M_inside (the paper's interval), M_noise_inside ("not shown worse"), M_within ("shown
# within 0.5"); the column names are the contract of tables/oracle.csv.
_SETS = (("inside", "inside"), ("noise_inside", "noise_inside"), ("within", "within"))


def _resolution(choice: Choice, lo: float, hi: float) -> tuple[float, float]:
    """How finely a set's edges `lo` and `hi` are resolved: the relative gap from each edge to the next tried
    value outside it (NaN where none lies beyond: the edge is open). The exhaustive Oracle refines both
    intervals' edges to 5 %; the racing Oracle refines the paper interval's once and then only where a compared
    schedule falls in the gap."""
    values = list(choice.values)
    i, j = values.index(lo), values.index(hi)
    return (lo / values[i - 1] - 1 if i > 0 else np.nan, values[j + 1] / hi - 1 if j + 1 < len(values) else np.nan)


def _record(choice: Choice) -> dict:
    return {"best_max_lr": choice.best, "best_val_acc": choice.best_acc, "best_se": choice.best_se,
            "lo": choice.lo, "hi": choice.hi, "contiguous": choice.contiguous, "noise_lo": choice.noise_lo,
            "noise_hi": choice.noise_hi, "noise_contiguous": choice.noise_contiguous,
            "strict_lo": choice.strict_lo, "strict_hi": choice.strict_hi, "n_strict": int(sum(choice.within)),
            "n_seeds": choice.n_seeds, "n_values": len(choice.values),
            "values": " ".join(f"{v:.4g}" for v in choice.values), "unimodal": choice.unimodal,
            **dict(zip(("lo_resolution", "hi_resolution"), _resolution(choice, choice.lo, choice.hi))),
            **dict(zip(("noise_lo_resolution", "noise_hi_resolution"),
                       _resolution(choice, choice.noise_lo, choice.noise_hi)))}


def _against_silo(frame: pd.DataFrame, choices: list[Choice], df: pd.DataFrame) -> pd.DataFrame:
    """Add each cycle's density and, per SILO variant M: M_max_lr and whether it is inside each set."""
    frame = frame.assign(density=frame["cycle"].map(densities(df)))
    for method in silo_methods(df):
        lr = frame["cycle"].map(silo_max_lr_by_cycle(df, method)).astype(float)
        frame[f"{method}_max_lr"] = lr
        for column, field in _SETS:
            flags = [pd.NA if np.isnan(v) else in_set(v, c.values, getattr(c, field)) for v, c in zip(lr, choices)]
            frame[f"{method}_{column}"] = pd.array(flags, dtype="boolean")
    return frame


def oracle_intervals(df: pd.DataFrame, tol: float = TOLERANCE) -> pd.DataFrame:
    """One row per cycle: b, the three sets, the values every seed trained, and each SILO variant against them."""
    rows = oracle_trials(df)
    choices = {int(cycle): choice for cycle, group in rows.groupby("cycle")
               if (choice := choose(Curve.from_rows(group), tol)) is not None}
    frame = pd.DataFrame([{"cycle": c, **_record(ch)} for c, ch in choices.items()], columns=["cycle", *_KEYS])
    frame = _against_silo(frame, list(choices.values()), df)
    return frame[["cycle", "density", *_KEYS, *[c for c in frame if c.startswith("silo_")]]]


def seed_intervals(df: pd.DataFrame, tol: float = TOLERANCE) -> pd.DataFrame:
    """One row per (seed, cycle): that seed's own best and interval (n = 1: "not shown worse" is the paper's
    interval and "shown within 0.5" is {b})."""
    rows = oracle_trials(df)
    choices = {(int(seed), int(cycle)): choice for (seed, cycle), group in rows.groupby(["seed", "cycle"])
               if (choice := choose(Curve.from_rows(group), tol)) is not None}
    frame = pd.DataFrame([{"seed": s, "cycle": c, **_record(ch)} for (s, c), ch in choices.items()],
                         columns=["seed", "cycle", *_KEYS])
    return _against_silo(frame, list(choices.values()), df)


def count_inside(frame: pd.DataFrame, column: str, first: int = 0) -> tuple[int, int]:
    """(cycles ≥ `first` where the flag holds, cycles ≥ `first` with a value to judge)."""
    if column not in frame:
        return 0, 0
    cycle = frame["cycle"] if "cycle" in frame else pd.Series(frame.index, index=frame.index)
    judged = frame.loc[cycle >= first, column].dropna()
    return int(np.sum(judged.to_numpy(dtype=bool))), len(judged)
