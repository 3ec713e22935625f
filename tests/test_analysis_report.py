"""The full report from a hand-made but realistic results table: every table, every figure, no external links."""
from __future__ import annotations

import base64
import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis.report import write_report
from trainables.schedules import silo_max_lr

GRID = [0.01 * 2**i for i in range(7)]
SILO = {"epsilon": 0.08, "delta": 0.6, "q": 1, "beta": 3.0}
RATE, CYCLES, SEEDS = 0.2, 4, (0, 1, 2)


def _hist(rng: np.random.Generator, scale: float) -> str:
    edges = np.linspace(-3 * scale, 3 * scale, 21)
    counts = rng.poisson(1000 * np.exp(-0.5 * (((edges[:-1] + edges[1:]) / 2) / scale) ** 2))
    return json.dumps({"edges": edges.tolist(), "counts": counts.tolist()})


def realistic(methods: tuple[str, ...] = ("oracle", "silo", "constant", "warmup")) -> pd.DataFrame:
    """Three seeds, five cycles; accuracy peaks at a max_lr that moves up as the network is pruned."""
    rng = np.random.default_rng(0)
    rows: list[dict] = []

    def add(method: str, stage: str, seed: int, cycle: int, lr: float, **kw) -> None:
        acc = 80 - 6 * math.log2(lr / (0.08 * 1.6**cycle)) ** 2
        silo = SILO if method == "silo" else dict.fromkeys(SILO, float("nan"))
        rows.append({
            "experiment": "demo", "method": method, "stage": stage, "schedule": method, "seed": seed,
            "cycle": cycle, "density": 100 * (1 - RATE) ** cycle, "max_lr": lr,
            "val_acc": acc + rng.normal(0, 0.2), "test_acc": acc + rng.normal(0, 0.5), "best_epoch": 15,
            "epochs": 20, "seconds": 3.5, "device": "cpu", "grad_std": 0.01 * (1 + cycle),
            "act_std": 1 / (1 + 0.2 * cycle), "grad_hist": _hist(rng, 0.01 * (1 + cycle)),
            "act_hist": _hist(rng, 1 / (1 + 0.2 * cycle)), "diverged": False, "selected": True, "pruned": False,
            "trial_id": f"{method}-{stage}-{seed}-{cycle}-{lr:.4g}", "study_trial": float("nan"), "checkpoint": "",
            **silo, **kw})

    for seed in SEEDS:
        for cycle in range(CYCLES + 1):
            if "oracle" in methods:
                for lr in GRID:
                    add("oracle", "grid", seed, cycle, lr, selected=False)
                add("oracle", "grid", seed, cycle, 5.0, diverged=True, selected=False, val_acc=10.0)
                add("oracle", "refine", seed, cycle, 0.06 * 1.6**cycle, selected=False)
            if "silo" in methods:
                add("silo", "final", seed, cycle, silo_max_lr(cycle, rate=RATE, **SILO))
            for b in set(methods) - {"oracle", "silo"}:
                add(b, "final", seed, cycle, 0.1)
    if "silo" in methods:
        for t in range(4):
            add("silo", "fit", 0, 0, 0.08, study_trial=float(t), pruned=t == 3)
    for b in set(methods) - {"oracle", "silo"}:
        for lr in GRID:
            add(b, "tune", 0, 0, lr)
    df = pd.DataFrame(rows)
    trials = df[(df["method"] == "oracle") & ~df["diverged"]]
    best = trials.sort_values(["val_acc", "max_lr"], ascending=[False, True]).groupby(["seed", "cycle"]).head(1)
    df.loc[best.index, "selected"] = True
    return df


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> tuple[Path, dict[str, Path]]:
    out = tmp_path_factory.mktemp("run")
    realistic().to_parquet(out / "results.parquet")
    (out / "spec.json").write_text(json.dumps({"preset": "mnist1d-mlp", "model": "mlp", "rate": RATE,
                                               "cycles": CYCLES, "grid": GRID[:2]}))
    return out, write_report(out)


TABLES = ("oracle", "oracle_seeds", "accuracy", "cost", "statistics")
FIGURES = ("max_lr", "accuracy", "histograms")


def test_every_table_and_figure_is_written(report):
    out, written = report
    expected = {f"tables/{t}.{ext}" for t in TABLES for ext in ("csv", "md", "tex")}
    expected |= {f"figures/{f}.png" for f in FIGURES} | {"report.md", "report.html"}
    assert set(written) == expected
    assert all(path == out / name and path.is_file() for name, path in written.items())
    assert all((out / f"figures/{f}.png").read_bytes().startswith(b"\x89PNG") for f in FIGURES)
    assert all("\\toprule" in (out / f"tables/{t}.tex").read_text() for t in TABLES)
    assert not list(out.rglob("*.tmp"))


def test_markdown_report_holds_spec_tables_verdicts_and_figures(report):
    out, _ = report
    md = (out / "report.md").read_text()
    assert "# Oracle search report: demo" in md
    assert "| preset |  mnist1d-mlp |" in md and "| grid   | [0.01, 0.02] |" in md
    for t in TABLES:
        assert (out / f"tables/{t}.md").read_text() in md
    for f in FIGURES:
        assert f"(figures/{f}.png)" in md
    verdicts = re.findall(r"\*\*Verdict:\*\* (.+)", md)
    assert len(verdicts) == len(TABLES)
    assert verdicts[0].startswith("SILO inside the Oracle interval at ") and "of 5 cycles" in verdicts[0]
    assert re.match(r"SILO best at \d of 5 densities", verdicts[2])
    assert re.match(r"SILO cost \d+% of the Oracle's epochs", verdicts[3])
    assert "_No" not in md  # nothing missing


def test_html_is_self_contained(report):
    out, _ = report
    page = (out / "report.html").read_text()
    for bad in ("http://", "https://", 'src="http', "<link", "<script", "url("):
        assert bad not in page
    images = re.findall(r'<img [^>]*src="([^"]+)"', page)
    assert len(images) == len(FIGURES)
    for src in images:
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1]).startswith(b"\x89PNG")
    assert page.count("<table>") == len(TABLES) + 1  # plus the spec
    assert "<strong>" in page and "<style>" in page


def test_oracle_csv_holds_the_pooled_intervals(report):
    out, _ = report
    pooled = pd.read_csv(out / "tables/oracle.csv")
    assert pooled["cycle"].tolist() == list(range(CYCLES + 1))
    assert (pooled["lo"] <= pooled["best_max_lr"]).all() and (pooled["best_max_lr"] <= pooled["hi"]).all()
    assert (pooled["n_seeds"] == len(SEEDS)).all()
    assert pooled["best_max_lr"].is_monotonic_increasing  # the optimum moves up with pruning
    assert pooled["silo_max_lr"].tolist() == pytest.approx([silo_max_lr(m, rate=RATE, **SILO) for m in range(5)])


def test_csv_results_give_the_same_report(report, tmp_path):
    out, _ = report
    realistic().to_csv(tmp_path / "results.csv", index=False)
    write_report(tmp_path)
    for t in TABLES:
        assert (tmp_path / f"tables/{t}.md").read_text() == (out / f"tables/{t}.md").read_text()


def test_oracle_only_results_still_report_with_notes(tmp_path):
    realistic(("oracle",)).to_parquet(tmp_path / "results.parquet")
    written = write_report(tmp_path)
    md = (tmp_path / "report.md").read_text()
    assert "_No SILO rows: SILO's max_lr left out._" in md
    assert "_No baseline rows: baselines left out._" in md
    assert "No SILO or no Oracle rows: no cost comparison." in md
    assert "SILO max_lr" not in (tmp_path / "tables/oracle.md").read_text()
    assert {"figures/max_lr.png", "figures/accuracy.png", "figures/histograms.png"} <= set(written)
    assert "Oracle search report: demo" in (tmp_path / "report.html").read_text()


def test_results_without_oracle_or_histograms_leave_those_parts_out(tmp_path):
    realistic(("silo", "cosine")).assign(grad_hist="", act_hist="").to_parquet(tmp_path / "results.parquet")
    written = write_report(tmp_path)
    md = (tmp_path / "report.md").read_text()
    assert "_No Oracle rows: Oracle intervals left out._" in md
    assert "_No histograms in the results: histogram figure left out._" in md
    assert "tables/oracle.md" not in written and "figures/histograms.png" not in written
    assert "figures/max_lr.png" in written  # SILO and the theory curve still plotted
    assert "(SILO rows, mean over seeds)" in md
    assert "| Cosine " in (tmp_path / "tables/accuracy.md").read_text()
