"""The paper's §5.3 question over replicates: at each cycle, each replicate's Oracle b with its paper interval and
each SILO variant's max_lr, whether it lies inside that replicate's interval, and in how many replicates; beside
it, the same count for the two controls that do not adapt (not adapting and the best constant), so that a count
SILO reaches is read against what a constant reaches over the same (replicate, cycle) pairs.

- `Intervals.read(name, rows)`: one replicate's Oracle sets (`analysis.intervals.oracle_intervals`), SILO
  parameters, the first cycle that tests each SILO variant (`tables.first_judged`: after q, never cycle 0), and
  the controls' max_lr (`compared.schedules`: constant_dense, constant_best) with whether each lies inside the
  paper interval at each cycle (`selection.in_set`, as SILO's).
- `oracle_choices(rows)`: the Oracle's choice per cycle (`selection.choose`), its sets over the trained values.
- `section_table(reps)`: the table, one row per cycle.
- `max_lr_plot(reps, spec)`: the paper's max_lr figure with every replicate drawn."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pandas as pd

from analysis import figures
from analysis.intervals import oracle_intervals
from analysis.select import label, pruning_rate, silo_params
from analysis.tables import Table, first_judged, fmt_density
from analysis.verdict_sentences import fmt_lr
from oracle_search.compared import oracle_curves, oracle_trials, schedules, silo_methods
from oracle_search.schema import SILO_METHODS
from oracle_search.selection import Choice, Curve, choose, in_set

CONTROLS = {"constant_best": "the best constant", "constant_dense": "not adapting"}  # the §5.3 count's controls


def oracle_choices(rows: pd.DataFrame) -> dict[int, Choice]:
    """The Oracle's choice and sets per cycle on its current chain, as `intervals.oracle_intervals` makes them."""
    return {int(cycle): choice for cycle, group in oracle_trials(rows).groupby("cycle")
            if (choice := choose(Curve.from_rows(group))) is not None}


@dataclass(frozen=True)
class Intervals:
    """One replicate's Oracle sets per cycle, its SILO variants' parameters and first judged cycles."""

    name: str
    pooled: pd.DataFrame
    silo: dict[str, dict]
    first: dict[str, int]
    cycles: int
    rate: float
    controls: dict[str, float] = dataclasses.field(default_factory=dict)  # CONTROLS' max_lr (none: left out)
    control_inside: dict[str, dict[int, bool]] = dataclasses.field(default_factory=dict)  # per control and cycle

    @classmethod
    def read(cls, name: str, rows: pd.DataFrame, spec: dict | None) -> "Intervals":
        silo = {m: p for m in silo_methods(rows) if (p := silo_params(rows, m)) is not None}
        lrs = schedules(rows, oracle_curves(rows)) if not oracle_trials(rows).empty else {}
        controls = {c: next(iter(lrs[c].values())) for c in CONTROLS if lrs.get(c)}
        choices = oracle_choices(rows)
        inside = {c: {m: in_set(x, ch.values, ch.inside) for m, ch in choices.items()} for c, x in controls.items()}
        return cls(name, oracle_intervals(rows), silo, {m: first_judged(rows, m) for m in silo},
                   int(rows["cycle"].max()), pruning_rate(rows, spec), controls, inside)


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


def _control_count(reps: list[Intervals], control: str, pairs: list[tuple[str, int]]) -> tuple[int, int]:
    """(pairs where `control` lies inside its replicate's paper interval, pairs where it has a max_lr)."""
    by = {r.name: r for r in reps}
    flags = [by[n].control_inside[control][c] for n, c in pairs
             if control in by[n].control_inside and c in by[n].control_inside[control]]
    return sum(flags), len(flags)


def section_table(reps: list[Intervals]) -> Table | None:
    """Rows: cycles. Columns: λ, each replicate's b [paper interval], per SILO variant its max_lr in each
    replicate (in / out of that replicate's paper interval; * where the cycle does not test it) and in how many
    replicates it lies inside, of those whose cycle tests it, and each control's max_lr in each replicate, in or
    out. The line gives each SILO variant's count and, over the same (replicate, cycle) pairs, each control's."""
    data = _records(reps)
    if data.empty:
        return None
    cycles = sorted(data["cycle"].unique())
    lam = data.drop_duplicates("cycle").set_index("cycle")["density"]
    oracle = data.drop_duplicates(["replicate", "cycle"]).set_index(["replicate", "cycle"])
    variants = [m for m in SILO_METHODS if "method" in data and m in set(data["method"])]
    silo = data.set_index(["method", "replicate", "cycle"]) if variants else None
    names = [r.name for r in reps]
    by = {r.name: r for r in reps}
    controls = [c for c in CONTROLS if any(c in r.controls for r in reps)]
    rows, counts = [], {m: [0, 0] for m in variants}
    pairs: dict[str, list[tuple[str, int]]] = {m: [] for m in variants}  # each variant's judged pairs
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
            pairs[m] += [(s.name[1], c) for s in judged]  # the row's name is its (method, replicate, cycle)
            row[f"{label(m)} inside"] = f"{inside} of {len(judged)}" if judged else "–"
        for k in controls:
            here = [(by[n].controls[k], by[n].control_inside[k].get(c)) for n in names
                    if k in by[n].controls and (n, c) in oracle.index]
            row[f"{CONTROLS[k].removeprefix('the ').capitalize()} max_lr"] = " · ".join(
                f"{fmt_lr(x)} {_inside(pd.NA if flag is None else flag)}{'' if c >= 1 else '*'}" for x, flag in here)
        rows.append(row)
    parts = []
    for m, (k, n) in counts.items():
        part = (f"{label(m)} lies inside its replicate's paper interval at {k} of {n} (replicate, cycle) pairs it "
                "is tested at")
        beside = [f"{CONTROLS[c]} at {i}" + (f" of {j}" if j != n else "")
                  for c in controls for i, j in [_control_count(reps, c, pairs[m])]]
        if beside:
            part += " (over the same pairs: " + ", ".join(beside) + ")"
        parts.append(part)
    every = [(n, c) for n in names for c in cycles if c >= 1 and (n, c) in oracle.index]
    overall = [f"{CONTROLS[c]} ({_lrs(reps, c)}) at {i} of {j}" for c in controls
               for i, j in [_control_count(reps, c, every)]]
    line = (f"The paper's §5.3 question over {len(reps)} replicates: at each density, each replicate's Oracle b "
            "(seed mean) with its paper interval (values within 0.5 points of b's seed-mean validation accuracy), "
            "and each SILO variant's max_lr in each replicate, in order, in or out of that replicate's interval; "
            "beside them the two controls that do not adapt, not adapting (the Oracle's dense choice kept) and the "
            "best constant (chosen on the Oracle's chain), in or out by the same rule. "
            "* a cycle ≤ q (SILO keeps ε there) or cycle 0, which tests nothing and is not counted. "
            + ("; ".join(parts) + "." if parts else "No SILO rows.")
            + (f" Over every (replicate, cycle ≥ 1) pair: " + ", ".join(overall) + "." if overall else ""))
    return Table("section53", "max_lr per cycle over the replicates (paper §5.3)", pd.DataFrame(rows), data, line)


def _lrs(reps: list[Intervals], control: str) -> str:
    """A control's max_lr over the replicates, each value once, in the replicates' order."""
    return ", ".join(dict.fromkeys(fmt_lr(r.controls[control]) for r in reps if control in r.controls))


def max_lr_plot(reps: list[Intervals], theory: dict) -> figures.Rendered | None:
    """The paper's figure over replicates, one panel each (`figures.max_lr_replicates_figure`, PNG and SVG);
    `theory`: Theorem 1's σ_X, σ_W, d."""
    if all(r.pooled.empty and not r.silo for r in reps):
        return None
    return figures.max_lr_replicates_figure([(r.name, r.pooled, r.silo) for r in reps], reps[0].rate,
                                            max(r.cycles for r in reps), theory)

