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
    # The reversal: SILO (fit) vs not adapting is +4.32 at seed 0 and -4.83 at seed 100.
    row = per[(per["schedule"] == "silo_fit") & (per["versus"] == "constant_dense")].set_index("replicate")
    assert row.loc["replicate-1", "advantage"] == pytest.approx(4.32, abs=0.005)
    assert row.loc["replicate-2", "advantage"] == pytest.approx(-4.83, abs=0.005)
    over = verdict[(verdict["schedule"] == "silo_fit") & (verdict["versus"] == "constant_dense")].iloc[0]
    assert over["advantage"] == pytest.approx((4.32 - 4.83) / 2, abs=0.01) and over["verdict"] == "inconclusive"
    # 6 compared cycles at 0.5 points each
    assert set(verdict["margin"]) == {3.0}
    report = (out / "report.md").read_text()
    first = report.index("## The answer over 2 replicates")
    assert first < report.index("## Each replicate's labels") < report.index("## The choices each replicate made")
    # the disagreement beyond their own intervals, and the choices that differed upstream
    assert ("SILO (fit) vs not adapting (constant_dense): replicate-1 and replicate-2 disagree beyond their own "
            "intervals (+4.32 [+2.38, +6.26] vs -4.83 [-5.61, -4.05]); the upstream choices that differed: the dense "
            "choice (0.16 vs 0.32)") in report
    assert (SEED0 / "report.md").exists() is False  # each run's own folder is left as it is


def test_the_first_screen_holds_the_verdict_the_max_lr_figure_and_the_section_53_table(over):
    report = (over / "report.md").read_text()
    head = "\n".join(report.splitlines()[:40]) + "\n"
    assert "## The answer over 2 replicates" in head and (over / "tables" / "replicate_answer.md").read_text() in head
    assert "](figures/max_lr.png)" in head and (over / "figures" / "max_lr.png").read_bytes().startswith(b"\x89PNG")
    assert (over / "tables" / "section53.md").read_text() in head
    headings = re.findall(r"^#+ (.+)$", report, flags=re.M)
    assert len(headings) == len(set(headings)), headings  # no heading said twice
    assert "**" not in report  # no bold words
    order = ["## The answer over 2", "## max_lr per cycle over the replicates (paper §5.3)",
             "## Test accuracy over the replicates", "## Each replicate's own report",
             "## Where the runs contradict the paper's premises", "## Each replicate's labels",
             "## The choices each replicate made", "## Cost"]
    assert [report.index(h) for h in order] == sorted(report.index(h) for h in order)


def test_the_section_53_table_holds_each_replicates_b_interval_and_silo_and_counts_them(over):
    md = (over / "tables" / "section53.md").read_text().splitlines()
    header = [c.strip() for c in md[0].strip("|").split("|")]
    assert header == ["λ (%)", "replicate-1 b [paper interval]", "replicate-2 b [paper interval]",
                      "SILO (paper) max_lr", "SILO (paper) inside", "SILO (fit) max_lr", "SILO (fit) inside"]
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
