"""Per-cycle regret of each schedule's max_lr on the Oracle's chain, the two controls, and the verdict.

The definitions are docs/design.md's "Regret and controls", followed exactly:
- S: the tuning seeds whose current Oracle chain has rows at every cycle 0..L (L: the Oracle's last cycle).
- Complete values of a cycle: trained by every seed of S and diverged on none. a_s(x) is seed s's validation
  accuracy at a complete x, linear in ln x between adjacent complete values (undefined when a trained value
  strictly between them diverged on a seed of S), undefined outside the complete values.
- Regret of x at cycle m: mean over S of d_s = a_s(b^(−s)) − a_s(x), b^(−s) the complete value with the best mean
  over S without s (a leave-one-out Oracle, so the Oracle's own selection noise is not counted against x).
- Controls: `constant_dense` (the value the Oracle chained at cycle 0, kept) and `constant_best` (the best single
  value in hindsight, an optimistic control).
- Verdict: per-seed advantages summed over cycles 1..L, a 95 % t interval, and the seeds 80 % power would need.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from analysis.select import final_rows, oracle_trials, silo_max_lr_by_cycle, silo_methods
from oracle_search.schema import Method
from oracle_search.selection import lr_key

_EPS = 1e-9
CONFIDENCE = 0.975  # two-sided 95 %
POWER = 0.80
MAX_SEEDS = 1000
CONTROLS = ("constant_dense", "constant_best")
VERSUS = ("oracle", *CONTROLS)
REGRET_COLUMNS = ["schedule", "cycle", "max_lr", "regret", "ci_lo", "ci_hi", "n"]
VERDICT_COLUMNS = ["schedule", "versus", "advantage", "ci_lo", "ci_hi", "n", "verdict", "seeds_needed"]
END_TO_END_COLUMNS = [*VERDICT_COLUMNS, "diverged", "versus_diverged", "seeds"]
WARMUP = Method.WARMUP.value


@dataclass(frozen=True)
class CycleCurves:
    """One cycle of the Oracle's current chain on the seeds of S."""

    acc: pd.DataFrame  # index: every max_lr some seed of S trained (ascending); columns: seeds of S; NaN if not
    diverged: pd.DataFrame  # same shape; True where that seed's row diverged

    @property
    def complete(self) -> list[float]:
        ok = self.acc.notna().all(axis=1) & ~self.diverged.any(axis=1)
        return [float(v) for v in self.acc.index[ok.to_numpy()]]

    def at(self, x: float) -> np.ndarray | None:
        """a_s(x) for the seeds of S, or None where undefined."""
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
        """b^(−s) for each seed of S in column order, or None with fewer than two seeds or no complete value."""
        complete, seeds = self.complete, list(self.acc.columns)
        if len(seeds) < 2 or not complete:
            return None
        acc = self.acc.loc[complete]
        return [_best(acc.drop(columns=s).mean(axis=1)) for s in seeds]

    def oracle_acc(self) -> np.ndarray | None:
        """a_s(b^(−s)) per seed of S."""
        best = self.loo_best()
        if best is None:
            return None
        return np.array([self.acc.loc[b, s] for b, s in zip(best, self.acc.columns)], dtype=float)


def _best(mean: pd.Series) -> float:
    """The index of the largest value, ties within 1e-9 to the smaller index (mean is sorted ascending)."""
    return float(mean.index[(mean >= mean.max() - _EPS).to_numpy()][0])


@dataclass(frozen=True)
class Curves:
    """The Oracle's current chain on S, cycles 0..L."""

    seeds: list[int]
    last: int  # L
    cycles: dict[int, CycleCurves]
    chained0: float | None  # the value the Oracle chained at cycle 0 (on the seeds of S)

    @property
    def n(self) -> int:
        return len(self.seeds)


def oracle_curves(df: pd.DataFrame) -> Curves:
    """S and each cycle's a_s(v) from the Oracle's current chain."""
    rows = oracle_trials(df)
    if rows.empty:
        return Curves([], -1, {}, None)
    last = int(rows["cycle"].max())
    cycles_of = rows.groupby("seed")["cycle"].agg(lambda c: set(int(x) for x in c))
    seeds = sorted(int(s) for s, cs in cycles_of.items() if cs >= set(range(last + 1)))
    rows = rows[rows["seed"].isin(seeds)].assign(max_lr=rows["max_lr"].map(lr_key),
                                                 diverged=rows["diverged"].astype(bool))
    cycles = {}
    for m in range(last + 1):
        at = rows[rows["cycle"] == m]
        cell = at.groupby(["max_lr", "seed"]).agg(acc=("val_acc", "mean"), div=("diverged", "max"))
        acc = cell["acc"].unstack("seed").reindex(columns=seeds).sort_index().astype(float)
        div = cell["div"].unstack("seed").reindex(index=acc.index, columns=seeds)
        cycles[m] = CycleCurves(acc, div.fillna(False).astype(bool))
    chosen = rows[(rows["cycle"] == 0) & rows["selected"].astype(bool)]["max_lr"]
    chained0 = float(chosen.mode().min()) if not chosen.empty else None
    return Curves(seeds, last, cycles, chained0)


def constant_best(curves: Curves) -> float | None:
    """Among the complete values of any cycle, those defined at every cycle 1..L; the one with the largest
    Σ_{m=1..L} mean_s a_s(x), ties within 1e-9 to the smaller. Chosen in hindsight: optimistic."""
    candidates = sorted({v for c in curves.cycles.values() for v in c.complete})
    scores = {}
    for x in candidates:
        per_cycle = [curves.cycles[m].at(x) for m in range(1, curves.last + 1)]
        if all(a is not None for a in per_cycle):
            scores[x] = sum(float(np.mean(a)) for a in per_cycle)
    return _best(pd.Series(scores).sort_index()) if scores else None


def schedules(df: pd.DataFrame, curves: Curves) -> dict[str, dict[int, float]]:
    """max_lr per cycle of each SILO variant with final rows and of both controls (an empty dict: none)."""
    out = {m: {int(c): float(v) for c, v in silo_max_lr_by_cycle(df, m).items()} for m in silo_methods(df)}
    cycles = range(curves.last + 1)
    out["constant_dense"] = {m: curves.chained0 for m in cycles} if curves.chained0 is not None else {}
    best = constant_best(curves)
    out["constant_best"] = {m: best for m in cycles} if best is not None else {}
    return out


def regret_per_seed(cycle: CycleCurves, x: float | None) -> np.ndarray | None:
    """d_s = a_s(b^(−s)) − a_s(x) per seed of S, or None where undefined."""
    if x is None:
        return None
    oracle, a = cycle.oracle_acc(), cycle.at(x)
    return None if oracle is None or a is None else oracle - a


def mean_ci(d: np.ndarray) -> tuple[float, float, float]:
    """(mean, ci_lo, ci_hi): mean ± t(0.975, n−1)·sd/√n (ddof 1); NaN bounds with fewer than two values."""
    mean = float(np.mean(d))
    if len(d) < 2:
        return mean, math.nan, math.nan
    half = stats.t.ppf(CONFIDENCE, len(d) - 1) * float(np.std(d, ddof=1)) / math.sqrt(len(d))
    return mean, mean - half, mean + half


def seeds_needed(adv: np.ndarray) -> int | None:
    """The smallest n' ≥ 2 with (t(0.975, n'−1) + t(0.80, n'−1))·sd(adv)/√n' < |mean(adv)| (80 % power at the
    observed effect); None when the mean is 0, there is no spread to go on, or n' would exceed 1000."""
    effect = abs(float(np.mean(adv)))
    if effect == 0 or len(adv) < 2:
        return None
    sd = float(np.std(adv, ddof=1))
    for n in range(2, MAX_SEEDS + 1):
        if (stats.t.ppf(CONFIDENCE, n - 1) + stats.t.ppf(POWER, n - 1)) * sd / math.sqrt(n) < effect:
            return n
    return None


def regret_table(df: pd.DataFrame) -> pd.DataFrame:
    """tables/regret.csv: one row per schedule and cycle 0..L; regret and CI empty where undefined."""
    curves = oracle_curves(df)
    records = []
    for name, lrs in schedules(df, curves).items():
        for m in range(curves.last + 1):
            x = lrs.get(m)
            d = regret_per_seed(curves.cycles[m], x)
            mean, lo, hi = mean_ci(d) if d is not None else (math.nan,) * 3
            records.append({"schedule": name, "cycle": m, "max_lr": math.nan if x is None else x, "regret": mean,
                            "ci_lo": lo, "ci_hi": hi, "n": curves.n})
    return pd.DataFrame(records, columns=REGRET_COLUMNS)


def _judge(adv: np.ndarray | None, n: int) -> dict:
    """advantage, CI, verdict and seeds_needed of per-seed advantages (None: undefined)."""
    if adv is None:
        return {"advantage": math.nan, "ci_lo": math.nan, "ci_hi": math.nan, "verdict": "undefined",
                "seeds_needed": pd.NA}
    mean, lo, hi = mean_ci(adv)
    if n < 2:
        return {"advantage": mean, "ci_lo": math.nan, "ci_hi": math.nan, "verdict": "undefined",
                "seeds_needed": pd.NA}
    verdict = "better" if lo > 0 else "worse" if hi < 0 else "indistinguishable"
    need = seeds_needed(adv)
    return {"advantage": mean, "ci_lo": lo, "ci_hi": hi, "verdict": verdict,
            "seeds_needed": pd.NA if need is None else need}


def _advantage(curves: Curves, a: dict[int, float], b: dict[int, float] | None) -> np.ndarray | None:
    """Per seed of S, Σ_{m=1..L} (a_s(x_A) − a_s(x_B)); against the Oracle (b None), −Σ d_s(x_A). None (undefined)
    when an x is undefined, or when L = 0 leaves no cycle to compare."""
    if curves.last < 1:
        return None
    total = np.zeros(curves.n)
    for m in range(1, curves.last + 1):
        x = a.get(m)
        ours = curves.cycles[m].at(x) if x is not None else None
        if ours is None:
            return None
        if b is None:
            theirs = curves.cycles[m].oracle_acc()
        else:
            y = b.get(m)
            theirs = curves.cycles[m].at(y) if y is not None else None
        if theirs is None:
            return None
        total += ours - theirs
    return total


def verdict_table(df: pd.DataFrame) -> pd.DataFrame:
    """tables/verdict.csv: each SILO variant against `oracle`, `constant_dense` and `constant_best`."""
    curves = oracle_curves(df)
    if not curves.seeds:
        return pd.DataFrame(columns=VERDICT_COLUMNS)
    lrs = schedules(df, curves)
    records = []
    for method in silo_methods(df):
        for versus in VERSUS:
            adv = _advantage(curves, lrs[method], None if versus == "oracle" else lrs[versus])
            records.append({"schedule": method, "versus": versus, "n": curves.n, **_judge(adv, curves.n)})
    frame = pd.DataFrame(records, columns=VERDICT_COLUMNS)
    frame["seeds_needed"] = frame["seeds_needed"].astype("Int64")
    return frame


def _chains(rows: pd.DataFrame, last: int) -> tuple[dict[int, pd.Series], set[int]]:
    """Per evaluation seed, test accuracy per cycle 1..L of its final chain when the chain is whole and never
    diverged; and the seeds whose chain diverged at a cycle ≤ L."""
    whole, diverged = {}, set()
    for seed, chain in rows.groupby("seed"):
        chain = chain[chain["cycle"] <= last]
        if chain["diverged"].astype(bool).any():
            diverged.add(int(seed))
            continue
        acc = chain.groupby("cycle")["test_acc"].mean()
        if set(range(1, last + 1)) <= set(int(c) for c in acc.index):
            whole[int(seed)] = acc
    return whole, diverged


def end_to_end(df: pd.DataFrame, versus: str = WARMUP) -> pd.DataFrame:
    """Each SILO variant's own final chains against `versus`'s (LR warmup: the dense-tuned peak kept), on the
    evaluation seeds both ran: per seed Σ_{m=1..L} (test_acc_A − test_acc_B), with CI and seeds_needed. A seed
    whose chain diverged for either method is left out of the pairs and counted in `diverged`/`versus_diverged`."""
    theirs = final_rows(df, versus)
    if theirs.empty:
        return pd.DataFrame(columns=END_TO_END_COLUMNS)
    last = int(df["cycle"].max())
    b, b_div = _chains(theirs, last)
    records = []
    for method in silo_methods(df):
        a, a_div = _chains(final_rows(df, method), last)
        seeds = sorted(set(a) & set(b))
        adv = np.array([sum(a[s][m] - b[s][m] for m in range(1, last + 1)) for s in seeds], dtype=float)
        records.append({"schedule": method, "versus": versus, "n": len(seeds),
                        **_judge(adv if seeds else None, len(seeds)), "diverged": len(a_div),
                        "versus_diverged": len(b_div), "seeds": " ".join(map(str, seeds))})
    frame = pd.DataFrame(records, columns=END_TO_END_COLUMNS)
    frame["seeds_needed"] = frame["seeds_needed"].astype("Int64")
    return frame
