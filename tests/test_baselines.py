"""Baselines: each schedule's peak tuned on validation, then S seeds over every cycle (real Ray)."""
from __future__ import annotations

import pandas as pd
import pytest

from oracle_search.baselines import BASELINE_SCHEDULES
from oracle_search.cli import main

pytestmark = pytest.mark.slow


def test_baselines_give_s_rows_per_schedule_and_cycle_with_the_tuned_lr(tmp_path):
    out = tmp_path / "b"
    assert main(["baselines", "--preset", "tiny", "--seeds", "2", "--out", str(out)]) == 0
    rows = pd.read_parquet(out / "results.parquet")
    final, tune = rows[rows["stage"] == "final"], rows[rows["stage"] == "tune"]
    methods = set(BASELINE_SCHEDULES) | {"silo"}
    counts = final.groupby(["method", "cycle"]).size()
    alive = {m for m in methods if not final[final["method"] == m]["diverged"].any()}
    for method in alive:
        for cycle in range(3):
            assert counts[(method, cycle)] == 2
    for method in BASELINE_SCHEDULES:
        candidates = tune[(tune["method"] == method) & ~tune["diverged"]]
        best = candidates.sort_values(["val_acc", "max_lr"], ascending=[False, True]).iloc[0]
        assert set(final[final["method"] == method]["max_lr"]) == {best["max_lr"]}
        assert (final[final["method"] == method]["schedule"] == method).all()
    silo = final[final["method"] == "silo"]
    assert silo["epsilon"].notna().all() and (silo["schedule"] == "silo").all()
    # each cycle >= 1 starts from the same method and seed's previous cycle
    for (method, seed), g in final.groupby(["method", "seed"]):
        g = g.sort_values("cycle")
        assert g["start_hash"].iloc[1:].tolist() == g["checkpoint_hash"].iloc[:-1].tolist()
