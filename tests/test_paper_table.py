"""Test accuracy in the paper's format (analysis/paper_table.py, `oracle-search paper-table`): methods × the
densities chosen, mean ± std over one run's seeds or over replicates (each replicate's seed mean one value), as
Markdown and LaTeX; the accuracy over replicates with ± std beside the 95 % interval; bad densities refused."""
from __future__ import annotations

import math

import pandas as pd
import pytest
from scipy import stats

from analysis import render
from analysis.paper_table import interval_table, paper_table, pick, summary, units
from conftest import cli
from test_analysis_tables import accuracy_rows
from test_replicate_report import SEED0, SEED100


def shifted(df: pd.DataFrame, points: float) -> pd.DataFrame:
    return df.assign(test_acc=df["test_acc"] + points)


def test_one_runs_table_is_mean_and_std_over_its_seeds_at_the_densities_chosen():
    data = summary(units({"run": accuracy_rows()}, "seed"))
    table = paper_table(data, over="seeds")
    assert table.cells.columns.tolist() == ["Method", "λ = 100 %", "λ = 80 %"]
    # Oracle: seeds 80, 81, 82 then 70, 72, 71 (std 1); SILO (paper): 79 and 81, then 75 alone (no std).
    assert table.cells.values.tolist() == [
        ["Oracle", "81.00 ± 1.00", "71.00 ± 1.00"],
        ["SILO (paper)", "80.00 ± 1.41", "75.00"],
        ["SILO (fit)", "82.00 ± 0.71", "–"],
        ["Constant LR", "78.00 ± 0.00", "–"],
    ]
    assert table.bold.iloc[:, 1:].values.tolist() == [[False, False], [False, True], [True, False], [False, False]]
    assert "over seeds (n = 1–3;" in table.verdict
    chosen = paper_table(data, [80.0], over="seeds")
    assert chosen.cells.columns.tolist() == ["Method", "λ = 80 %"]
    assert pick(data, [80.2, 100]) == [1, 0]  # within 0.5 %, in the order asked
    with pytest.raises(ValueError, match=r"no cycle at λ = 50, 90 %; the densities are 100, 80"):
        pick(data, [50, 80, 90])


def test_the_tables_render_as_markdown_and_booktabs_latex():
    table = paper_table(summary(units({"run": accuracy_rows()}, "seed")), over="seeds")
    md = render.markdown(table.cells, table.bold)
    assert [c.strip() for c in md.splitlines()[0].split("|")[1:4]] == ["Method", "λ = 100 %", "λ = 80 %"]
    assert "| SILO (fit)   | **82.00 ± 0.71** |" in md
    tex = render.latex(table.cells, table.bold)
    assert tex.startswith("\\begin{tabular}{lrr}\n\\toprule\nMethod & $\\lambda$ = 100 \\% & $\\lambda$ = 80 \\% \\\\")
    assert "SILO (fit) & \\textbf{82.00 $\\pm$ 0.71} & -- \\\\" in tex
    assert tex.rstrip().endswith("\\bottomrule\n\\end{tabular}")


def test_over_replicates_each_replicates_mean_is_one_value_and_the_interval_sits_beside_the_std():
    base = accuracy_rows()
    data = summary(units({"replicate-1": base, "replicate-2": shifted(base, 2.0)}, "replicate"))
    oracle = data[(data["method"] == "oracle") & (data["cycle"] == 0)].iloc[0]
    assert (oracle["mean"], oracle["n"]) == (82.0, 2)  # seed means 81 and 83
    assert oracle["std"] == pytest.approx(math.sqrt(2))
    half = stats.t.ppf(0.975, 1) * math.sqrt(2) / math.sqrt(2)
    assert (oracle["ci_lo"], oracle["ci_hi"]) == pytest.approx((82.0 - half, 82.0 + half))
    cells = interval_table(data).cells.set_index("Method")
    assert cells.loc["Oracle", "λ = 100 %"] == f"82.00 ± 1.41 [{82 - half:.2f}, {82 + half:.2f}]"
    assert cells.loc["SILO (paper)", "λ = 80 %"] == f"76.00 ± 1.41 [{76 - half:.2f}, {76 + half:.2f}]"
    assert paper_table(data).cells.set_index("Method").loc["Oracle", "λ = 100 %"] == "82.00 ± 1.41"
    assert "over replicates (n = 2;" in paper_table(data).verdict
    # One replicate is one unit, not its seeds: its seed mean, no std, no interval.
    alone = summary(units({"replicate-1": base}, "replicate"))
    assert interval_table(alone).cells.set_index("Method").loc["Oracle", "λ = 100 %"] == "81.00"


def test_the_command_prints_a_runs_table_or_the_replicates_and_refuses_a_density_no_cycle_has(capsys):
    assert cli(["paper-table", str(SEED0), "--densities", "100,26.2", "--latex"]) == 0
    out = capsys.readouterr().out
    assert "\\toprule" in out and "$\\lambda$ = 100 \\%" in out and "$\\lambda$ = 26.2 \\%" in out
    assert "$\\lambda$ = 64" not in out and "over seeds (n = 3;" in out
    assert cli(["paper-table", str(SEED0), str(SEED100)]) == 0
    out = capsys.readouterr().out
    assert "over replicates (n = 2;" in out and "| Oracle " in out and "λ = 6.87 %" in out
    assert cli(["paper-table", str(SEED0), "--densities", "100,17"]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line == ("oracle-search: error: densities: no cycle at λ = 17 %; the densities are 100, 64, 41, 26.2, "
                    "16.8, 10.7, 6.87")
    assert cli(["paper-table", str(SEED0), "--densities", "100,abc"]) == 2
    assert "densities" in capsys.readouterr().err
