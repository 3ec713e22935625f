"""compare: Oracle, fitter, baselines and report as one resumable run, including after SIGKILL."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

pytestmark = pytest.mark.slow

CLI = [sys.executable, "-m", "oracle_search.cli", "compare", "--preset", "tiny", "--trials", "3", "--seeds", "2",
       "--eval-seeds", "2", "--refine", "1"]


def run_until(args: list[str], marker: str) -> None:
    """Start the CLI in its own session and SIGKILL its whole process group once `marker` is printed."""
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        for line in proc.stdout:
            if marker in line:
                os.killpg(proc.pid, signal.SIGKILL)
                break
        else:
            pytest.fail(f"never printed {marker!r}")
    finally:
        proc.wait(timeout=60)


def test_compare_writes_results_and_report_and_resumes_after_sigkill(tmp_path: Path):
    out = tmp_path / "cmp"
    run_until(CLI + ["--out", str(out)], "== 2/4")
    before = {p.name: json.loads(p.read_text())["trial_id"] for p in (out / "ledger").glob("*.json")}
    assert any(name.startswith("oracle-") for name in before)

    done = subprocess.run(CLI + ["--out", str(out)], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    for name, trial_id in before.items():  # finished before the kill: not trained again
        assert json.loads((out / "ledger" / name).read_text())["trial_id"] == trial_id

    rows = pd.read_parquet(out / "results.parquet")
    assert {"oracle", "silo_paper", "silo_fit", "constant", "decay", "cyclical", "warmup", "cosine"} <= set(rows["method"])
    assert len(rows) == len(list((out / "ledger").glob("*.json")))
    # every value the Oracle trained, it trained on both tuning seeds
    oracle = rows[rows["method"] == "oracle"]
    per_seed = oracle.groupby(["cycle", "seed"])["max_lr"].apply(lambda v: tuple(sorted(v.round(9))))
    assert (per_seed.groupby("cycle").nunique() == 1).all()
    # final runs use evaluation seeds that no tuning row used
    final = rows[rows["stage"] == "final"]
    assert set(final["seed"]) == {1000, 1001}
    assert set(rows[rows["stage"] != "final"]["seed"]) == {0, 1}
    # identical trainings ran once: LR warmup's cycle-0 tuning is the Oracle's cycle-0 grid
    warmup_tune = rows[(rows["method"] == "warmup") & (rows["stage"] == "tune")]
    assert len(warmup_tune) and warmup_tune["reused"].all()
    report = (out / "report.md").read_text()
    assert report.index("## The answer") < report.index("## Oracle max_lr") < report.index("## Settings")
    assert "## Cost" in report and "## Test accuracy" in report
    oracle_csv = pd.read_csv(out / "tables" / "oracle.csv")
    assert {"noise_lo", "noise_hi", "silo_paper_noise_inside", "silo_fit_inside"} <= set(oracle_csv.columns)
    assert (out / "report.html").exists()
