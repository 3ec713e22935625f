"""The one t interval every decision and table rests on, and the seeds a comparison would need.

Every interval in the product is a Student-t interval for the mean of paired differences d (or of per-seed
accuracies): mean ± t(q, n−1)·sd(d)/√n with the sample sd (ddof 1). Two-sided at `TWO_SIDED` (q = 0.975) for the
regret, the verdict and the tables; one-sided at `ONE_SIDED` (q = 0.95) for the Oracle's "not shown worse" and
"shown within 0.5" sets. `half_width` is the only place a t quantile is taken.
"""
from __future__ import annotations

import math
from typing import Literal

import numpy as np
from scipy import stats

ONE_SIDED = 0.95  # confidence of a one-sided bound (the Oracle's sets)
TWO_SIDED = 0.95  # confidence of a two-sided interval (regret, verdict, tables)
POWER = 0.80  # the power `seeds_needed` asks for
MAX_SEEDS = 1000

Sided = Literal["one", "two"]


def half_width(sd, n, confidence: float = TWO_SIDED, sided: Sided = "two", dof=None):
    """t(q, dof)·sd/√n, with q = `confidence` one-sided or 1 − (1 − `confidence`)/2 two-sided and dof = n − 1
    unless given (a pooled sd brings its own); NaN where dof < 1. Takes scalars or arrays (broadcast)."""
    q = confidence if sided == "one" else 1 - (1 - confidence) / 2
    n = np.asarray(n, dtype=float)
    dof = n - 1 if dof is None else np.asarray(dof, dtype=float)
    t = np.where(dof >= 1, stats.t.ppf(q, np.maximum(dof, 1)), np.nan)
    out = t * np.asarray(sd, dtype=float) / np.sqrt(np.maximum(n, 1))
    return float(out) if out.ndim == 0 else out


def mean_interval(d, confidence: float = TWO_SIDED, sided: Sided = "two") -> tuple[float, float, float]:
    """(mean, lo, hi) of the mean of `d`: mean ∓ `half_width`. One-sided, lo is the lower bound and hi the upper
    bound, each at `confidence`. NaN bounds with fewer than two values."""
    d = np.asarray(d, dtype=float)
    mean = float(np.mean(d))
    if len(d) < 2:
        return mean, math.nan, math.nan
    half = half_width(float(np.std(d, ddof=1)), len(d), confidence, sided)
    return mean, mean - half, mean + half


def zero_spread(d) -> bool:
    """Whether every value of `d` is the same (n ≥ 2): its interval has no width, which the report says."""
    d = np.asarray(d, dtype=float)
    return len(d) >= 2 and float(np.ptp(d)) == 0.0


def seeds_needed(d) -> int | None:
    """The smallest n' ≥ 2 whose two-sided `TWO_SIDED` interval would exclude 0 with power `POWER` at the observed
    mean and sd: half_width(two-sided) + half_width(one-sided at POWER) < |mean|. None when the mean is 0, there is
    no spread to go on, or n' would exceed `MAX_SEEDS`. A search, not a formula: t depends on n' itself."""
    d = np.asarray(d, dtype=float)
    effect = abs(float(np.mean(d)))
    if effect == 0 or len(d) < 2 or zero_spread(d):
        return None
    sd = float(np.std(d, ddof=1))
    for n in range(2, MAX_SEEDS + 1):
        if half_width(sd, n, TWO_SIDED, "two") + half_width(sd, n, POWER, "one") < effect:
            return n
    return None
