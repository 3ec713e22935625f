"""The plan that widens with the slots (issue: paper scale in a day): δ's wide plan and the Oracle's wide rounds
where the slots allow, the scheduler's priority order on both engines, the calibrated optimum's drift, and the dry
run's words for what bounds the wall. Pure Python: no Ray cluster, no training."""
from __future__ import annotations

import glob
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import ROOT
from oracle_search.delta import WIDTH, DeltaPlan, next_deltas
from oracle_search.racing import OracleSearch, Pool
from oracle_search.searcher import TrialQueue
from oracle_search.simulate import DRIFT, AccuracyModel
from oracle_search.simulate_job import JobWalls
from trainables.timestamps import duration

GRID = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28)


def test_a_wide_delta_refinement_brackets_in_one_round_where_the_narrow_one_bisects():
    trained, coarse = [0.5, 1.0, 2.0], [0.25, 0.5, 1.0, 2.0, 4.0]
    narrow, _ = next_deltas(1.0, trained, coarse, walk_first=False)
    assert narrow == pytest.approx([2 ** -0.5, 2 ** 0.5], rel=1e-5)  # one midpoint per side: ×1.41 still > ×1.25
    wide, _ = next_deltas(1.0, trained, coarse, width=3)
    # ln 2 / ln 1.25 = 3.1: four parts on each side, every spacing 2^(1/4) = 1.19 <= 1.25
    assert wide == pytest.approx(sorted(2 ** (k / 4) for k in (-3, -2, -1, 1, 2, 3)), rel=1e-5)
    # a walk takes `width` coarse values at once where the narrow plan takes one
    assert next_deltas(0.25, [0.25], coarse + [8.0], width=3)[0] == [0.5, 1.0, 2.0]
    assert next_deltas(0.25, [0.25], coarse + [8.0])[0] == [0.5]


def test_a_wide_refinement_brackets_any_gap_of_the_presets_grids_in_one_look():
    """Each look of δ is a chain of cycles (about 12 T on the paper's ResNet-20): a refinement that leaves a gap
    wider than ×BRACKET costs a whole extra look. Coarse δ values are a preset grid's ratio apart above d₁ and
    halvings (×2) below it, so WIDTH must resolve both in one round on the paper's presets (WIDTH = 3 leaves the
    ResNet-20 grid's ×2.68 at ×1.28; the toy presets' coarser grids may take two)."""
    from oracle_search.delta import BRACKET
    from trainables.paper_presets import PAPER_PRESETS
    ratios = {2.0} | {round(max(b / a for a, b in zip(sorted(p.spec.grid), sorted(p.spec.grid)[1:])), 6)
                      for p in PAPER_PRESETS.values()}
    assert max(ratios) > 2.6 and len(PAPER_PRESETS) >= 6
    for gap in sorted(ratios):
        new, _ = next_deltas(1.0, [1.0, gap], [1.0, gap], width=WIDTH)
        values = sorted({1.0, gap, *new})
        assert max(b / a for a, b in zip(values, values[1:])) <= BRACKET * (1 + 1e-6), (gap, values)


def test_the_delta_plan_widens_only_where_a_wide_look_fits_the_slots():
    plan = DeltaPlan(0.16, GRID, (0, 1, 2), 6, mode="racing", final_seeds=(1000, 1001, 1002))
    need = 2 * WIDTH * 3
    assert plan.for_slots(need - 1) == plan  # scarce slots: today's race
    wide = plan.for_slots(need)
    assert wide.wide and wide.mode == "exhaustive" and not wide.racing
    assert set(plan.first) < set(wide.first) and len(wide.first) == len(plan.first) + WIDTH


def test_the_oracles_rounds_widen_only_where_the_grid_on_every_seed_fits():
    search = OracleSearch(GRID, (0, 1, 2))
    narrow, wide = search.for_slots(23), search.for_slots(24)
    assert not narrow.wide and wide.wide
    assert len(narrow.race(list(GRID), Pool(), None, None).needed()) == 8  # a seed per value a look
    assert len(wide.race(list(GRID), Pool(), None, None).needed()) == 24  # every seed at once
    assert not OracleSearch(GRID, (0, 1, 2), mode="exhaustive").for_slots(1000).wide  # exhaustive is its own


def test_trial_queue_hands_tune_the_highest_priority_first_ties_in_order():
    queue = TrialQueue()
    queue.put([{"key": "a"}, {"key": "b"}], [0.0, 5.0])
    queue.put([{"key": "c"}, {"key": "d"}], [5.0, 1.0])
    queue.prioritise("a", 9.0)  # another line waits on it
    assert [queue.suggest(str(i))["trial"]["key"] for i in range(4)] == ["a", "b", "c", "d"]


def _drift_of(run: str) -> float:
    df = pd.read_parquet(Path(run) / "results.parquet")
    chosen = df[(df["method"] == "oracle") & df["selected"].astype(bool)].groupby("cycle")["max_lr"].first()
    return float(chosen.iloc[-1] / chosen.iloc[0])


def test_the_models_drift_is_the_committed_runs_median():
    """DRIFT is the median over the committed runs with every value on every seed of b at the last cycle over b at
    cycle 0; the model moves its optimum by it (a fixed optimum made SILO's rising peak diverge)."""
    runs = [*glob.glob(str(ROOT / "benchmarks/results/*exhaustive*/seed0")),
            str(ROOT / "benchmarks/results/compare-exhaustive-seed0-2026-11-26"),
            str(ROOT / "benchmarks/results/compare-2026-11-27/exhaustive-seed0"), str(ROOT / "benchmarks/results/compare-2026-11-27/exhaustive-seed100"),
            str(ROOT / "benchmarks/results/racing-told-2026-11-27/exhaustive-seed0"),
            *glob.glob(str(ROOT / "benchmarks/results/replicates-2026-11-27/*/replicate-*"))]
    drifts = [_drift_of(run) for run in runs]
    assert len(drifts) == 11
    assert DRIFT == pytest.approx(float(np.median(drifts)), rel=0.01)
    model = AccuracyModel()
    assert model.optimum(0.1, 0, 6) == 0.1 and model.optimum(0.1, 6, 6) == pytest.approx(0.1 * DRIFT)
    assert model.optimum(0.1, 3, 6) == pytest.approx(0.1 * math.sqrt(DRIFT))


def test_the_dry_run_says_what_bounds_the_wall_in_words_and_units():
    chain_bound = JobWalls(64, wall=100.0, longest_chain=95.0, trainings=64, busy=640.0,
                           ends={"replicate-1": 90.0, "replicate-1/oracle": 90.0, "replicate-2": 100.0,
                                 "replicate-2/silo_paper": 100.0, "replicate-2/oracle": 60.0})
    line = chain_bound.line()
    assert "bounded by the chain" in line and "more slots will not shorten it" in line
    assert "the wall is 10 T" in line and "the replicates end at 1: 9 T, 2: 10 T" in line
    assert chain_bound.setter() == "replicate-2/silo_paper"
    work_bound = JobWalls(2, wall=100.0, longest_chain=10.0, trainings=20, busy=190.0)
    assert "bounded by the work" in work_bound.line()
    assert duration(45.0) == "45.0 s" and duration(600.0) == "10.0 min (600 s)"
    assert duration(5 * 3600.0) == "5.0 h (18,000 s)" and duration(326_210.0) == "3.8 days (326,210 s)"
