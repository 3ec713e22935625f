"""Named selections of the results table: the current rows, each method's final rows, densities, SILO's
parameters. Method names, labels and stages come from `oracle_search.schema`."""
from __future__ import annotations

import pandas as pd

from oracle_search.compared import final_rows
from oracle_search.schema import METHODS, Method, Stage

LABELS = {m.value: info.label for m, info in METHODS.items()}
SCHEDULE_LABELS = {"constant_dense": "constant_dense (not adapting)",
                   "constant_best": "constant_best (hindsight, optimistic)"}
# The stages whose trainings a method's cost counts; methods not named here count tune + final.
COST_STAGES = {Method.ORACLE.value: (Stage.GRID.value, Stage.REFINE.value),
               Method.SILO_FIT.value: (Stage.FIT.value, Stage.FINAL.value)}
DEFAULT_STAGES = (Stage.TUNE.value, Stage.FINAL.value)
DEFAULT_RATE = 0.2


def methods(df: pd.DataFrame) -> list[str]:
    """Methods present, in report order: the schema's order, then any others by name."""
    present = set(df["method"])
    known = [m.value for m in METHODS]
    return [m for m in known if m in present] + sorted(present - set(known))


def label(method: str) -> str:
    return LABELS.get(method, method)


def schedule_label(name: str) -> str:
    """A method's label, or a control's name with what it is."""
    return SCHEDULE_LABELS.get(name, label(name))


def cost_rows(df: pd.DataFrame, method: str) -> pd.DataFrame:
    """Every training a method paid for and actually ran (rows reused from an identical training are free)."""
    rows = df[(df["method"] == method) & ~df["reused"].astype(bool)]
    return rows[rows["stage"].isin(COST_STAGES.get(method, DEFAULT_STAGES))]


def densities(df: pd.DataFrame) -> pd.Series:
    """Density λ (percent) per cycle."""
    return df.groupby("cycle")["density"].mean()


def pruning_rate(df: pd.DataFrame, spec: dict | None) -> float:
    """The pruning rate p: from the spec, else 1 - λ(1)/100, else the default 0.2."""
    if spec and "rate" in spec:
        return float(spec["rate"])
    lam = densities(df)
    return 1.0 - float(lam[1]) / 100.0 if 1 in lam.index else DEFAULT_RATE


def silo_params(df: pd.DataFrame, method: str = Method.SILO_PAPER.value) -> dict | None:
    """A SILO variant's (epsilon, delta, q, beta) from its current final rows, or None without them."""
    rows = final_rows(df, method)[["epsilon", "delta", "q", "beta"]].dropna()
    if rows.empty:
        return None
    first = rows.iloc[0]
    return {"epsilon": float(first.epsilon), "delta": float(first.delta), "q": int(first.q), "beta": float(first.beta)}
