"""`oracle-search report RUN` on hand-made results tables written with `oracle_search.schema.write_results`:
every table and figure, the verdict's family end to end first (worded as over replicates, with which labels hold
across it under the table) and the settings last, the §5.3 diagnostic on the Oracle's chain apart, a
self-contained HTML page, the three sets' columns in tables/oracle.csv, and tables/regret.csv and
tables/verdict.csv."""
from __future__ import annotations

import base64
import contextlib
import io
import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from oracle_search.cli import main
from oracle_search.schema import write_results
from trainables.schedules import silo_max_lr

GRID = [0.01 * 2**i for i in range(7)]
RATE, CYCLES, SEEDS, EVAL_SEEDS = 0.2, 4, (0, 1, 2), (10, 11, 12)
PARAMS = {"silo_paper": {"epsilon": 0.08, "delta": 0.6, "q": 1, "beta": 5.0},
          "silo_fit": {"epsilon": 0.07, "delta": 0.4, "q": 2, "beta": 3.0}}
BASELINES = ("constant", "warmup")


def _hist(rng: np.random.Generator, scale: float) -> str:
    edges = np.linspace(-3 * scale, 3 * scale, 21)
    counts = rng.poisson(1000 * np.exp(-0.5 * (((edges[:-1] + edges[1:]) / 2) / scale) ** 2))
    return json.dumps({"edges": edges.tolist(), "counts": counts.tolist()})


def realistic(methods: tuple[str, ...] = ("oracle", "silo_paper", "silo_fit", *BASELINES),
              cycles: int = CYCLES) -> list[dict]:
    """Three tuning seeds, five cycles; accuracy peaks at a max_lr that moves up as the network is pruned. The
    Oracle chains its seed-mean best forward; the other methods run on evaluation seeds."""
    rng = np.random.default_rng(0)
    rows: list[dict] = []

    def acc(cycle: int, lr: float) -> float:
        return 80 - 6 * math.log2(lr / (0.08 * 1.6**cycle)) ** 2

    def add(method: str, stage: str, seed: int, cycle: int, lr: float, **kw) -> None:
        a = acc(cycle, lr)
        rows.append({
            "experiment": "demo", "method": method, "stage": stage, "schedule": method, "seed": seed,
            "cycle": cycle, "density": 100 * (1 - RATE) ** cycle, "max_lr": lr,
            "val_acc": a + rng.normal(0, 0.2), "test_acc": a + rng.normal(0, 0.5), "best_epoch": 15,
            "epochs": 20, "seconds": 3.5, "device": "cpu", "grad_std": 0.01 * (1 + cycle),
            "act_std": 1 / (1 + 0.2 * cycle), "grad_hist": _hist(rng, 0.01 * (1 + cycle)),
            "act_hist": _hist(rng, 1 / (1 + 0.2 * cycle)), "selected": stage == "final", "diverged": False,
            "trial_id": f"{method}-{stage}-{seed}-{cycle}-{lr:.4g}", **PARAMS.get(method, {}), **kw})

    if "oracle" in methods:
        chosen = None
        for cycle in range(cycles + 1):
            first = len(rows)
            for seed in SEEDS:
                start = f"s{seed}c{cycle - 1}lr{chosen:.4g}" if cycle else ""
                for lr, stage in [*((g, "grid") for g in GRID), (0.06 * 1.6**cycle, "refine")]:
                    add("oracle", stage, seed, cycle, lr, start_hash=start,
                        checkpoint_hash=f"s{seed}c{cycle}lr{lr:.4g}")
                add("oracle", "grid", seed, cycle, 5.0, diverged=True, val_acc=10.0, start_hash=start)
            trained = pd.DataFrame(rows[first:])
            means = trained[~trained["diverged"]].groupby("max_lr")["val_acc"].mean()
            chosen = float(means.idxmax())
            for r in rows[first:]:
                r["selected"] = r["max_lr"] == chosen
    for method in ("silo_paper", "silo_fit"):
        if method in methods:
            for seed in EVAL_SEEDS:
                for cycle in range(cycles + 1):
                    add(method, "final", seed, cycle, silo_max_lr(cycle, rate=RATE, **PARAMS[method]))
    if "silo_paper" in methods:
        for t, delta in enumerate((0.3, 0.6, 0.9)):
            add("silo_paper", "tune", 0, cycles, 0.1, delta=delta, reused=t == 0)
    if "silo_fit" in methods:
        for t in range(4):
            add("silo_fit", "fit", 0, 0, 0.08, study_trial=float(t), stopped_early=t == 3)
    for b in sorted(set(methods) - {"oracle", "silo_paper", "silo_fit"}):
        for lr in GRID:
            add(b, "tune", 0, 0, lr)
        for seed in EVAL_SEEDS:
            for cycle in range(cycles + 1):
                add(b, "final", seed, cycle, 0.1)
    return rows


SPEC = {"preset": "mnist1d-mlp", "dataset": "mnist1d", "model": "mlp", "rate": RATE, "cycles": CYCLES,
        "grid": GRID[:2], "device": "cpu", "amp": False}


def report_of(out: Path, rows: list[dict] | None, spec: dict | None = SPEC) -> dict[str, Path]:
    """Run `oracle-search report out` on `rows` (None: on the table already there); return the files it printed."""
    if rows is not None:
        write_results(out, rows)
    if spec is not None:
        (out / "spec.json").write_text(json.dumps(spec))
    with contextlib.redirect_stdout(io.StringIO()) as stdout:
        assert main(["report", str(out)]) == 0
    printed = dict(line.split(": ", 1) for line in stdout.getvalue().splitlines())
    return {name: Path(path) for name, path in printed.items()}


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> tuple[Path, dict[str, Path]]:
    out = tmp_path_factory.mktemp("run")
    return out, report_of(out, realistic())


TABLES = ("answer", "oracle", "oracle_values", "oracle_seeds", "verdict", "end_to_end", "regret", "accuracy", "paper", "cost",
          "statistics")
FIGURES = ("regret", "max_lr", "accuracy", "histograms")


def test_every_table_and_figure_is_written_and_printed(report):
    out, printed = report
    expected = {f"tables/{t}.{ext}" for t in TABLES for ext in ("csv", "md", "tex")}
    expected |= {f"figures/{f}.{ext}" for f in FIGURES for ext in ("png", "svg")} | {"report.md", "report.html"}
    assert set(printed) == expected
    assert all(path == out / name and path.is_file() for name, path in printed.items())
    on_disk = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    assert on_disk == expected | {"results.parquet", "results.csv", "spec.json"}  # and no temp files
    assert all(printed[f"figures/{f}.png"].read_bytes().startswith(b"\x89PNG") for f in FIGURES)
    for f in FIGURES:  # each figure also as SVG, a paper's vector copy of the same drawing, linked from report.md
        svg = printed[f"figures/{f}.svg"].read_text()
        assert svg.startswith("<?xml") and "<svg" in svg and 'id="axes_1"' in svg and "https://" not in svg
    assert all("\\toprule" in printed[f"tables/{t}.tex"].read_text() for t in TABLES)


def sections(md: str) -> list[str]:
    return re.findall(r"^## (.+)$", md, flags=re.M)


def test_the_answer_comes_first_and_the_settings_last(report):
    out, _ = report
    md = (out / "report.md").read_text()
    assert md.startswith("# Oracle search report: demo\n")
    assert sections(md) == ["The answer", "End to end: the verdict's family in full (held-out test accuracy)",
                            "Oracle max_lr and intervals (paper §5.3)",
                            "The §5.3 diagnostic: SILO's max_lr on the Oracle's chain", "Test accuracy", "Cost",
                            "Gradient and activation statistics (§3.1)", "Settings"]
    answer = md[md.index("## The answer"):md.index("## End to end")]
    # The verdict's family as a table, first: a row per comparison (every benchmark trained, the best benchmark
    # naming which), a column per SILO variant; the Oracle-chain comparisons are not in it.
    block = answer[answer.index("| compared with"):].splitlines()
    lines = block[:next(i for i, line in enumerate(block) if not line.startswith("|"))]
    table, header = "\n".join(lines), lines[0]
    assert re.search(r"\| compared with +\| +SILO \(paper\) +\| +SILO \(fit\) +\|", header), header
    rows = [line.split("|")[1].strip() for line in lines[2:]]
    assert rows == ["Constant LR", "LR warmup", "the best benchmark (Constant LR, chosen on tuning seeds)"]
    cell = (r"(▲ better|▼ worse|= equivalent|\? inconclusive)( by more than the margin)?( \(uncorrected\))?† "
            r"[+-]\d+\.\d\d \[[+-]\d+\.\d\d, [+-]\d+\.\d\d\]")
    for line in lines[2:]:
        assert len(re.findall(cell, line)) == 2, line
    assert "vs the Oracle" not in answer and "Oracle's chain summed" not in answer
    # Under the table, first: which labels hold across the family; then the max_lr figure, then the prose.
    under = answer.split(table)[1].lstrip("\n").splitlines()[0]
    assert under.startswith("Across the family of 6 comparisons at 5 % (Holm, over this run's evaluation seeds), ")
    assert "(figures/regret.png)" not in answer  # the regret figure is the diagnostic's
    prose = answer[answer.index("(figures/max_lr.png)"):]
    assert "The controls come from the Oracle's rows" not in answer  # the diagnostic's controls, said there
    assert re.search(r"Against the Oracle as run \(exhaustive: 135 trainings, 2,700 epochs\): SILO \(paper\) cost "
                     r"340 epochs \(13 % of the Oracle's epochs as run", prose)
    assert re.search(r"SILO \(paper\) is ahead of every method it shares evaluation seeds with at \d of 5 densities",
                     prose)
    assert "Best mean test accuracy per density: 100 %: " in prose
    assert prose.rstrip().endswith("\"The §5.3 diagnostic: SILO's max_lr on the Oracle's chain\" below: conditional "
                                   "on the Oracle's chain, on the tuning seeds, in-sample; not part of the verdict.")
    diagnostic = md[md.index("## The §5.3 diagnostic"):md.index("## Test accuracy")]
    assert diagnostic.index("On the Oracle's chain, does SILO (paper) beat not adapting and the best constant in "
                            "hindsight? It ") < diagnostic.index("On the Oracle's chain, does SILO (fit) beat")
    assert re.search(r"not adapting \(constant_dense = 0\.08\): [+-]\d+\.\d\d points \(95 % CI \[[+-]\d+\.\d\d, "
                     r"[+-]\d+\.\d\d\]\)", diagnostic)
    assert "the best constant in hindsight (constant_best = 0.32, optimistic)" in diagnostic
    assert "summed over cycles 1–4, n = 3 tuning seeds)." in diagnostic
    assert "These are 6 comparisons (2 SILO variants × the Oracle, constant_dense and constant_best), each at 95 %, " \
           "not corrected for multiplicity: the §5.3 diagnostic, conditional on the Oracle's chain, on the tuning " \
           "seeds, in-sample; not part of the verdict." in diagnostic
    assert "The controls come from the Oracle's rows" in diagnostic and "(figures/regret.png)" in diagnostic
    assert "| preset |" not in md[:md.index("## Settings")]
    settings = md[md.index("## Settings"):]
    assert "| preset  |  mnist1d-mlp |" in settings and "| grid    | [0.01, 0.02] |" in settings
    assert "| amp     |        false |" in settings  # autocast applies on CPUs too, so it is shown
    assert "channels_last" not in settings  # a GPU-only switch, dropped from a CPU run


def test_markdown_report_holds_every_table_and_figure(report):
    out, _ = report
    md = (out / "report.md").read_text()
    for t in TABLES:
        assert (out / f"tables/{t}.md").read_text() in md
    for f in FIGURES:
        assert f"(figures/{f}.png)" in md and f"[SVG](figures/{f}.svg)" in md
    for t in TABLES:  # each table under its verdict line, in plain words (no bold label)
        caption = md.split((out / f"tables/{t}.md").read_text())[0].rstrip().splitlines()[-1]
        assert caption and not caption.startswith(("#", "|", "**")), (t, caption)
    assert "**Verdict:**" not in md
    assert "_No" not in md  # nothing missing


def test_html_is_self_contained_with_the_answer_first(report):
    out, _ = report
    page = (out / "report.html").read_text()
    for bad in ("http://", "https://", 'src="http', "<link", "<script", "url("):
        assert bad not in page
    images = re.findall(r'<img [^>]*src="([^"]+)"', page)
    assert len(images) == len(FIGURES)
    for src in images:
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1]).startswith(b"\x89PNG")
    assert page.count("<table>") == len(TABLES) + 1  # plus the settings
    headings = re.findall(r"<h2[^>]*>([^<]+)</h2>", page)
    assert headings[0] == "The answer" and headings[-1] == "Settings"
    first_table = page[page.index("<table>"):page.index("</table>")]
    assert "the best benchmark (Constant LR, chosen on tuning seeds)" in first_table and "SILO (fit)" in first_table
    assert page.index("<table>") < page.index("<img")  # the verdict table before any figure
    # which labels hold across the family: the first paragraph under the table
    assert page[page.index("</table>"):].split("<p>")[1].startswith("Across the family of 6 comparisons")
    # better / worse / equivalent / inconclusive told apart by a mark and a word, not by colour alone
    assert re.search(r"<td>(▲ better|▼ worse|= equivalent|\? inconclusive)[^<]*† ", first_table)


def in_set_by_hand(x: float, members: pd.DataFrame) -> bool:
    """A member, or strictly between two adjacent trained values that are both members (members: max_lr, flag)."""
    values, flags = members["max_lr"].tolist(), members["flag"].tolist()
    if any(abs(x / v - 1) < 1e-6 and f for v, f in zip(values, flags)):
        return True
    return any(a < x < b and fa and fb for a, b, fa, fb in zip(values, values[1:], flags, flags[1:]))


def test_oracle_csv_holds_the_three_sets_and_each_silo_variant(report):
    out, _ = report
    pooled = pd.read_csv(out / "tables/oracle.csv")
    assert {"lo", "hi", "noise_lo", "noise_hi", "noise_contiguous", "strict_lo", "strict_hi", "silo_paper_max_lr",
            "silo_paper_inside", "silo_paper_noise_inside", "silo_paper_within", "silo_fit_max_lr",
            "silo_fit_inside", "silo_fit_noise_inside", "silo_fit_within"} <= set(pooled)
    assert pooled["cycle"].tolist() == list(range(CYCLES + 1))
    assert (pooled["n_seeds"] == len(SEEDS)).all()
    assert (pooled["noise_lo"] <= pooled["lo"]).all() and (pooled["hi"] <= pooled["noise_hi"]).all()
    assert (pooled["lo"] <= pooled["strict_lo"]).all() and (pooled["strict_hi"] <= pooled["hi"]).all()
    assert pooled["best_max_lr"].is_monotonic_increasing  # the optimum moves up with pruning
    values = pd.read_csv(out / "tables/oracle_values.csv")
    for method, params in PARAMS.items():
        lr = [silo_max_lr(m, rate=RATE, **params) for m in range(CYCLES + 1)]
        assert pooled[f"{method}_max_lr"].tolist() == pytest.approx(lr)
        for flag, column in (("inside", "paper_inside"), ("noise_inside", "noise_inside"), ("within", "within")):
            expected = [in_set_by_hand(x, values[values["cycle"] == c].rename(columns={column: "flag"}))
                        for c, x in enumerate(lr)]
            assert pooled[f"{method}_{flag}"].tolist() == expected, (method, flag)


def test_regret_and_verdict_csvs_follow_the_contract(report):
    """The files' columns and rows, as docs/design.md defines them. Their values are checked against numbers
    worked out by hand in `test_hand_made_regret_and_verdict` (and tests/test_analysis_regret.py)."""
    out, _ = report
    regret = pd.read_csv(out / "tables/regret.csv")
    assert list(regret.columns) == ["schedule", "cycle", "max_lr", "regret", "ci_lo", "ci_hi", "n"]
    assert regret["schedule"].unique().tolist() == ["silo_paper", "silo_fit", "constant_dense", "constant_best"]
    assert (regret.groupby("schedule")["cycle"].apply(list) == [list(range(CYCLES + 1))] * 4).all()
    assert regret["n"].eq(3).all()
    verdict = pd.read_csv(out / "tables/verdict.csv")
    assert list(verdict.columns) == ["schedule", "versus", "advantage", "ci_lo", "ci_hi", "n", "verdict", "margin",
                                     "seeds_needed"]
    assert list(zip(verdict["schedule"], verdict["versus"])) == [
        (m, v) for m in ("silo_paper", "silo_fit") for v in ("oracle", "constant_dense", "constant_best")]
    assert set(verdict["verdict"]) <= {"better", "worse", "equivalent", "inconclusive", "undefined"}
    e2e = pd.read_csv(out / "tables/end_to_end.csv")  # the family: every benchmark trained and the best one
    assert list(zip(e2e["schedule"], e2e["versus"])) == [
        (m, v) for m in ("silo_paper", "silo_fit") for v in ("constant", "warmup", "best_benchmark")]
    assert e2e["n"].eq(3).all() and set(e2e.loc[e2e["versus"] == "best_benchmark", "chosen"]) <= {"constant", "warmup"}


# The example at cycle 0 (b = 0.1; 0.05 noisy and 0.8 points worse: inside the noise-aware interval;
# 0.2 consistently 0.7 points worse: outside) and a cycle 1 where 0.4 is 0.9 points worse but noisy.
HAND = {0: (0.1, {0.025: [70.0, 71.0, 72.0], 0.05: [80.2, 80.2, 80.2], 0.1: [80.0, 81.0, 82.0],
                  0.2: [79.4, 80.3, 81.2], 0.4: [60.0, 61.0, 62.0]}),
        1: (0.2, {0.05: [60.0, 60.0, 60.0], 0.1: [79.6, 79.6, 79.6], 0.2: [80.0, 80.0, 80.0],
                  0.4: [80.1, 79.1, 78.1]})}


def hand_rows() -> list[dict]:
    rows = []
    for cycle, (best, accs) in HAND.items():
        start = HAND[cycle - 1][0] if cycle else None
        for lr, per_seed in accs.items():
            rows += [{"experiment": "hand", "method": "oracle", "stage": "grid", "seed": s, "cycle": cycle,
                      "density": 100 * 0.8**cycle, "max_lr": lr, "val_acc": a, "test_acc": a, "epochs": 10,
                      "seconds": 1.0, "selected": lr == best, "checkpoint_hash": f"s{s}c{cycle}lr{lr}",
                      "start_hash": f"s{s}c{cycle - 1}lr{start}" if cycle else ""} for s, a in enumerate(per_seed)]
    for method, lrs in (("silo_paper", (0.05, 0.2)), ("silo_fit", (0.2, 0.4))):
        rows += [{"experiment": "hand", "method": method, "stage": "final", "seed": s, "cycle": c,
                  "density": 100 * 0.8**c, "max_lr": lr, "val_acc": 75.0, "test_acc": 75.0, "epochs": 10,
                  "seconds": 1.0, "selected": True, **PARAMS[method]} for s in EVAL_SEEDS for c, lr in enumerate(lrs)]
    return rows


def abandoned_rows() -> list[dict]:
    """A first run chained 0.05 forward from cycle 0 and found 0.8 best at cycle 1; those rows stay in the table."""
    return [{"experiment": "hand", "method": "oracle", "stage": "grid", "seed": s, "cycle": 1, "density": 80.0,
             "max_lr": 0.8, "val_acc": 99.0, "test_acc": 99.0, "epochs": 10, "seconds": 1.0, "selected": True,
             "start_hash": f"s{s}c0lr0.05", "checkpoint_hash": f"old{s}"} for s in SEEDS]


@pytest.fixture(scope="module")
def hand(tmp_path_factory) -> tuple[Path, dict[str, Path]]:
    out = tmp_path_factory.mktemp("hand")
    return out, report_of(out, hand_rows() + abandoned_rows(), spec=None)


def test_report_reads_the_sets_off_a_hand_made_table(hand):
    _, printed = hand
    pooled = pd.read_csv(printed["tables/oracle.csv"]).set_index("cycle")
    assert pooled["best_max_lr"].tolist() == [0.1, 0.2]  # not the abandoned chain's 0.8 at cycle 1
    assert pooled["n_values"].tolist() == [5, 4]
    assert list(zip(pooled["lo"], pooled["hi"])) == [(0.1, 0.1), (0.1, 0.2)]
    assert list(zip(pooled["noise_lo"], pooled["noise_hi"])) == [(0.05, 0.1), (0.1, 0.4)]
    # Cycle 1: 0.1 is 0.4 worse on every seed, so shown within 0.5; 0.4 (d = [−0.1, 0.9, 1.9]) is not.
    assert list(zip(pooled["strict_lo"], pooled["strict_hi"])) == [(0.1, 0.1), (0.1, 0.2)]
    assert pooled["noise_contiguous"].tolist() == [True, True]
    assert pooled["silo_paper_max_lr"].tolist() == [0.05, 0.2]
    assert pooled["silo_paper_inside"].tolist() == [False, True]
    assert pooled["silo_paper_noise_inside"].tolist() == [True, True]
    assert pooled["silo_paper_within"].tolist() == [False, True]
    assert pooled["silo_fit_max_lr"].tolist() == [0.2, 0.4]
    assert pooled["silo_fit_inside"].tolist() == [False, False]
    assert pooled["silo_fit_noise_inside"].tolist() == [False, True]
    assert pooled["silo_fit_within"].tolist() == [False, False]
    md = printed["report.md"].read_text()
    # q = 1 for SILO (paper): no cycle after q; q = 2 for SILO (fit): none either.
    assert 'SILO (paper) at the 0 cycles from 2 on: inside the paper\'s interval at 0, "not shown worse"' in md
    assert re.search(r"\| not shown worse \(lenient\) +\| +\[0\.05, 0\.1\] \| +\[0\.1, 0\.4\] \|", md)
    assert re.search(r"\| values shown within 0\.5 +\| +1 \| +2 \|", md)
    assert "## Settings" not in md  # no spec.json


def test_hand_made_regret_and_verdict(hand):
    """By hand. Leave-one-out Oracle: 0.1 at cycle 0 whichever seed is left out ([80, 81, 82]), 0.2 at cycle 1
    ([80, 80, 80]). constant_dense = 0.1; constant_best = 0.2 (cycle 1 means: 0.05 60, 0.1 79.6, 0.2 80, 0.4 79.1;
    0.025 lies below cycle 1's values). Cycle 1: SILO (paper) at 0.2 has regret 0; SILO (fit) at 0.4
    d = [−0.1, 0.9, 1.9]; constant_dense d = [0.4, 0.4, 0.4]."""
    _, printed = hand
    regret = pd.read_csv(printed["tables/regret.csv"]).set_index(["schedule", "cycle"])
    assert regret.loc["constant_dense", "max_lr"].tolist() == [0.1, 0.1]
    assert regret.loc["constant_best", "max_lr"].tolist() == [0.2, 0.2]
    half = 4.302652729911275 / 3**0.5  # t(0.975, 2)·1/√3
    assert regret.loc[("silo_paper", 0), ["regret", "ci_lo", "ci_hi"]].tolist() == pytest.approx([0.8, 0.8 - half, 0.8 + half])
    assert regret.loc[("silo_fit", 1), ["regret", "ci_lo", "ci_hi"]].tolist() == pytest.approx([0.9, 0.9 - half, 0.9 + half])
    assert regret.loc[("constant_dense", 1), ["regret", "ci_lo", "ci_hi"]].tolist() == pytest.approx([0.4, 0.4, 0.4])
    assert regret.loc[("silo_paper", 1), "regret"] == pytest.approx(0)
    verdict = pd.read_csv(printed["tables/verdict.csv"]).set_index(["schedule", "versus"])
    assert verdict["margin"].eq(0.5).all()  # 0.5 points per compared cycle × L = 1
    row = verdict.loc[("silo_paper", "constant_dense")]  # a(0.2) − a(0.1) = [0.4, 0.4, 0.4]
    # CI [0.4, 0.4] excludes 0 but lies inside ±0.5: equivalent wins over better
    assert (row.advantage, row.ci_lo, row.ci_hi, row.verdict) == (
        pytest.approx(0.4), pytest.approx(0.4), pytest.approx(0.4), "equivalent")
    assert pd.isna(row.seeds_needed)  # equivalent (and zero spread): no seeds to give; the sentence says so
    row = verdict.loc[("silo_paper", "oracle")]  # SILO (paper) sits on the Oracle's choice: [0, 0, 0]
    assert (row.advantage, row.verdict) == (pytest.approx(0), "equivalent") and pd.isna(row.seeds_needed)
    row = verdict.loc[("silo_fit", "constant_best")]  # a(0.4) − a(0.2) = [0.1, −0.9, −1.9]
    assert (row.advantage, row.ci_lo, row.ci_hi, row.verdict) == (
        pytest.approx(-0.9), pytest.approx(-0.9 - half), pytest.approx(-0.9 + half), "inconclusive")
    # seeds_needed by brute force: the first n' with (t(0.975, n'−1) + t(0.8, n'−1))·1/√n' < 0.9.
    need = next(k for k in range(2, 1001)
                if (stats.t.ppf(0.975, k - 1) + stats.t.ppf(0.8, k - 1)) / k**0.5 < 0.9)
    assert row.seeds_needed == need == 12
    md = printed["report.md"].read_text()
    assert ("On the Oracle's chain, does SILO (paper) beat not adapting and the best constant in hindsight? It is "
            "equivalent to not "
            "adapting (constant_dense = 0.1) within ±0.50 points: +0.40 points (95 % CI [+0.40, +0.40]), zero "
            "spread: all 3 seeds gave the same difference; it is equivalent to the best constant in hindsight "
            "(constant_best = 0.2, optimistic) within ±0.50 points: +0.00 points (95 % CI [+0.00, +0.00]); it is "
            "equivalent to the Oracle within ±0.50 points") in md
    assert "is inconclusive against the best constant in hindsight (constant_best = 0.2, optimistic) at n = 3 " \
           "(neither a difference nor equivalence within ±0.50 points shown): -0.90 points (95 % CI [-3.38, " \
           "+1.58]), about 12 seeds would tell" in md
    # No final chains but SILO's: nothing to compare end to end, so no verdict; the diagnostic alone.
    assert "tables/answer.csv" not in printed and "tables/end_to_end.csv" not in printed
    assert "_No final chains to compare SILO with on the evaluation seeds: no verdict._" in md
    assert "_No final chains to compare SILO with on the evaluation seeds: no end-to-end comparison._" in md


@pytest.mark.filterwarnings("error::pandas.errors.Pandas4Warning")  # CSV empty strings read back as NaN floats
def test_csv_results_give_the_same_report(hand, tmp_path):
    out, printed = hand
    (tmp_path / "results.csv").write_bytes((out / "results.csv").read_bytes())
    again = report_of(tmp_path, None, spec=None)
    assert set(again) == set(printed)
    for name in printed:
        if name.startswith("tables/"):
            assert again[name].read_text() == printed[name].read_text(), name


def test_oracle_only_results_still_report_with_notes(tmp_path):
    printed = report_of(tmp_path, realistic(("oracle",), cycles=2))
    md = printed["report.md"].read_text()
    assert '\nNo SILO rows; 3 of 3 "not shown worse" sets contiguous (n = 3).\n' in md
    assert "_No final chains to compare SILO with on the evaluation seeds: no verdict._" in md
    assert "tables/regret.csv" in printed and "tables/verdict.csv" not in printed
    assert "_No baseline rows: baselines left out._" in md
    assert "No SILO or no Oracle rows: no cost comparison." in md
    assert "SILO" not in printed["tables/oracle.md"].read_text()
    assert {"figures/max_lr.png", "figures/accuracy.png", "figures/histograms.png"} <= set(printed)


def test_results_without_oracle_or_histograms_leave_those_parts_out(tmp_path):
    rows = [r | {"grad_hist": "", "act_hist": ""} for r in realistic(("silo_paper", "cosine"), cycles=2)]
    printed = report_of(tmp_path, rows)
    md = printed["report.md"].read_text()
    assert "_No Oracle rows: Oracle intervals left out._" in md
    assert "_No histograms in the results: histogram figure left out._" in md
    assert "tables/oracle.md" not in printed and "figures/histograms.png" not in printed
    assert "figures/max_lr.png" in printed  # SILO and the theory curve still plotted
    assert "(SILO (paper), mean over seeds)" in md
    assert "| Cosine " in printed["tables/accuracy.md"].read_text()


def test_an_empty_results_table_says_so(tmp_path):
    printed = report_of(tmp_path, [], spec=None)
    assert set(printed) == {"report.md", "report.html"}
    assert "The results table is empty: nothing to report." in printed["report.md"].read_text()


def test_report_without_results_exits_2_naming_dir_and_writes_nothing(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "RUN" in err[0]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_a_results_table_missing_a_column_exits_2_naming_it_and_writes_nothing(tmp_path, capsys, fmt):
    table = pd.DataFrame(hand_rows()).drop(columns=["selected", "val_acc"])
    if fmt == "parquet":
        table.to_parquet(tmp_path / "results.parquet")
    else:
        table.to_csv(tmp_path / "results.csv", index=False)
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "RUN" in err[0] and "val_acc" in err[0] and "selected" in err[0]
    assert [p.name for p in tmp_path.iterdir()] == [f"results.{fmt}"]


def test_cost_csv_counts_the_trainings_each_method_ran(report):
    out, _ = report
    cost = pd.read_csv(out / "tables/cost.csv").set_index("method")
    # Oracle: 5 cycles x 3 seeds x (7 grid + 1 refine + 1 diverged); silo_paper: 3 tuning rows, one reused,
    # + 15 final; silo_fit: 4 fit + 15 final; each baseline: 7 tune + 15 final.
    assert cost["trainings"].to_dict() == {"oracle": 135, "silo_paper": 17, "silo_fit": 19, "constant": 22,
                                           "warmup": 22}
    assert cost["reused"].to_dict() == {"oracle": 0, "silo_paper": 1, "silo_fit": 0, "constant": 0, "warmup": 0}
    assert cost["epochs"].to_dict() == {m: 20 * n for m, n in cost["trainings"].items()}


def test_the_report_flags_an_unbracketed_delta_and_says_a_bracketed_ones_neighbours(tmp_path):
    from analysis.report import _silo_paper_note

    assert _silo_paper_note(tmp_path) is None  # no silo_paper here
    record = {"epsilon": 0.1, "delta": 0.005, "delta_candidates": [0.005, 0.01, 0.05], "delta_bracketed": False,
              "delta_open": "δ sits at the bottom of its range", "bracket_ratio": 1.25}
    (tmp_path / "silo_paper.json").write_text(json.dumps(record))
    note = _silo_paper_note(tmp_path)
    assert "δ = 0.005" in note and "{0.005, 0.01, 0.05}" in note
    assert "**δ is not bracketed: δ sits at the bottom of its range**" in note
    (tmp_path / "silo_paper.json").write_text(json.dumps(record | {"delta": 0.01, "delta_bracketed": True,
                                                                    "delta_open": None}))
    note = _silo_paper_note(tmp_path)
    assert "not bracketed" not in note and "within ×1.25" in note
    (tmp_path / "silo_paper.json").write_text(json.dumps(record | {"delta": None}))
    assert "every δ tried diverged" in _silo_paper_note(tmp_path)


def test_the_settings_show_the_oracles_options_where_the_run_recorded_them(tmp_path):
    """options.json (written by `oracle` and `compare`) joins the Settings table as options.oracle.*; a folder
    without it shows the spec alone."""
    out = tmp_path / "run"
    report_of(out, realistic())
    assert "options.oracle" not in (out / "report.md").read_text()
    (out / "options.json").write_text(json.dumps({"oracle": {"seeds": 3, "refine": 3, "bracket": False, "fuse": 0,
                                                             "mode": "racing"}}))
    report_of(out, None)
    settings = (out / "report.md").read_text().split("## Settings")[1]
    assert "options.oracle.mode" in settings and "racing" in settings and "options.oracle.bracket" in settings


# --- issue 59: the answer is the verdict's family, end to end on the evaluation seeds ------------------------------

def held_out_study() -> list[dict]:
    """One study by hand (`test_fair_verdict_report.study`: the Oracle on tuning seeds 0–2; SILO (paper), LR warmup,
    cosine and the three held-out references as final chains on evaluation seeds 1000–1002, cycles 0–2; cosine
    scored highest on the tuning seeds, so it is the best benchmark), with per-seed spread at cycles 1–2. Summed
    over cycles 1–2, SILO (paper) minus: cosine −4.0, −4.3, −3.7 (worse beyond the margin ±1, p ≈ 0.002); LR warmup
    +1.5, +2.5, +3.5 ([+0.02, +4.98]: better, only above 0, p ≈ 0.049, which Holm's step-down across the family's 6
    comparisons withdraws at its fifth step, 0.049 > 0.05/2); the Oracle's schedule +2, −1, −4 (inconclusive)."""
    from test_fair_verdict_report import study

    spread = {"cosine": {1000: 0.0, 1001: 0.15, 1002: -0.15}, "oracle_schedule": {1000: -1.5, 1001: 0.0, 1002: 1.5}}
    rows = []
    for r in study(0):
        r = dict(r)
        if r["stage"] == "final" and r["cycle"] >= 1:
            if r["method"] == "warmup":
                r["test_acc"] = 80.0 + 0.05 * (r["seed"] - 1000) - {1000: 0.75, 1001: 1.25, 1002: 1.75}[r["seed"]]
            elif r["method"] in spread:
                r["test_acc"] += spread[r["method"]][r["seed"]]
        rows.append(r)
    return rows


def test_the_answer_is_the_family_end_to_end_worded_as_over_replicates_and_cosine_beats_silo(tmp_path):
    """The first table is the verdict's family on the evaluation seeds, not the Oracle-chain regret: a row per
    comparison, cosine ahead of SILO (paper) beyond the margin and the best benchmark naming cosine; a label Holm
    withdraws says "(uncorrected)" instead of a claim beside its withdrawal; every label carries † (this run's
    choices); the first line under the table says which labels hold across the family. The Oracle-chain comparisons
    are the §5.3 diagnostic, in a section of their own, labelled in-sample."""
    printed = report_of(tmp_path, held_out_study(), spec={"dataset": "synthetic", "grid": [0.1, 0.2, 0.4],
                                                          "cycles": 2, "rate": 0.2})
    md = printed["report.md"].read_text()
    answer_md = printed["tables/answer.md"].read_text()
    cells = {line.split("|")[1].strip(): line.split("|")[2].strip() for line in answer_md.splitlines()[2:]}
    assert list(cells) == ["the Oracle's schedule (held out)", "not adapting (max_lr 0.1)",
                           "the best constant (max_lr 0.4)", "LR warmup", "Cosine",
                           "the best benchmark (Cosine, chosen on tuning seeds)"]
    assert cells["Cosine"] == "▼ worse by more than the margin† -4.00 [-4.75, -3.25]"
    assert cells["the best benchmark (Cosine, chosen on tuning seeds)"] == cells["Cosine"]
    assert cells["LR warmup"] == "▲ better (uncorrected)† +2.50 [+0.02, +4.98], not shown beyond the margin"
    assert cells["the Oracle's schedule (held out)"].startswith("? inconclusive† -1.00 [")
    assert "not under Holm" not in md and "vs the Oracle" not in answer_md
    answer = pd.read_csv(printed["tables/answer.csv"]).set_index("versus")
    assert answer.loc["cosine", "p_value"] == pytest.approx(2 * stats.t.sf(4.0 / (0.3 / 3**0.5), 2))
    assert (answer.loc["cosine", "holm"], answer.loc["warmup", "holm"], answer.loc["warmup", "bonferroni"]) == (
        "yes", "no", "no")
    assert answer.loc["best_benchmark", "chosen"] == "cosine"
    # the first line under the table, in words; the single-run caveat in the table's line
    under = md.split(answer_md)[1].lstrip("\n").splitlines()[0]
    assert under.startswith("Across the family of 6 comparisons at 5 % (Holm, over this run's evaluation seeds), 4 "
                            "hold: ")
    assert "SILO (paper) worse than Cosine by more than the margin" in under
    assert "SILO (paper) worse than the best benchmark (Cosine, chosen on tuning seeds) by more than the margin" in under
    assert "LR warmup" not in under and under.endswith("(Bonferroni keeps 4).")
    assert "† Every label is conditional on this run's choices" in md
    # the Oracle-chain comparisons: the §5.3 diagnostic, apart and labelled
    diagnostic = md[md.index("## The §5.3 diagnostic: SILO's max_lr on the Oracle's chain"):md.index("## Test accuracy")]
    assert "conditional on the Oracle's chain, on the tuning seeds, in-sample; not part of the verdict" in diagnostic
    assert "On the Oracle's chain, does SILO (paper) beat not adapting" in diagnostic
    assert md.index("## The answer") < md.index("## End to end") < md.index("## The §5.3 diagnostic")
    # the cost on the first screen: the Oracle ran exhaustive (its 27 trainings are its whole plan), silo_paper's δ
    # search apart from its final chains, the held-out references on their own
    first = md[:md.index("## End to end")]
    assert ("Against the Oracle as run (exhaustive: 27 trainings, 270 epochs): SILO (paper) cost 100 epochs (37 % of "
            "the Oracle's epochs as run and 37 % of its device-hours): its δ search 10 (4 % of the Oracle's) and the "
            "SILO schedule itself, its final chains on the evaluation seeds, 90 (33 % of the Oracle's).") in first
    assert ("The held-out references (the Oracle's schedule, not adapting and the best constant as final chains on "
            "the evaluation seeds: what the end-to-end verdict adds): 27 trainings, 270 epochs (100 % of the "
            "Oracle's).") in first
