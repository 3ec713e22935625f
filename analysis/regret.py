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
- Verdict: per-seed advantages summed over cycles 1..L, a 95 % t interval, labelled by `statistics.label` against
  a margin of `margin_per_cycle` × L points (summed like the advantage): equivalent (the interval inside ±margin),
  better, worse, inconclusive or undefined; and the seeds 80 % power would need.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from oracle_search.compared import Curves, final_rows, last_cycle, oracle_curves, schedules, silo_methods
from oracle_search.curve import Curve, refuse_duplicates
from oracle_search.schema import BASELINES, HELD_OUT, Method, Stage, current_rows
from oracle_search.statistics import MARGIN_PER_CYCLE, label, mean_interval, seeds_needed

CONTROLS = ("constant_dense", "constant_best")
VERSUS = ("oracle", *CONTROLS)
REGRET_COLUMNS = ["schedule", "cycle", "max_lr", "regret", "ci_lo", "ci_hi", "n"]
VERDICT_COLUMNS = ["schedule", "versus", "advantage", "ci_lo", "ci_hi", "n", "verdict", "margin", "seeds_needed"]
END_TO_END_COLUMNS = [*VERDICT_COLUMNS, "diverged", "versus_diverged", "seeds", "chosen"]
BEST_BENCHMARK = "best_benchmark"  # per replicate, the benchmark its tuning seeds scored highest (`best_benchmark`)
# What each SILO variant is compared with in the verdict, end to end on the evaluation seeds: the held-out references
# (the Oracle's schedule, not adapting, the best constant), every tuned benchmark schedule, and the best benchmark.
FAMILY = (*HELD_OUT, *BASELINES, BEST_BENCHMARK)


def regret_per_seed(cycle: Curve, x: float | None) -> np.ndarray | None:
    """d_s = a_s(b^(−s)) − a_s(x) per seed of S, or None where undefined."""
    if x is None:
        return None
    oracle, a = cycle.oracle_acc(), cycle.at(x)
    return None if oracle is None or a is None else oracle - a


def regret_frame(curves: Curves, lrs: dict[str, dict[int, float]]) -> pd.DataFrame:
    """tables/regret.csv: one row per schedule and cycle 0..L; regret and CI empty where undefined."""
    records = []
    for name, by_cycle in lrs.items():
        for m in range(curves.last + 1):
            x = by_cycle.get(m)
            d = regret_per_seed(curves.cycles[m], x)
            mean, lo, hi = mean_interval(d) if d is not None else (math.nan,) * 3
            records.append({"schedule": name, "cycle": m, "max_lr": math.nan if x is None else x, "regret": mean,
                            "ci_lo": lo, "ci_hi": hi, "n": curves.n})
    return pd.DataFrame(records, columns=REGRET_COLUMNS)


def _judge(adv: np.ndarray | None, n: int, margin: float) -> dict:
    """advantage, CI, verdict (`statistics.label` against `margin`, the summed margin), margin and seeds_needed of
    per-seed advantages (None: undefined). seeds_needed is for better/worse/inconclusive (the seeds that would
    exclude 0); empty for equivalent."""
    if adv is None:
        return {"advantage": math.nan, "ci_lo": math.nan, "ci_hi": math.nan, "verdict": "undefined",
                "margin": margin, "seeds_needed": pd.NA}
    mean, lo, hi = mean_interval(adv)
    if n < 2:
        return {"advantage": mean, "ci_lo": math.nan, "ci_hi": math.nan, "verdict": "undefined",
                "margin": margin, "seeds_needed": pd.NA}
    verdict = label(lo, hi, margin)
    need = seeds_needed(adv) if verdict != "equivalent" else None
    return {"advantage": mean, "ci_lo": lo, "ci_hi": hi, "verdict": verdict, "margin": margin,
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


def _frame(records: list[dict], columns: list[str]) -> pd.DataFrame:
    frame = pd.DataFrame(records, columns=columns)
    frame["seeds_needed"] = frame["seeds_needed"].astype("Int64")
    frame["margin"] = frame["margin"].astype(float)
    return frame


def verdict_frame(curves: Curves, lrs: dict[str, dict[int, float]], silo: list[str],
                  margin_per_cycle: float = MARGIN_PER_CYCLE) -> pd.DataFrame:
    """tables/verdict.csv: each SILO variant in `silo` against `oracle`, `constant_dense` and `constant_best`,
    labelled against margin = `margin_per_cycle` × L."""
    if not curves.seeds:
        return _frame([], VERDICT_COLUMNS)
    margin = margin_per_cycle * max(curves.last, 0)
    records = []
    for method in silo:
        for versus in VERSUS:
            adv = _advantage(curves, lrs[method], None if versus == "oracle" else lrs[versus])
            records.append({"schedule": method, "versus": versus, "n": curves.n, **_judge(adv, curves.n, margin)})
    return _frame(records, VERDICT_COLUMNS)


def _chains(rows: pd.DataFrame, last: int) -> tuple[dict[int, pd.Series], set[int]]:
    """Per evaluation seed, test accuracy per cycle 1..L of its final chain when the chain is whole and never
    diverged; and the seeds whose chain diverged at a cycle ≤ L."""
    refuse_duplicates(rows, ["seed", "cycle"], "final chains")
    whole, diverged = {}, set()
    for seed, chain in rows.groupby("seed"):
        chain = chain[chain["cycle"] <= last]
        if chain["diverged"].astype(bool).any():
            diverged.add(int(seed))
            continue
        acc = chain.set_index("cycle")["test_acc"]
        if set(range(1, last + 1)) <= set(int(c) for c in acc.index):
            whole[int(seed)] = acc
    return whole, diverged


def paired(df: pd.DataFrame, last: int, a: str, b: str, margin_per_cycle: float = MARGIN_PER_CYCLE) -> dict:
    """Method `a`'s own final chains against `b`'s, end to end on the evaluation seeds both ran: per seed
    Σ_{m=1..L} (test_acc_A − test_acc_B), with the CI, the verdict against margin = `margin_per_cycle` × L and
    seeds_needed (`END_TO_END_COLUMNS` but `versus`' name). A seed whose chain diverged for either method is left out
    of the pairs and counted in `diverged`/`versus_diverged`; without final rows for either, undefined."""
    margin = margin_per_cycle * max(last, 0)
    (x, x_div), (y, y_div) = (_chains(final_rows(df, m), last) for m in (a, b))
    seeds = sorted(set(x) & set(y))
    adv = np.array([sum(x[s][m] - y[s][m] for m in range(1, last + 1)) for s in seeds], dtype=float)
    return {"schedule": a, "versus": b, "n": len(seeds), **_judge(adv if seeds and last >= 1 else None, len(seeds),
                                                                   margin),
            "diverged": len(x_div), "versus_diverged": len(y_div), "seeds": " ".join(map(str, seeds))}


def tuning_scores(df: pd.DataFrame) -> dict[str, float]:
    """Each benchmark schedule's score on the tuning seeds, as its tuning chose its peak: the best seed-mean
    cycle-0 validation accuracy among the peaks every tuning seed trained (`Curve.best`). The Oracle's own schedule
    (LR warmup on the default) is tuned on the Oracle's cycle-0 rows. No evaluation seed is read."""
    rows = current_rows(df)
    own = {s for s in rows.loc[rows["method"] == Method.ORACLE.value, "schedule"].dropna()}
    scores = {}
    for name in BASELINES:
        tune = rows[(rows["method"] == name) & (rows["stage"] == Stage.TUNE.value) & (rows["cycle"] == 0)]
        if tune.empty and name in own:  # the Oracle's cycle 0 on S, as the dense choice was made
            curve = oracle_curves(df).cycles.get(0)
        elif tune.empty:
            continue
        else:
            curve = Curve.from_rows(tune, sorted(int(s) for s in tune["seed"].unique()))
        if curve is not None and (best := curve.best) is not None:
            scores[name] = float(np.mean(curve.at(best)))
    return scores


def best_benchmark(df: pd.DataFrame) -> str | None:
    """The benchmark schedule with the highest tuning-seed score (`tuning_scores`; ties to the first in the
    registry's order), chosen before any evaluation seed is read; None without a tuned benchmark."""
    scores = tuning_scores(df)
    return max(scores, key=lambda name: (scores[name], -BASELINES.index(name))) if scores else None


def end_to_end_frame(df: pd.DataFrame, last: int, margin_per_cycle: float = MARGIN_PER_CYCLE) -> pd.DataFrame:
    """tables/end_to_end.csv, the verdict's family: each SILO variant's own final chains against each of
    `FAMILY` on the evaluation seeds both ran (`paired`). `best_benchmark` is the benchmark its tuning seeds
    scored highest (`chosen`). A comparison whose versus has no final rows is left out."""
    best = best_benchmark(df)
    records = []
    for method in silo_methods(df):
        for versus in FAMILY:
            theirs = best if versus == BEST_BENCHMARK else versus
            if theirs is None or final_rows(df, theirs).empty:
                continue
            records.append(paired(df, last, method, theirs, margin_per_cycle)
                           | {"versus": versus, "chosen": theirs if versus == BEST_BENCHMARK else ""})
    return _frame(records, END_TO_END_COLUMNS)


@dataclass(frozen=True)
class Regret:
    """Everything the report says about the regret, computed once (`analyse`) and passed to every table, figure
    and sentence."""

    curves: Curves
    schedules: dict[str, dict[int, float]]  # max_lr per cycle of each SILO variant and both controls
    regret: pd.DataFrame  # tables/regret.csv
    verdict: pd.DataFrame  # tables/verdict.csv
    end_to_end: pd.DataFrame  # tables/end_to_end.csv: the verdict's family, end to end on the evaluation seeds
    last: int  # L
    margin_per_cycle: float = MARGIN_PER_CYCLE  # the verdicts' margin is this × L points (their `margin` column)

    def control_lr(self, name: str) -> float:
        """A control's constant max_lr, NaN without one."""
        values = set(self.schedules.get(name, {}).values())
        return values.pop() if values else math.nan


def analyse(df: pd.DataFrame, margin_per_cycle: float = MARGIN_PER_CYCLE) -> Regret:
    """The regret, the verdict and the end-to-end comparison of a results table; every label against a margin of
    `margin_per_cycle` points per compared cycle (summed over cycles 1..L, like the advantage)."""
    curves = oracle_curves(df)
    lrs = schedules(df, curves)
    last = last_cycle(df)
    return Regret(curves, lrs, regret_frame(curves, lrs),
                  verdict_frame(curves, lrs, silo_methods(df), margin_per_cycle),
                  end_to_end_frame(df, last, margin_per_cycle=margin_per_cycle), last, margin_per_cycle)
