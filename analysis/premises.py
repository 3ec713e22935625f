"""Where a run contradicts the SILO paper's premises, one sentence each, with the numbers. The paper's argument
rests on observations a run can contradict:

- the gradient σ falls as the network is pruned (Fig. 1, §3.1), which is why the max_lr should rise;
- the Oracle's max_lr b moves as the network is pruned (Theorem 2, Remark 2: α ∝ C^(-1/2) rises), so a schedule
  that adapts has something to find. "b stays flat" fires when, over cycles 1..L (L ≥ 2), b takes at most two
  values with no value of the Oracle's cycle-0 grid strictly between them: at most one grid step, which racing's
  and the refinement's noise alone can take (a b identical at every cycle, cycle 0 included, was the old rule: it
  never fired when b moved one step at cycle 1 and stayed, as on the default);
- adapting has something to find at all (`nothing_to_find`, one run or over replicates): it has nothing to find
  when the best constant is equivalent to or better than the Oracle's own schedule end to end on the evaluation
  seeds (`analysis.regret.paired` of the held-out chains `constant_best` and `oracle_schedule`, per run; over
  replicates the mean and 95 % t interval of the replicates' advantages, labelled by `statistics.label`), or when
  one constant max_lr lies inside the paper interval at every (run, cycle) pair (`selection.in_set`);
- SILO costs a fraction of the Oracle (the paper's complexity claim): SILO costing more epochs than the Oracle as
  run is the opposite. The sentence compares with both Oracles, the one that ran (racing by default) and the
  exhaustive one it stands for (`exhaustive_oracle`: its plan along the run's own chain), and separates what
  SILO's own search costs (silo_paper's δ search, its "tune" rows; silo_fit's study, its "fit" rows) from what
  the SILO schedule itself costs (its "final" chains).

`findings(df)` reads them off one run's results table (the same statistics, Oracle sets and cost rows the report's
tables use); `sentences` says them for one run, `over_replicates` gathers them over replicates (in how many, with
each replicate's numbers). Nothing is said where the run agrees with the premise or cannot tell."""
from __future__ import annotations

import math
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import pandas as pd

from analysis import regret
from analysis.intervals import oracle_intervals
from analysis.over_replicates import oracle_choices
from analysis.select import label
from analysis.tables import fmt_density, statistics_table
from analysis.verdict_sentences import ci_text, fmt_lr
from oracle_search.compared import final_rows, last_cycle, oracle_curves, oracle_trials
from oracle_search.estimate import oracle_phase
from oracle_search.racing import OracleSearch
from oracle_search.schema import SILO_METHODS, Method, Stage
from oracle_search.selection import in_set, lr_key
from oracle_search.statistics import MARGIN_PER_CYCLE, label as verdict_label, mean_interval

SIGMA = "sigma_rises"
FLAT = "flat_b"
COST = "silo_costs_more"  # one finding per SILO variant: key "silo_costs_more:<method>"
NOTHING = "nothing_to_find"

PREMISE = {
    # The reading is named (issue 60): which weights σ pools over decides its direction. The paper's Fig. 1 counts
    # all weights, the pruned ones' zero gradients too; `layer_statistics` pools the surviving ones.
    SIGMA: "where the paper's Fig. 1 premise is that it falls as the network is pruned (here σ over the surviving "
           "weights' gradients at each cycle's end, on one training batch of the Oracle's chain; Fig. 1 counts all "
           "weights, the pruned ones' zeros too, a reading in which σ can fall while this one rises: `oracle-search "
           "premise` reads both)",
    FLAT: "where the paper's premise (Theorem 2, Remark 2) is a max_lr that rises as the network is pruned: here b "
          "moves by at most one step of the grid after cycle 0",
    COST: "where the paper's complexity claim is that SILO costs a fraction of the Oracle",
    NOTHING: "where the paper's premise (Theorem 2, Remark 2) is a max_lr that must move as the network is pruned, "
             "so that a schedule that adapts has something to find",
}
# What a SILO variant's own search is (its rows before its schedule is fixed), by method.
SEARCH = {Method.SILO_PAPER.value: (Stage.TUNE.value, "its δ search"),
          Method.SILO_FIT.value: (Stage.FIT.value, "its study")}


@dataclass(frozen=True)
class Finding:
    """One premise the run contradicts: `key` (SIGMA, FLAT or COST:method) and the numbers said about it."""

    key: str
    numbers: str  # e.g. "from 0.00086 at λ = 100 % to 0.0029 at λ = 6.87 % (3.33×)"

    @property
    def premise(self) -> str:
        return PREMISE[self.key.split(":")[0]]

    @property
    def subject(self) -> str:
        kind, _, method = self.key.partition(":")
        return {SIGMA: "The gradient σ rises", FLAT: "The Oracle's b stays flat",
                COST: f"{label(method)} costs more epochs than the Oracle",
                NOTHING: "Adapting has nothing to find"}[kind]


def _sigma(df: pd.DataFrame) -> Finding | None:
    table = statistics_table(df)
    if table is None or len(table.data) < 2:
        return None
    first, last = table.data.iloc[0], table.data.iloc[-1]
    if not last["grad_std"] > first["grad_std"]:
        return None
    return Finding(SIGMA, f"from {first['grad_std']:.2g} at λ = {fmt_density(first['density'])} % to "
                          f"{last['grad_std']:.2g} at λ = {fmt_density(last['density'])} % "
                          f"({last['grad_std'] / first['grad_std']:.2f}×)")


def grid_of(df: pd.DataFrame) -> list[float]:
    """The Oracle's coarse grid: the values of its cycle-0 grid rows (cycle 0 trains the whole grid)."""
    rows = oracle_trials(df)
    return sorted(set(rows[(rows["cycle"] == 0) & (rows["stage"] == Stage.GRID.value)]["max_lr"].map(lr_key)))


def _flat(df: pd.DataFrame) -> Finding | None:
    """b over cycles 1..L (L ≥ 2: one cycle after 0 shows no trend) takes at most two values with no grid value
    strictly between them."""
    pooled = oracle_intervals(df)
    later = pooled[pooled["cycle"] >= 1]
    if len(later) < 2:
        return None
    bs = later["best_max_lr"].map(lr_key)
    values = sorted(set(bs))
    if len(values) > 2 or any(values[0] < g < values[-1] for g in grid_of(df)):
        return None
    lam = pooled["density"]
    cycles = f"cycles {int(later['cycle'].iloc[0])}–{int(later['cycle'].iloc[-1])}"
    if len(values) == 1:
        where = f"at {fmt_lr(values[0])} at all {len(later)} {cycles}"
    else:
        (a, n), (b, k) = ((v, int((bs == v).sum())) for v in values)
        where = (f"at {fmt_lr(a)} ({n} cycle{'s' * (n != 1)}) or {fmt_lr(b)} ({k}) over {cycles}, no grid value "
                 "between them")
    first = pooled[pooled["cycle"] == 0]["best_max_lr"]
    start = f"; {fmt_lr(first.iloc[0])} at cycle 0" if len(first) else ""
    return Finding(FLAT, f"{where}{start}; from λ = {fmt_density(lam.iloc[0])} % to {fmt_density(lam.iloc[-1])} %")


def exhaustive_oracle(df: pd.DataFrame, grid: list[float] | None = None, bracket: bool = True) -> int | None:
    """The exhaustive plan along the run's own chain: at every cycle 0..L, the plan's first values
    (`racing.OracleSearch.first_values`: the grid at cycle 0, later the bracket around the previous b with the dense
    best) and the values the run refined or completed there, each on every seed of the chain. For an exhaustive
    run, exactly its Oracle's trainings; for a racing one, less than the exhaustive Oracle would train (it refines
    both intervals' edges, up to 3 rounds: `exhaustive_at_most`). None without Oracle rows. `grid`: the spec's
    (default: `grid_of`)."""
    rows = oracle_trials(df)
    curves = oracle_curves(df)
    if rows.empty or not curves.seeds:
        return None
    grid = sorted(lr_key(g) for g in grid) if grid else grid_of(df)
    chosen = rows[rows["selected"].astype(bool) & rows["seed"].isin(curves.seeds)]
    b = chosen.groupby("cycle")["max_lr"].agg(lambda v: v.map(lr_key).mode().min())
    search = OracleSearch(tuple(grid), tuple(curves.seeds), bracket=bracket, mode="exhaustive")
    total = 0
    for m in range(curves.last + 1):
        if m >= 1 and m - 1 not in b.index:
            break
        first = set(search.first_values(None if m == 0 else b[m - 1], b.get(0)))
        refined = set(rows[(rows["cycle"] == m) & (rows["stage"] == Stage.REFINE.value)]["max_lr"].map(lr_key))
        total += len(first | refined) * curves.n
    return total


def exhaustive_at_most(df: pd.DataFrame, grid: list[float] | None = None, refine: int = 3,
                       bracket: bool = True) -> int | None:
    """The exhaustive Oracle's trainings at most, the plan's closed form (`estimate.oracle_phase`, as the dry run
    prints it) for this run's seeds and cycles 0..L: every value of the first round and `refine` rounds of at most 4
    more, at every cycle, on every seed."""
    curves = oracle_curves(df)
    if not curves.seeds:
        return None
    plan = SimpleNamespace(grid=list(grid) if grid else grid_of(df), cycles=curves.last, epochs=0)
    return oracle_phase(plan, curves.n, refine, bracket).most


@dataclass(frozen=True)
class OracleCost:
    """What the run's Oracle cost and what the exhaustive Oracle it stands for would: trainings actually run, their
    epochs and seconds; the exhaustive plan's trainings along the run's chain (`low`) and at most (`high`), equal
    where the Oracle ran exhaustive (`racing` False: it trained at least the plan along its chain)."""

    trainings: int
    epochs: int
    seconds: float
    low: int
    high: int
    racing: bool

    @classmethod
    def of(cls, df: pd.DataFrame, grid: list[float] | None = None, refine: int = 3,
           bracket: bool = True) -> "OracleCost | None":
        rows = _spent(df, Method.ORACLE.value, (Stage.GRID.value, Stage.REFINE.value))
        low = exhaustive_oracle(df, grid, bracket)
        if rows.empty or low is None:
            return None
        racing = len(rows) < low
        high = max(exhaustive_at_most(df, grid, refine, bracket) or low, low) if racing else low
        return cls(len(rows), int(rows["epochs"].sum()), float(rows["seconds"].sum()), low, high, racing)

    @property
    def per_training(self) -> float:
        return self.epochs / self.trainings

    def exhaustive(self) -> str:
        """The exhaustive Oracle's trainings in words."""
        if not self.racing:
            return f"{self.low:,} trainings"
        return f"{self.low:,}–{self.high:,} trainings"

    def share(self, part: float) -> str:
        """`part` trainings as a share of the exhaustive Oracle's: one value, or from its most to its fewest."""
        if not self.racing:
            return _pct(part, self.low)
        return f"{100 * part / self.high:.0f}–{_pct(part, self.low)}"


def _spent(df: pd.DataFrame, method: str, stages: tuple[str, ...]) -> pd.DataFrame:
    """A method's trainings actually run (reused rows are free) in `stages`."""
    return df[(df["method"] == method) & df["stage"].isin(stages) & ~df["reused"].astype(bool)]


def _pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.0f} %"


def _cost(df: pd.DataFrame, grid: list[float] | None = None) -> list[Finding]:
    """SILO costing more epochs than the Oracle as run, said against both Oracles (the one that ran and the
    exhaustive one it stands for, `OracleCost`), its own search and its final chains apart."""
    oracle = OracleCost.of(df, grid)
    if oracle is None or not oracle.epochs > 0:
        return []
    ran = f"the {'racing' if oracle.racing else 'exhaustive'} Oracle's epochs as run"
    per = oracle.per_training
    found = []
    for m in SILO_METHODS:
        stage, what = SEARCH[m]
        search = _spent(df, m, (stage,))
        finals = _spent(df, m, (Stage.FINAL.value,))
        total = int(search["epochs"].sum() + finals["epochs"].sum())
        if not total > oracle.epochs:
            continue
        said = f"{_pct(total, oracle.epochs)} of {ran} ({total:,} against {oracle.epochs:,})"
        if oracle.racing:
            said += (f" and {oracle.share(total / per)} of the exhaustive Oracle's it stands for ("
                     f"{oracle.exhaustive()}, {round(oracle.low * per):,}–{round(oracle.high * per):,} epochs: its "
                     "plan along this run's chain with this run's refinements, and the plan at most)")
        def shares(epochs: int) -> str:
            return (f"{_pct(epochs, oracle.epochs)} of the Oracle's as run"
                    + (f", {oracle.share(epochs / per)} of the exhaustive one's" if oracle.racing else ""))

        search_epochs, final_epochs = int(search["epochs"].sum()), int(finals["epochs"].sum())
        parts = [f"{what} {search_epochs:,} epochs ({shares(search_epochs)})",
                 f"the SILO schedule itself, its final chains on the evaluation seeds, {final_epochs:,} "
                 f"({shares(final_epochs)})"]
        found.append(Finding(f"{COST}:{m}", f"{said}; of it, " + " and ".join(parts)))
    return found


def findings(df: pd.DataFrame, grid: list[float] | None = None) -> list[Finding]:
    """The premises this run contradicts, in the order σ, b, cost. `grid`: the spec's, for the exhaustive Oracle's
    plan (default: the Oracle's cycle-0 values)."""
    return [f for f in (_sigma(df), _flat(df)) if f is not None] + _cost(df, grid)


# --- adapting has nothing to find: one run or over replicates --------------------------------------------------------

HELD_OUT_PAIR = (Method.CONSTANT_BEST.value, Method.ORACLE_SCHEDULE.value)


def _held_out(df: pd.DataFrame, margin_per_cycle: float) -> dict | None:
    """`regret.paired` of the best constant's held-out chains against the Oracle's schedule's, end to end on the
    evaluation seeds; None where the run has no such chains."""
    if any(final_rows(df, m).empty for m in HELD_OUT_PAIR):
        return None
    return regret.paired(df, last_cycle(df), *HELD_OUT_PAIR, margin_per_cycle)


def one_constant(runs: dict[str, pd.DataFrame]) -> tuple[list[float], int]:
    """(the max_lr values, of those any run's Oracle trained, that lie inside the paper interval at every (run,
    cycle) pair, cycles 0..L; the number of pairs). No value where some run has fewer than two cycles."""
    choices = {name: oracle_choices(df) for name, df in runs.items()}
    if not choices or any(len(c) < 2 for c in choices.values()):
        return [], 0
    pairs = [ch for by in choices.values() for ch in by.values()]
    candidates = sorted({lr_key(v) for ch in pairs for v in ch.values})
    return [x for x in candidates if all(in_set(x, ch.values, ch.inside) for ch in pairs)], len(pairs)


def nothing_to_find(runs: dict[str, pd.DataFrame], margin_per_cycle: float = MARGIN_PER_CYCLE) -> str | None:
    """The sentence where adapting has nothing to find in these runs (one run, or replicates of one study), else
    None. It fires when the best constant is equivalent to or better than the Oracle's schedule end to end (one
    run: its interval over evaluation seeds; replicates: the mean of the replicates' advantages and its 95 % t
    interval over replicates, `statistics.label` against the summed margin), or when one constant lies inside the
    paper interval at every (run, cycle) pair."""
    unit = "replicate" if len(runs) > 1 else "run"
    parts = []
    ends = {name: d for name, df in runs.items() if (d := _held_out(df, margin_per_cycle)) is not None}
    if ends:
        margin = float(next(iter(ends.values()))["margin"])
        if len(runs) == 1:
            (d,) = ends.values()
            mean, lo, hi, verdict = d["advantage"], d["ci_lo"], d["ci_hi"], d["verdict"]
            over = f"over {d['n']} evaluation seeds"
        else:
            values = np.array([d["advantage"] for d in ends.values()], dtype=float)
            values = values[~np.isnan(values)]
            mean, lo, hi = mean_interval(values) if len(values) else (math.nan,) * 3
            verdict = verdict_label(lo, hi, margin)
            over = (f"over {len(values)} replicates: " + ", ".join(
                f"{name} {d['advantage']:+.2f}" for name, d in ends.items() if not pd.isna(d["advantage"])))
        if verdict in ("equivalent", "better"):
            how = (f"equivalent to the Oracle's schedule within ±{margin:g}" if verdict == "equivalent" else
                   "better than the Oracle's schedule")
            last = last_cycle(next(iter(runs.values())))
            parts.append(f"the best constant, held out, is {how} end to end ({mean:+.2f} {ci_text(lo, hi)} {over}; "
                         f"held-out test accuracy summed over cycles 1–{last} on the evaluation seeds)")
    inside, pairs = one_constant(runs)
    if inside:
        values = ", ".join(fmt_lr(x) for x in inside)
        parts.append(f"{'one constant' if len(inside) == 1 else 'each of the constants'} {values} lies inside the "
                     f"paper interval at every ({unit}, cycle) pair ({pairs} of {pairs}, cycle 0 included)")
    if not parts:
        return None
    return f"Adapting has nothing to find: " + "; and ".join(parts) + f", {PREMISE[NOTHING]}."


def sentences(found: list[Finding]) -> list[str]:
    """One run: one sentence per finding."""
    return [f"{f.subject}: {f.numbers}, {f.premise}." for f in found]


def over_replicates(found: dict[str, list[Finding]]) -> list[str]:
    """Replicates (name -> its findings): one sentence per premise contradicted in any replicate, saying in how many
    and each one's numbers."""
    keys = list(dict.fromkeys(f.key for fs in found.values() for f in fs))
    lines = []
    for key in keys:
        hits = [(name, f) for name, fs in found.items() for f in fs if f.key == key]
        subject, premise = hits[0][1].subject, hits[0][1].premise
        numbers = "; ".join(f"{name} {f.numbers}" for name, f in hits)
        lines.append(f"{subject} in {len(hits)} of {len(found)} replicates ({numbers}), {premise}.")
    return lines
