"""Named selections of the results table: Oracle trials, each method's final rows, densities, SILO parameters."""
from __future__ import annotations

import pandas as pd

BASELINES = ("constant", "decay", "cyclical", "warmup", "cosine")
LABELS = {
    "oracle": "Oracle",
    "silo": "SILO",
    "constant": "Constant LR",
    "decay": "LR decay",
    "cyclical": "Cyclical LR",
    "warmup": "LR warmup",
    "cosine": "Cosine",
}
# The stages whose trainings a method's cost counts; methods not named here are baselines.
COST_STAGES = {"oracle": ("grid", "refine"), "silo": ("fit", "final")}
BASELINE_STAGES = ("tune", "final")
DEFAULT_RATE = 0.2


def methods(df: pd.DataFrame) -> list[str]:
    """Methods present, in report order: oracle, silo, the paper's baselines, then any others by name."""
    known = ("oracle", "silo", *BASELINES)
    present = set(df["method"])
    return [m for m in known if m in present] + sorted(present - set(known))


def label(method: str) -> str:
    return LABELS.get(method, method)


def oracle_trials(df: pd.DataFrame) -> pd.DataFrame:
    """The Oracle's grid and refinement trials that did not diverge."""
    keep = (df["method"] == "oracle") & df["stage"].isin(COST_STAGES["oracle"]) & ~df["diverged"].astype(bool)
    return df[keep]


def final_rows(df: pd.DataFrame, method: str) -> pd.DataFrame:
    """The rows a method is judged by: the Oracle's selected trials, every other method's final stage."""
    rows = df[df["method"] == method]
    if method == "oracle":
        return rows[rows["stage"].isin(COST_STAGES["oracle"]) & rows["selected"].astype(bool)]
    return rows[rows["stage"] == "final"]


def cost_rows(df: pd.DataFrame, method: str) -> pd.DataFrame:
    """Every training a method paid for: Oracle grid + refine, SILO fit + final, baselines tune + final."""
    rows = df[df["method"] == method]
    return rows[rows["stage"].isin(COST_STAGES.get(method, BASELINE_STAGES))]


def densities(df: pd.DataFrame) -> pd.Series:
    """Density λ (percent) per cycle."""
    return df.groupby("cycle")["density"].mean()


def pruning_rate(df: pd.DataFrame, spec: dict | None) -> float:
    """The pruning rate p: from the spec, else 1 - λ(1)/100, else the default 0.2."""
    if spec and "rate" in spec:
        return float(spec["rate"])
    lam = densities(df)
    return 1.0 - float(lam[1]) / 100.0 if 1 in lam.index else DEFAULT_RATE


def silo_params(df: pd.DataFrame) -> dict | None:
    """SILO's (epsilon, delta, q, beta) from its final rows, or None without them."""
    rows = final_rows(df, "silo")[["epsilon", "delta", "q", "beta"]].dropna()
    if rows.empty:
        return None
    first = rows.iloc[0]
    return {"epsilon": float(first.epsilon), "delta": float(first.delta), "q": int(first.q), "beta": float(first.beta)}


def silo_max_lr_by_cycle(df: pd.DataFrame) -> pd.Series:
    """The max_lr SILO used per cycle (shared by all seeds)."""
    return final_rows(df, "silo").groupby("cycle")["max_lr"].first()
