"""Baselines: each schedule's peak tuned on the tuning seeds' validation accuracy, then final runs on held-out
evaluation seeds over every cycle (real Ray)."""
from __future__ import annotations

import pandas as pd
import pytest

from oracle_search.cli import main
from oracle_search.schema import BASELINES
from oracle_search.curve import Curve

pytestmark = [pytest.mark.slow, pytest.mark.ray]  # a Runner on a local Ray of its own


def test_baselines_tune_on_tuning_seeds_and_run_finals_on_evaluation_seeds(tmp_path):
    out = tmp_path / "b"
    assert main(["baselines", "--preset", "tiny", "--tuning-seeds", "2", "--eval-seeds", "2", "--out", str(out)]) == 0
    rows = pd.read_parquet(out / "results.parquet")
    final, tune = rows[rows["stage"] == "final"], rows[rows["stage"] == "tune"]
    assert set(tune["seed"]) == {0, 1} and set(final["seed"]) == {1000, 1001}
    # no Oracle and no study in this folder: no SILO variant
    assert set(final["method"]) <= set(BASELINES)
    counts = final.groupby(["method", "cycle"]).size()
    alive = {m for m in BASELINES if not final[final["method"] == m]["diverged"].any()}
    for method in alive:
        for cycle in range(3):
            assert counts[(method, cycle)] == 2
    for method in BASELINES:
        best = Curve.from_rows(tune[tune["method"] == method]).best  # seed-mean over both tuning seeds
        assert set(final[final["method"] == method]["max_lr"]) == {best}
        assert (final[final["method"] == method]["schedule"] == method).all()
    assert final["selected"].all()
    # each cycle >= 1 starts from the same method and seed's previous cycle
    for (method, seed), g in final.groupby(["method", "seed"]):
        g = g.sort_values("cycle")
        assert g["start_hash"].iloc[1:].tolist() == g["checkpoint_hash"].iloc[:-1].tolist()
