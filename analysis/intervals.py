"""The Oracle's max_lr and interval (paper §5.3) per (seed, cycle) and pooled over seeds, against SILO's max_lr."""
from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.select import densities, oracle_trials, silo_max_lr_by_cycle

TOLERANCE = 0.5  # percentage points of validation accuracy
_EPS = 1e-9


def interval(acc: pd.Series, tol: float = TOLERANCE) -> dict:
    """Best max_lr of `acc` (max_lr -> val_acc; ties go to the smaller) and the values within `tol` of it.

    `contiguous` says whether no grid value between the interval's ends lies outside it.
    """
    acc = acc.sort_index()
    best_acc = acc.max()
    best = acc.index[(acc == best_acc).to_numpy()][0]
    member = (acc >= best_acc - tol - _EPS).to_numpy()
    grid = acc.index.to_numpy()
    lo, hi = grid[member].min(), grid[member].max()
    between = (grid >= lo) & (grid <= hi)
    return {
        "best_max_lr": float(best),
        "best_val_acc": float(best_acc),
        "lo": float(lo),
        "hi": float(hi),
        "contiguous": bool(member[between].all()),
        "n_grid": len(grid),
        "n_inside": int(member.sum()),
    }


def _grid_accuracy(df: pd.DataFrame) -> pd.Series:
    """Validation accuracy per (seed, cycle, max_lr) over the Oracle's trials, repeats averaged."""
    rows = oracle_trials(df)
    # Round keys so grid values computed separately per seed still match.
    key = rows["max_lr"].map(lambda x: float(f"{x:.12g}"))
    return rows.assign(max_lr=key).groupby(["seed", "cycle", "max_lr"])["val_acc"].mean()


def _compare(frame: pd.DataFrame, df: pd.DataFrame) -> pd.DataFrame:
    """Add each cycle's density, SILO's max_lr and whether it lies in [lo, hi] (NA without SILO)."""
    silo = frame["cycle"].map(silo_max_lr_by_cycle(df)).astype(float)
    inside = (silo >= frame["lo"] * (1 - _EPS)) & (silo <= frame["hi"] * (1 + _EPS))
    return frame.assign(
        density=frame["cycle"].map(densities(df)),
        silo_max_lr=silo,
        inside=inside.astype("boolean").mask(silo.isna()),
    )


_KEYS = ["best_max_lr", "best_val_acc", "lo", "hi", "contiguous", "n_grid", "n_inside"]


def seed_intervals(df: pd.DataFrame, tol: float = TOLERANCE) -> pd.DataFrame:
    """One row per (seed, cycle): the Oracle's best max_lr, interval [lo, hi], contiguity, SILO inside."""
    acc = _grid_accuracy(df)
    rows = [
        {"seed": seed, "cycle": cycle, **interval(g.droplevel(["seed", "cycle"]), tol)}
        for (seed, cycle), g in acc.groupby(level=["seed", "cycle"])
    ]
    frame = pd.DataFrame(rows, columns=["seed", "cycle", *_KEYS])
    return _compare(frame, df)[["seed", "cycle", "density", *_KEYS, "silo_max_lr", "inside"]]


def pooled_intervals(df: pd.DataFrame, tol: float = TOLERANCE) -> pd.DataFrame:
    """One row per cycle: the interval on the seed-mean validation accuracy of grid values every seed trained."""
    acc = _grid_accuracy(df)
    rows = []
    for cycle, g in acc.groupby(level="cycle"):
        wide = g.droplevel("cycle").unstack("seed").dropna()
        if not wide.empty:
            rows.append({"cycle": cycle, **interval(wide.mean(axis=1), tol), "n_seeds": wide.shape[1]})
    frame = pd.DataFrame(rows, columns=["cycle", *_KEYS, "n_seeds"])
    return _compare(frame, df)[["cycle", "density", *_KEYS, "n_seeds", "silo_max_lr", "inside"]]


def count_inside(frame: pd.DataFrame) -> tuple[int, int]:
    """(cycles with SILO inside the interval, cycles with a SILO value to judge)."""
    judged = frame["inside"].dropna()
    return int(np.sum(judged.to_numpy(dtype=bool))), len(judged)
