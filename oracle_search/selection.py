"""The one place that decides what the Oracle chose: the best max_lr of a cycle, the paper's interval, the
"not shown worse" and "shown within 0.5" sets, whether a max_lr lies inside a set, and which values to train next
to resolve them. The drivers and the analysis both use it.

Definitions (docs/design.md has them too):
- A cycle's **curve** is the validation accuracy of every max_lr trained by all n seeds (max_lr × seed).
- **b**, the best value: the highest seed-mean validation accuracy among values no seed diverged on; ties go to
  the smaller max_lr.
- The **paper's interval** (§5.3): values whose seed-mean is within `TOLERANCE` points of b's.
- **"not shown worse"** (formerly "noise-aware"): v ≠ b is excluded when mean(d) − t(0.95, n−1)·sd(d)/√n >
  `TOLERANCE`, with the paired differences d_s = acc_s(b) − acc_s(v): only a value shown, with 95 % one-sided
  confidence, to be more than `TOLERANCE` points worse is out. Lenient by design: it always contains the paper's
  interval, and noisier values get in more easily. With n = 1 it is the paper's interval.
- **"shown within 0.5"** (strict, an equivalence test): v ≠ b is in it when mean(d) + t(0.95, n−1)·sd(d)/√n <
  `TOLERANCE`. With n = 1 nothing can be shown, so it is {b}.
- b is in every set; a value some seed diverged on is in none.
- A max_lr x is **inside** a set only when it equals a member or lies between two adjacent trained values that
  are both members (`in_set`); [lo, hi] of a set with a hole or a diverged value inside is not the set.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

import numpy as np
import pandas as pd

from oracle_search.curve import Curve, lr_key
from oracle_search.statistics import ONE_SIDED, mean_interval

TOLERANCE = 0.5  # percentage points of validation accuracy (paper §5.3)
RESOLUTION = 0.05  # an interval edge is resolved when its outside neighbour lies within 5 % of it
_EPS = 1e-9


@dataclass(frozen=True)
class Choice:
    """What the Oracle decided at one cycle."""

    best: float
    best_acc: float  # seed mean
    best_se: float  # standard error of the seed mean (NaN with one seed)
    lo: float  # the paper's interval
    hi: float
    contiguous: bool
    noise_lo: float  # "not shown worse" (formerly noise-aware): its smallest and largest member
    noise_hi: float
    noise_contiguous: bool
    n_seeds: int
    values: tuple[float, ...]  # every value trained by all seeds
    inside: tuple[bool, ...]  # per value: in the paper's interval
    noise_inside: tuple[bool, ...]  # per value: not shown worse
    unimodal: bool
    strict_lo: float  # "shown within 0.5": its smallest and largest member
    strict_hi: float
    within: tuple[bool, ...]  # per value: shown within 0.5


def noise_excluded(d: np.ndarray, tolerance: float = TOLERANCE, confidence: float = ONE_SIDED) -> bool:
    """Whether paired differences d_s = acc_s(b) − acc_s(v) show v more than `tolerance` points worse: the
    one-sided lower bound exceeds it. With one seed the bound is the difference itself (the paper's rule)."""
    if len(d) == 1:
        return bool(d[0] > tolerance + _EPS)
    _, lower, _ = mean_interval(d, confidence, "one")
    return bool(lower > tolerance + _EPS)


def shown_within(d: np.ndarray, tolerance: float = TOLERANCE, confidence: float = ONE_SIDED) -> bool:
    """Whether paired differences d_s = acc_s(b) − acc_s(v) show v less than `tolerance` points worse (an
    equivalence test: the one-sided upper bound is below it). One seed shows nothing."""
    if len(d) < 2:
        return False
    _, _, upper = mean_interval(d, confidence, "one")
    return bool(upper < tolerance - _EPS)


def _span(values: list[float], inside: list[bool]) -> tuple[float, float, bool]:
    chosen = [v for v, i in zip(values, inside) if i]
    lo, hi = min(chosen), max(chosen)
    contiguous = all(i for v, i in zip(values, inside) if lo <= v <= hi)
    return lo, hi, contiguous


def unimodal(mean: pd.Series, best: float, tolerance: float = TOLERANCE) -> bool:
    """False when, walking away from b on either side, the seed-mean rises again by more than `tolerance`."""
    for side in (mean[mean.index <= best][::-1], mean[mean.index >= best]):
        low = math.inf
        for acc in side:
            if acc > low + tolerance + _EPS:
                return False
            low = min(low, acc)
    return True


def choose(curve: Curve, tolerance: float = TOLERANCE) -> Choice | None:
    """The cycle's best value and both intervals, or None when every value diverged. A value some seed trained but
    not every seed (one the racing rule dropped) is listed among the values and is in none of the sets."""
    best = curve.best
    if best is None:
        return None
    values, complete = curve.tried, set(curve.complete)
    acc, mean = curve.acc.loc[values], curve.mean()
    alive = [v in complete for v in values]
    paper = [bool(a and m >= mean[best] - tolerance - _EPS) for a, m in zip(alive, mean)]
    base = acc.loc[best].to_numpy()
    noise = [bool(a and (v == best or not noise_excluded(base - acc.loc[v].to_numpy(), tolerance)))
             for a, v in zip(alive, values)]
    within = [bool(a and (v == best or shown_within(base - acc.loc[v].to_numpy(), tolerance)))
              for a, v in zip(alive, values)]
    lo, hi, contiguous = _span(values, paper)
    noise_lo, noise_hi, noise_contiguous = _span(values, noise)
    strict_lo, strict_hi, _ = _span(values, within)
    return Choice(best=best, best_acc=float(mean[best]), best_se=float(curve.standard_error()[best]),
                  lo=lo, hi=hi, contiguous=contiguous, noise_lo=noise_lo, noise_hi=noise_hi,
                  noise_contiguous=noise_contiguous, n_seeds=curve.n_seeds, values=tuple(values),
                  inside=tuple(paper), noise_inside=tuple(noise),
                  unimodal=unimodal(mean.loc[curve.trained], best, tolerance),
                  strict_lo=strict_lo, strict_hi=strict_hi, within=tuple(within))


def in_set(value: float, values: Iterable[float], members: Iterable[bool]) -> bool:
    """Whether `value` is inside the set whose membership over the trained `values` (ascending) is `members`: it
    equals a member, or lies strictly between two adjacent trained values that are both members."""
    key, pairs = lr_key(value), [(lr_key(v), m) for v, m in zip(values, members)]
    for i, (v, member) in enumerate(pairs):
        if key == v:  # equal after the rounding every trained value went through
            return bool(member)
        if i + 1 < len(pairs) and v < key < pairs[i + 1][0]:
            return bool(member and pairs[i + 1][1])
    return False


def bracket(grid: list[float], previous: float, width: float = 4.0) -> list[float]:
    """After cycle 0: the grid values within a factor `width` of the previous cycle's choice, and that choice."""
    near = [g for g in grid if previous / width - _EPS <= g <= previous * width + _EPS]
    return sorted({lr_key(v) for v in [*near, previous]})


def next_values(choice: Choice, grid: list[float], resolution: float = RESOLUTION,
                paper_only: bool = False) -> list[float]:
    """Values to train next so that b is not on the edge of what was tried and each edge of both intervals lies
    between a trained value inside and a trained value outside, no further apart than `resolution` (relative).

    Outward, the next coarse-grid value is tried; an edge at the grid's end stays open. Inward, the geometric
    midpoint of the edge and its outside neighbour halves the gap. `paper_only`: resolve only the paper
    interval's edges (the racing Oracle: the decisions rest on b and that interval; "not shown worse" keeps the
    resolution its edges reach on the way)."""
    values, grid = list(choice.values), sorted(lr_key(g) for g in grid)
    new: set[float] = set()

    def outward(edge: float, step: int) -> None:
        beyond = [g for g in grid if (g < edge - _EPS if step < 0 else g > edge + _EPS)]
        if beyond:
            new.add(beyond[-1] if step < 0 else beyond[0])

    # b lies in both intervals, so resolving their edges also moves the search off b's edge of the range.
    edges = ((choice.lo, -1), (choice.hi, 1))
    if not paper_only:
        edges = ((choice.noise_lo, -1), (choice.noise_hi, 1), *edges)
    for edge, step in edges:
        j = values.index(edge) + step
        if not 0 <= j < len(values):
            outward(edge, step)
            continue
        neighbour = values[j]
        if abs(neighbour / edge - 1) > resolution:
            new.add(lr_key(math.sqrt(edge * neighbour)))
    return sorted(v for v in new if all(abs(v / t - 1) > _EPS for t in values))


def dense_curve(rows: pd.DataFrame, seeds: list[int] | None = None) -> Curve | None:
    """The Oracle's cycle-0 curve (the unpruned network) on `seeds` (default: every seed), if it ran."""
    if rows.empty:
        return None
    rows = rows[(rows["method"] == "oracle") & (rows["cycle"] == 0)]
    return Curve.from_rows(rows, seeds) if not rows.empty else None


def dense_best(rows: pd.DataFrame) -> float | None:
    """The Oracle's seed-mean best at cycle 0 (the paper's "tuned LR" of the unpruned network), if it ran."""
    curve = dense_curve(rows)
    return curve.best if curve is not None else None
