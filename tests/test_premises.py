"""Where a run contradicts the SILO paper's premises (analysis/premises.py): a rising gradient σ, SILO costing more
epochs than the Oracle, an Oracle whose b stays flat; each one sentence with the numbers, on hand-made tables,
over replicates, and in a real report of the committed default run."""
from __future__ import annotations

from analysis.premises import COST, FLAT, PREMISE, SIGMA, Finding, findings, over_replicates, sentences
from oracle_search.schema import read_results, results_frame
from test_analysis_report import realistic, report_of
from test_analysis_tables import cost_rows, oracle_rows, row, statistics_rows
from test_replicate_report import SEED0


def test_a_rising_gradient_sigma_is_said_with_its_numbers_and_a_falling_one_is_not():
    (found,) = [f for f in findings(results_frame(statistics_rows())) if f.key == SIGMA]
    assert sentences([found]) == ["The gradient σ rises: from 0.2 at λ = 100 % to 0.4 at λ = 80 % (2.00×), "
                                  f"{PREMISE[SIGMA]}."]
    # The sentence names its reading: over which weights σ pools decides its direction (issue 60).
    assert "σ over the surviving weights' gradients at each cycle's end" in PREMISE[SIGMA]
    assert "Fig. 1 counts all weights, the pruned ones' zeros too" in PREMISE[SIGMA]
    falling = [row("silo_paper", "final", s, c, grad_std=g) for s in (10, 11) for c, g in ((0, 2.0), (1, 0.5))]
    assert not [f for f in findings(results_frame(falling)) if f.key == SIGMA]


def _peaked(best: float) -> tuple[float, dict[float, list[float]]]:
    """One Oracle cycle on the grid 0.05..0.4 whose seed-mean best is `best` (80 there, 70 elsewhere)."""
    return best, {lr: [80.0 if lr == best else 70.0] * 3 for lr in (0.05, 0.1, 0.2, 0.4)}


def test_an_oracle_whose_b_moves_one_grid_step_at_cycle_1_and_stays_is_flat():
    """Issue 59: the old rule (b identical at every cycle, cycle 0 included) never fired when b moved one grid step
    at cycle 1 and stayed. Now: over cycles 1..L (L ≥ 2), at most two values with no grid value between them."""
    assert not [f for f in findings(results_frame(oracle_rows())) if f.key == FLAT]  # one cycle after 0: no trend
    stays = {0: _peaked(0.1), 1: _peaked(0.2), 2: _peaked(0.2), 3: _peaked(0.2)}
    (found,) = [f for f in findings(results_frame(oracle_rows(stays))) if f.key == FLAT]
    assert sentences([found])[0] == (
        "The Oracle's b stays flat: at 0.2 at all 3 cycles 1–3; 0.1 at cycle 0; from λ = 100 % to 51.2 %, where the "
        "paper's premise (Theorem 2, Remark 2) is a max_lr that rises as the network is pruned: here b moves by at "
        "most one step of the grid after cycle 0.")
    steps = {0: _peaked(0.1), 1: _peaked(0.2), 2: _peaked(0.4), 3: _peaked(0.2)}  # two adjacent grid values
    (found,) = [f for f in findings(results_frame(oracle_rows(steps))) if f.key == FLAT]
    assert "at 0.2 (2 cycles) or 0.4 (1) over cycles 1–3, no grid value between them" in found.numbers
    rises = {0: _peaked(0.05), 1: _peaked(0.1), 2: _peaked(0.2), 3: _peaked(0.4)}  # three values: it moves
    assert not [f for f in findings(results_frame(oracle_rows(rises))) if f.key == FLAT]
    apart = {0: _peaked(0.1), 1: _peaked(0.1), 2: _peaked(0.4), 3: _peaked(0.4)}  # 0.2 lies between: two steps
    assert not [f for f in findings(results_frame(oracle_rows(apart))) if f.key == FLAT]


def test_silo_costing_more_epochs_than_the_oracle_is_said_and_costing_less_is_not():
    rows = cost_rows()  # the Oracle 60 epochs, SILO (paper) 30, SILO (fit) 32
    assert not [f for f in findings(rows) if f.key.startswith(COST)]
    dearer = results_frame(rows.to_dict("records") + [row("silo_paper", "tune", 0, 1, epochs=50, selected=False)])
    (found,) = [f for f in findings(dearer) if f.key.startswith(COST)]
    # This Oracle trained every value of its plan on every seed: it is the exhaustive one. Its δ search (tune rows,
    # 10 + 50 epochs) and its final chains (20) are said apart.
    assert sentences([found]) == [
        "SILO (paper) costs more epochs than the Oracle: 133 % of the exhaustive Oracle's epochs as run (80 against "
        "60); of it, its δ search 60 epochs (100 % of the Oracle's as run) and the SILO schedule itself, its final "
        "chains on the evaluation seeds, 20 (33 % of the Oracle's as run), where the paper's complexity claim is "
        "that SILO costs a fraction of the Oracle."]


def test_over_replicates_one_sentence_per_premise_says_in_how_many_with_each_ones_numbers():
    a, b = Finding(SIGMA, "from 1 to 2 (2.00×)"), Finding(SIGMA, "from 1 to 3 (3.00×)")
    cost = Finding(f"{COST}:silo_fit", "120 % of the Oracle's epochs (12 against 10)")
    assert over_replicates({"replicate-1": [a, cost], "replicate-2": [b], "replicate-3": []}) == [
        "The gradient σ rises in 2 of 3 replicates (replicate-1 from 1 to 2 (2.00×); replicate-2 from 1 to 3 "
        f"(3.00×)), {PREMISE[SIGMA]}.",
        "SILO (fit) costs more epochs than the Oracle in 1 of 3 replicates (replicate-1 120 % of the Oracle's epochs "
        "(12 against 10)), where the paper's complexity claim is that SILO costs a fraction of the Oracle."]
    assert over_replicates({"replicate-1": [], "replicate-2": []}) == []


def test_the_default_runs_own_report_says_its_gradient_sigma_rises(tmp_path):
    # The committed exhaustive compare of the default (base seed 0): σ from 8.6e-4 to 3.4e-3.
    assert sentences(findings(results_frame(read_results(SEED0).to_dict("records")))) == [
        f"The gradient σ rises: from 0.00086 at λ = 100 % to 0.0034 at λ = 6.87 % (3.92×), {PREMISE[SIGMA]}."]
    printed = report_of(tmp_path, realistic())  # grad σ 0.01 (1 + cycle): rising
    first = printed["report.md"].read_text().split("\n## ")[1]  # the answer's section
    assert "The gradient σ rises: from 0.01 at λ = 100 % to 0.05 at λ = 41 % (5.00×)" in first
