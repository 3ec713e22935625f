"""The committed example's verdict recomputes from its own files with pandas and scipy alone (issue 59): this test
imports nothing of the project's, so a mistake in `oracle_search.statistics` cannot hide here.

From each replicate's results table (`docs/example/replicate-r/results.parquet`), every comparison's advantage is
re-derived from the definition: per evaluation seed both methods ran without diverging, the sum over cycles 1..L
(L: the Oracle's last cycle) of the test accuracy of the SILO variant's final chain minus the other's; the
replicate's advantage is their mean. Over replicates: the mean, the 95 % t interval on R − 1 df, the label
(equivalent inside ±margin, else better/worse when it excludes 0, else inconclusive), the p-value of the label's
hypothesis and Holm's step-down across the family."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

EXAMPLE = Path(__file__).resolve().parent.parent / "docs" / "example"
BENCHMARKS = ("constant", "decay", "cyclical", "warmup", "cosine")


def _finals(rows: pd.DataFrame, method: str) -> pd.DataFrame:
    return rows[(rows["method"] == method) & (rows["stage"] == "final") & rows["selected"].astype(bool)]


def _per_seed(rows: pd.DataFrame, method: str, last: int) -> dict[int, pd.Series]:
    out = {}
    for seed, chain in _finals(rows, method).groupby("seed"):
        chain = chain[chain["cycle"] <= last]
        if chain["diverged"].astype(bool).any():
            continue
        acc = chain.set_index("cycle")["test_acc"]
        if set(range(1, last + 1)) <= set(int(c) for c in acc.index):
            out[int(seed)] = acc
    return out


def _best_benchmark(rows: pd.DataFrame) -> str:
    """The benchmark with the best seed-mean cycle-0 validation accuracy at a peak every tuning seed trained."""
    scores = {}
    for name in BENCHMARKS:
        tune = rows[(rows["method"] == name) & (rows["stage"] == "tune") & (rows["cycle"] == 0)]
        seeds = tune["seed"].nunique()
        ok = tune.groupby(tune["max_lr"].round(6)).filter(lambda g: g["seed"].nunique() == seeds
                                                          and not g["diverged"].astype(bool).any())
        if not ok.empty:
            scores[name] = ok.groupby(ok["max_lr"].round(6))["val_acc"].mean().max()
    return max(scores, key=lambda n: (scores[n], -BENCHMARKS.index(n)))


def _replicate_advantages(run: Path) -> dict[tuple[str, str], float]:
    rows = pd.read_parquet(run / "results.parquet")
    oracle = rows[rows["method"] == "oracle"]
    last = int(oracle["cycle"].max())
    out = {}
    for silo in ("silo_paper", "silo_fit"):
        a = _per_seed(rows, silo, last)
        for versus in ("oracle_schedule", "constant_dense", "constant_best", *BENCHMARKS, "best_benchmark"):
            theirs = _best_benchmark(rows) if versus == "best_benchmark" else versus
            b = _per_seed(rows, theirs, last)
            seeds = sorted(set(a) & set(b))
            if a and seeds:
                out[(silo, versus)] = float(np.mean([sum(a[s][m] - b[s][m] for m in range(1, last + 1))
                                                     for s in seeds]))
    return out


def _label(lo: float, hi: float, margin: float) -> str:
    if -margin - 1e-12 <= lo and hi <= margin + 1e-12:
        return "equivalent"
    return "better" if lo > 0 else "worse" if hi < 0 else "inconclusive"


def _p(values: np.ndarray, verdict: str, margin: float) -> float:
    n, mean, sd = len(values), values.mean(), values.std(ddof=1)
    if sd == 0:  # zero spread: the test degenerates to whether the label holds
        return 0.0 if (abs(mean) <= margin if verdict == "equivalent" else mean != 0) else 1.0
    se = sd / math.sqrt(n)
    if verdict == "equivalent":
        p = min(1.0, 2 * max(stats.t.sf((mean + margin) / se, n - 1), stats.t.cdf((mean - margin) / se, n - 1)))
        return min(p, 0.05)
    return 2 * stats.t.sf(abs(mean) / se, n - 1)


@pytest.mark.skipif(not (EXAMPLE / "replicate-1" / "results.parquet").exists(),
                    reason="the example ships without its results tables")
def test_every_number_of_the_examples_verdict_recomputes_with_scipy_alone():
    runs = sorted(p for p in EXAMPLE.glob("replicate-*") if (p / "results.parquet").exists())
    per = [_replicate_advantages(run) for run in runs]
    verdict = pd.read_csv(EXAMPLE / "tables" / "verdict.csv")
    assert set(zip(verdict["schedule"], verdict["versus"])) == set().union(*per)
    replicates = pd.read_csv(EXAMPLE / "tables" / "replicates.csv")
    for _, row in replicates.iterrows():  # each replicate's advantage, from its own results table
        r = int(str(row["replicate"]).split("-")[-1]) - 1
        assert row["advantage"] == pytest.approx(per[r][(row["schedule"], row["versus"])], abs=1e-9)
    pvalues = {}
    for _, row in verdict.iterrows():
        key = (row["schedule"], row["versus"])
        values = np.array([p[key] for p in per if key in p])
        n, mean = len(values), values.mean()
        half = stats.t.ppf(0.975, n - 1) * values.std(ddof=1) / math.sqrt(n)
        # tolerances scale with the magnitudes summed: accuracies near 100 points over L cycles and 3 seeds
        assert (row["advantage"], row["ci_lo"], row["ci_hi"]) == pytest.approx((mean, mean - half, mean + half),
                                                                               abs=1e-9)
        assert row["replicates"] == n
        assert row["verdict"] == _label(mean - half, mean + half, row["margin"])
        pvalues[key] = _p(values, row["verdict"], row["margin"])
        assert row["p_value"] == pytest.approx(pvalues[key], rel=1e-9, abs=1e-15)
    # Holm's step-down across the whole family, at 5 %
    order = sorted(pvalues, key=pvalues.get)
    held, stop = {}, False
    for k, key in enumerate(order):
        stop = stop or pvalues[key] > 0.05 / (len(order) - k)
        held[key] = not stop
    for _, row in verdict.iterrows():
        key = (row["schedule"], row["versus"])
        if row["verdict"] in ("better", "worse", "equivalent"):
            assert (row["holm"] == "yes") == held[key], key
