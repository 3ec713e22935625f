"""The one t interval every decision and table rests on, the one label rule, and the seeds (or replicates) a
comparison would need.

Every interval in the product is a Student-t interval for the mean of paired differences d (or of per-seed
accuracies): mean ± t(q, n−1)·sd(d)/√n with the sample sd (ddof 1). Two-sided at `TWO_SIDED` (q = 0.975) for the
regret, the verdict and the tables; one-sided at `ONE_SIDED` (q = 0.95) for the Oracle's "not shown worse" and
"shown within 0.5" sets. `half_width` is the only place a t quantile is taken (`p_value` reads the t tail at
an observed statistic, which is no quantile).

`label` is the one verdict rule, within a run (per-seed advantages, `analysis.regret`) and over replicates of the
whole study (per-replicate advantages, `analysis.replicates`): equivalent / better / worse / inconclusive /
undefined from the 95 % interval and a margin of `MARGIN_PER_CYCLE` points per compared cycle.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import integrate, stats

from oracle_search.options import MARGIN_PER_CYCLE  # noqa: F401 (the label rule's margin, imported from here)

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


# --- one label rule, within a run and over replicates --------------------------------------------------------------

# MARGIN_PER_CYCLE (0.5 points per compared cycle, the paper's interval tolerance) is `compare --margin`'s default:
# a comparison sums it like the advantage, so its margin is MARGIN_PER_CYCLE × L over cycles 1..L.
EQUIVALENCE_POWER = 0.90  # one-sided quantile of `replicates_needed`'s equivalence branch (80 % power of TOST at 0)
# 0.05: the level of the p-values and of `holm`. Rounded: 1 − 0.95 is 0.050000000000000044 in floating point, which
# let p = 0.05000000000000004 pass a test at "0.05" by accident.
ALPHA = round(1 - TWO_SIDED, 12)
# An interval within this many points of ±margin touches it: the bounds come out of sd·t/√n in floating point, so
# an interval built to touch the margin may land 1e-16 outside, and its TOST p at 0.05000000000000004 (issue 52).
MARGIN_TOLERANCE = 1e-12
REPLICATE_BUDGET = 50  # `plans`: a plan needing more replicates of the whole study is "not decidable at this budget"


def _nan(x) -> bool:
    """None, NaN and pandas' NA alike."""
    try:
        return math.isnan(float(x))
    except TypeError:
        return True


def label(lo, hi, margin) -> str:
    """The verdict of a comparison from its two-sided 95 % interval [lo, hi] of the advantage and its margin:
    - "equivalent" when −margin ≤ lo and hi ≤ margin: the interval lies inside ±margin, bounds inclusive (an
      interval that touches ±margin is inside, up to `MARGIN_TOLERANCE`). Checked first, so it wins over "better"/"worse" when both hold
      (a difference shown but smaller than the margin is reported as equivalent);
    - else "better" when lo > 0, "worse" when hi < 0 (strict: an interval that touches 0 shows no difference);
    - else "inconclusive";
    - "undefined" when lo or hi is NaN (no interval). The same rule within a run (per-seed advantages) and over
      replicates (per-replicate advantages)."""
    if _nan(lo) or _nan(hi):
        return "undefined"
    if -margin - MARGIN_TOLERANCE <= lo and hi <= margin + MARGIN_TOLERANCE:
        return "equivalent"
    if lo > 0:
        return "better"
    if hi < 0:
        return "worse"
    return "inconclusive"


def sd_upper(sd, n, confidence: float = POWER) -> float:
    """Upper one-sided `confidence` bound on a normal population's sd from a sample sd of n values:
    sd·√((n − 1)/χ²(1 − confidence, n − 1)). NaN for n < 2. (n = 3 at 0.80: χ²(0.2, 2) = 0.4463, factor
    2.1169.)"""
    if n < 2 or _nan(sd):
        return math.nan
    return float(sd) * math.sqrt((n - 1) / stats.chi2.ppf(1 - confidence, n - 1))


def holm(pvalues, alpha: float = ALPHA) -> list[bool]:
    """Holm's step-down: with the m defined p-values sorted p_(1) ≤ … ≤ p_(m), reject H_(k) while
    p_(k) ≤ alpha/(m − k + 1) and stop at the first that is not. NaN p-values are not hypotheses: False, and not
    counted in m. Returns, per input p-value in its order, whether it is rejected."""
    p = np.asarray(pvalues, dtype=float)
    out = [False] * len(p)
    order = [int(i) for i in np.argsort(p, kind="stable") if not math.isnan(p[i])]
    m = len(order)
    for k, i in enumerate(order):
        if p[i] > alpha / (m - k):
            break
        out[i] = True
    return out


def p_value(values, verdict: str, margin: float) -> float:
    """The p-value of the hypothesis a verdict rests on, from the values (one per replicate), consistent with the
    two-sided `TWO_SIDED` interval `label` reads (t with n − 1 df, se = sd/√n):
    - "better", "worse", "inconclusive": the two-sided one-sample t-test of mean 0, so p < 0.05 exactly when the
      interval excludes 0;
    - "equivalent": TOST, p = min(1, 2·max(p_lower, p_upper)) of the one-sided tests of mean ≤ −margin
      (p_lower = P(T ≥ (mean + margin)/se)) and mean ≥ +margin (p_upper = P(T ≤ (mean − margin)/se)). Doubling
      makes each one-sided test a 2.5 % test, so p ≤ 0.05 exactly when the 95 % two-sided interval lies inside
      ±margin (the label's rule; at lo = −margin or hi = margin exactly, p = 0.05), not the usual 90 % TOST.
      Where the label holds (its interval inside ±margin up to `MARGIN_TOLERANCE`) p is at most 0.05, so rounding
      in the last bit cannot turn an interval that touches the margin into p = 0.05000000000000004.
    NaN for "undefined" or fewer than two values. With zero spread (`zero_spread`: sd 0) the test degenerates:
    0 when the label holds (equivalent: |mean| ≤ margin; otherwise mean ≠ 0), else 1."""
    d = np.asarray(values, dtype=float)
    if verdict == "undefined" or len(d) < 2:
        return math.nan
    n, mean, sd = len(d), float(np.mean(d)), float(np.std(d, ddof=1))
    if zero_spread(d) or sd == 0:
        holds = abs(mean) <= margin if verdict == "equivalent" else mean != 0
        return 0.0 if holds else 1.0
    se = sd / math.sqrt(n)
    if verdict == "equivalent":
        p_lower = float(stats.t.sf((mean + margin) / se, n - 1))
        p_upper = float(stats.t.cdf((mean - margin) / se, n - 1))
        p = min(1.0, 2 * max(p_lower, p_upper))
        _, lo, hi = mean_interval(d)
        return min(p, ALPHA) if label(lo, hi, margin) == "equivalent" else p
    return float(2 * stats.t.sf(abs(mean) / se, n - 1))


def replicates_needed(values, margin: float, verdict: str) -> int | None:
    """How many replicates a comparison would need, planned with sd' = `sd_upper`(sample sd, R) (an 80 % upper
    bound, so R = 2 or 3 replicates do not plan with a lucky small sd):
    - "inconclusive" or "equivalent": the smallest n ≥ 2 with half_width(sd', n, two-sided 95 %) +
      half_width(sd', n, one-sided 0.90) ≤ margin: the replicates that would show equivalence (the 95 % interval
      inside ±margin) with 80 % power if the true difference were 0;
    - "better" or "worse": the smallest n ≥ 2 with half_width(sd', n, two-sided 95 %) + half_width(sd', n,
      one-sided 0.80) < |mean|: the replicates that would reproduce the label with 80 % power if the true effect
      were the observed one. Optimistic (the observed effect of a label that was selected for being significant
      overstates the true one): a reading of how far the label is from the edge, not a plan.
    None for "undefined", with fewer than two values, when sd is 0 (`zero_spread`) or undefined, or when n would
    exceed `MAX_SEEDS`. A search (t depends on n), vectorised over n = 2..MAX_SEEDS."""
    d = np.asarray(values, dtype=float)
    if verdict not in ("better", "worse", "inconclusive", "equivalent") or len(d) < 2:
        return None
    sd = float(np.std(d, ddof=1))
    if zero_spread(d) or not sd > 0:
        return None
    return replicates_needed_at(sd_upper(sd, len(d)), float(np.mean(d)), margin, verdict)


def replicates_needed_at(sd: float, mean: float, margin: float, verdict: str) -> int | None:
    """`replicates_needed`'s search at a given sd (no bound taken), with the same two branches; None for another
    verdict, a zero or undefined sd, or beyond `MAX_SEEDS`."""
    if verdict not in ("better", "worse", "inconclusive", "equivalent") or not sd > 0:
        return None
    n = np.arange(2, MAX_SEEDS + 1)
    two = half_width(sd, n, TWO_SIDED, "two")
    if verdict in ("inconclusive", "equivalent"):
        ok = two + half_width(sd, n, EQUIVALENCE_POWER, "one") <= margin
    else:
        ok = two + half_width(sd, n, POWER, "one") < abs(mean)
    return int(n[np.argmax(ok)]) if ok.any() else None


def power(hypothesis: str, n: int, mean: float, sd: float, margin: float) -> float:
    """The chance that n replicates show `hypothesis` with the label's 95 % two-sided interval (t on n − 1 df) if
    the true difference were `mean` and the sd between replicates `sd` (normal replicates), exactly:
    - "difference": the interval excludes 0 (the two-sided t-test at 0.05): a noncentral t, noncentrality
      mean·√n/sd;
    - "equivalence": the interval lies inside ±margin: P(x̄ − c·s ≥ −margin and x̄ + c·s ≤ margin), c = t(0.975,
      n − 1)/√n, x̄ ~ N(mean, sd²/n) independent of (n − 1)s²/sd² ~ χ²(n − 1), integrated over s.
    NaN for n < 2 or no positive sd."""
    if n < 2 or not sd > 0:
        return math.nan
    df = n - 1
    t = float(stats.t.ppf(1 - (1 - TWO_SIDED) / 2, df))
    if hypothesis == "difference":
        ncp = mean * math.sqrt(n) / sd
        return float(stats.nct.sf(t, df, ncp) + stats.nct.cdf(-t, df, ncp))
    if hypothesis != "equivalence":
        raise ValueError(f"unknown hypothesis {hypothesis!r}")
    c, se = t / math.sqrt(n), sd / math.sqrt(n)
    top = df * (margin / (c * sd)) ** 2  # the largest χ² at which the interval can still fit inside ±margin

    def inside(u: float) -> float:
        half = c * sd * math.sqrt(u / df)
        return (stats.norm.cdf((margin - half - mean) / se) - stats.norm.cdf((-margin + half - mean) / se)) \
            * stats.chi2.pdf(u, df)
    return float(min(1.0, max(0.0, integrate.quad(inside, 0, top, limit=200)[0])))


@dataclass(frozen=True)
class Plan:
    """How many replicates of the whole study would show `hypothesis` ("difference" or "equivalence") with 80 %
    power if the true difference were `at` and the sd `sd` (the planning sd, `sd_upper`); `replicates` None: more
    than `budget`, not decidable at this budget. `power`: the chance at the observed mean (`observed`) with
    `replicates` (or with `budget` when not decidable), at the same sd."""

    hypothesis: str
    replicates: int | None
    power: float
    at: float
    observed: float
    sd: float
    budget: int


def plan_at(hypothesis: str, at: float, observed: float, sd: float, margin: float,
            budget: int = REPLICATE_BUDGET) -> Plan:
    """The smallest n in 2..`budget` whose `power` for `hypothesis` at the true difference `at` is ≥ `POWER`
    (exact, not the t + t approximation of `replicates_needed_at`), with the power at `observed` beside it."""
    found = next((n for n in range(2, budget + 1) if power(hypothesis, n, at, sd, margin) >= POWER), None)
    return Plan(hypothesis, found, power(hypothesis, found or budget, observed, sd, margin), at, observed, sd,
                budget)


def plans(values, margin: float, verdict: str, budget: int = REPLICATE_BUDGET) -> list[Plan]:
    """The plans for a comparison over replicates, on sd' = `sd_upper`(sample sd, R):
    - "inconclusive" with |mean| ≥ margin: the data point to a difference; an equivalence test cannot succeed if
      the true difference is the observed one. One plan: a difference at the observed mean;
    - "inconclusive" with |mean| < margin (its interval then holds 0, as every inconclusive one does): both plans
      at the observed mean, equivalence first; where the mean is near 0 the difference plan is not decidable at the
      budget, where it is near the margin the equivalence plan is not;
    - "equivalent": the plan `replicates_needed` reads (to show equivalence again if the true difference were 0,
      its number unchanged), with the power at the observed mean beside it;
    - none for "better", "worse" (`replicates_needed` reads how far those labels are from the edge) and
      "undefined", nor with fewer than two values or no spread."""
    d = np.asarray(values, dtype=float)
    if verdict not in ("inconclusive", "equivalent") or len(d) < 2 or zero_spread(d):
        return []
    sd = sd_upper(float(np.std(d, ddof=1)), len(d))
    mean = float(np.mean(d))
    if verdict == "equivalent":
        n = replicates_needed_at(sd, mean, margin, verdict)
        n = n if n is not None and n <= budget else None
        return [Plan("equivalence", n, power("equivalence", n or budget, mean, sd, margin), 0.0, mean, sd, budget)]
    if abs(mean) >= margin:
        return [plan_at("difference", mean, mean, sd, margin, budget)]
    return [plan_at("equivalence", mean, mean, sd, margin, budget), plan_at("difference", mean, mean, sd, margin,
                                                                               budget)]


def replicates_lower_estimate(ci_lo: float, ci_hi: float, n: int, margin: float, verdict: str) -> int | None:
    """From one run's comparison (its 95 % interval over n seeds), a rough lower estimate of the replicates it
    needs: `replicates_needed_at` at the seed-level standard error se = half-width / t(0.975, n − 1). The sd
    between whole studies includes the noise of the finals' seeds and adds the choices before them (dense choice,
    δ, b), so on average it is at least se; but only on average, not in every comparison: a sample sd over a few
    replicates can be smaller (SILO (paper) vs the best constant, base seed 0: 0.084 between 3 replicates, each
    replicate's own se 0.42–0.46). So an estimate, not a bound. None where the interval is undefined."""
    if _nan(ci_lo) or _nan(ci_hi) or n < 2:
        return None
    se = (ci_hi - ci_lo) / 2 / half_width(1.0, 1, TWO_SIDED, "two", dof=n - 1)  # half-width / t
    return replicates_needed_at(se, (ci_hi + ci_lo) / 2, margin, verdict)
