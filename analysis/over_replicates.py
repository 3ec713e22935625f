"""The paper's §5.3 question over replicates: at each cycle, each replicate's Oracle b with its paper interval and
each SILO variant's max_lr, whether it lies inside that replicate's interval, and in how many replicates.

- `Intervals.read(name, rows)`: one replicate's Oracle sets (`analysis.intervals.oracle_intervals`), SILO
  parameters and the first cycle that tests each SILO variant (`tables.first_judged`: after q, never cycle 0).
- `section_table(reps)`: the table, one row per cycle.
- `max_lr_plot(reps, spec)`: the paper's max_lr figure with every replicate drawn."""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from analysis import figures
from analysis.intervals import oracle_intervals
from analysis.select import label, pruning_rate, silo_params
from analysis.tables import Table, first_judged, fmt_density
from analysis.verdict_sentences import fmt_lr
from oracle_search.compared import silo_methods
from oracle_search.schema import SILO_METHODS


@dataclass(frozen=True)
class Intervals:
    """One replicate's Oracle sets per cycle, its SILO variants' parameters and first judged cycles."""

    name: str
    pooled: pd.DataFrame
    silo: dict[str, dict]
    first: dict[str, int]
    cycles: int
    rate: float

    @classmethod
    def read(cls, name: str, rows: pd.DataFrame, spec: dict | None) -> "Intervals":
        silo = {m: p for m in silo_methods(rows) if (p := silo_params(rows, m)) is not None}
        return cls(name, oracle_intervals(rows), silo, {m: first_judged(rows, m) for m in silo},
                   int(rows["cycle"].max()), pruning_rate(rows, spec))


def _records(reps: list[Intervals]) -> pd.DataFrame:
    """Long: one row per (replicate, cycle, SILO variant) with b, the paper interval, the variant's max_lr, whether
    it is inside and whether the cycle tests it."""
    records = []
    for r in reps:
        for _, row in r.pooled.iterrows():
            base = {"replicate": r.name, "cycle": int(row["cycle"]), "density": float(row["density"]),
                    "b": float(row["best_max_lr"]), "lo": float(row["lo"]), "hi": float(row["hi"])}
            variants = [m for m in SILO_METHODS if f"{m}_max_lr" in row.index] or [None]
            for m in variants:
                extra = {} if m is None else {
                    "method": m, "max_lr": float(row[f"{m}_max_lr"]), "inside": row[f"{m}_inside"],
                    "judged": int(row["cycle"]) >= r.first.get(m, 1)}
                records.append({**base, **extra})
    return pd.DataFrame(records)


def _inside(x: object) -> str:
    return "–" if pd.isna(x) else ("in" if x else "out")


def section_table(reps: list[Intervals]) -> Table | None:
    """Rows: cycles. Columns: λ, each replicate's b [paper interval], and per SILO variant its max_lr in each
    replicate (in / out of that replicate's paper interval; * where the cycle does not test it) and in how many
    replicates it lies inside, of those whose cycle tests it."""
    data = _records(reps)
    if data.empty:
        return None
    cycles = sorted(data["cycle"].unique())
    lam = data.drop_duplicates("cycle").set_index("cycle")["density"]
    oracle = data.drop_duplicates(["replicate", "cycle"]).set_index(["replicate", "cycle"])
    variants = [m for m in SILO_METHODS if "method" in data and m in set(data["method"])]
    silo = data.set_index(["method", "replicate", "cycle"]) if variants else None
    names = [r.name for r in reps]
    rows, counts = [], {m: [0, 0] for m in variants}
    for c in cycles:
        row = {"λ (%)": fmt_density(lam[c])}
        for n in names:
            o = oracle.loc[(n, c)] if (n, c) in oracle.index else None
            row[f"{n} b [paper interval]"] = "–" if o is None else f"{fmt_lr(o['b'])} [{fmt_lr(o['lo'])}, {fmt_lr(o['hi'])}]"
        for m in variants:
            here = [silo.loc[(m, n, c)] for n in names if (m, n, c) in silo.index]
            row[f"{label(m)} max_lr"] = " · ".join(
                f"{fmt_lr(s['max_lr'])} {_inside(s['inside'])}{'' if s['judged'] else '*'}" for s in here)
            judged = [s for s in here if s["judged"] and not pd.isna(s["inside"])]
            inside = sum(bool(s["inside"]) for s in judged)
            counts[m][0] += inside
            counts[m][1] += len(judged)
            row[f"{label(m)} inside"] = f"{inside} of {len(judged)}" if judged else "–"
        rows.append(row)
    parts = [f"{label(m)} lies inside its replicate's paper interval at {k} of {n} (replicate, cycle) pairs it is "
             "tested at" for m, (k, n) in counts.items()]
    line = (f"The paper's §5.3 question over {len(reps)} replicates: at each density, each replicate's Oracle b "
            "(seed mean) with its paper interval (values within 0.5 points of b's seed-mean validation accuracy), "
            "and each SILO variant's max_lr in each replicate, in order, in or out of that replicate's interval. "
            "* a cycle ≤ q (SILO keeps ε there) or cycle 0, which tests nothing and is not counted. "
            + ("; ".join(parts) + "." if parts else "No SILO rows."))
    return Table("section53", "max_lr per cycle over the replicates (paper §5.3)", pd.DataFrame(rows), data, line)


def max_lr_plot(reps: list[Intervals], theory: dict) -> bytes | None:
    """The paper's figure over replicates (`figures.max_lr_replicates_figure`); `theory`: Theorem 1's σ_X, σ_W, d."""
    if all(r.pooled.empty and not r.silo for r in reps):
        return None
    return figures.max_lr_replicates_figure([(r.name, r.pooled, r.silo) for r in reps], reps[0].rate,
                                            max(r.cycles for r in reps), theory)

