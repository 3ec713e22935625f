"""The Oracle's choice and both intervals per cycle (on seed means) and per seed, against each SILO variant's
max_lr. All decisions come from `oracle_search.selection`, the drivers' own rule."""
from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.select import densities, oracle_trials, silo_max_lr_by_cycle, silo_methods
from oracle_search.selection import TOLERANCE, Curve, choose, inside

_KEYS = ["best_max_lr", "best_val_acc", "best_se", "lo", "hi", "contiguous", "noise_lo", "noise_hi",
         "noise_contiguous", "n_seeds", "n_values", "values", "unimodal"]


def _record(choice) -> dict:
    return {"best_max_lr": choice.best, "best_val_acc": choice.best_acc, "best_se": choice.best_se,
            "lo": choice.lo, "hi": choice.hi, "contiguous": choice.contiguous, "noise_lo": choice.noise_lo,
            "noise_hi": choice.noise_hi, "noise_contiguous": choice.noise_contiguous, "n_seeds": choice.n_seeds,
            "n_values": len(choice.values), "values": " ".join(f"{v:.4g}" for v in choice.values),
            "unimodal": choice.unimodal}


def _against_silo(frame: pd.DataFrame, df: pd.DataFrame) -> pd.DataFrame:
    """Add each cycle's density and, per SILO variant M: M_max_lr, M_inside (paper), M_noise_inside."""
    frame = frame.assign(density=frame["cycle"].map(densities(df)))
    for method in silo_methods(df):
        lr = frame["cycle"].map(silo_max_lr_by_cycle(df, method)).astype(float)
        frame[f"{method}_max_lr"] = lr
        for name, lo, hi in (("inside", "lo", "hi"), ("noise_inside", "noise_lo", "noise_hi")):
            flags = [pd.NA if np.isnan(v) else inside(v, a, b) for v, a, b in zip(lr, frame[lo], frame[hi])]
            frame[f"{method}_{name}"] = pd.array(flags, dtype="boolean")
    return frame


def oracle_intervals(df: pd.DataFrame, tol: float = TOLERANCE) -> pd.DataFrame:
    """One row per cycle: b, both intervals, the values every seed trained, and each SILO variant against them."""
    rows = oracle_trials(df)
    records = [{"cycle": int(cycle), **_record(choice)} for cycle, group in rows.groupby("cycle")
               if (choice := choose(Curve.from_rows(group), tol)) is not None]
    frame = pd.DataFrame(records, columns=["cycle", *_KEYS])
    frame = _against_silo(frame, df)
    return frame[["cycle", "density", *_KEYS, *[c for c in frame if c.startswith("silo_")]]]


def seed_intervals(df: pd.DataFrame, tol: float = TOLERANCE) -> pd.DataFrame:
    """One row per (seed, cycle): that seed's own best and interval (n = 1, so both intervals coincide)."""
    rows = oracle_trials(df)
    records = [{"seed": int(seed), "cycle": int(cycle), **_record(choice)}
               for (seed, cycle), group in rows.groupby(["seed", "cycle"])
               if (choice := choose(Curve.from_rows(group), tol)) is not None]
    frame = pd.DataFrame(records, columns=["seed", "cycle", *_KEYS])
    return _against_silo(frame, df)


def count_inside(frame: pd.DataFrame, column: str) -> tuple[int, int]:
    """(cycles where the flag holds, cycles with a value to judge)."""
    if column not in frame:
        return 0, 0
    judged = frame[column].dropna()
    return int(np.sum(judged.to_numpy(dtype=bool))), len(judged)
