"""One replicate's failure never loses the others: `compare --replicates 2` on the digits preset, with replicate 2's
final runs failing on purpose (tests/fault_plugins.py). Replicate 1 finishes and keeps its report; the report over
the finished replicate says which one failed and why; the command exits 1 naming it; a rerun, the fault gone,
resumes replicate 2 (replicate 1 trains nothing again) and writes the report over both."""
from __future__ import annotations

import contextlib
import io
import json

import pytest

from fault_plugins import FLAG
from oracle_search import cli
from oracle_search.cli import EXIT_FAILED
from oracle_search.ledger import Ledger

ARGV = ["compare", "--preset", "digits-mlp", "--model", "tests.fault_plugins:mlp_failing_replicate_2",
        "--cycles", "1", "--epochs", "6", "--tuning-seeds", "2", "--eval-seeds", "2", "--trials", "0", "--refine", "0",
        "--replicates", "2"]


@pytest.mark.slow
def test_a_failed_replicate_leaves_the_others_report_and_a_rerun_completes_it(ray_local, tmp_path):
    out = tmp_path / "cmp"
    argv = [*ARGV, "--out", str(out)]
    FLAG.touch()
    try:
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            assert cli.main(argv) == EXIT_FAILED
    finally:
        FLAG.unlink(missing_ok=True)
    last = err.getvalue().strip().splitlines()[-1]
    assert last.startswith("oracle-search: failed: replicate 2 failed:") and "fault on purpose" in last
    assert "rerun the same command to resume" in last and "replicate 1" not in last.split("covers")[0]
    # replicate 1 finished: its own report, and the report over it says replicate 2 failed and why
    assert (out / "replicate-1" / "report.md").exists() and not (out / "replicate-2" / "report.md").exists()
    report = (out / "report.md").read_text()
    assert "1 of 2 replicates; replicate-2 failed:" in report and "fault on purpose" in report
    assert "over 1 replicate" in report
    before = {r["key"]: r["trial_id"] for r in Ledger(out / "replicate-1").rows()}
    assert any(r["seed"] == 11000 for r in Ledger(out / "replicate-2").rows()) is False

    # the fault gone, the same command completes replicate 2 and trains nothing of replicate 1 again
    assert cli.main(argv) == 0
    assert {r["key"]: r["trial_id"] for r in Ledger(out / "replicate-1").rows()} == before
    assert any(r["seed"] == 11000 and r["stage"] == "final" for r in Ledger(out / "replicate-2").rows())
    assert (out / "replicate-2" / "report.md").exists()
    report = (out / "report.md").read_text()
    assert "failed" not in report.split("\n## ")[1] and "over 2 replicates" in report
    assert json.loads((out / "replicates.json").read_text())["replicates"] == 2
