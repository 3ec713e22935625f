"""`oracle-search report docs/example --out X` (issue 62): the report over the committed example's replicates,
written from its committed results tables into a folder of its own, gives the committed verdict, and leaves
docs/example as it is. The command line in a process of its own, as a reader runs it; no Ray (a report reads
tables)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "docs" / "example"
CLI = str(Path(sys.executable).parent / "oracle-search")


def files(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file under `folder`: its size and modification time (ns), to tell that nothing was written there."""
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}


def section(report: str, title: str) -> str:
    """The text of `report`'s section `title` (its `## ` heading to the next)."""
    start = report.index(f"\n## {title}\n")
    end = report.find("\n## ", start + 1)
    return report[start:end if end >= 0 else None]


@pytest.mark.slow  # the whole report over three replicates, figures included: about 30 s on 2 cores
def test_the_report_over_the_committed_example_writes_its_verdict_elsewhere(tmp_path):
    before = files(EXAMPLE)
    out = tmp_path / "example-report"
    env = os.environ | {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([CLI, "report", str(EXAMPLE), "--out", str(out)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"report.md: {out / 'report.md'}" in done.stdout

    # The same verdict: the table of every comparison (mean, interval, label, Holm) and the report's first section.
    assert (out / "tables" / "verdict.csv").read_text() == (EXAMPLE / "tables" / "verdict.csv").read_text()
    assert (out / "tables" / "replicates.csv").read_text() == (EXAMPLE / "tables" / "replicates.csv").read_text()
    title = "The answer over 3 replicates"
    assert section((out / "report.md").read_text(), title) == section((EXAMPLE / "report.md").read_text(), title)
    # The run's own records came along: the estimate beside the measured time, as the committed report has it.
    estimated = [line for line in (EXAMPLE / "report.md").read_text().splitlines() if "Estimated before the run" in line]
    assert estimated and estimated[0] in (out / "report.md").read_text()
    # Its links lead to the committed replicates' own reports.
    for r in (1, 2, 3):
        assert os.path.relpath(EXAMPLE / f"replicate-{r}" / "report.md", out) in (out / "report.md").read_text()

    assert files(EXAMPLE) == before  # nothing written into the committed example


def test_a_report_over_a_replicates_folder_into_a_file_is_refused_and_writes_nothing(tmp_path):
    (tmp_path / "afile").write_text("a file\n")
    done = subprocess.run([CLI, "report", str(EXAMPLE), "--out", "afile"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"oracle-search: error: out: afile is a file, not a folder; give --out a folder this process can make or "
        "write in"]
    assert [p.name for p in tmp_path.iterdir()] == ["afile"] and (tmp_path / "afile").read_text() == "a file\n"
