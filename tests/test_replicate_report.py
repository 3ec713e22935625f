"""`oracle-search report RUN [RUN ...] --out DIR`: the report over finished runs as replicates, on the two committed
exhaustive compares of the default (base seeds 0 and 100: tables written before rows had timestamps), and its
refusals: exit 2, one line naming both runs, nothing written."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from analysis.intervals import oracle_intervals
from analysis.select import silo_params
from analysis.verdict_sentences import fmt_lr
from conftest import ROOT, cli
from oracle_search.schema import read_results, results_frame
from oracle_search.replicates import check_folder, replicate_dir
from oracle_search.seeds import SEED_STRIDE, check_seed_room, evaluation_seeds, replicate_spec, tuning_seeds
from trainables.spec import SpecError

RUNS = ROOT / "benchmarks" / "results" / "compare-2026-11-27"
SEED0, SEED100 = RUNS / "exhaustive-seed0", RUNS / "exhaustive-seed100"


def copy_run(src: Path, dst: Path) -> Path:
    dst.mkdir(parents=True)
    for name in ("results.parquet", "spec.json", "silo_paper.json", "silo_fit.json"):
        shutil.copy(src / name, dst / name)
    return dst


@pytest.fixture(scope="module")
def over(tmp_path_factory) -> Path:
    """The report over the two committed runs, in a folder of its own."""
    out = tmp_path_factory.mktemp("reports") / "over"
    assert cli(["report", str(SEED0), str(SEED100), "--out", str(out)]) == 0
    return out


def test_two_older_runs_aggregate_into_the_verdict_and_replicates_tables(over):
    out = over
    verdict = pd.read_csv(out / "tables" / "verdict.csv")
    assert list(verdict.columns[:10]) == ["schedule", "versus", "advantage", "ci_lo", "ci_hi", "replicates", "verdict",
                                          "margin", "holm", "replicates_needed"]
    per = pd.read_csv(out / "tables" / "replicates.csv")
    assert list(per.columns) == ["replicate", "schedule", "versus", "advantage", "ci_lo", "ci_hi", "n", "verdict"]
    assert len(per) == 2 * len(verdict) and set(verdict["replicates"]) == {2}
    # The family: end to end on the evaluation seeds, against every benchmark these older runs trained (they hold
    # no held-out references) and the best benchmark; the Oracle's chain is the diagnostic, never in the family.
    assert list(zip(verdict["schedule"], verdict["versus"])) == [
        (m, v) for m in ("silo_paper", "silo_fit")
        for v in ("constant", "decay", "cyclical", "warmup", "cosine", "best_benchmark")]
    # The reversal, on the Oracle's chain: SILO (fit) vs not adapting is +4.32 at seed 0 and -4.83 at seed
    # 100; now in the §5.3 diagnostic, per replicate.
    diagnostic = pd.read_csv(out / "tables" / "diagnostic.csv")
    row = diagnostic[(diagnostic["schedule"] == "silo_fit") & (diagnostic["versus"] == "constant_dense")]
    assert row.set_index("replicate")["advantage"].to_dict() == pytest.approx(
        {"replicate-1": 4.32, "replicate-2": -4.83}, abs=0.005)
    over = verdict[(verdict["schedule"] == "silo_paper") & (verdict["versus"] == "warmup")].iloc[0]
    assert over["advantage"] == pytest.approx((3.72 - 2.44) / 2, abs=0.01) and over["verdict"] == "inconclusive"
    # 6 compared cycles at 0.5 points each
    assert set(verdict["margin"]) == {3.0}
    report = (out / "report.md").read_text()
    first = report.index("## The answer over 2 replicates")
    assert first < report.index("## Each replicate's labels") < report.index("## The choices each replicate made")
    assert report.index("## The choices each replicate made") < report.index("## The §5.3 diagnostic")
    assert ("The §5.3 diagnostic, conditional on the Oracle's chain, on the tuning seeds, in-sample; not part of "
            "the verdict.") in report
    # the disagreement beyond their own intervals, and the choices that differed upstream
    assert ("SILO (paper) vs LR warmup: replicate-1 and replicate-2 disagree beyond their own intervals (+3.72 "
            "[+2.03, +5.41] vs -2.44 [-3.75, -1.13]); the upstream choices that differed: the dense choice (0.16 vs "
            "0.32)") in report
    assert (SEED0 / "report.md").exists() is False  # each run's own folder is left as it is


def test_the_first_screen_holds_the_verdict_the_max_lr_figure_and_the_section_53_table(over):
    report = (over / "report.md").read_text()
    head = "\n".join(report.splitlines()[:40]) + "\n"
    answer = (over / "tables" / "replicate_answer.md").read_text()
    assert "## The answer over 2 replicates" in head and answer in head
    # the first line under the answer says which labels hold across the family
    assert head.split(answer)[1].lstrip("\n").startswith(
        "Across the family of 12 comparisons at 5 % (Holm), none of the labels holds (Bonferroni keeps none).")
    assert "](figures/max_lr.png)" in head and (over / "figures" / "max_lr.png").read_bytes().startswith(b"\x89PNG")
    assert (over / "tables" / "section53.md").read_text() in head
    headings = re.findall(r"^#+ (.+)$", report, flags=re.M)
    assert len(headings) == len(set(headings)), headings  # no heading said twice
    assert "**" not in report  # no bold words
    order = ["## The answer over 2", "## max_lr per cycle over the replicates (paper §5.3)",
             "## Test accuracy over the replicates", "## Cost per method over the replicates",
             "## Each replicate's own report",
             "## Where the runs contradict the paper's premises", "## Each replicate's labels",
             "## The choices each replicate made", "## Cost\n"]
    assert [report.index(h) for h in order] == sorted(report.index(h) for h in order)


def test_the_section_53_table_holds_each_replicates_b_interval_and_silo_and_counts_them(over):
    md = (over / "tables" / "section53.md").read_text().splitlines()
    header = [c.strip() for c in md[0].strip("|").split("|")]
    assert header == ["λ (%)", "replicate-1 b [paper interval]", "replicate-2 b [paper interval]",
                      "SILO (paper) max_lr", "SILO (paper) inside", "SILO (fit) max_lr", "SILO (fit) inside",
                      "Best constant max_lr", "Not adapting max_lr"]
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in md[2:]]
    counts = {"silo_paper": [0, 0], "silo_fit": [0, 0]}
    for k, run in enumerate((SEED0, SEED100)):  # each replicate's own sets, read independently
        df = results_frame(read_results(run).to_dict("records"))
        pooled = oracle_intervals(df)
        for i, r in pooled.iterrows():
            assert cells[i][1 + k] == f"{fmt_lr(r['best_max_lr'])} [{fmt_lr(r['lo'])}, {fmt_lr(r['hi'])}]"
            for j, m in ((3, "silo_paper"), (5, "silo_fit")):
                judged = r["cycle"] >= max(silo_params(df, m)["q"] + 1, 1)
                mark = ("in" if r[f"{m}_inside"] else "out") + ("" if judged else "*")
                assert cells[i][j].split(" · ")[k] == f"{fmt_lr(r[f'{m}_max_lr'])} {mark}"
                counts[m][0] += bool(judged and r[f"{m}_inside"])
                counts[m][1] += bool(judged)
    for j, m in ((4, "silo_paper"), (6, "silo_fit")):
        said = [c[j] for c in cells]
        assert sum(int(x.split(" of ")[0]) for x in said if x != "–") == counts[m][0]
        assert sum(int(x.split(" of ")[1]) for x in said if x != "–") == counts[m][1]


def test_each_replicates_report_is_linked_where_it_exists_relative_to_the_report(tmp_path):
    runs = [copy_run(SEED0, tmp_path / "runs" / "a"), copy_run(SEED100, tmp_path / "runs" / "b")]
    out = tmp_path / "over"
    assert cli(["report", *map(str, runs), "--out", str(out)]) == 0
    md = (out / "report.md").read_text()
    assert str(tmp_path) not in md  # no machine path
    assert "replicate-1: ../runs/a has no report yet (oracle-search report ../runs/a writes it)." in md
    for run in runs:  # once each run has its own report, the report over them links it
        for ext in ("md", "html"):
            (run / f"report.{ext}").write_text("x")
    assert cli(["report", *map(str, runs), "--out", str(out)]) == 0
    md, page = (out / "report.md").read_text(), (out / "report.html").read_text()
    assert "- [replicate-1: ../runs/a](../runs/a/report.md)\n- [replicate-2: ../runs/b](../runs/b/report.md)" in md
    assert re.findall(r'<a href="([^"]+)"', page) == ["../runs/a/report.html", "../runs/b/report.html"]
    assert all((out / link).resolve().exists() for link in re.findall(r'<a href="([^"]+)"', page))


def test_runs_of_different_specs_are_refused_naming_both_and_nothing_is_written(tmp_path, capsys):
    other = copy_run(SEED100, tmp_path / "other")
    spec = json.loads((other / "spec.json").read_text())
    spec["epochs"] += 1
    (other / "spec.json").write_text(json.dumps(spec))
    out = tmp_path / "over"
    assert cli(["report", str(SEED0), str(other), "--out", str(out)]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert str(SEED0) in line and str(other) in line and "different experiments" in line and "epochs" in line
    assert not out.exists()


def test_runs_sharing_a_seed_are_refused_naming_both_and_nothing_is_written(tmp_path, capsys):
    twin = copy_run(SEED0, tmp_path / "twin")
    out = tmp_path / "over"
    assert cli(["report", str(SEED0), str(twin), "--out", str(out)]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert str(SEED0) in line and str(twin) in line and "share seed(s) 0, 1, 2, 1000" in line
    assert not out.exists()


def test_several_runs_need_an_out_folder_that_is_none_of_them(tmp_path, capsys):
    assert cli(["report", str(SEED0), str(SEED100)]) == 2
    assert "--out" in capsys.readouterr().err
    run = copy_run(SEED0, tmp_path / "run")
    assert cli(["report", str(run), str(SEED100), "--out", str(run)]) == 2
    assert "is one of the runs" in capsys.readouterr().err
    assert sorted(p.name for p in run.iterdir()) == ["results.parquet", "silo_fit.json", "silo_paper.json", "spec.json"]


def test_replicate_seeds_are_the_base_seed_moved_by_the_stride_and_stay_disjoint():
    from trainables.presets import PRESETS

    base = PRESETS["tiny"].spec
    seeds = []
    for r in (1, 2, 3):
        spec = replicate_spec(base, r)
        assert spec.seed == base.seed + SEED_STRIDE * (r - 1)
        seeds.append(set(tuning_seeds(spec, 3)) | set(evaluation_seeds(spec, 3)))
    assert replicate_spec(base, 1) == base  # replicate 1 is the run --replicates 1 makes
    assert not (seeds[0] & seeds[1]) and not (seeds[1] & seeds[2]) and not (seeds[0] & seeds[2])
    assert seeds[1] == {10_000, 10_001, 10_002, 11_000, 11_001, 11_002}


def test_seed_counts_that_would_reach_the_next_replicate_are_refused():
    check_seed_room(1000, 9000, 1)  # the edge: still disjoint
    with pytest.raises(SpecError, match="seeds"):
        check_seed_room(1001, 3, 1)
    with pytest.raises(SpecError, match="eval-seeds"):
        check_seed_room(3, 9001, 1)


def test_a_folder_holds_one_run_or_replicates_never_both(tmp_path):
    single = copy_run(SEED0, tmp_path / "single")
    with pytest.raises(SpecError, match="holds a single run"):
        check_folder(single, 3)
    check_folder(single, 1)
    many = tmp_path / "many"
    many.mkdir()
    (many / "replicates.json").write_text(json.dumps({"replicates": 3}))
    with pytest.raises(SpecError, match="holds 3 replicates"):
        check_folder(many, 1)
    check_folder(many, 3)
    assert replicate_dir(many, 2) == many / "replicate-2"


def test_compare_options_refuse_a_bad_replicate_count_or_margin():
    from oracle_search.pipeline import CompareOptions

    with pytest.raises(SpecError, match="replicates"):
        CompareOptions(replicates=0)
    with pytest.raises(SpecError, match="margin"):
        CompareOptions(margin=-0.1)
    assert CompareOptions().replicates == 3 and CompareOptions().margin == 0.5


# --- what the report over replicates plans and says (issue 52) ------------------------------------------------------

REPLICATED = ROOT / "benchmarks" / "results" / "replicates-2026-11-27"


def _per(rows: list[tuple]) -> pd.DataFrame:
    """A replicates frame from (replicate, schedule, versus, advantage, ci_lo, ci_hi) rows."""
    from analysis.replicate_report import VERSUS_NAMES  # noqa: F401 (the names the sentences use)
    from oracle_search.statistics import label

    return pd.DataFrame([{"replicate": r, "schedule": s, "versus": v, "advantage": a, "ci_lo": lo, "ci_hi": hi,
                          "n": 3, "verdict": label(lo, hi, 3.0)} for r, s, v, a, lo, hi in rows])


def _replicate(name: str, dense: float):
    from analysis.replicate_report import Replicate

    return Replicate(name, Path(name), pd.DataFrame(), None, "", dense, {}, None, None)


def test_every_disjoint_pair_is_found_and_the_largest_gap_named_with_the_others_counted():
    """Base seed 0, SILO (fit) vs the best constant: replicate 1 −2.14 [−3.15, −1.14], replicate 2 −0.18
    [−1.07, +0.71], replicate 3 −2.43 [−6.20, +1.33]. The lowest (3) and the highest (2) overlap, so a look at
    those two alone found nothing; replicates 1 and 2 are disjoint (gap −1.07 − (−1.14) = 0.07). A second
    comparison, [−1, 1], [4, 6] and [8, 12], has three disjoint pairs (gaps 3, 7 and 2): it names the widest,
    replicate-3 and replicate-1, and counts the 2 others."""
    from analysis.replicate_report import disagreements

    reps = [_replicate("replicate-1", 0.32), _replicate("replicate-2", 0.2263), _replicate("replicate-3", 0.2263)]
    per = _per([("replicate-1", "silo_fit", "constant_best", -2.14, -3.15, -1.14),
                ("replicate-2", "silo_fit", "constant_best", -0.18, -1.07, 0.71),
                ("replicate-3", "silo_fit", "constant_best", -2.43, -6.20, 1.33),
                ("replicate-1", "silo_paper", "oracle_schedule", 0.0, -1.0, 1.0),
                ("replicate-2", "silo_paper", "oracle_schedule", 5.0, 4.0, 6.0),
                ("replicate-3", "silo_paper", "oracle_schedule", 10.0, 8.0, 12.0)])
    fit, paper = disagreements(reps, per)
    assert fit == ("SILO (fit) vs the best constant: replicate-2 and replicate-1 disagree beyond their "
                   "own intervals (-0.18 [-1.07, +0.71] vs -2.14 [-3.15, -1.14]); the upstream choices that differed: "
                   "the dense choice (0.2263 vs 0.32).")
    assert paper.startswith("SILO (paper) vs the Oracle's schedule (held out): replicate-3 and replicate-1 disagree "
                            "beyond their own "
                            "intervals (+10.00 [+8.00, +12.00] vs +0.00 [-1.00, +1.00]) (2 other pairs of replicates "
                            "disjoint too); the upstream choices that differed: the dense choice")


def test_a_row_a_replicate_left_undefined_says_its_own_count_and_df():
    """3 replicates; silo_fit vs warmup undefined in one: its cell says "2 of 3 replicates, 1 df", and the line
    says the table's df is not every row's; silo_fit vs the best constant, defined in one: no interval."""
    from analysis.replicate_report import answer_table
    from analysis.replicates import aggregate
    from test_replicates import replicate

    verdict, _ = aggregate({k: replicate(k) for k in (0, 1, 2)}, 0.5)
    table = answer_table(verdict, 3)
    fit = table.cells.set_index("compared with")["SILO (fit)"]  # one row per comparison, one column per variant
    assert fit["LR warmup"].endswith("(2 of 3 replicates, 1 df)")
    assert fit["the best constant"] == "– undefined +1.50 (1 of 3 replicates, no interval)"
    assert "(2 of 3" not in fit["the Oracle (leave-one-out)"]
    assert "its count and df are in its cell" in table.verdict


def test_an_equivalence_that_also_excludes_0_says_so_and_the_words_are_exact():
    """Replicate 2 of base seed 0, SILO (paper) vs not adapting: +2.66 [+2.57, +2.75] lies inside ±3 and above 0;
    both hold and the cell says both. The captions: "suggests" (disjoint intervals are evidence, not proof), the
    equivalence test's 95 % interval, and Holm's sentence with Bonferroni's answer."""
    from analysis.replicate_report import _cell, answer_table, multiplicity, replicates_table
    from analysis.replicates import aggregate
    from test_replicates import replicate

    assert _cell("equivalent", 2.66, 2.57, 2.75) == "= equivalent +2.66 [+2.57, +2.75], also above 0"
    assert _cell("equivalent", -0.58, -1.02, -0.14) == "= equivalent -0.58 [-1.02, -0.14], also below 0"
    assert _cell("equivalent", 0.02, -1.24, 1.29) == "= equivalent +0.02 [-1.24, +1.29]"
    assert _cell("better", 1.89, 0.56, 3.23) == "▲ better +1.89 [+0.56, +3.23]"
    per = _per([("replicate-1", "silo_fit", "oracle", 0.0, -1.0, 1.0)])
    assert "that suggests the choices, not the seeds, decided the label" in replicates_table(per, ["replicate-1"]).verdict
    verdict, _ = aggregate({k: replicate(k) for k in (0, 1, 2)}, 0.5)
    assert "the 95 % interval, stricter than the usual equivalence test at 0.05, which uses the 90 % one" in \
        answer_table(verdict, 3).verdict
    sentence = multiplicity(verdict)
    assert "was chosen by its own label, which Holm's theorem, made for hypotheses fixed in advance, does not " \
           "cover; so Bonferroni at 0.05/4 per row" in sentence
    assert sentence.endswith("Of the 2 labels (better, worse or equivalent), Holm keeps 1 and Bonferroni keeps 1, "
                             "the same ones.")
    flipped = verdict.assign(bonferroni=verdict["holm"].map({"yes": "no", "no": "no"}))
    assert multiplicity(flipped).endswith("Holm keeps 1 and Bonferroni keeps none; they differ on SILO (paper) vs not "
                                          "adapting (Holm yes, Bonferroni no).")


def test_on_the_committed_base_seed_0_replicates_the_warmup_rows_are_planned_for_a_difference(tmp_path):
    """The issue's check on benchmarks/results/replicates-2026-11-27/seed0-R3: both LR warmup rows (+3.84 and
    +3.19, margin ±3) carry difference plans with their power (38 and 9 replicates, where the report used to plan
    82 and 13 for equivalence at 0), and SILO (fit) vs the best constant, whose lowest and highest replicates
    overlap, gets its sentence for replicates 2 and 1."""
    runs = [REPLICATED / "seed0-R3" / f"replicate-{r}" for r in (1, 2, 3)]
    out = tmp_path / "over"
    assert cli(["report", *map(str, runs), "--out", str(out)]) == 0
    report = (out / "report.md").read_text()
    # Planned as ranges (issue 61): at the observed mean (38 and 9, as before) to one se nearer to 0.
    assert "SILO (paper) vs LR warmup (inconclusive, mean +3.84 ± se 2.25, sd 3.89): a difference 38–> 50 " in report
    assert "SILO (fit) vs LR warmup (inconclusive, mean +3.19 ± se 0.81, sd 1.40): a difference 9–15 " in report
    assert ("SILO (paper) vs LR warmup: replicate-2 and replicate-1 disagree beyond their own intervals (+6.63 "
            "[+5.27, +8.00] vs -0.60 [-1.90, +0.70])") in report
    assert "= equivalent +2.66 [+2.57, +2.75], also above 0" in report  # the §5.3 diagnostic, per replicate
    verdict = pd.read_csv(out / "tables" / "verdict.csv").set_index(["schedule", "versus"])
    assert verdict.loc[("silo_paper", "warmup"), "plan_difference"] == 38
    assert pd.isna(verdict.loc[("silo_paper", "warmup"), "plan_equivalence"])
