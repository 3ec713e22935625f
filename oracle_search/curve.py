"""One cycle's curve: validation accuracy per (max_lr, seed) on a chain's seeds. The Oracle's choice
(`selection`), the regret and the verdict (`analysis.regret`) and the racing rule all read a cycle through it.

- **trained**: the values every seed trained (a diverged training counts as trained).
- **complete**: trained by every seed and diverged on none.
- **best** (b): the complete value with the highest seed mean; ties within 1e-9 go to the smaller max_lr.
- **at(x)**: a_s(x) per seed, x complete, or linear in ln x between adjacent complete values; undefined (None)
  outside them or across a value that diverged on any seed.
- **loo_best**: per seed s, b computed without s (a leave-one-out Oracle).

A (max_lr, seed) that appears twice is an error naming both rows, never an average: one chain trains each value
once per seed.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Mapping

import numpy as np
import pandas as pd

_EPS = 1e-9


def lr_key(value: float) -> float:
    """max_lr values computed in different places compare equal after this rounding."""
    return float(f"{value:.6g}")


class DuplicateRows(ValueError):
    """Two rows of one chain claim the same (cycle, max_lr, seed)."""


def refuse_duplicates(rows: pd.DataFrame, keys: list[str], what: str) -> None:
    """Raise `DuplicateRows` naming the rows when two share `keys`."""
    dup = rows[rows.duplicated(keys, keep=False)]
    if dup.empty:
        return
    shown = [c for c in ("method", "stage", "cycle", "max_lr", "seed", "key", "val_acc") if c in dup.columns]
    raise DuplicateRows(f"{what}: {len(dup)} rows share ({', '.join(keys)}), which one chain trains once; "
                        f"refusing to average them:\n{dup[shown].to_string(index=False)}")


def best_of(mean: pd.Series) -> float | None:
    """The index of the largest value, ties within 1e-9 to the smaller index (`mean` sorted ascending)."""
    mean = mean.dropna()
    if mean.empty:
        return None
    return float(mean.index[(mean >= mean.max() - _EPS).to_numpy()][0])


@dataclass(frozen=True)
class Curve:
    """One cycle's validation accuracy per (max_lr, seed)."""

    acc: pd.DataFrame  # index: every max_lr some seed trained (ascending); columns: the seeds; NaN if not trained
    diverged: pd.DataFrame  # same shape; True where that seed's training diverged

    @classmethod
    def from_rows(cls, rows: pd.DataFrame | Iterable[Mapping], seeds: Iterable[int] | None = None) -> "Curve":
        """From rows with max_lr, seed, val_acc and diverged. `seeds`: the chain's seeds (default: every seed in
        the rows); rows of other seeds are left out."""
        frame = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(list(rows))
        if frame.empty:
            cols = pd.Index(sorted(seeds or []), name="seed")
            empty = pd.DataFrame(index=pd.Index([], name="max_lr", dtype=float), columns=cols, dtype=float)
            return cls(empty, empty.astype(bool))
        frame = frame.assign(max_lr=frame["max_lr"].map(lr_key), diverged=frame["diverged"].astype(bool))
        if seeds is not None:
            seeds = sorted(int(s) for s in seeds)
            frame = frame[frame["seed"].isin(seeds)]
        refuse_duplicates(frame, ["max_lr", "seed"], "one cycle's curve")
        cells = frame.set_index(["max_lr", "seed"])
        acc = cells["val_acc"].astype(float).unstack("seed").sort_index()
        div = cells["diverged"].unstack("seed").reindex_like(acc)
        if seeds is not None:
            acc, div = acc.reindex(columns=seeds), div.reindex(columns=seeds)
        # pandas' nullable "boolean" first: a cell no seed trained is <NA>, then not diverged (a bool fill of a
        # float frame is deprecated)
        return cls(acc, div.astype("boolean").fillna(False).astype(bool))

    @property
    def seeds(self) -> list[int]:
        return [int(s) for s in self.acc.columns]

    @property
    def n_seeds(self) -> int:
        return self.acc.shape[1]

    def _where(self, ok: pd.Series) -> list[float]:
        return [float(v) for v in self.acc.index[ok.to_numpy()]]

    @property
    def tried(self) -> list[float]:
        """Values some seed trained (ascending): `trained` plus those the racing rule dropped early."""
        return self._where(self.acc.notna().any(axis=1))

    @property
    def trained(self) -> list[float]:
        """Values every seed trained, diverged or not (ascending)."""
        return self._where(self.acc.notna().all(axis=1))

    @property
    def complete(self) -> list[float]:
        """Values every seed trained and none diverged on (ascending)."""
        return self._where(self.acc.notna().all(axis=1) & ~self.diverged.any(axis=1))

    def mean(self) -> pd.Series:
        """Mean over the seeds that trained it, of every value some seed trained."""
        return self.acc.loc[self.tried].mean(axis=1)

    def standard_error(self) -> pd.Series:
        """Standard error of each value's mean over the seeds that trained it (NaN with one seed)."""
        acc = self.acc.loc[self.tried]
        return acc.std(axis=1, ddof=1) / np.sqrt(acc.count(axis=1))

    @property
    def best(self) -> float | None:
        """b: the complete value with the best seed mean, ties to the smaller; None when none is complete."""
        return best_of(self.acc.loc[self.complete].mean(axis=1))

    def at(self, x: float) -> np.ndarray | None:
        """a_s(x) per seed (column order), or None where undefined."""
        key, complete = lr_key(x), self.complete
        if key in complete:  # a value computed elsewhere (SILO's curve) matches a trained one after rounding
            return self.acc.loc[key].to_numpy(dtype=float)
        below = [v for v in complete if v < key]
        above = [v for v in complete if v > key]
        if not below or not above:
            return None
        lo, hi = below[-1], above[0]
        between = self.diverged[(self.diverged.index > lo) & (self.diverged.index < hi)]
        if between.to_numpy().any():
            return None
        a_lo, a_hi = self.acc.loc[lo].to_numpy(dtype=float), self.acc.loc[hi].to_numpy(dtype=float)
        return a_lo + (a_hi - a_lo) * (math.log(x) - math.log(lo)) / (math.log(hi) - math.log(lo))

    def loo_best(self) -> list[float] | None:
        """b without seed s, for each seed in column order; None with fewer than two seeds or nothing complete."""
        complete = self.complete
        if self.n_seeds < 2 or not complete:
            return None
        acc = self.acc.loc[complete]
        return [best_of(acc.drop(columns=s).mean(axis=1)) for s in acc.columns]

    def oracle_acc(self) -> np.ndarray | None:
        """a_s(b^(−s)) per seed: what a leave-one-out Oracle scores on each seed."""
        best = self.loo_best()
        if best is None:
            return None
        return np.array([self.acc.loc[b, s] for b, s in zip(best, self.acc.columns)], dtype=float)
