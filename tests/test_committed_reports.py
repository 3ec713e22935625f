"""The committed reports: every file a report.md or report.html under docs/ or benchmarks/ names (its links and
images) is committed beside it, nothing points to the network; and the committed example (docs/example/, the
default main job's report over its three replicates) opens with the answer, the max_lr figure and the §5.3 table."""
from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "docs" / "example"
REPORTS = sorted(p for base in ("docs", "benchmarks") for p in (ROOT / base).rglob("report.*")
                 if p.suffix in (".md", ".html"))


def named(report: Path) -> list[str]:
    """The files a report names: Markdown links and images `](target)`, HTML href= and src= (data: URIs and
    in-page #anchors name no file)."""
    text = report.read_text()
    found = (re.findall(r"\]\(([^)\s]+)\)", text) if report.suffix == ".md"
             else re.findall(r"""(?:href|src)=["']([^"']+)["']""", text))
    return [t for t in found if not t.startswith(("data:", "#"))]


def test_the_example_and_its_replicates_reports_are_committed():
    example = {p.relative_to(EXAMPLE).as_posix() for p in REPORTS if EXAMPLE in p.parents}
    assert example == {f"{d}report.{ext}" for d in ("", "replicate-1/", "replicate-2/", "replicate-3/")
                       for ext in ("md", "html")}


@pytest.mark.parametrize("report", REPORTS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_file_a_committed_report_names_is_committed_beside_it(report):
    targets = named(report)
    remote = [t for t in targets if "://" in t]
    missing = [t for t in targets if "://" not in t and not (report.parent / unquote(t.split("#")[0])).is_file()]
    assert (remote, missing) == ([], []), f"{report.relative_to(ROOT)} names files that are not there"


def test_the_examples_first_screen_holds_the_verdict_the_max_lr_figure_and_the_section_53_table():
    report = (EXAMPLE / "report.md").read_text()
    head = "\n".join(report.splitlines()[:40]) + "\n"
    assert head.startswith("# Oracle search report over 3 replicates: mnist1d-mlp\n")
    assert (EXAMPLE / "tables" / "replicate_answer.md").read_text() in head
    assert "](figures/max_lr.png)" in head
    assert (EXAMPLE / "tables" / "section53.md").read_text() in head
    assert named(EXAMPLE / "report.html") == [f"replicate-{r}/report.html" for r in (1, 2, 3)]
