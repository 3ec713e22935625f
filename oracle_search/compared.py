"""What the verdict compares, as the drivers need it too: the Oracle's current chain as curves over S (the seeds
whose chain reaches every cycle), each compared schedule's max_lr per cycle (both SILO variants, the two
controls), and the completion a racing run trains before its verdict (`completion_targets`). Pure functions of
the results table; `analysis.regret` builds the regret and the verdict on them (docs/design.md, "Regret and
controls")."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd

from oracle_search.curve import Curve, best_of, lr_key
from oracle_search.schema import SILO_METHODS, Method, Stage, current_rows
from oracle_search.selection import RESOLUTION, bracket, choose


def oracle_trials(df: pd.DataFrame) -> pd.DataFrame:
    """The Oracle's grid and refinement rows on its current chain (diverged ones included)."""
    rows = current_rows(df)
    return rows[rows["method"] == Method.ORACLE.value]


def final_rows(df: pd.DataFrame, method: str) -> pd.DataFrame:
    """The rows a method is judged by: the Oracle's selected chain, every other method's current final chain."""
    rows = current_rows(df)
    rows = rows[rows["method"] == method]
    if method == Method.ORACLE.value:
        return rows[rows["selected"].astype(bool)]
    return rows[rows["stage"] == Stage.FINAL.value]


def silo_methods(df: pd.DataFrame) -> list[str]:
    """The SILO variants with final rows."""
    return [m for m in SILO_METHODS if not final_rows(df, m).empty]


def silo_max_lr_by_cycle(df: pd.DataFrame, method: str = Method.SILO_PAPER.value) -> pd.Series:
    """The max_lr a SILO variant used per cycle, shared by all its seeds (a schedule is a function of the cycle;
    seeds that disagree are an error, not a first pick)."""
    rows = final_rows(df, method)
    split = rows.groupby("cycle")["max_lr"].agg(lambda v: v.map(lr_key).nunique() > 1)
    if split.any():
        raise ValueError(f"{method}'s final rows use several max_lr at cycle(s) "
                         f"{', '.join(str(c) for c in split[split].index)}")
    return rows.groupby("cycle")["max_lr"].first()


def last_cycle(df: pd.DataFrame) -> int:
    """L, the last cycle compared: the Oracle's last current cycle, or the table's last cycle without Oracle rows
    (-1 for an empty table)."""
    oracle = oracle_trials(df)
    rows = oracle if not oracle.empty else df
    return int(rows["cycle"].max()) if not rows.empty else -1


@dataclass(frozen=True)
class Curves:
    """The Oracle's current chain on S, cycles 0..L."""

    seeds: list[int]
    last: int  # L
    cycles: dict[int, Curve]
    chained0: float | None  # the value the Oracle chained at cycle 0 (on the seeds of S)

    @property
    def n(self) -> int:
        return len(self.seeds)


def oracle_curves(df: pd.DataFrame) -> Curves:
    """S and each cycle's a_s(v) from the Oracle's current chain."""
    rows = oracle_trials(df)
    if rows.empty:
        return Curves([], -1, {}, None)
    last = last_cycle(df)
    seeds = chain_seeds(rows, last)
    cycles = {m: Curve.from_rows(rows[rows["cycle"] == m], seeds) for m in range(last + 1)}
    chosen = rows[(rows["cycle"] == 0) & rows["selected"].astype(bool) & rows["seed"].isin(seeds)]["max_lr"]
    chained0 = float(chosen.map(lr_key).mode().min()) if not chosen.empty else None
    return Curves(seeds, last, cycles, chained0)


def chain_seeds(rows: pd.DataFrame, last: int) -> list[int]:
    """S: the seeds whose Oracle rows (`rows`, one chain) reach every cycle 0..`last`."""
    cycles_of = rows.groupby("seed")["cycle"].agg(lambda c: set(int(x) for x in c))
    return sorted(int(s) for s, cs in cycles_of.items() if cs >= set(range(last + 1)))


def constant_best(curves: Curves) -> float | None:
    """Among the complete values of any cycle, those defined at every cycle 1..L; the one with the largest
    Σ_{m=1..L} mean_s a_s(x), ties within 1e-9 to the smaller. Chosen in hindsight: optimistic. None when L = 0
    (no cycle to sum over) or no value is defined at every cycle."""
    if curves.last < 1:
        return None
    candidates = sorted({v for c in curves.cycles.values() for v in c.complete})
    scores = {}
    for x in candidates:
        per_cycle = [curves.cycles[m].at(x) for m in range(1, curves.last + 1)]
        if all(a is not None for a in per_cycle):
            scores[x] = sum(float(np.mean(a)) for a in per_cycle)
    return best_of(pd.Series(scores, dtype=float).sort_index())


def schedules(df: pd.DataFrame, curves: Curves) -> dict[str, dict[int, float]]:
    """max_lr per cycle of each SILO variant with final rows and of both controls (an empty dict: none)."""
    out = {m: {int(c): float(v) for c, v in silo_max_lr_by_cycle(df, m).items()} for m in silo_methods(df)}
    cycles = range(curves.last + 1)
    out["constant_dense"] = {m: curves.chained0 for m in cycles} if curves.chained0 is not None else {}
    best = constant_best(curves)
    out["constant_best"] = {m: best for m in cycles} if best is not None else {}
    return out


def completion_targets(df: pd.DataFrame, grid: list[float] | None = None, use_bracket: bool = True,
                       resolution: float = RESOLUTION) -> dict[int, list[float]]:
    """Per cycle, the values the verdict needs trained by every seed of S but not yet (racing leaves far values
    with fewer seeds, walks only as far as a value survives, and resolves the sets' edges coarsely):
    - each compared schedule's max_lr where some seed trained it, else the tried values on either side of it;
    - where it lies beyond every tried value (the walk stopped short of it), the `grid` value next beyond it, so
      it can be interpolated as after an exhaustive Oracle, which trains its whole bracket (`use_bracket`: the
      grid values within the bracket of the previous b, `selection.bracket`; else the whole grid);
    - where it lies between a member and a non-member of the paper interval further apart than `resolution`,
      their geometric midpoint, so that decision is resolved as finely as an exhaustive Oracle's. The lenient and
      strict sets' gaps are not resolved here: on the default that cost 45 more trainings per run (81 completions
      against 36, measured) for no "inside" flag that differed from exhaustive search in replay.
    A value that diverged on a seed is left alone: the interpolation is undefined across it anyway."""
    curves = oracle_curves(df)
    out: dict[int, set[float]] = {}
    grid = sorted(lr_key(g) for g in grid or [])
    for by_cycle in schedules(df, curves).values():
        for m, x in by_cycle.items():
            cycle = curves.cycles.get(m)
            if cycle is None or x is None:
                continue
            key, tried, complete = lr_key(x), cycle.tried, set(cycle.complete)
            below, above = [v for v in tried if v < key][-1:], [v for v in tried if v > key][:1]
            near = [key] if key in tried else below + above
            want = out.setdefault(m, set())
            want.update(v for v in near if v not in complete and not cycle.diverged.loc[v].any())
            if key not in tried and not (below and above):
                reach = _bracket_of(grid, curves, m) if use_bracket else grid
                low = [] if below else [g for g in reach if g <= key][-1:]
                high = [] if above else [g for g in reach if g >= key][:1]
                want.update(low + high)
            choice = choose(cycle)
            if key in tried or not (below and above) or choice is None:
                continue
            members = dict(zip(choice.values, choice.inside))
            lo, hi = below[0], above[0]
            if members.get(lo) != members.get(hi) and hi / lo - 1 > resolution:
                want.add(lr_key(math.sqrt(lo * hi)))
    return {m: sorted(values) for m, values in sorted(out.items()) if values}


COMPLETION_PASSES = 3  # constant_best may move as values complete: complete again, at most this often


def complete_for_verdict(rows: Callable[[], pd.DataFrame], train: Callable[[dict[int, list[float]]], int],
                         grid: list[float], use_bracket: bool) -> None:
    """The completion before a racing run's verdict (a racing `compare`, and `replay` of one): `train` the missing
    seeds of `completion_targets` on the current `rows()` (it returns how many it trained), and again, until a pass
    trains nothing."""
    for _ in range(COMPLETION_PASSES):
        targets = completion_targets(rows(), grid, use_bracket)
        if not targets or not train(targets):
            return


def _bracket_of(grid: list[float], curves: Curves, m: int) -> list[float]:
    """The grid values an exhaustive Oracle trains at cycle m: the whole grid at cycle 0, later the bracket around
    the previous cycle's b (`selection.bracket`)."""
    previous = curves.cycles.get(m - 1)
    if m == 0 or previous is None or previous.best is None:
        return grid
    return [g for g in bracket(grid, previous.best) if g in grid]
