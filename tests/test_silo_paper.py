"""silo_paper's δ: its range, the refinement step around the winner, when it is bracketed, and a real bracketing
run on digits whose silo_paper.json is checked against the results table."""
from __future__ import annotations

import dataclasses
import io
import json
import math

import pandas as pd
import pytest

from oracle_search.engine import Progress

from oracle_search.engine import own_runner
from oracle_search.schema import read_results
from oracle_search.delta import BRACKET, DeltaPlan, bracketed, delta_grid, delta_range, next_deltas
from oracle_search.silo_paper import tune_silo_paper
from trainables.presets import PRESETS

MNIST_GRID = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28]


# --- the range and the step (worked out by hand) ------------------------------------------------------------------

def test_the_first_candidates_put_silos_top_on_the_next_three_grid_values():
    assert delta_grid(0.269, MNIST_GRID) == pytest.approx([0.051, 0.371, 1.011])
    assert delta_grid(0.16, MNIST_GRID) == pytest.approx([0.16, 0.48, 1.12])
    assert delta_grid(1.28, MNIST_GRID) == [1.28]  # ε tops the grid: a top of 2ε


def test_the_range_goes_below_the_first_candidate_by_halving_down_to_5_percent_of_epsilon():
    # ε = 0.269: d1 = 0.32 - 0.269 = 0.051; floor 0.05 * 0.269 = 0.01345; 0.051 / 2 = 0.0255, 0.051 / 4 < floor
    assert delta_range(0.269, MNIST_GRID) == pytest.approx([0.01345, 0.0255, 0.051, 0.371, 1.011])
    # ε = 0.1 on digits' grid: d1 = 0.1; halvings 0.05 .. 0.00625 (0.003125 < floor 0.005), then the floor
    assert delta_range(0.1, [0.02, 0.05, 0.1, 0.2]) == pytest.approx([0.005, 0.00625, 0.0125, 0.025, 0.05, 0.1])
    # d1 = 0.01 lies below the floor 0.015 already: nothing below it
    assert delta_range(0.3, [0.31, 0.5]) == pytest.approx([0.01, 0.2])
    # ε tops the grid: d1 = ε = 1.28, halvings down to 0.08, then the floor 0.064
    assert delta_range(1.28, MNIST_GRID) == pytest.approx([0.064, 0.08, 0.16, 0.32, 0.64, 1.28])


def test_an_interior_winner_is_refined_on_both_sides_by_geometric_midpoints():
    coarse = delta_range(0.269, MNIST_GRID)
    new, ends = next_deltas(0.371, [0.051, 0.371, 1.011], coarse)
    assert new == pytest.approx([math.sqrt(0.051 * 0.371), math.sqrt(0.371 * 1.011)], rel=1e-5) and ends == []


def test_a_winner_at_the_edge_of_what_was_trained_goes_outward_to_the_next_coarse_value():
    coarse = delta_range(0.269, MNIST_GRID)
    # the smallest trained δ wins: the next coarse value below (0.0255) only, while the winner walks outward (the
    # earlier rule also tried the midpoint toward 0.371, wasted once the winner moves on)
    new, ends = next_deltas(0.051, [0.051, 0.371, 1.011], coarse)
    assert new == pytest.approx([0.0255]) and ends == []
    new, ends = next_deltas(0.051, [0.051, 0.371, 1.011], coarse, walk_first=False)
    assert new == pytest.approx([0.0255, math.sqrt(0.051 * 0.371)], rel=1e-5) and ends == []
    # at the range's floor nothing is left below; the neighbour above within x1.25 needs nothing either
    new, ends = next_deltas(0.01345, [0.01345, 0.016, 0.0255], coarse)
    assert new == [] and ends == ["below"]
    # the largest δ of the range wins: nothing above; below, 0.9 is within x1.25 of 1.011
    new, ends = next_deltas(1.011, [0.9, 1.011], coarse)
    assert new == [] and ends == ["above"]


def test_bracketed_needs_a_trained_neighbour_within_x1_25_on_both_sides():
    assert BRACKET == 1.25
    assert bracketed(0.05, [0.04, 0.05, 0.0625])  # 1.25 and 1.25: exactly on the limit
    assert not bracketed(0.05, [0.04, 0.05, 0.07])  # 1.4 above
    assert not bracketed(0.05, [0.03, 0.05, 0.06])  # 1.67 below
    assert not bracketed(0.05, [0.05, 0.06])  # nothing below
    assert not next_deltas(0.05, [0.04, 0.05, 0.0625], [0.01, 0.1])[0]  # and nothing more is trained


# --- racing (trainings answered from a table worked out by hand) ------------------------------------------------

class _Slots:
    progress = Progress(io.StringIO())

    def slots(self) -> int:
        return 1


def test_racing_drops_a_far_delta_early_and_chooses_the_exhaustive_delta(monkeypatch):
    """ε = 0.16 on the MNIST grid: first δ 0.16, 0.48, 1.12; the winner 0.16 is the lowest tried, so the search
    walks out to 0.08 alone, then refines around 0.16 by midpoints. Accuracy at the target: 82 − 12·ln(δ/0.16)²
    plus seed effects (+0.3, −0.3, 0) and a per-δ wobble of ±0.2, so the pool has spread. The first three δ get
    every seed: after round 2 the pool has 2 df and t(1 − 0.05/(18·3), 2) ≈ 23 makes the margin wider than any gap;
    0.08, alone in its rounds, gets every seed too. Of the next round's 0.113 and 0.277, 0.277 (3.6 points behind)
    is dropped after its second seed; the search ends at the δ the exhaustive search finds, bracketed, having
    trained one chain fewer."""
    from oracle_search import silo_paper

    def acc(d: float, s: int) -> float:
        peak = 82 - 12 * math.log(d / 0.16) ** 2
        return peak + {0: 0.3, 1: -0.3, 2: 0.0}[s] + (0.2 if (s + round(d * 1000)) % 2 else -0.2)

    asked: list[tuple[float, int]] = []

    def train(runner, epsilon, pairs, target, finals=None):
        asked.extend(pairs)
        return {(d, s): {"max_lr": d, "seed": s, "val_acc": acc(d, s), "diverged": False} for d, s in pairs}

    monkeypatch.setattr(silo_paper, "_train", train)
    exhaustive = silo_paper.search_delta(_Slots(), DeltaPlan(0.16, tuple(MNIST_GRID), (0, 1, 2), 6))
    n_exhaustive = len(asked)
    asked.clear()
    raced = silo_paper.search_delta(_Slots(), DeltaPlan(0.16, tuple(MNIST_GRID), (0, 1, 2), 6, mode="racing"))
    assert raced.delta == exhaustive.delta == pytest.approx(0.16)
    assert raced.is_bracketed and exhaustive.is_bracketed
    assert set(exhaustive.trained_on.values()) == {3} and exhaustive.dropped == {}
    assert {d: n for d, n in raced.trained_on.items() if n < 3} == {0.277128: 2}
    assert 0.277128 in raced.dropped
    assert sorted(raced.scores) == sorted(exhaustive.scores)  # the same δ were tried
    assert len(asked) == n_exhaustive - 1
    record = raced.record()
    assert {c["delta"]: c["seeds_trained"] for c in record["candidates"]}[0.277128] == 2
    assert {c["delta"]: c["dropped"] for c in record["candidates"]}[0.16] is None


# --- a real run ---------------------------------------------------------------------------------------------------

def _refinable(d: float, others: list[float], coarse: list[float]) -> bool:
    """Whether d is a coarse value or the geometric midpoint of two other trained values."""
    if any(abs(d / c - 1) < 1e-5 for c in coarse):
        return True
    return any(abs(d / math.sqrt(a * b) - 1) < 1e-5 for a in others for b in others if a < b)


@pytest.mark.slow
def test_a_real_delta_search_on_digits_writes_what_the_rows_say(ray_local, tmp_path):
    """ε = 0.1 on digits (3 epochs, cycles 0..2, 2 seeds), at most 2 rounds. silo_paper.json is checked against
    the tuning rows of the results table: its candidates are the δ trained, its δ is their best seed-mean
    validation accuracy at cycle 2 (computed here with pandas), and bracketed or open as its neighbours say."""
    spec = dataclasses.replace(PRESETS["digits-mlp"].spec, cycles=2, epochs=3)
    seeds, epsilon, grid = [0, 1], 0.1, [0.05, 0.1, 0.2, 0.4, 0.8]
    log = io.StringIO()
    with own_runner(out=tmp_path, spec=spec, experiment="silo", progress=Progress(log)) as runner:
        params = tune_silo_paper(runner, DeltaPlan(epsilon, tuple(grid), tuple(seeds), runner.spec.cycles, rounds=2))
        runner.write_results()
    record = json.loads((tmp_path / "silo_paper.json").read_text())
    rows = read_results(tmp_path)
    tune = rows[(rows["method"] == "silo_paper") & (rows["stage"] == "tune")]
    trained = sorted(tune["delta"].round(9).unique())
    assert record["delta_candidates"] == pytest.approx(trained)
    assert len(trained) > 3, "no refinement round ran"  # the first three are never bracketed on this grid
    assert {0.1, 0.3, 0.7} <= set(trained)  # the first candidates: ε + δ on 0.2, 0.4, 0.8
    coarse = delta_range(epsilon, grid)
    assert all(_refinable(d, trained, coarse) for d in trained)
    # δ: best seed mean at cycle 2 over the δ whose chains reached it undiverged on both seeds; ties to the smaller
    end = tune[tune["cycle"] == 2]
    ok = end.groupby("delta").filter(lambda g: len(g) == 2 and not g["diverged"].any())
    means = ok.groupby("delta")["val_acc"].mean()
    best = min(means.index[means >= means.max() - 1e-9])
    assert record["delta"] == pytest.approx(best) and params.delta == pytest.approx(best)
    assert (params.epsilon, params.q, params.beta) == (epsilon, 1, 5.0)
    for c in record["candidates"]:
        assert c["top"] == pytest.approx(epsilon + c["delta"], rel=1e-5)
        assert (c["val_acc"] is None) == (round(c["delta"], 9) not in set(means.index.round(9)))
    i = trained.index(round(best, 9))
    both = 0 < i < len(trained) - 1
    within = both and trained[i + 1] / best <= 1.25 + 1e-9 and best / trained[i - 1] <= 1.25 + 1e-9
    assert record["delta_bracketed"] == within
    assert (record["delta_open"] is None) == within
    if not within:
        assert record["delta_open"] in ("2 refinement rounds spent", "δ sits at the bottom of its range",
                                        "δ sits at the top of its range")
    assert ("bracketed" if within else "NOT bracketed") in log.getvalue()
    # cycles 0..q train at ε for every δ: one training each per seed, the rest reused
    early = tune[tune["cycle"] <= 1]
    assert (~early["reused"]).sum() == 2 * len(seeds) and early["max_lr"].eq(epsilon).all()
