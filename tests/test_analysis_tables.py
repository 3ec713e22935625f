"""The report's tables on hand-made results tables: Oracle intervals, accuracy with 95 % half-widths and n, cost
counting trainings actually run, §3.1 statistics at the Oracle's dense best, and their exact Markdown / LaTeX."""
from __future__ import annotations

import math

import pandas as pd
import pytest
from scipy import stats

from analysis import render
from analysis.intervals import oracle_intervals
from analysis.tables import (accuracy_table, best_per_density, cost_table, headline, oracle_table, racing_table,
                             seed_table, statistics_table, values_table)
from oracle_search.schema import results_frame


def row(method: str, stage: str, seed: int, cycle: int, **kw) -> dict:
    return {"experiment": "t", "method": method, "stage": stage, "seed": seed, "cycle": cycle,
            "density": 100 * 0.8**cycle, "max_lr": 0.1, "val_acc": 50.0, "test_acc": 50.0, "epochs": 10,
            "seconds": 360.0, "grad_std": 0.1, "act_std": 1.0, "selected": stage == "final", **kw}


def oracle(seed: int, cycle: int, lr: float, *, chosen: float, **kw) -> dict:
    """An Oracle grid row on seed `seed`'s chain, which picked `chosen` at every earlier cycle."""
    return row("oracle", "grid", seed, cycle, max_lr=lr, selected=lr == chosen,
               checkpoint_hash=f"s{seed}c{cycle}lr{lr}",
               start_hash=f"s{seed}c{cycle - 1}lr{chosen}" if cycle else "", **kw)


# --- accuracy ---------------------------------------------------------------------------------------------------

def accuracy_rows() -> pd.DataFrame:
    """Oracle on tuning seeds 0-2; SILO variants and a baseline on evaluation seeds 10-11."""
    rows = [oracle(s, c, 0.1, chosen=0.1, test_acc=a)
            for c, accs in ((0, (80.0, 81.0, 82.0)), (1, (70.0, 72.0, 71.0))) for s, a in enumerate(accs)]
    rows += [oracle(s, c, 0.2, chosen=0.1, test_acc=99.0) for s in range(3) for c in (0, 1)]  # not chained
    rows += [row("silo_paper", "final", s, c, test_acc=a) for (s, c), a in
             {(10, 0): 79.0, (11, 0): 81.0, (10, 1): 75.0}.items()]
    rows += [row("silo_paper", "final", s, c, test_acc=99.0, selected=False) for s in (10, 11) for c in (0, 1)]
    rows += [row("silo_paper", "tune", 0, 0, test_acc=99.0, selected=False)]
    rows += [row("silo_fit", "final", s, 0, test_acc=a) for s, a in ((10, 81.5), (11, 82.5))]
    rows += [row("silo_fit", "fit", 0, 1, test_acc=99.0, study_trial=0.0)]
    rows += [row("constant", "final", s, 0, test_acc=78.0) for s in (10, 11)]
    return results_frame(rows)


def half_width(values: list[float]) -> float:
    n = len(values)
    sd = math.sqrt(sum((v - sum(values) / n) ** 2 for v in values) / (n - 1))
    return stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n)


def test_accuracy_cells_are_mean_half_width_and_n():
    assert half_width([80.0, 81.0, 82.0]) == pytest.approx(4.302653 / math.sqrt(3), rel=1e-6)  # 2.484
    assert half_width([79.0, 81.0]) == pytest.approx(12.706205, rel=1e-6)
    table = accuracy_table(accuracy_rows())
    assert table.cells.columns.tolist() == ["Method", "100", "80"]
    assert table.cells.values.tolist() == [
        ["Oracle", "81.00 ± 2.48 (n=3)", "71.00 ± 2.48 (n=3)"],
        ["SILO (paper)", "80.00 ± 12.71 (n=2)", "75.00 (n=1)"],
        ["SILO (fit)", "82.00 ± 6.35 (n=2)", "–"],
        ["Constant LR", "78.00 ± 0.00 (n=2)", "–"],
    ]
    assert table.bold.values.tolist() == [[False, False, False], [False, False, True], [False, True, False],
                                          [False, False, False]]
    data = table.data.set_index(["method", "cycle"])
    assert data.loc[("oracle", 0), "ci95"] == pytest.approx(half_width([80.0, 81.0, 82.0]))
    assert data.loc[("silo_fit", 0), "ci95"] == pytest.approx(half_width([81.5, 82.5]))
    assert math.isnan(data.loc[("silo_paper", 1), "ci95"])
    assert data["n_seeds"].tolist() == [3, 3, 2, 1, 2, 2]
    assert data["density"].tolist() == pytest.approx([100.0, 80.0, 100.0, 80.0, 100.0, 100.0])


def test_accuracy_verdict_uses_paired_differences_on_shared_evaluation_seeds():
    # λ = 100: SILO (paper) − SILO (fit) on seeds 10, 11 = [−2.5, −1.5] (behind); SILO (fit) − SILO (paper) =
    # [2.5, 1.5], mean 2, half-width 12.71·0.707/√2 = 6.35 (CI contains 0); SILO (fit) − Constant = [3.5, 4.5],
    # mean 4 ± 6.35 (contains 0). λ = 80: only SILO (paper) seed 10 and the Oracle (tuning seeds, never paired).
    assert accuracy_table(accuracy_rows()).verdict == (
        "SILO (paper) is ahead of every method it shares evaluation seeds with at 0 of 1 densities, with the "
        "paired 95 % CI above 0 at 0; SILO (fit) is ahead of every method it shares evaluation seeds with at 1 of 1 "
        "densities, with the paired 95 % CI above 0 at 0 (paired differences on the shared evaluation seeds; the "
        "Oracle runs on its tuning seeds, so it is not paired; a diverged chain is counted, not averaged).")
    # λ = 100: SILO (fit) leads (82); the best method sharing its seeds is SILO (paper) (80), CI contains 0.
    # λ = 80: SILO (paper) 75 beats the Oracle's 71, but they share no seed.
    assert best_per_density(accuracy_rows()) == "100 %: SILO (fit) (within noise of SILO (paper)); 80 %: SILO (paper) (not paired)"


def test_a_diverged_final_chain_is_counted_not_averaged():
    """Seed 12's SILO (paper) chain diverged at cycle 1 (its row reports 79, from before the divergence): from
    cycle 1 on the cell averages seeds 10 and 11 only and says 1 diverged; the paired comparison leaves it out."""
    rows = [row("silo_paper", "final", s, c, test_acc=a, diverged=(s, c) == (12, 1))
            for s, accs in {10: (80.0, 70.0), 11: (82.0, 72.0), 12: (81.0, 79.0)}.items() for c, a in enumerate(accs)]
    rows += [row("warmup", "final", s, c, test_acc=a)
             for s, accs in {10: (80.0, 69.0), 11: (82.0, 70.0), 12: (81.0, 60.0)}.items() for c, a in enumerate(accs)]
    table = accuracy_table(results_frame(rows))
    assert table.cells.values.tolist() == [
        ["SILO (paper)", f"81.00 ± {half_width([80.0, 82.0, 81.0]):.2f} (n=3)",
         f"71.00 ± {half_width([70.0, 72.0]):.2f} (n=2, 1 diverged)"],
        ["LR warmup", f"81.00 ± {half_width([80.0, 82.0, 81.0]):.2f} (n=3)",
         f"66.33 ± {half_width([69.0, 70.0, 60.0]):.2f} (n=3)"],
    ]
    data = table.data.set_index(["method", "cycle"])
    assert data.loc[("silo_paper", 1), ["mean", "n_seeds", "diverged"]].tolist() == [71.0, 2, 1]
    # Paired at λ = 80 on seeds 10, 11: [1, 2], mean 1.5, half-width 12.71·0.707/√2 = 6.35: ahead, CI contains 0.
    assert "at 2 of 2 densities, with the paired 95 % CI above 0 at 0" in table.verdict
    every = [row("silo_paper", "final", s, 0, test_acc=50.0, diverged=True) for s in (10, 11)]
    assert accuracy_table(results_frame(every)).cells.values.tolist() == [["SILO (paper)", "diverged (n=2)"]]


def test_accuracy_table_exact_markdown():
    table = accuracy_table(accuracy_rows())
    assert render.markdown(table.cells, table.bold) == (
        "| Method       |                    100 |                 80 |\n"
        "| :----------- | ---------------------: | -----------------: |\n"
        "| Oracle       |     81.00 ± 2.48 (n=3) | 71.00 ± 2.48 (n=3) |\n"
        "| SILO (paper) |    80.00 ± 12.71 (n=2) |    **75.00 (n=1)** |\n"
        "| SILO (fit)   | **82.00 ± 6.35 (n=2)** |                  – |\n"
        "| Constant LR  |     78.00 ± 0.00 (n=2) |                  – |\n"
    )


def test_accuracy_table_exact_latex():
    table = accuracy_table(accuracy_rows())
    assert render.latex(table.cells, table.bold) == (
        "\\begin{tabular}{lrr}\n"
        "\\toprule\n"
        "Method & 100 & 80 \\\\\n"
        "\\midrule\n"
        "Oracle & 81.00 $\\pm$ 2.48 (n=3) & 71.00 $\\pm$ 2.48 (n=3) \\\\\n"
        "SILO (paper) & 80.00 $\\pm$ 12.71 (n=2) & \\textbf{75.00 (n=1)} \\\\\n"
        "SILO (fit) & \\textbf{82.00 $\\pm$ 6.35 (n=2)} & -- \\\\\n"
        "Constant LR & 78.00 $\\pm$ 0.00 (n=2) & -- \\\\\n"
        "\\bottomrule\n"
        "\\end{tabular}\n"
    )


def test_renderers_escape_special_characters():
    cells = pd.DataFrame({"λ (%)": ["a_b"], "x|y": ["1 & 2"]})
    assert render.latex(cells) == (
        "\\begin{tabular}{lr}\n\\toprule\n$\\lambda$ (\\%) & x|y \\\\\n\\midrule\na\\_b & 1 \\& 2 \\\\\n"
        "\\bottomrule\n\\end{tabular}\n"
    )
    assert render.markdown(cells) == "| λ (%) |  x\\|y |\n| :---- | ----: |\n| a_b   | 1 & 2 |\n"
    assert "<td>1 &amp; 2</td>" in render.html(cells)


# --- cost -------------------------------------------------------------------------------------------------------

def cost_rows() -> pd.DataFrame:
    rows = [oracle(0, c, lr, chosen=0.01) for c in (0, 1) for lr in (0.01, 0.02)]
    rows += [row("oracle", "refine", 0, 1, max_lr=0.015, start_hash="s0c0lr0.01")]
    rows += [oracle(0, 1, 0.04, chosen=0.01, reused=True)]  # an identical earlier training: free
    rows += [row("oracle", "single", 0, 0, epochs=99)]  # `oracle-search cycle`: no method's cost
    rows += [oracle(0, 1, 0.01, chosen=0.01, test_acc=71.0) | {"stage": "refine", "selected": False,
                                                                "start_hash": "abandoned"}]  # ran, so it counts
    rows += [row("silo_paper", "tune", 0, 0, selected=False, reused=r) for r in (False, True)]
    rows += [row("silo_paper", "final", s, 1, seconds=180.0, test_acc=a) for s, a in ((10, 74.0), (11, 76.0))]
    rows += [row("silo_fit", "fit", 0, 0, epochs=e, seconds=90.0, stopped_early=e < 5, study_trial=float(t),
                 selected=False) for t, e in enumerate((5, 5, 2))]
    rows += [row("silo_fit", "final", s, 1, seconds=180.0, test_acc=a) for s, a in ((10, 70.0), (11, 72.0))]
    rows += [row("constant", "tune", 0, 0, selected=False), row("constant", "final", 10, 0)]
    return results_frame(rows)


def test_cost_table_counts_only_trainings_actually_run():
    table = cost_table(cost_rows())
    data = table.data.set_index("method")
    assert data["trainings"].to_dict() == {"oracle": 6, "silo_paper": 3, "silo_fit": 5, "constant": 2}
    assert data["reused"].to_dict() == {"oracle": 1, "silo_paper": 1, "silo_fit": 0, "constant": 0}
    assert data["epochs"].to_dict() == {"oracle": 60, "silo_paper": 30, "silo_fit": 32, "constant": 20}
    assert data["device_hours"].to_dict() == pytest.approx(
        {"oracle": 0.6, "silo_paper": 0.2, "silo_fit": 0.175, "constant": 0.2})
    assert table.cells.values.tolist() == [
        ["Oracle", "6", "1", "60", "0.600", "50.00"],
        ["SILO (paper)", "3", "1", "30", "0.200", "75.00"],
        ["SILO (fit)", "5", "0", "32", "0.175", "71.00"],
        ["Constant LR", "2", "0", "20", "0.200", "–"],
    ]
    assert table.cells.columns[-1] == "test acc. at λ = 80"
    # Without the exhaustive Oracle's plan (`premises.OracleCost`, which the report passes), the Oracle as run alone.
    # Each SILO variant's search apart from its final chains: silo_paper's δ search 1 training (the other reused),
    # silo_fit's study 12 epochs (one trial stopped early).
    assert table.verdict == (
        "Against the Oracle as run (6 trainings, 60 epochs): SILO (paper) cost 30 epochs (50 % of the "
        "Oracle's epochs as run and 33 % of its device-hours): its δ search 10 (17 % of the Oracle's) and the SILO "
        "schedule itself, its final chains on the evaluation seeds, 20 (33 % of the Oracle's); SILO (fit) cost 32 "
        "epochs (53 % of the Oracle's epochs as run and 29 % of its device-hours): its study 12 (20 % of the "
        "Oracle's) and the SILO schedule itself, its final chains on the evaluation seeds, 20 (33 % of the "
        "Oracle's). SILO (paper) takes ε from the Oracle's cycle 0, which its cost does not count.")


def test_final_runs_no_longer_current_are_counted_in_the_cost_and_said_once():
    """A wide δ search's speculative final runs of a δ that lost (deselected by the winner's): in silo_paper's cost,
    in no accuracy, and named in one sentence."""
    spec = [row("silo_paper", "final", s, 1, seconds=180.0, test_acc=10.0, selected=False, delta=0.5)
            for s in (10, 11)]
    table = cost_table(results_frame(cost_rows().to_dict("records") + spec))
    assert table.data.set_index("method")["trainings"]["silo_paper"] == 3 + 2
    assert table.cells.values.tolist()[1][-1] == "75.00"  # the current chain's accuracy alone
    assert table.verdict.endswith(" Not current and counted in the cost: 2 final run(s) of SILO (paper) (speculative "
                                  "runs of a δ that did not win, or a chain a rerun replaced; read by no decision).")
    assert "Not current" not in cost_table(cost_rows()).verdict


def test_a_deselected_final_run_whose_training_the_current_chain_copied_is_not_unused():
    """Every δ's final chain trains cycles 0..q at ε alike: where the winner's chain copied the losing δ's row of
    such a cycle (`reused`), that training was read, and neither the dry run's waste nor the cost sentence counts
    it (on the paper's ResNet-20 on 64 slots, 18 of the 126 the first count gave)."""
    from oracle_search.schema import unused_finals

    lost = [row("silo_paper", "final", 12, c, selected=False, training=f"t{c}", key=f"lost{c}") for c in (0, 1, 2)]
    won = [row("silo_paper", "final", 12, c, training=f"t{c}", key=f"won{c}", reused=True) for c in (0, 1)]
    won.append(row("silo_paper", "final", 12, 2, training="w2", key="won2"))
    assert [r["key"] for r in unused_finals(lost + won)] == ["lost2"]
    assert cost_table(results_frame(cost_rows().to_dict("records") + lost + won)).verdict.endswith(
        "Not current and counted in the cost: 1 final run(s) of SILO (paper) (speculative runs of a δ that did not "
        "win, or a chain a rerun replaced; read by no decision).")


def racing_cost_rows() -> pd.DataFrame:
    """A racing Oracle (3 seeds, grid 0.1, 0.2, 0.4, cycles 0–1; 0.4 dropped after seed 0 at both cycles): 14
    trainings of 10 epochs, 36 s each. The exhaustive plan along its chain: the grid at cycle 0 and the bracket
    around b = 0.1 (the whole grid) at cycle 1, on every seed: 18 trainings; at most, the plan's closed form.
    SILO (paper): a δ search of 20 trainings and final chains of 4 (240 epochs). The held-out references: the Oracle's
    schedule trained (4), not adapting copied from SILO (paper)'s identical chain (4 reused, free)."""
    from oracle_rows import oracle_rows

    def spent(**kw) -> dict:
        return {"experiment": "t", "epochs": 10, "seconds": 36.0, "val_acc": 70.0, "test_acc": 70.0,
                "density": 100 * 0.8**kw["cycle"], **kw}

    cycles = {c: (0.1, {0.1: [80.0, 80.1, 79.9], 0.2: [79.0, 79.1, 78.9], 0.4: {0: 60.0}}) for c in (0, 1)}
    rows = [r | {"epochs": 10, "seconds": 36.0} for r in oracle_rows(cycles)]
    rows += [spent(method="silo_paper", stage="tune", seed=0, cycle=1, max_lr=0.1, delta=0.01 * i) for i in range(20)]
    rows += [spent(method=m, stage="final", seed=s, cycle=c, max_lr=0.1, selected=True, reused=m == "constant_dense",
                   **({"epsilon": 0.1, "delta": 0.2, "q": 1, "beta": 5.0} if m == "silo_paper" else {}))
             for m in ("silo_paper", "oracle_schedule", "constant_dense") for s in (10, 11) for c in (0, 1)]
    return results_frame(rows)


def test_the_cost_sentence_compares_with_both_oracles_the_search_apart_and_the_held_out_references_on_their_own():
    """Issue 59: "SILO (paper) costs 115–140 % of the Oracle's epochs" compared with the racing Oracle alone and was
    mostly silo_paper's δ search. One run's sentence says both Oracles (the exhaustive one from its plan along the
    run's chain to the plan at most, `premises.OracleCost`), the δ search apart from the SILO schedule's final
    chains, and what the held-out references add."""
    from analysis.premises import OracleCost

    df = racing_cost_rows()
    oracle = OracleCost.of(df, [0.1, 0.2, 0.4])
    assert (oracle.trainings, oracle.epochs, oracle.low, oracle.racing) == (14, 140, 18, True)
    high = oracle.high
    verdict = cost_table(df, oracle).verdict

    def most(part: int) -> str:  # a share of the exhaustive Oracle's, from its most trainings to its fewest
        return f"{100 * part / high:.0f}–{100 * part / 18:.0f} %"

    assert verdict == (
        f"Against the racing Oracle as run (14 trainings, 140 epochs) and the exhaustive Oracle it stands for (18–{high} "
        f"trainings, 180–{10 * high} epochs at the racing Oracle's epochs per training: its plan along this run's chain "
        "with this run's refinements, and the plan at most): SILO (paper) cost 240 epochs (171 % of the racing "
        f"Oracle's epochs as run and 171 % of its device-hours; {most(24)} of the exhaustive one's epochs): its δ "
        f"search 200 (143 % of the racing Oracle's, {most(20)} of the exhaustive one's) and the SILO schedule itself, "
        f"its final chains on the evaluation seeds, 40 (29 % of the racing Oracle's, {most(4)} of the exhaustive "
        "one's). SILO (paper) takes ε from the Oracle's cycle 0, which its cost does not count. The held-out "
        "references (the Oracle's schedule, not adapting and the best constant as final chains on the evaluation "
        "seeds: what the end-to-end verdict adds): 4 trainings, 40 epochs (29 % of the racing Oracle's, "
        f"{most(4)} of the exhaustive one's); 4 more copied from identical trainings of other chains, free.")
    assert most(24).endswith("133 %") and most(20).endswith("111 %")


def test_tables_absent_without_their_rows():
    rows = results_frame([row("constant", "final", 0, 0)])
    assert oracle_table(rows) is None and values_table(rows) is None and seed_table(rows) is None
    assert cost_table(rows).verdict == "No SILO or no Oracle rows: no cost comparison."
    assert accuracy_table(rows).verdict == "No SILO rows."


# --- §3.1 statistics --------------------------------------------------------------------------------------------

def statistics_rows(second_cycle_lrs=(0.02, 0.04)) -> list[dict]:
    """Two seeds; the Oracle's dense best is 0.02 (val 80 against 70), its cycle-1 choice 0.04."""
    grad = {(0, 0.02): (0.1, 0.3), (1, 0.02): (0.4, 0.4), (1, 0.04): (0.8, 0.6), (0, 0.04): (7.0, 7.0)}
    act = {(0, 0.02): (1.0, 3.0), (1, 0.02): (1.0, 1.0), (1, 0.04): (4.0, 2.0), (0, 0.04): (7.0, 7.0)}
    val = {(0, 0.02): 80.0, (0, 0.04): 70.0, (1, 0.02): 70.0, (1, 0.04): 80.0}
    chosen = {0: 0.02, 1: 0.04}
    rows = []
    for c, lrs in ((0, (0.02, 0.04)), (1, second_cycle_lrs)):
        for lr in lrs:
            rows += [oracle(s, c, lr, chosen=chosen[c] if c == 0 else 0.02, val_acc=val[(c, lr)],
                            grad_std=grad[(c, lr)][s], act_std=act[(c, lr)][s]) | {"selected": lr == chosen[c]}
                     for s in (0, 1)]
    # an abandoned chain's cycle-1 row at 0.02 must not count
    rows += [oracle(0, 1, 0.02, chosen=0.04, grad_std=99.0, act_std=99.0) | {"selected": False}]
    rows += [row("silo_paper", "final", s, c, grad_std=g, act_std=1.0) for s in (10, 11)
             for c, g in ((0, 0.5), (1, 2.0))]
    return rows


def test_statistics_come_from_the_oracle_chain_at_its_dense_best():
    table = statistics_table(results_frame(statistics_rows()))
    assert table.cells.values.tolist() == [["100", "0.2", "2"], ["80", "0.4", "1"]]
    assert table.verdict == ("From λ = 100% to 80%, gradient σ changes 2.00× and activation σ 0.50× "
                             "(Oracle chain at its dense best max_lr 0.02, mean over seeds).")


def test_statistics_fall_back_to_the_selected_chain_then_to_another_method():
    # The bracket left 0.02 out at cycle 1: the Oracle's selected rows (0.02, then 0.04) instead.
    table = statistics_table(results_frame(statistics_rows(second_cycle_lrs=(0.04,))))
    assert table.cells.values.tolist() == [["100", "0.2", "2"], ["80", "0.7", "3"]]
    assert table.verdict.endswith("(Oracle, mean over seeds).")
    silo_only = statistics_table(results_frame([r for r in statistics_rows() if r["method"] == "silo_paper"]))
    assert silo_only.cells["gradient σ"].tolist() == ["0.5", "2"]
    assert silo_only.verdict.endswith("gradient σ changes 4.00× and activation σ 1.00× (SILO (paper), mean over "
                                      "seeds).")


# --- Oracle tables ----------------------------------------------------------------------------------------------

CYCLES = {0: (0.1, {0.025: [70.0, 71.0, 72.0], 0.05: [80.2, 80.2, 80.2], 0.1: [80.0, 81.0, 82.0],
                    0.2: [79.4, 80.3, 81.2], 0.4: [60.0, 61.0, 62.0]}),
          1: (0.2, {0.05: [60.0, 60.0, 60.0], 0.1: [79.6, 79.6, 79.6], 0.2: [80.0, 80.0, 80.0],
                    0.4: [80.1, 79.1, 78.1]})}


def oracle_rows(cycles=CYCLES, seeds=3) -> list[dict]:
    return [oracle(s, c, lr, chosen=cycles[c - 1][0] if c else best, val_acc=accs[s]) | {"selected": lr == best}
            for c, (best, values) in cycles.items() for lr, accs in values.items() for s in range(seeds)]


def silo_rows() -> list[dict]:
    return [row(m, "final", s, c, max_lr=lr) for s in (10, 11)
            for m, lrs in (("silo_paper", (0.05, 0.2)), ("silo_fit", (0.2, 0.4))) for c, lr in enumerate(lrs)]


def test_oracle_table_paper_layout_with_both_intervals_and_both_silo_variants():
    table = oracle_table(results_frame(oracle_rows() + silo_rows()))
    assert table.cells.columns.tolist() == ["λ (%)", "100", "80"]
    assert table.cells.values.tolist() == [
        ["Oracle max_lr", "0.1", "0.2"],
        ["val. acc. (mean ± s.e.)", "81.00 ± 0.58", "80.00 ± 0.00"],
        ["Oracle interval (paper)", "[0.1, 0.1]", "[0.1, 0.2]"],
        ["not shown worse (lenient)", "[0.05, 0.1]", "[0.1, 0.4]"],
        ["shown within 0.5 (strict)", "[0.1, 0.1]", "[0.1, 0.2]"],
        ["values shown within 0.5", "1", "2"],
        ["contiguous (paper / not shown worse)", "yes / yes", "yes / yes"],
        ["values trained", "5", "4"],
        # the next value tried outside each edge: 0.05 and 0.2 around [0.1, 0.1]; 0.05 and 0.4 around [0.1, 0.2]
        ["edge resolution (paper: lo / hi)", "100 % / 100 %", "100 % / 100 %"],
        # lenient [0.05, 0.1]: 0.025 and 0.2 outside; [0.1, 0.4]: 0.05 below, nothing tried above 0.4
        ["edge resolution (not shown worse: lo / hi)", "100 % / 100 %", "100 % / open"],
        ["unimodal", "yes", "yes"],
        ["SILO (paper) max_lr", "0.05", "0.2"],
        ["SILO (paper) inside (paper / not shown worse / within)", "no / yes / no*", "yes / yes / yes"],
        ["SILO (fit) max_lr", "0.2", "0.4"],
        ["SILO (fit) inside (paper / not shown worse / within)", "no / no / no*", "no / yes / no"],
    ]
    lines = headline(oracle_intervals(results_frame(oracle_rows() + silo_rows())))
    # silo_rows carry no q: cycle 0 is never counted, so one cycle is judged. At cycle 1 (b = 0.2) SILO (paper) is
    # 0.2 = b: in all three. SILO (fit) is 0.4: mean 79.1 (0.9 worse) outside the paper's, d = [−0.1, 0.9, 1.9]
    # not shown worse, not shown within.
    assert lines == [
        'SILO (paper) at the 1 cycle from 1 on: inside the paper\'s interval at 1, "not shown worse" (lenient) at '
        '1, "shown within 0.5" (strict) at 1 (n = 3 tuning seeds, 95 % one-sided; cycles < 1, marked *, test '
        'nothing and are not counted).',
        'SILO (fit) at the 1 cycle from 1 on: inside the paper\'s interval at 0, "not shown worse" (lenient) at '
        '1, "shown within 0.5" (strict) at 0 (n = 3 tuning seeds, 95 % one-sided; cycles < 1, marked *, test '
        'nothing and are not counted).',
    ]
    assert table.verdict == " ".join(lines)


def test_headline_counts_only_cycles_after_q():
    """With q = 0 for SILO (fit) the first judged cycle is still 1 (cycle 0 tests nothing); with q = 1 for SILO
    (paper) and only cycles 0-1 nothing is judged."""
    silo = [r | {"epsilon": 0.1, "delta": 0.1, "beta": 5.0, "q": 1 if r["method"] == "silo_paper" else 0}
            for r in silo_rows()]
    df = results_frame(oracle_rows() + silo)
    lines = oracle_table(df).verdict
    assert "SILO (paper) at the 0 cycles from 2 on: inside the paper's interval at 0," in lines
    assert "SILO (fit) at the 1 cycle from 1 on:" in lines
    cells = oracle_table(df).cells.set_index("λ (%)")
    assert cells.loc["SILO (paper) inside (paper / not shown worse / within)"].tolist() == ["no / yes / no*",
                                                                                             "yes / yes / yes*"]
    assert cells.loc["SILO (fit) inside (paper / not shown worse / within)"].tolist() == ["no / no / no*",
                                                                                           "no / yes / no"]


def test_headline_without_silo_rows():
    no_silo = headline(oracle_intervals(results_frame(oracle_rows())))
    assert no_silo == ['No SILO rows; 2 of 2 "not shown worse" sets contiguous (n = 3).']


def test_values_table_lists_every_value_with_both_flags():
    table = values_table(results_frame(oracle_rows()))
    data = table.data.set_index(["cycle", "max_lr"])
    assert len(data) == 9
    assert data.loc[(0, 0.05), ["val_mean", "val_se"]].tolist() == pytest.approx([80.2, 0.0])
    assert data.loc[(0, 0.05), ["paper_inside", "noise_inside", "best"]].tolist() == [False, True, False]
    assert data.loc[(0, 0.2), ["paper_inside", "noise_inside"]].tolist() == [False, False]
    assert data["best"].sum() == 2 and data.loc[(1, 0.2), "best"]
    assert table.cells.iloc[1].tolist() == ["100", "0.05", "3", "complete", "80.20 ± 0.00", "no", "yes", "no", ""]
    assert (data["n"] == 3).all() and (data["status"] == "complete").all()
    # cycle 1: 0.1 is 0.4 worse on every seed (sd 0): shown within 0.5; 0.4 is not.
    assert data.loc[(1, 0.1), "within"] and not data.loc[(1, 0.4), "within"] and data.loc[(1, 0.2), "within"]
    assert table.verdict == ("9 (cycle, max_lr) values trained by all 3 seeds; every cycle's seed-mean curve is "
                             "unimodal.")
    bumpy = {0: (0.1, {0.025: [76.0], 0.05: [75.0], 0.1: [80.0]})}
    assert values_table(results_frame(oracle_rows(bumpy, seeds=1))).verdict.endswith("not unimodal at λ = 100 %.")


def test_values_table_of_a_racing_run_gives_n_and_status_and_never_says_every_seed_over_fewer():
    """Racing left cycle 1's 0.4 with one seed and never trained 0.8 (racing.json): n and status say so, the
    verdict counts them apart, and the racing table lists both with the drop's gap and look."""
    rows = [r for r in oracle_rows() if not (r["cycle"] == 1 and r["max_lr"] == 0.4 and r["seed"] > 0)]
    raced = {0: {"dropped": [], "not_trained": [], "completed_for_sets": []},
             1: {"dropped": [{"max_lr": 0.1, "seeds": 1, "gap": 2.0, "look": 1, "leader": 0.2, "why": "..."},
                             {"max_lr": 0.4, "seeds": 1, "gap": 2.5, "look": 1, "leader": 0.2, "why": "..."}],
                 "not_trained": [0.8], "completed_for_sets": [0.05]}}
    table = values_table(results_frame(rows), raced=raced)
    data = table.data.set_index(["cycle", "max_lr"])
    assert data.loc[(1, 0.4), ["n", "status"]].tolist() == [1, "dropped"]
    assert data.loc[(1, 0.8), ["n", "status"]].tolist() == [0, "not trained"]
    assert data.loc[(1, 0.2), ["n", "status"]].tolist() == [3, "complete"]
    assert table.verdict.startswith("8 (cycle, max_lr) values trained by all 3 seeds; 1 dropped, 1 not trained (n says")
    racing = racing_table(results_frame(rows), raced)
    # 0.1 was dropped in the race, then completed before the verdict (the rows hold all 3 seeds): said so
    assert racing.data[["cycle", "max_lr", "change", "seeds"]].values.tolist() == [
        [1, 0.1, "dropped, completed for the verdict", 1], [1, 0.4, "dropped", 1], [1, 0.8, "not trained", 0],
        [1, 0.05, "completed for the sets", pd.NA]]
    assert racing.cells.iloc[1].tolist() == ["80", "0.4", "dropped", "1", "2.50", "1", "0.2"]
    assert racing.verdict.endswith("so that the sets stay exact and 1 dropped one(s) for the verdict.")
    assert racing.verdict.startswith("Racing left 1 value(s) with fewer than all seeds, dropped 0 on a divergence")
    assert racing_table(results_frame(rows), None) is None  # an exhaustive run: no racing table


def test_seed_table_says_how_often_the_seeds_disagree():
    table = seed_table(results_frame(oracle_rows()))
    assert table.cells["Oracle max_lr"].tolist() == ["0.05", "0.4", "0.1", "0.2", "0.1", "0.2"]
    assert table.verdict.startswith("Each seed's own best differs across seeds at 2 of 2 cycles")
    same = {0: (0.1, {0.05: [70.0, 70.0], 0.1: [80.0, 81.0]})}
    assert "at 0 of 1 cycles" in seed_table(results_frame(oracle_rows(same, seeds=2))).verdict


# --- the verdict's words and marks ---------------------------------------------------------------------------------

def test_verdict_marks_and_sentences_for_every_label():
    """Each label has a mark and a word (readable without colour) and a sentence; equivalent names its margin and
    gives no seeds, inconclusive gives the seeds that would tell."""
    from analysis.tables import VERDICT_MARKS, _answer_cell
    from analysis.verdict_sentences import judged

    assert set(VERDICT_MARKS) == {"better", "worse", "equivalent", "inconclusive", "undefined"}

    def row(verdict, adv, lo, hi, need=pd.NA, holm=pd.NA, n=3):
        return pd.Series({"verdict": verdict, "advantage": adv, "ci_lo": lo, "ci_hi": hi, "n": n, "margin": 1.0,
                          "seeds_needed": need, "holm": holm})

    # One run's cells say the labels in the words of the answer over replicates, with † (this run's choices fixed).
    assert _answer_cell(row("equivalent", 0.4, 0.2, 0.6, holm="yes")) == "= equivalent† +0.40 [+0.20, +0.60], also " \
                                                                         "above 0"
    assert _answer_cell(row("better", 1.6, 0.3, 2.9, holm="no")) == (
        "▲ better (uncorrected)† +1.60 [+0.30, +2.90], not shown beyond the margin")
    assert _answer_cell(row("worse", -4.0, -5.5, -2.5, holm="yes")) == "▼ worse by more than the margin† -4.00 " \
                                                                         "[-5.50, -2.50]"
    assert _answer_cell(row("undefined", 1.0, math.nan, math.nan, n=1)) == "– undefined (n = 1 < 2 seeds)"
    assert judged(row("equivalent", 0.4, 0.2, 0.6), "X") == (
        "is equivalent to X within ±1.00 points: +0.40 points (95 % CI [+0.20, +0.60])")
    assert _answer_cell(row("inconclusive", -0.9, -3.38, 1.58, 12)) == (
        "? inconclusive† -0.90 [-3.38, +1.58]; ~12 seeds to tell")
    assert judged(row("inconclusive", -0.9, -3.38, 1.58, 12), "X") == (
        "is inconclusive against X at n = 3 (neither a difference nor equivalence within ±1.00 points shown): "
        "-0.90 points (95 % CI [-3.38, +1.58]), about 12 seeds would tell")
    assert _answer_cell(row("better", 2.0, 1.5, 2.5, holm="yes")) == "▲ better by more than the margin† +2.00 " \
                                                                      "[+1.50, +2.50]"
    assert judged(row("worse", -2.0, -2.5, -1.5), "X") == "loses to X: -2.00 points (95 % CI [-2.50, -1.50])"
