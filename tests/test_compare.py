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

CLI = [sys.executable, "-m", "oracle_search.cli", "compare", "--preset", "tiny", "--trials", "3", "--seeds", "1"]


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
    run_until(CLI + ["--out", str(out)], "fit-silo: study")
    before = {p.name: json.loads(p.read_text())["trial_id"] for p in (out / "ledger").glob("*.json")}
    assert any(name.startswith("oracle-") for name in before)

    done = subprocess.run(CLI + ["--out", str(out)], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    for name, trial_id in before.items():  # finished before the kill: not trained again
        assert json.loads((out / "ledger" / name).read_text())["trial_id"] == trial_id

    rows = pd.read_parquet(out / "results.parquet")
    assert {"oracle", "silo", "constant", "decay", "cyclical", "warmup", "cosine"} <= set(rows["method"])
    assert len(rows) == len(list((out / "ledger").glob("*.json")))
    report = (out / "report.md").read_text()
    assert "## Oracle max_lr and interval" in report and "## Cost" in report and "## Test accuracy" in report
    assert (out / "report.html").exists()
    assert "Oracle table" in done.stdout
