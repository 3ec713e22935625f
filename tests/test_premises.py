"""Where a run contradicts the SILO paper's premises (analysis/premises.py): a rising gradient σ, SILO costing more
epochs than the Oracle, an Oracle whose b stays flat; each one sentence with the numbers, on hand-made tables,
over replicates, and in a real report of the committed default run."""
from __future__ import annotations

from analysis.premises import COST, FLAT, SIGMA, Finding, findings, over_replicates, sentences
from oracle_search.schema import read_results, results_frame
from test_analysis_report import realistic, report_of
from test_analysis_tables import CYCLES, cost_rows, oracle_rows, row, statistics_rows
from test_replicate_report import SEED0


def test_a_rising_gradient_sigma_is_said_with_its_numbers_and_a_falling_one_is_not():
    (found,) = [f for f in findings(results_frame(statistics_rows())) if f.key == SIGMA]
    assert sentences([found]) == ["The gradient σ rises: from 0.2 at λ = 100 % to 0.4 at λ = 80 % (2.00×), where "
                                  "the paper's Fig. 1 premise is that it falls as the network is pruned."]
    falling = [row("silo_paper", "final", s, c, grad_std=g) for s in (10, 11) for c, g in ((0, 2.0), (1, 0.5))]
    assert not [f for f in findings(results_frame(falling)) if f.key == SIGMA]


def test_an_oracle_whose_b_is_the_same_at_every_cycle_is_flat_and_one_that_moves_is_not():
    assert not [f for f in findings(results_frame(oracle_rows())) if f.key == FLAT]  # b: 0.1, then 0.2
    flat = {0: CYCLES[0], 1: (0.1, {0.05: [60.0] * 3, 0.1: [80.0] * 3, 0.2: [79.0] * 3})}
    (found,) = [f for f in findings(results_frame(oracle_rows(flat))) if f.key == FLAT]
    assert sentences([found])[0].startswith("The Oracle's b stays flat: at 0.1 at all 2 cycles, from λ = 100 % to "
                                            "80 %, where the paper's premise (Theorem 2, Remark 2) is a max_lr that "
                                            "rises")


def test_silo_costing_more_epochs_than_the_oracle_is_said_and_costing_less_is_not():
    rows = cost_rows()  # the Oracle 60 epochs, SILO (paper) 30, SILO (fit) 32
    assert not [f for f in findings(rows) if f.key.startswith(COST)]
    dearer = results_frame(rows.to_dict("records") + [row("silo_paper", "tune", 0, 1, epochs=50, selected=False)])
    (found,) = [f for f in findings(dearer) if f.key.startswith(COST)]
    assert sentences([found]) == ["SILO (paper) costs more epochs than the Oracle: 133 % of the Oracle's epochs "
                                  "(80 against 60), where the paper's complexity claim is that SILO costs a fraction "
                                  "of the Oracle."]


def test_over_replicates_one_sentence_per_premise_says_in_how_many_with_each_ones_numbers():
    a, b = Finding(SIGMA, "from 1 to 2 (2.00×)"), Finding(SIGMA, "from 1 to 3 (3.00×)")
    cost = Finding(f"{COST}:silo_fit", "120 % of the Oracle's epochs (12 against 10)")
    assert over_replicates({"replicate-1": [a, cost], "replicate-2": [b], "replicate-3": []}) == [
        "The gradient σ rises in 2 of 3 replicates (replicate-1 from 1 to 2 (2.00×); replicate-2 from 1 to 3 "
        "(3.00×)), where the paper's Fig. 1 premise is that it falls as the network is pruned.",
        "SILO (fit) costs more epochs than the Oracle in 1 of 3 replicates (replicate-1 120 % of the Oracle's epochs "
        "(12 against 10)), where the paper's complexity claim is that SILO costs a fraction of the Oracle."]
    assert over_replicates({"replicate-1": [], "replicate-2": []}) == []


def test_the_default_runs_own_report_says_its_gradient_sigma_rises(tmp_path):
    # The committed exhaustive compare of the default (base seed 0): σ from 8.6e-4 to 3.4e-3.
    assert sentences(findings(results_frame(read_results(SEED0).to_dict("records")))) == [
        "The gradient σ rises: from 0.00086 at λ = 100 % to 0.0034 at λ = 6.87 % (3.92×), where the paper's Fig. 1 "
        "premise is that it falls as the network is pruned."]
    printed = report_of(tmp_path, realistic())  # grad σ 0.01 (1 + cycle): rising
    first = printed["report.md"].read_text().split("\n## ")[1]  # the answer's section
    assert "The gradient σ rises: from 0.01 at λ = 100 % to 0.05 at λ = 41 % (5.00×)" in first
