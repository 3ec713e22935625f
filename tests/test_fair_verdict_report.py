"""Issue 59 in the reports (analysis/replicate_report.py, analysis/premises.py, analysis/over_replicates.py):
labels a reader cannot misread (the family sentence, "(uncorrected)", the margin said, Bonferroni's count), the
controls beside the §5.3 count, "adapting has nothing to find", the cost against both Oracles, and the cost table
on the first screen; on hand-made results tables, one study of which has cosine beat SILO on held-out seeds."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from analysis.premises import COST, OracleCost, exhaustive_oracle, findings, nothing_to_find, sentences
from analysis.replicate_report import (Replicate, _cell, answer_table, cost_table, family_line, multiplicity,
                                       write_replicates_report)
from analysis.replicates import aggregate
from analysis.select import cost_rows
from oracle_rows import oracle_rows
from oracle_search.schema import read_results, results_frame, write_results
from oracle_search.statistics import label
from test_replicate_report import SEED0

MARGIN = 1.0  # 0.5 points per compared cycle × L = 2

# --- the words of a cell, the family and the corrections -----------------------------------------------------------


def test_a_cell_says_uncorrected_instead_of_a_claim_beside_its_withdrawal_and_tells_the_margin_from_0():
    """The label stays `statistics.label`'s; the words come from (verdict, lo, hi, margin, holm)."""
    assert _cell("better", 5.1, 3.2, 7.0, 3.0, "yes") == "▲ better by more than the margin +5.10 [+3.20, +7.00]"
    # the cell: "▲ better +3.19 [+1.37, +5.01] (not under Holm)" against a ±3 margin
    assert _cell("better", 3.19, 1.37, 5.01, 3.0, "no") == (
        "▲ better (uncorrected) +3.19 [+1.37, +5.01], not shown beyond the margin")
    assert _cell("worse", -4.0, -4.5, -3.5, 3.0, "no") == "▼ worse by more than the margin (uncorrected) -4.00 " \
                                                            "[-4.50, -3.50]"
    assert _cell("worse", -2.0, -2.9, -1.1, 3.0, "yes") == "▼ worse -2.00 [-2.90, -1.10], not shown beyond the margin"
    assert _cell("equivalent", 0.5, 0.1, 0.9, 1.0, "no") == "= equivalent (uncorrected) +0.50 [+0.10, +0.90], also " \
                                                             "above 0"
    assert _cell("inconclusive", 1.0, -1.0, 3.0, 1.0, pd.NA) == "? inconclusive +1.00 [-1.00, +3.00]"
    # lo exactly at the margin is not beyond it
    assert _cell("better", 4.0, 3.0, 5.0, 3.0, "yes").endswith(", not shown beyond the margin")


def _frame(advantages: dict[tuple[str, str], list[float]], k: int) -> pd.DataFrame:
    """Replicate k's comparison frame: its own interval (advantage ± 0.5) and label, margin 1."""
    rows = []
    for (schedule, versus), values in advantages.items():
        a = values[k]
        rows.append({"schedule": schedule, "versus": versus, "advantage": a, "ci_lo": a - 0.5, "ci_hi": a + 0.5,
                     "n": 3, "verdict": label(a - 0.5, a + 0.5, MARGIN), "margin": MARGIN})
    return pd.DataFrame(rows)


# Over three replicates: SILO (paper) worse than cosine by more than the margin (sd 0.2: p ≈ 0.0008); better than
# LR warmup, only above 0 (sd 1: [0.52, 5.48] against the margin 1, p ≈ 0.035, withdrawn by Holm); the rest
# inconclusive.
FAMILY = {("silo_paper", "oracle_schedule"): [1.0, -2.0, 0.5],
          ("silo_paper", "constant_dense"): [2.0, -1.0, 3.0],
          ("silo_paper", "cosine"): [-4.0, -4.2, -3.8],
          ("silo_paper", "warmup"): [2.0, 3.0, 4.0],
          ("silo_fit", "cosine"): [-6.0, 1.0, -2.0],
          ("silo_fit", "best_benchmark"): [-6.0, 1.0, -2.0]}


def test_the_first_line_under_the_table_says_which_labels_hold_across_the_family():
    verdict, _ = aggregate({k: _frame(FAMILY, k) for k in range(3)}, 0.5)
    by = verdict.set_index(["schedule", "versus"])
    assert (by.loc[("silo_paper", "cosine"), "verdict"], by.loc[("silo_paper", "cosine"), "holm"]) == ("worse", "yes")
    assert (by.loc[("silo_paper", "warmup"), "verdict"], by.loc[("silo_paper", "warmup"), "holm"]) == ("better", "no")
    assert family_line(verdict) == ("Across the family of 6 comparisons at 5 % (Holm), 1 holds: SILO (paper) worse "
                                    "than Cosine by more than the margin (Bonferroni keeps 1).")
    none = verdict.assign(holm=verdict["holm"].map({"yes": "no", "no": "no"}),
                          bonferroni=verdict["bonferroni"].map({"yes": "no", "no": "no"}))
    assert family_line(none) == ("Across the family of 6 comparisons at 5 % (Holm), none of the labels holds "
                                 "(Bonferroni keeps none).")
    # the table: one row per comparison, a column per SILO variant; no claim beside its withdrawal
    cells = answer_table(verdict, 3).cells.set_index("compared with")
    assert cells.loc["Cosine", "SILO (paper)"].startswith("▼ worse by more than the margin -4.00 [")
    assert cells.loc["LR warmup", "SILO (paper)"].startswith("▲ better (uncorrected) +3.00 [")
    assert cells.loc["LR warmup", "SILO (paper)"].endswith(", not shown beyond the margin")
    assert cells.loc["LR warmup", "SILO (fit)"] == "–"  # not compared
    assert not cells.apply(lambda c: c.str.contains("not under Holm")).any().any()
    assert list(cells.index) == ["the Oracle's schedule (held out)", "not adapting", "Cosine", "LR warmup",
                                 "the best benchmark (chosen on tuning seeds)"]


def test_the_bonferroni_sentence_says_how_many_labels_each_correction_keeps_even_none():
    """The issue: "Bonferroni … keeps the same labels" when no label survives either read as if labels were kept."""
    verdict, _ = aggregate({k: _frame(FAMILY, k) for k in range(3)}, 0.5)
    none = verdict.assign(holm=verdict["holm"].map({"yes": "no", "no": "no"}),
                          bonferroni=verdict["bonferroni"].map({"yes": "no", "no": "no"}))
    sentence = multiplicity(none)
    assert "keeps the same labels" not in sentence
    assert sentence.endswith("Of the 2 labels (better, worse or equivalent), Holm keeps none and Bonferroni keeps "
                             "none.")
    assert multiplicity(verdict).endswith("Of the 2 labels (better, worse or equivalent), Holm keeps 1 and "
                                          "Bonferroni keeps 1, the same ones.")
    nothing = verdict.assign(verdict="inconclusive", holm=pd.NA, bonferroni=pd.NA)
    assert multiplicity(nothing).endswith("No comparison is labelled better, worse or equivalent, so neither "
                                          "correction has a label to keep.")


# --- hand-made studies ---------------------------------------------------------------------------------------------

NOISE = (0.0, 0.1, -0.1)  # per seed
# The Oracle's cycles on the grid 0.1, 0.2, 0.4 (seed means): b 0.1, 0.2, 0.4; its paper interval [0.1, 0.2],
# [0.2, 0.4], [0.2, 0.4]: 0.2 lies inside at every cycle. constant_dense = 0.1 (inside at cycle 0 only);
# constant_best = 0.4 (Σ over cycles 1–2: 159.7 against 159.6 for 0.2 and 148 for 0.1), inside at cycles 1 and 2.
ORACLE = {0: (0.1, {0.1: 80.0, 0.2: 79.8, 0.4: 70.0}),
          1: (0.2, {0.1: 78.0, 0.2: 80.0, 0.4: 79.7}),
          2: (0.4, {0.1: 70.0, 0.2: 79.6, 0.4: 80.0})}
SILO_PAPER = (0.1, 0.1, 0.3)  # q = 1: ε at cycles 0 and 1; 0.3 lies between two members at cycle 2
SILO_PARAMS = {"epsilon": 0.1, "delta": 0.2, "q": 1, "beta": 5.0}


def _cost(row: dict, **kw) -> dict:
    return {"epochs": 10, "seconds": 36.0, "device": "cpu", "experiment": "hand", **row, **kw}


def study(r: int, *, cosine_gap: float = 2.0, best_gap: float = 0.1, oracle: dict = ORACLE) -> list[dict]:
    """Replicate r (base seed 10000·r): the Oracle on tuning seeds; SILO (paper), LR warmup, cosine and the three
    held-out references as final chains on evaluation seeds, cycles 0–2. Per evaluation seed and cycle, cosine
    scores `cosine_gap` above SILO (so SILO − cosine = −2·gap summed over cycles 1–2) and the best constant
    `best_gap` above the Oracle's schedule."""
    base = 10000 * r
    cycles = {c: (b, {lr: {base + s: acc + NOISE[s] for s in range(3)} for lr, acc in accs.items()})
              for c, (b, accs) in oracle.items()}
    rows = [_cost(row) for row in oracle_rows(cycles)]
    for lr in (0.1, 0.2):  # the δ search: one trained, one reused
        rows.append(_cost({"method": "silo_paper", "stage": "tune", "seed": base, "cycle": 2, "max_lr": lr,
                           "val_acc": 79.0, "test_acc": 78.0}, reused=lr == 0.2, delta=lr))
    for name, val in (("cosine", 81.0), ("warmup", 80.0)):  # tuning on cycle 0: cosine scores highest
        for s in range(3):
            rows.append(_cost({"method": name, "stage": "tune", "seed": base + s, "cycle": 0, "max_lr": 0.1,
                               "val_acc": val + NOISE[s], "test_acc": val}))
    finals = {"silo_paper": (SILO_PAPER, 0.0), "cosine": ((0.1,) * 3, cosine_gap),
              "warmup": ((0.1,) * 3, 0.3 * (r - 1)), "oracle_schedule": ((0.1, 0.2, 0.4), 0.5),
              "constant_dense": ((0.1,) * 3, -2.0), "constant_best": ((0.4,) * 3, 0.5 + best_gap)}
    for method, (lrs, gap) in finals.items():
        for s in range(3):
            for c, lr in enumerate(lrs):
                extra = SILO_PARAMS if method == "silo_paper" else {}
                rows.append(_cost({"method": method, "stage": "final", "seed": base + 1000 + s, "cycle": c,
                                   "density": 100 * 0.8**c, "max_lr": lr, "val_acc": 80.0,
                                   "test_acc": 80.0 + gap + 0.05 * s * (r + 1), "selected": True}, **extra))
    return rows


def _replicates(tmp_path: Path, n: int = 3, **kw) -> list[Path]:
    runs = []
    for r in range(n):
        run = tmp_path / f"replicate-{r + 1}"
        run.mkdir(parents=True)
        write_results(run, study(r, cosine_gap=2.0 + 0.1 * r, **kw))
        (run / "spec.json").write_text(json.dumps({"dataset": "synthetic", "grid": [0.1, 0.2, 0.4], "seed": 10000 * r,
                                                   "cycles": 2, "rate": 0.2}))
        runs.append(run)
    return runs


def test_a_study_where_cosine_beats_silo_on_held_out_seeds_says_so_first(tmp_path):
    """The first screen: the family sentence under the answer names cosine (and the best benchmark, which the
    tuning seeds chose: cosine) ahead of SILO (paper) beyond the margin; the §5.3 count with both controls beside
    it; the cost table; "adapting has nothing to find" where it holds."""
    runs = _replicates(tmp_path / "runs")
    out = tmp_path / "over"
    write_replicates_report(out, runs, 0.5)
    report = (out / "report.md").read_text()
    answer = (out / "tables" / "replicate_answer.md").read_text()
    under = report.split(answer)[1].lstrip("\n").splitlines()[0]
    assert under.startswith("Across the family of 6 comparisons at 5 % (Holm), ")
    assert "SILO (paper) worse than Cosine by more than the margin" in under
    assert "SILO (paper) worse than the best benchmark (chosen on tuning seeds) by more than the margin" in under
    cosine = next(line for line in answer.splitlines() if line.startswith("| Cosine "))
    assert "▼ worse by more than the margin -4.20 [" in cosine
    verdict = pd.read_csv(out / "tables" / "verdict.csv").set_index(["schedule", "versus"])
    assert verdict.loc[("silo_paper", "cosine"), "advantage"] == pytest.approx(-4.2, abs=0.01)  # −2·(2, 2.1, 2.2)
    assert set(verdict.index.get_level_values("versus")) == {"oracle_schedule", "constant_dense", "constant_best",
                                                             "warmup", "cosine", "best_benchmark"}
    # the §5.3 count with the controls beside it: SILO (paper) is tested at cycle 2 only (q = 1)
    assert ("SILO (paper) lies inside its replicate's paper interval at 3 of 3 (replicate, cycle) pairs it is tested "
            "at (over the same pairs: the best constant at 3, not adapting at 0)") in report
    assert ("Over every (replicate, cycle ≥ 1) pair: the best constant (0.4) at 6 of 6, not adapting (0.1) at 0 of "
            "6.") in report
    # the first screen, in order: answer, §5.3, cost table, links, premises
    order = ["## The answer over 3", "## max_lr per cycle over the replicates (paper §5.3)",
             "## Cost per method over the replicates", "## Each replicate's own report",
             "## Where the runs contradict the paper's premises", "## Each replicate's labels"]
    assert [report.index(h) for h in order] == sorted(report.index(h) for h in order)
    assert (out / "tables" / "replicate_cost.csv").exists()
    # the best constant, held out, 0.1 above the Oracle's schedule per cycle: +0.2 summed, inside ±1; and 0.2
    # inside every interval
    premises = report[report.index("## Where the runs contradict"):report.index("## Each replicate's labels")]
    assert ("Adapting has nothing to find: the best constant, held out, is equivalent to the Oracle's schedule within "
            "±1 end to end") in premises
    assert "one constant 0.2 lies inside the paper interval at every (replicate, cycle) pair (9 of 9, cycle 0 " \
           "included)" in premises


def test_nothing_to_find_from_the_held_out_chains_alone_and_not_when_the_oracle_is_ahead():
    """No constant inside every interval (b 0.1, then 0.4 with nothing else within 0.5): only the held-out
    comparison can fire. The best constant 0.1 above the Oracle's schedule per cycle (+0.2 summed over cycles 1–2,
    inside ±1): equivalent, it fires; 3 points below (−6 summed): not."""
    apart = {0: (0.1, {0.1: 80.0, 0.2: 70.0, 0.4: 60.0}), 1: (0.4, {0.1: 60.0, 0.2: 70.0, 0.4: 80.0}),
             2: (0.4, {0.1: 60.0, 0.2: 70.0, 0.4: 80.0})}
    near = {f"replicate-{r}": results_frame(study(r, oracle=apart)) for r in range(3)}
    said = nothing_to_find(near)
    assert said is not None and said.startswith(
        "Adapting has nothing to find: the best constant, held out, is equivalent to the Oracle's schedule within ±1 "
        "end to end (+0.20 [+0.20, +0.20] over 3 replicates: replicate-0 +0.20, replicate-1 +0.20, replicate-2 "
        "+0.20; held-out test accuracy summed over cycles 1–2 on the evaluation seeds)")
    assert "lies inside the paper interval" not in said
    behind = {f"replicate-{r}": results_frame(study(r, oracle=apart, best_gap=-3.0)) for r in range(3)}
    assert nothing_to_find(behind) is None
    # one run: its interval over the evaluation seeds
    one = nothing_to_find({"run": near["replicate-0"]})
    assert one is not None and "over 3 evaluation seeds" in one


def test_the_cost_sentence_compares_with_both_oracles_and_says_the_search_and_the_schedule_apart():
    """A racing Oracle: 3 seeds, grid 0.1, 0.2, 0.4, cycles 0–1; 0.4 dropped after seed 0 at both cycles: 14
    trainings of 10 epochs. The exhaustive plan along its chain: the grid at cycle 0 and the bracket around b = 0.1
    (the whole grid) at cycle 1, on every seed: 18; at most, the plan's closed form. SILO (paper): a δ search of 20
    trainings and final chains of 4: 240 epochs."""
    cycles = {c: (0.1, {0.1: [80.0, 80.1, 79.9], 0.2: [79.0, 79.1, 78.9], 0.4: {0: 60.0}}) for c in (0, 1)}
    rows = [_cost(row) for row in oracle_rows(cycles)]
    rows += [_cost({"method": "silo_paper", "stage": "tune", "seed": 0, "cycle": 1, "max_lr": 0.1, "val_acc": 70.0,
                    "test_acc": 70.0}, delta=0.01 * i) for i in range(20)]
    rows += [_cost({"method": "silo_paper", "stage": "final", "seed": s, "cycle": c, "max_lr": 0.1, "val_acc": 70.0,
                    "test_acc": 70.0, "selected": True}, **SILO_PARAMS) for s in (10, 11) for c in (0, 1)]
    df = results_frame(rows)
    cost = OracleCost.of(df, [0.1, 0.2, 0.4])
    assert (cost.trainings, cost.epochs, cost.low, cost.racing) == (14, 140, 18, True)
    assert cost.high >= 18
    (found,) = [f for f in findings(df, [0.1, 0.2, 0.4]) if f.key.startswith(COST)]
    sentence = sentences([found])[0]
    assert sentence.startswith(
        "SILO (paper) costs more epochs than the Oracle: 171 % of the racing Oracle's epochs as run (240 against "
        f"140) and {100 * 24 / cost.high:.0f}–133 % of the exhaustive Oracle's it stands for (18–{cost.high} "
        f"trainings, 180–{cost.high * 10} epochs")
    assert ("; of it, its δ search 200 epochs (143 % of the Oracle's as run, "
            f"{100 * 20 / cost.high:.0f}–111 % of the exhaustive one's) and the SILO schedule itself, its final "
            "chains on the evaluation seeds, 40 (29 % of the Oracle's as run") in sentence


def test_the_exhaustive_plan_along_an_exhaustive_runs_chain_is_its_own_oracle_count():
    """The committed exhaustive compare of the default (base seed 0): every value of the plan on every seed."""
    df = results_frame(read_results(SEED0).to_dict("records"))
    grid = json.loads((SEED0 / "spec.json").read_text())["grid"]
    assert exhaustive_oracle(df, grid) == len(cost_rows(df, "oracle")) == 282
    assert OracleCost.of(df, grid).racing is False


def test_the_cost_table_counts_trainings_run_per_method_with_mean_and_sd_and_the_exhaustive_share():
    """Two replicates; per replicate the Oracle trains 27 (3 values × 3 seeds × 3 cycles, its whole plan: it is
    exhaustive), the δ search 1 (the other is reused), each final chain 9. Replicate 2's Oracle rows took twice as
    long: device-hours 27·36/3600 = 0.27 and 0.54."""
    frames = [study(0), [row | ({"seconds": 72.0} if row["method"] == "oracle" else {}) for row in study(1)]]
    reps = [Replicate(f"replicate-{i + 1}", Path("nowhere"), results_frame(rows), None, "", 0.1, {}, None, None)
            for i, rows in enumerate(frames)]
    table = cost_table(reps, {"grid": [0.1, 0.2, 0.4]})
    cells = table.cells.set_index("method")
    assert list(cells.index) == ["Oracle (as run)", "SILO (paper): δ search", "SILO (paper): final chains",
                                 "LR warmup: tuning and final chains", "Cosine: tuning and final chains",
                                 "Oracle's schedule (held out): final chains", "Not adapting (held out): final chains",
                                 "Best constant (held out): final chains", "every training run",
                                 "Oracle, exhaustive (not run)"]
    oracle = cells.loc["Oracle (as run)"]
    assert (oracle["trainings"], oracle["epochs"], oracle["device-hours"]) == ("27 ± 0", "270 ± 0", "0.405 ± 0.191")
    assert oracle["share of the exhaustive Oracle's trainings"] == "100 %"
    assert cells.loc["SILO (paper): δ search", "trainings"] == "1 ± 0"  # the reused row is free
    assert cells.loc["SILO (paper): final chains", "share of the exhaustive Oracle's trainings"] == "33 %"
    assert cells.loc["Cosine: tuning and final chains", "trainings"] == "12 ± 0"
    assert cells.loc["every training run", "trainings"] == "88 ± 0"  # 27 + 1 + 9 + 2·12 + 3·9
    assert cells.loc["Oracle, exhaustive (not run)", "trainings"] == "27 ± 0"
    assert "on cpu" in table.verdict and "The Oracle ran exhaustive" in table.verdict
    data = table.data
    assert set(data["replicate"]) == {"replicate-1", "replicate-2"}
