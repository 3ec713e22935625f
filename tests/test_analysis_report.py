"""`oracle-search report DIR` on hand-made results tables written with `oracle_search.schema.write_results`:
every table and figure, the answer first and the settings last, a self-contained HTML page, and the noise-aware
interval's columns in tables/oracle.csv."""
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


TABLES = ("oracle", "oracle_values", "oracle_seeds", "accuracy", "cost", "statistics")
FIGURES = ("max_lr", "accuracy", "histograms")


def test_every_table_and_figure_is_written_and_printed(report):
    out, printed = report
    expected = {f"tables/{t}.{ext}" for t in TABLES for ext in ("csv", "md", "tex")}
    expected |= {f"figures/{f}.png" for f in FIGURES} | {"report.md", "report.html"}
    assert set(printed) == expected
    assert all(path == out / name and path.is_file() for name, path in printed.items())
    on_disk = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    assert on_disk == expected | {"results.parquet", "results.csv", "spec.json"}  # and no temp files
    assert all(printed[f"figures/{f}.png"].read_bytes().startswith(b"\x89PNG") for f in FIGURES)
    assert all("\\toprule" in printed[f"tables/{t}.tex"].read_text() for t in TABLES)


def sections(md: str) -> list[str]:
    return re.findall(r"^## (.+)$", md, flags=re.M)


def test_the_answer_comes_first_and_the_settings_last(report):
    out, _ = report
    md = (out / "report.md").read_text()
    assert md.startswith("# Oracle search report: demo\n")
    assert sections(md) == ["The answer", "Oracle max_lr and intervals (paper §5.3)", "Test accuracy", "Cost",
                            "Gradient and activation statistics (§3.1)", "Settings"]
    answer = md[md.index("## The answer"):md.index("## Oracle max_lr")]
    assert re.search(r"_SILO \(paper\) inside the noise-aware Oracle interval at \d of 5 cycles \(n = 3 tuning "
                     r"seeds", answer)
    assert re.search(r"_SILO \(fit\) inside the noise-aware Oracle interval at \d of 5 cycles", answer)
    assert re.search(r"SILO \(paper\) cost \d+% of the Oracle's epochs", answer)
    assert re.search(r"SILO \(paper\) has the highest mean at \d of 5 densities, beyond the 95 % half-widths at \d",
                     answer)
    assert "Best mean test accuracy per density: 100 %: " in answer and "(figures/max_lr.png)" in answer
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
        assert f"(figures/{f}.png)" in md
    assert len(re.findall(r"\*\*Verdict:\*\* (.+)", md)) == len(TABLES)
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
    assert page.index("SILO (paper) inside the noise-aware Oracle interval") < page.index("<table>")


def test_oracle_csv_holds_both_intervals_and_each_silo_variant(report):
    out, _ = report
    pooled = pd.read_csv(out / "tables/oracle.csv")
    assert {"noise_lo", "noise_hi", "noise_contiguous", "silo_paper_max_lr", "silo_paper_inside",
            "silo_paper_noise_inside", "silo_fit_max_lr", "silo_fit_inside", "silo_fit_noise_inside"} <= set(pooled)
    assert pooled["cycle"].tolist() == list(range(CYCLES + 1))
    assert (pooled["n_seeds"] == len(SEEDS)).all()
    assert (pooled["noise_lo"] <= pooled["lo"]).all() and (pooled["hi"] <= pooled["noise_hi"]).all()
    assert pooled["best_max_lr"].is_monotonic_increasing  # the optimum moves up with pruning
    for method, params in PARAMS.items():
        lr = [silo_max_lr(m, rate=RATE, **params) for m in range(CYCLES + 1)]
        assert pooled[f"{method}_max_lr"].tolist() == pytest.approx(lr)
        for flag, lo, hi in (("inside", "lo", "hi"), ("noise_inside", "noise_lo", "noise_hi")):
            expected = [a * (1 - 1e-9) <= v <= b * (1 + 1e-9) for v, a, b in zip(lr, pooled[lo], pooled[hi])]
            assert pooled[f"{method}_{flag}"].tolist() == expected


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


def test_report_reads_the_noise_aware_interval_off_a_hand_made_table(hand):
    _, printed = hand
    pooled = pd.read_csv(printed["tables/oracle.csv"]).set_index("cycle")
    assert pooled["best_max_lr"].tolist() == [0.1, 0.2]  # not the abandoned chain's 0.8 at cycle 1
    assert pooled["n_values"].tolist() == [5, 4]
    assert list(zip(pooled["lo"], pooled["hi"])) == [(0.1, 0.1), (0.1, 0.2)]
    assert list(zip(pooled["noise_lo"], pooled["noise_hi"])) == [(0.05, 0.1), (0.1, 0.4)]
    assert pooled["noise_contiguous"].tolist() == [True, True]
    assert pooled["silo_paper_max_lr"].tolist() == [0.05, 0.2]
    assert pooled["silo_paper_inside"].tolist() == [False, True]
    assert pooled["silo_paper_noise_inside"].tolist() == [True, True]
    assert pooled["silo_fit_max_lr"].tolist() == [0.2, 0.4]
    assert pooled["silo_fit_inside"].tolist() == [False, False]
    assert pooled["silo_fit_noise_inside"].tolist() == [False, True]
    md = printed["report.md"].read_text()
    assert "_SILO (paper) inside the noise-aware Oracle interval at 2 of 2 cycles" in md
    assert re.search(r"\| noise-aware interval +\| +\[0\.05, 0\.1\] \| +\[0\.1, 0\.4\] \|", md)
    assert "## Settings" not in md  # no spec.json


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
    assert "_No SILO rows; " in md and "noise-aware Oracle intervals contiguous (n = 3)._" in md
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
    assert len(err) == 1 and "DIR" in err[0]
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
    assert len(err) == 1 and "DIR" in err[0] and "val_acc" in err[0] and "selected" in err[0]
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
