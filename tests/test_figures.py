"""The figures a paper can use: every figure a report writes is there as PNG (embedded in report.html) and SVG
(vector); the max_lr figure over replicates has one panel per replicate and one legend, and its legend says what
its caption says. On the committed example's three replicates (their results tables, read, never written)."""
from __future__ import annotations

import dataclasses
import html
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from analysis import figures
from analysis.files import read_spec
from analysis.over_replicates import Intervals, max_lr_plot
from analysis.replicate_report import max_lr_caption, write_replicates_report
from analysis.report import DEFAULT_DIM, THEORY, _max_lr_plot
from conftest import ROOT
from oracle_search.schema import read_results, results_frame
from oracle_search.selection import TOLERANCE

EXAMPLE = ROOT / "docs" / "example"
RUNS = sorted(EXAMPLE.glob("replicate-*"))
SVG = "{http://www.w3.org/2000/svg}"


def svg_tree(svg: bytes) -> ET.Element:
    """The SVG with its comments kept: matplotlib draws text as paths and writes each text as a comment."""
    return ET.fromstring(svg, ET.XMLParser(target=ET.TreeBuilder(insert_comments=True)))


def groups(svg: bytes, kind: str) -> list[ET.Element]:
    """matplotlib's top-level groups of one kind: axes_1, axes_2, ... or legend_1, ..."""
    return [g for g in svg_tree(svg).iter(f"{SVG}g") if re.fullmatch(rf"{kind}_\d+", g.get("id", ""))]


def legend_texts(svg: bytes) -> list[str]:
    """Every legend's entries, as the SVG writes them."""
    return [html.unescape(c.text.strip()) for legend in groups(svg, "legend") for c in legend.iter()
            if c.tag is ET.Comment]


@pytest.fixture(scope="module")
def replicates() -> list[Intervals]:
    spec = read_spec(RUNS[0])
    return [Intervals.read(run.name, results_frame(read_results(run).to_dict("records")), spec) for run in RUNS]


@pytest.fixture(scope="module")
def over(tmp_path_factory) -> tuple[Path, dict[str, Path]]:
    """The report over the example's replicates, written in a folder of its own."""
    out = tmp_path_factory.mktemp("over")
    return out, write_replicates_report(out, RUNS, 0.5)


def test_every_figure_of_the_report_is_written_as_png_and_svg_and_the_markdown_links_both(over):
    out, written = over
    names = {Path(f).stem for f in written if f.startswith("figures/")}
    assert {"max_lr", "slots"} <= names
    on_disk = {p.relative_to(out).as_posix() for p in (out / "figures").iterdir()}
    assert on_disk == {f"figures/{n}.{ext}" for n in names for ext in ("png", "svg")} == \
        {f for f in written if f.startswith("figures/")}
    md = (out / "report.md").read_text()
    for name in names:
        assert (out / "figures" / f"{name}.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
        svg = (out / "figures" / f"{name}.svg").read_bytes()
        assert groups(svg, "axes") and b"https://" not in svg  # a drawing, and no link in it
        assert f"(figures/{name}.png)" in md and f"[SVG](figures/{name}.svg)" in md
    page = (out / "report.html").read_text()
    assert page.count('src="data:image/png;base64,') == len(names)  # the HTML stays self-contained


def test_the_max_lr_figure_over_the_example_has_a_panel_per_replicate_and_its_caption_says_its_legend(over):
    out, _ = over
    svg = (out / "figures" / "max_lr.svg").read_bytes()
    assert len(groups(svg, "axes")) == len(RUNS)
    md = (out / "report.md").read_text()
    (caption,) = re.findall(r"!\[([^\]]+)\]\(figures/max_lr\.png\)", md)
    entries = legend_texts(svg)
    assert len(entries) == len(set(entries)) >= 3  # one legend for all panels, each entry once
    missing = [e for e in entries if e not in caption]
    assert not missing, (missing, caption)
    assert "one panel per replicate" in caption and "geometric" not in caption


@pytest.mark.parametrize("n", [1, 2, 4])
def test_the_panels_follow_the_replicates_and_the_legend_does_not_grow(replicates, n):
    reps = [dataclasses.replace(replicates[i % len(replicates)], name=f"replicate-{i + 1}") for i in range(n)]
    theory = {**THEORY, "d": DEFAULT_DIM}
    figure = max_lr_plot(reps, theory)
    axes = groups(figure.svg, "axes")
    assert len(axes) == n
    titles = [html.unescape(c.text.strip()) for ax in axes for c in ax.iter() if c.tag is ET.Comment
              and c.text.strip().startswith("replicate-")]
    assert titles == [r.name for r in reps]  # each panel named by its replicate, in order
    entries = legend_texts(figure.svg)
    caption = max_lr_caption(reps, theory, "mnist1d")
    assert entries and all(e in caption for e in entries), (entries, caption)
    assert not any(r.name in e for r in reps for e in entries)  # the legend names styles, not replicates


def test_the_one_run_max_lr_figure_says_what_its_theory_curve_is_scaled_to_as_its_caption_does():
    run = RUNS[0]
    plot = _max_lr_plot(results_frame(read_results(run).to_dict("records")), read_spec(run), TOLERANCE)
    (theory,) = [e for e in legend_texts(plot.figure.svg) if e.startswith("theory")]
    scaled = theory.split("), ", 1)[1]
    assert scaled.startswith("scaled to") and scaled in plot.caption


def test_a_figure_gives_the_same_bytes_twice(replicates):
    """No date, no random ids: a report written again changes no figure file that did not change."""
    theory = {**THEORY, "d": DEFAULT_DIM}
    assert max_lr_plot(replicates, theory) == max_lr_plot(replicates, theory)
