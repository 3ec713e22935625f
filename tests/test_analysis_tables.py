"""Accuracy, cost, Oracle and statistics tables and their exact Markdown / LaTeX text, on hand-made rows."""
from __future__ import annotations

import pandas as pd
import pytest

from analysis import render
from analysis.tables import accuracy_table, cost_table, oracle_table, seed_table, statistics_table


def row(method: str, stage: str, seed: int, cycle: int, *, max_lr: float = 0.1, val_acc: float = 50.0,
        test_acc: float = 50.0, selected: bool = True, diverged: bool = False, epochs: int = 10,
        seconds: float = 360.0, grad_std: float = 0.1, act_std: float = 1.0) -> dict:
    return {"method": method, "stage": stage, "seed": seed, "cycle": cycle, "density": 100 * 0.8**cycle,
            "max_lr": max_lr, "val_acc": val_acc, "test_acc": test_acc, "selected": selected, "diverged": diverged,
            "epochs": epochs, "seconds": seconds, "grad_std": grad_std, "act_std": act_std}


def tiny_accuracy_rows() -> pd.DataFrame:
    rows = [row("oracle", "grid", s, c, test_acc=a) for (s, c), a in
            {(0, 0): 80.0, (1, 0): 82.0, (0, 1): 70.0, (1, 1): 72.0}.items()]
    rows += [row("oracle", "grid", 0, 0, test_acc=99.0, selected=False)]  # not chained forward: ignored
    rows += [row("silo", "final", s, c, test_acc=a) for (s, c), a in {(0, 0): 79.0, (1, 0): 81.0, (0, 1): 75.0}.items()]
    rows += [row("silo", "fit", 0, 1, test_acc=99.0)]  # fitter trial: ignored
    return pd.DataFrame(rows)


def test_accuracy_table_mean_std_and_best_per_column():
    table = accuracy_table(tiny_accuracy_rows())
    assert table.cells.values.tolist() == [["Oracle", "81.00 ± 1.41", "71.00 ± 1.41"], ["SILO", "80.00 ± 1.41", "75.00"]]
    assert table.bold.values.tolist() == [[False, True, False], [False, False, True]]
    assert table.verdict == "SILO best at 1 of 2 densities (highest mean test accuracy)."
    oracle = table.data[table.data["method"] == "oracle"]
    assert oracle["std"].tolist() == pytest.approx([2**0.5, 2**0.5])
    assert oracle["density"].tolist() == pytest.approx([100.0, 80.0])


def test_accuracy_table_exact_markdown():
    table = accuracy_table(tiny_accuracy_rows())
    assert render.markdown(table.cells, table.bold) == (
        "| Schedule |              100 |           80 |\n"
        "| :------- | ---------------: | -----------: |\n"
        "| Oracle   | **81.00 ± 1.41** | 71.00 ± 1.41 |\n"
        "| SILO     |     80.00 ± 1.41 |    **75.00** |\n"
    )


def test_accuracy_table_exact_latex():
    table = accuracy_table(tiny_accuracy_rows())
    assert render.latex(table.cells, table.bold) == (
        "\\begin{tabular}{lrr}\n"
        "\\toprule\n"
        "Schedule & 100 & 80 \\\\\n"
        "\\midrule\n"
        "Oracle & \\textbf{81.00 $\\pm$ 1.41} & 71.00 $\\pm$ 1.41 \\\\\n"
        "SILO & 80.00 $\\pm$ 1.41 & \\textbf{75.00} \\\\\n"
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


def test_tied_best_means_are_all_bold():
    rows = pd.DataFrame([row("oracle", "grid", 0, 0, test_acc=80.0), row("constant", "final", 0, 0, test_acc=80.0),
                         row("warmup", "final", 0, 0, test_acc=79.0)])
    table = accuracy_table(rows)
    assert table.bold["100"].tolist() == [True, True, False]
    assert table.verdict == "Oracle best at 1 of 1 densities (highest mean test accuracy)."


def test_cost_table_sums_each_methods_trainings():
    rows = [row("oracle", "grid", 0, c, selected=False) for c in (0, 1)]
    rows += [row("oracle", "grid", 0, 1, diverged=True, selected=False, epochs=2, seconds=36.0)]
    rows += [row("oracle", "refine", 0, 0, test_acc=81.0), row("oracle", "refine", 0, 1, test_acc=71.0)]
    rows += [row("silo", "fit", 0, c, epochs=5, seconds=180.0) for c in (0, 1)]
    rows += [row("silo", "final", s, 1, test_acc=a) for s, a in ((0, 74.0), (1, 76.0))]
    rows += [row("constant", "tune", 0, 0), row("constant", "final", 0, 0)]  # no final row at the last cycle
    table = cost_table(pd.DataFrame(rows))
    data = table.data.set_index("method")
    assert data["trainings"].to_dict() == {"oracle": 5, "silo": 4, "constant": 2}
    assert data["epochs"].to_dict() == {"oracle": 42, "silo": 30, "constant": 20}
    assert data.loc["oracle", "device_hours"] == pytest.approx((4 * 360 + 36) / 3600)
    assert data.loc["silo", "last_cycle_test_acc"] == pytest.approx(75.0)
    assert data.loc["oracle", "last_cycle_test_acc"] == pytest.approx(71.0)
    assert table.cells.values.tolist() == [
        ["Oracle", "5", "42", "0.410", "71.00"],
        ["SILO", "4", "30", "0.300", "75.00"],
        ["Constant LR", "2", "20", "0.200", "–"],
    ]
    assert table.verdict == "SILO cost 71% of the Oracle's epochs and 73% of its device-hours."


def test_statistics_table_means_over_seeds_and_falls_back_without_oracle():
    rows = [row("oracle", "grid", s, c, grad_std=g, act_std=a) for s, c, g, a in
            ((0, 0, 0.1, 1.0), (1, 0, 0.3, 3.0), (0, 1, 0.4, 1.0), (1, 1, 0.4, 1.0))]
    rows += [row("silo", "final", 0, c, grad_std=9.0, act_std=9.0) for c in (0, 1)]
    table = statistics_table(pd.DataFrame(rows))
    assert table.cells.values.tolist() == [["100", "0.2", "2"], ["80", "0.4", "1"]]
    assert table.verdict.startswith("From λ = 100% to 80%, gradient σ changes 2.00× and activation σ 0.50×")
    fallback = statistics_table(pd.DataFrame([r for r in rows if r["method"] == "silo"]))
    assert fallback.cells["gradient σ"].tolist() == ["9", "9"] and "SILO rows" in fallback.verdict


def test_oracle_table_paper_layout():
    rows = [row("oracle", "grid", s, c, max_lr=lr, val_acc=a, selected=False) for s in (0, 1)
            for c, accs in ((0, {0.01: 80.0, 0.02: 79.8, 0.04: 70.0}), (1, {0.01: 79.9, 0.02: 70.0, 0.04: 80.0}))
            for lr, a in accs.items()]
    rows += [row("silo", "final", s, c, max_lr=lr) for s in (0, 1) for c, lr in ((0, 0.02), (1, 0.02))]
    table = oracle_table(pd.DataFrame(rows))
    assert table.cells.columns.tolist() == ["λ (%)", "100", "80"]
    assert table.cells.values.tolist() == [
        ["Oracle max_lr", "0.01", "0.04"],
        ["Oracle interval", "[0.01, 0.02]", "[0.01, 0.04]"],
        ["contiguous", "yes", "no"],
        ["SILO max_lr", "0.02", "0.02"],
        ["SILO inside", "yes", "yes"],
    ]
    assert table.verdict == ("SILO inside the Oracle interval at 2 of 2 cycles "
                             "(seed-mean validation accuracy over 2 seeds, tolerance 0.5 points).")
    per_seed = seed_table(pd.DataFrame(rows))
    assert len(per_seed.cells) == 4
    assert per_seed.verdict == ("SILO inside the per-seed Oracle interval at 4 of 4 (seed, cycle) pairs; "
                                "2 of 4 intervals contiguous.")


def test_oracle_table_without_silo_drops_silo_rows():
    rows = [row("oracle", "grid", 0, 0, max_lr=lr, val_acc=a) for lr, a in {0.01: 80.0, 0.02: 70.0}.items()]
    table = oracle_table(pd.DataFrame(rows))
    assert table.cells["λ (%)"].tolist() == ["Oracle max_lr", "Oracle interval", "contiguous"]
    assert table.verdict.startswith("No SILO rows; 1 of 1 Oracle intervals contiguous")


def test_tables_absent_without_their_rows():
    rows = pd.DataFrame([row("constant", "final", 0, 0)])
    assert oracle_table(rows) is None and seed_table(rows) is None
    assert cost_table(rows).verdict == "No SILO or no Oracle rows: no cost comparison."
