"""Plans as ranges (issue 61): the report over replicates plans a fixed R at the observed mean and one standard
error to the unfavourable side, each on its sd bound, and says under which rule the replicates already run count;
read on the committed example's own results tables (docs/example, read only: nothing is written there)."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis.replicate_report import Replicate, _smallest, needed_line, plan_range, write_replicates_report
from analysis.replicates import aggregate, comparisons
from oracle_search.statistics import REPLICATE_BUDGET, plan_at, sd_upper

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "docs" / "example"
RUNS = sorted(EXAMPLE.glob("replicate-*"))


@pytest.fixture(scope="module")
def verdict() -> pd.DataFrame:
    """The verdict over the committed example's replicates, from their results tables (as the report reads them)."""
    reps = [Replicate.read(run, run.name, 0.5) for run in RUNS]
    found, _ = aggregate({i: comparisons(r.regret) for i, r in enumerate(reps)}, 0.5)
    return found


@pytest.mark.parametrize("hypothesis, at, sd, margin", [
    ("equivalence", 0.0, 1.0, 3.0), ("equivalence", -1.3, 0.9, 3.0), ("difference", 1.8, 1.5, 3.0),
    ("difference", 11.6, 12.8, 3.0), ("difference", 0.0, 1.0, 3.0)])
def test_the_bisection_finds_the_plan_the_linear_search_finds(hypothesis, at, sd, margin):
    assert _smallest(hypothesis, at, sd, margin) == plan_at(hypothesis, at, at, sd, margin).replicates


def test_a_range_runs_from_the_observed_mean_to_one_se_unfavourable_on_each_bound():
    values = np.array([-0.3, 0.8, -1.2])  # an equivalent-looking row: mean -0.23
    mean, sd, n, margin = float(values.mean()), float(values.std(ddof=1)), 3, 3.0
    se = sd / math.sqrt(n)
    found = plan_range("equivalence", mean, sd, n, margin)
    assert found["unfavourable"] == pytest.approx(mean - se)  # further from 0, on the mean's side
    assert found["sd_80"] == pytest.approx(sd_upper(sd, n)) and found["sd_95"] == pytest.approx(sd_upper(sd, n, 0.95))
    assert found["observed_80"] == plan_at("equivalence", mean, mean, found["sd_80"], margin).replicates
    assert found["unfavourable_80"] == plan_at("equivalence", mean - se, mean, found["sd_80"], margin).replicates
    assert found["observed_80"] < found["unfavourable_80"] <= found["unfavourable_95"]
    # A difference's unfavourable side is nearer to 0, and never past it.
    near = plan_range("difference", 0.5, 2.0, 3, margin)
    assert near["unfavourable"] == 0.0 and near["unfavourable_80"] is None


def test_the_committed_examples_plans_are_ranges_and_say_under_which_rule_its_replicates_count(verdict):
    line = needed_line(verdict)
    R = int(verdict["replicates"].max())
    assert R == len(RUNS) == 3
    planned = verdict[verdict["verdict"].isin(["equivalent", "inconclusive"]) & (verdict["sd"] > 0)]
    assert len(planned) >= 3
    # The first rows' numbers recomputed here from plan_at and sd_upper (every row's costs a minute of integrals).
    for _, r in planned[planned["schedule"] == "silo_paper"].head(4).iterrows():
        mean, sd, margin = float(r["advantage"]), float(r["sd"]), float(r["margin"])
        se, bound = sd / math.sqrt(R), sd_upper(sd, R)
        hypothesis = ("equivalence" if r["verdict"] == "equivalent" or abs(mean) < margin else "difference")
        worse = math.copysign(abs(mean) + se if hypothesis == "equivalence" else max(abs(mean) - se, 0), mean)
        ends = [plan_at(hypothesis, at, mean, bound, margin).replicates for at in (mean, worse)]
        text = [f"> {REPLICATE_BUDGET}" if e is None else str(e) for e in ends]
        span = text[0] if ends[0] == ends[1] else f"{text[0]}–{text[1]}"
        what = "equivalence" if hypothesis == "equivalence" else "a difference"
        assert f"mean {mean:+.2f} ± se {se:.2f}, sd {sd:.2f}): {what} {span} (sd bound {bound:.2f}; on the 95 % " \
               f"bound {sd_upper(sd, R, 0.95):.2f}: " in line, (r["schedule"], r["versus"], span)
    assert "planned for a fixed R" in line and "one standard error to the unfavourable side" in line
    assert f"Whether the {R} replicates already run count toward a plan depends on the rule" in line
    assert "under the sequential rule they count" in line and "optional stopping" in line
    # A run that went in waves says its replicates count under its own rule.
    waves = needed_line(verdict, auto=True)
    assert f"its {R} replicates count toward its own N under that rule" in waves and "Whether the" not in waves


@pytest.mark.slow  # the whole report over three replicates, figures included: about a minute on 2 loaded cores
def test_the_report_over_the_committed_example_plans_in_ranges_and_says_its_labels_are_fixed_r(tmp_path):
    before = {p: p.stat().st_mtime_ns for p in EXAMPLE.rglob("*") if p.is_file()}
    write_replicates_report(tmp_path / "example", RUNS, 0.5)
    report = (tmp_path / "example" / "report.md").read_text()
    assert "These labels are fixed-R labels: one look at R = 3 replicates" in report
    assert "assume R was fixed before any result was read" in report
    assert "Replicates needed, planned for a fixed R" in report and "depends on the rule" in report
    assert {p: p.stat().st_mtime_ns for p in EXAMPLE.rglob("*") if p.is_file()} == before
