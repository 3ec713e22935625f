"""Where a run contradicts the SILO paper's premises, one sentence each, with the numbers. The paper's argument
rests on three observations a run can contradict:

- the gradient σ falls as the network is pruned (Fig. 1, §3.1), which is why the max_lr should rise;
- the Oracle's max_lr b moves as the network is pruned (Theorem 2, Remark 2: α ∝ C^(-1/2) rises), so a schedule
  that adapts has something to find; an Oracle whose b is the same at every cycle says a constant max_lr is the
  Oracle here;
- SILO costs a fraction of the Oracle (the paper's complexity claim): SILO costing more epochs than the Oracle is the
  opposite.

`findings(df)` reads them off one run's results table (the same statistics, Oracle sets and cost rows the report's
tables use); `sentences` says them for one run, `over_replicates` gathers them over replicates (in how many, with
each replicate's numbers). Nothing is said where the run agrees with the premise or cannot tell."""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from analysis.intervals import oracle_intervals
from analysis.select import label
from analysis.tables import cost_table, fmt_density, statistics_table
from analysis.verdict_sentences import fmt_lr
from oracle_search.schema import SILO_METHODS
from oracle_search.selection import lr_key

SIGMA = "sigma_rises"
FLAT = "flat_b"
COST = "silo_costs_more"  # one finding per SILO variant: key "silo_costs_more:<method>"

PREMISE = {
    SIGMA: "where the paper's Fig. 1 premise is that it falls as the network is pruned",
    FLAT: "where the paper's premise (Theorem 2, Remark 2) is a max_lr that rises as the network is pruned: here a "
          "constant max_lr is the Oracle, and adapting has nothing to find",
    COST: "where the paper's complexity claim is that SILO costs a fraction of the Oracle",
}


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
                COST: f"{label(method)} costs more epochs than the Oracle"}[kind]


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


def _flat(df: pd.DataFrame) -> Finding | None:
    pooled = oracle_intervals(df)
    if len(pooled) < 2 or len({lr_key(b) for b in pooled["best_max_lr"]}) > 1:
        return None
    lam = pooled["density"]
    return Finding(FLAT, f"at {fmt_lr(pooled['best_max_lr'].iloc[0])} at all {len(pooled)} cycles, from λ = "
                         f"{fmt_density(lam.iloc[0])} % to {fmt_density(lam.iloc[-1])} %")


def _cost(df: pd.DataFrame) -> list[Finding]:
    table = cost_table(df)
    if table is None:
        return []
    by = table.data.set_index("method")
    if "oracle" not in by.index or not by.loc["oracle", "epochs"] > 0:
        return []
    oracle = int(by.loc["oracle", "epochs"])
    return [Finding(f"{COST}:{m}", f"{100 * by.loc[m, 'epochs'] / oracle:.0f} % of the Oracle's epochs "
                                   f"({int(by.loc[m, 'epochs']):,} against {oracle:,})")
            for m in SILO_METHODS if m in by.index and by.loc[m, "epochs"] > oracle]


def findings(df: pd.DataFrame) -> list[Finding]:
    """The premises this run contradicts, in the order σ, b, cost."""
    return [f for f in (_sigma(df), _flat(df)) if f is not None] + _cost(df)


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
