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
from typing import Callable

import numpy as np
import pandas as pd

from analysis.select import final_rows, last_cycle, oracle_trials, silo_max_lr_by_cycle, silo_methods
from oracle_search.curve import Curve, best_of, lr_key, refuse_duplicates
from oracle_search.schema import Method
from oracle_search.selection import RESOLUTION, bracket, choose
from oracle_search.statistics import MARGIN_PER_CYCLE, label, mean_interval, seeds_needed

CONTROLS = ("constant_dense", "constant_best")
VERSUS = ("oracle", *CONTROLS)
REGRET_COLUMNS = ["schedule", "cycle", "max_lr", "regret", "ci_lo", "ci_hi", "n"]
VERDICT_COLUMNS = ["schedule", "versus", "advantage", "ci_lo", "ci_hi", "n", "verdict", "margin", "seeds_needed"]
END_TO_END_COLUMNS = [*VERDICT_COLUMNS, "diverged", "versus_diverged", "seeds"]
WARMUP = Method.WARMUP.value


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


def end_to_end_frame(df: pd.DataFrame, last: int, versus: str = WARMUP,
                     margin_per_cycle: float = MARGIN_PER_CYCLE) -> pd.DataFrame:
    """Each SILO variant's own final chains against `versus`'s (LR warmup: the dense-tuned peak kept), on the
    evaluation seeds both ran: per seed Σ_{m=1..L} (test_acc_A − test_acc_B), with CI, the verdict against
    margin = `margin_per_cycle` × L, and seeds_needed. A seed whose chain diverged for either method is left out of
    the pairs and counted in `diverged`/`versus_diverged`."""
    theirs = final_rows(df, versus)
    if theirs.empty:
        return _frame([], END_TO_END_COLUMNS)
    margin = margin_per_cycle * max(last, 0)
    b, b_div = _chains(theirs, last)
    records = []
    for method in silo_methods(df):
        a, a_div = _chains(final_rows(df, method), last)
        seeds = sorted(set(a) & set(b))
        adv = np.array([sum(a[s][m] - b[s][m] for m in range(1, last + 1)) for s in seeds], dtype=float)
        records.append({"schedule": method, "versus": versus, "n": len(seeds),
                        **_judge(adv if seeds else None, len(seeds), margin), "diverged": len(a_div),
                        "versus_diverged": len(b_div), "seeds": " ".join(map(str, seeds))})
    return _frame(records, END_TO_END_COLUMNS)


@dataclass(frozen=True)
class Regret:
    """Everything the report says about the regret, computed once (`analyse`) and passed to every table, figure
    and sentence."""

    curves: Curves
    schedules: dict[str, dict[int, float]]  # max_lr per cycle of each SILO variant and both controls
    regret: pd.DataFrame  # tables/regret.csv
    verdict: pd.DataFrame  # tables/verdict.csv
    end_to_end: pd.DataFrame  # tables/end_to_end.csv
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
