"""The report: spec, tables and figures of one results folder as report.md and a self-contained report.html."""
from __future__ import annotations

import base64
import html
import json
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

import pandas as pd

from analysis import figures, paper_table, premises, render
from analysis.render import duration
from analysis.study_figures import study_figures
from analysis.files import ESTIMATE_FILE, read_spec
from analysis.intervals import oracle_intervals, seed_intervals
from analysis.regret import Regret, analyse
from analysis.slots import slot_lanes
from analysis.select import SCHEDULE_LABELS, densities, label, pruning_rate, silo_params
from oracle_search.compared import silo_methods
from oracle_search.options import OracleOptions, recorded, recorded_oracle
from analysis.tables import (END_TO_END_TITLE, Table, accuracy_table, answer_table, best_per_density, cost_table,
                             end_to_end_table,
                             oracle_table, racing_table, regret_table, seed_table, statistics_source, statistics_table,
                             values_table, verdict_table)
from analysis.verdict_sentences import DIAGNOSTIC
from oracle_search.curve import DuplicateRows
from oracle_search.racing import read_racing
from oracle_search.schema import REQUIRED, read_results, results_frame
from oracle_search.sessions import FINISHED, measured
from trainables.atomic import atomic_write_bytes
from oracle_search.selection import TOLERANCE
from oracle_search.statistics import MARGIN_PER_CYCLE

THEORY = {"sigma_x": 1.0, "sigma_w": 1.0}  # Theorem 1's σ_X, σ_W; d comes from the spec (default: MNIST-1D's 40)


@dataclass(frozen=True)
class Plot:
    name: str
    caption: str
    figure: figures.Rendered  # written as figures/NAME.png (embedded in report.html) and figures/NAME.svg

    @property
    def png(self) -> bytes:
        return self.figure.png


@dataclass
class Section:
    title: str
    tables: list[Table] = field(default_factory=list)
    plots: list[Plot] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    notes_after: list[str] = field(default_factory=list)  # below the tables and figures
    reports: list[tuple[str, str]] = field(default_factory=list)  # (text, folder): its report.md / .html, last
    plots_first: bool = False  # the figures above the tables


# Theorem 1's d: the width of a layer's input; for the MLPs, the dataset's input size.
INPUT_DIMS = {"mnist1d": 40, "digits": 64, "synthetic": 32, "cifar10": 3 * 32 * 32, "cifar100": 3 * 32 * 32,
              "imagenet": 3 * 224 * 224}
DEFAULT_DIM = 40


def _oracle_section(df: pd.DataFrame, spec: dict | None, tol: float, raced: dict[int, dict] | None) -> Section:
    """The Oracle's tables; where it raced (racing.json), what racing changed and how exact the sets are."""
    section = Section("Oracle max_lr and intervals (paper §5.3)")
    tables = [oracle_table(df, tol), values_table(df, tol, raced), racing_table(df, raced), seed_table(df, tol)]
    section.tables = [t for t in tables if t is not None]
    if not section.tables:
        section.notes.append("No Oracle rows: Oracle intervals left out.")
    elif raced is not None:
        section.notes.append(RACING_NOTE)
    return section


RACING_NOTE = (
    "The Oracle raced (oracle_search/racing.py): a max_lr shown more than 0.5 points worse than the leader got no "
    "more seeds, and from cycle 1 the values walked out from the previous b and stopped beyond a dropped one. b is "
    "the exhaustive Oracle's on the values trained. Once b was decided, every dropped value inside the \"not shown "
    "worse\" set's span or next to its edges was completed, so the three sets are exact on the values trained; "
    "their edges are resolved more coarsely than an exhaustive Oracle's (the paper interval's edges once, the "
    "others only to the values the walk and the completions reached: \"edge resolution\" below); next to a "
    "compared schedule's max_lr the paper interval was resolved to 5 % before the verdict. \"What racing changed\" "
    "lists each value left with fewer seeds and each value the walk never trained.")


def _end_to_end_section(r: Regret) -> Section:
    """The verdict's family in full (`tables/end_to_end.csv`): the answer's comparisons with their seeds needed, n
    and the chains left out."""
    section = Section(END_TO_END_TITLE)  # one heading: the table's
    if (table := end_to_end_table(r)) is not None:
        section.tables.append(table)
    else:
        section.notes.append("No final chains to compare SILO with on the evaluation seeds: no end-to-end comparison.")
    return section


DIAGNOSTIC_TITLE = "The §5.3 diagnostic: SILO's max_lr on the Oracle's chain"


def _diagnostic_section(df: pd.DataFrame, r: Regret) -> Section:
    """The §5.3 diagnostic: each SILO variant's max_lr against the leave-one-out Oracle and both controls on the
    Oracle's chain (`tables/verdict.csv`), the regret per cycle and its figure; in-sample, not part of the verdict."""
    section = Section(DIAGNOSTIC_TITLE)
    for table in (verdict_table(r), regret_table(df, r)):
        if table is not None:
            section.tables.append(table)
    if (plot := _regret_plot(df, r)) is not None:
        section.plots.append(plot)
    if not section.tables:
        section.notes.append("No Oracle rows: no regret.")
    else:
        section.notes.append(f"The comparisons on the Oracle's chain are the §5.3 diagnostic, {DIAGNOSTIC}: the "
                             "tuning seeds that chose δ, silo_fit's study and both controls score them here, at each "
                             "schedule's max_lr on the Oracle's own chain. The verdict (the answer, and the "
                             "end-to-end section) reads each method's own final chains on the evaluation seeds, "
                             "which made no choice.")
    return section


def _regret_plot(df: pd.DataFrame, r: Regret) -> Plot | None:
    regret = r.regret
    if regret.empty:
        return None
    labels = {m: label(m) for m in regret["schedule"].unique()} | SCHEDULE_LABELS
    params = silo_params(df, "silo_paper")
    figure = figures.regret_figure(regret, densities(df), labels, None if params is None else params["q"])
    return Plot("regret", f"Regret against cycle, the §5.3 diagnostic ({DIAGNOSTIC}): validation-accuracy points "
                "below a leave-one-out Oracle on the Oracle's chain, mean over the tuning seeds with 95 % CI bands, "
                "for each SILO variant and both controls; a gap where the max_lr lies outside the values every seed "
                "trained. Shaded: cycle 0 (not summed) and SILO (paper)'s cycles ≤ q, where it keeps ε.", figure)


def _max_lr_plot(df: pd.DataFrame, spec: dict | None, tol: float) -> Plot | None:
    pooled = oracle_intervals(df, tol)
    silo = {m: p for m in silo_methods(df) if (p := silo_params(df, m)) is not None}
    if pooled.empty and not silo:
        return None
    dataset = (spec or {}).get("dataset")
    d = INPUT_DIMS.get(dataset, DEFAULT_DIM)
    figure = figures.max_lr_figure(pooled, seed_intervals(df, tol), silo, pruning_rate(df, spec),
                                   int(df["cycle"].max()), {**THEORY, "d": d})
    unknown = "" if dataset in INPUT_DIMS else (f" The input dimension d of dataset {dataset!r} is not known here: "
                                                f"the theory curve assumes d = {DEFAULT_DIM}.")
    return Plot("max_lr", "max_lr against density: the Oracle (seed mean, the paper's interval as bars, the "
                "lenient \"not shown worse\" span as a band), each SILO variant, and the theory curve α ∝ C^(-1/2) "
                f"(Theorem 2, Remark 2) {figures.DENSE_SCALE}." + unknown, figure)


def _silo_fit_note(out_dir: Path) -> str | None:
    """silo_fit's search space and objective, as the pipeline recorded them."""
    path = out_dir / "silo_fit.json"
    if not path.exists():
        return None
    fit = json.loads(path.read_text())
    sp = fit["space"]
    return (f"SILO (fit): Optuna TPE over ε ∈ [{sp['epsilon'][0]:.4g}, {sp['epsilon'][1]:.4g}] (log), "
            f"δ ∈ [{sp['delta'][0]:.4g}, {sp['delta'][1]:.4g}], q ∈ {{{sp['q'][0]}..{sp['q'][1]}}}, "
            f"β ∈ [{sp['beta'][0]:g}, {sp['beta'][1]:g}]; objective: {fit['objective']} on tuning seed(s) "
            f"{fit['seeds']}; {fit['trials']} trials. SILO (paper): q = 1, β = 5, ε = the Oracle's dense best, "
            "δ by validation accuracy at the last cycle.")


def _silo_paper_note(out_dir: Path) -> str | None:
    """silo_paper's δ search as the driver recorded it (silo_paper.json), flagged when δ is not bracketed."""
    path = out_dir / "silo_paper.json"
    if not path.exists():
        return None
    sp = json.loads(path.read_text())
    if sp.get("delta") is None:
        return "SILO (paper): every δ tried diverged; it is left out."
    tried = ", ".join(f"{d:.4g}" for d in sp["delta_candidates"])
    line = f"SILO (paper): δ = {sp['delta']:.4g} (ε = {sp['epsilon']:.4g}), chosen among δ ∈ {{{tried}}}"
    if sp["delta_bracketed"]:
        return line + f"; bracketed: its trained neighbours lie within ×{sp['bracket_ratio']:g}."
    return line + f". **δ is not bracketed: {sp['delta_open']}**, so a better δ may lie beyond what was tried."


def _oracle_cost(df: pd.DataFrame, spec: dict | None, out_dir: Path | None) -> premises.OracleCost | None:
    """What the run's Oracle cost and the exhaustive Oracle it stands for (`premises.OracleCost`), planned on the
    spec's grid and the Oracle's recorded options (`refine`, `bracket`); None without an Oracle chain to plan along
    (or one whose rows cannot form a curve: the cost is then said against the Oracle as run alone)."""
    options = (recorded_oracle(out_dir) if out_dir is not None else None) or OracleOptions()
    try:
        return premises.OracleCost.of(df, (spec or {}).get("grid"), options.refine, options.bracket)
    except DuplicateRows:
        return None


def _summary_section(df: pd.DataFrame, spec: dict | None, tol: float, r: Regret, out_dir: Path) -> Section:
    """The answer in one screen: the verdict's family as a table (end to end on the evaluation seeds), which labels
    hold across it right under it, the max_lr figure; then what the table cannot say: the premises the run
    contradicts, the cost against both Oracles, δ's bracketing, silo_fit's search, the accuracy and the best method
    per density, and where the §5.3 diagnostic is."""
    section = Section("The answer")
    if (table := answer_table(r, df)) is not None:
        section.tables.append(table)
    else:
        section.notes.append("No final chains to compare SILO with on the evaluation seeds: no verdict.")
    if (plot := _max_lr_plot(df, spec, tol)) is not None:
        section.plots.append(plot)
    after = section.notes_after
    after += premises.sentences(premises.findings(df, (spec or {}).get("grid")))
    if (nothing := premises.nothing_to_find({"run": df}, r.margin_per_cycle)) is not None:
        after.append(nothing)
    if (table := cost_table(df, _oracle_cost(df, spec, out_dir))) is not None:
        after.append(table.verdict)
    after += [n for n in (_silo_paper_note(out_dir), _silo_fit_note(out_dir)) if n is not None]
    if (table := accuracy_table(df)) is not None:
        after.append(table.verdict)
    best = best_per_density(df)
    if best:
        after.append("Best mean test accuracy per density: " + best + ".")
    if not r.verdict.empty:
        after.append(f"Each SILO variant's max_lr against the Oracle and the controls on the Oracle's chain is in "
                     f"\"{DIAGNOSTIC_TITLE}\" below: {DIAGNOSTIC}.")
    return section


def _accuracy_section(df: pd.DataFrame) -> Section:
    section = Section("Test accuracy")
    table = accuracy_table(df)
    if table is None:
        section.notes.append("No final or selected rows: accuracy table left out.")
        return section
    section.tables += [table, paper_table.paper_table(paper_table.summary(paper_table.units({"run": df}, "seed")),
                                                      over="seeds")]
    if not set(df["method"]) - {"oracle", "silo_paper", "silo_fit"}:
        section.notes.append("No baseline rows: baselines left out.")
    section.plots.append(Plot("accuracy", "Early-stop test accuracy against density, mean ± 95 % half-width "
                              "over seeds.",
                              figures.accuracy_figure(df)))
    return section


def _cost_section(df: pd.DataFrame, spec: dict | None = None, out_dir: Path | None = None) -> Section:
    section = Section("Cost")
    table = cost_table(df, _oracle_cost(df, spec, out_dir))
    if table is None:
        section.notes.append("No trainings: cost table left out.")
    else:
        section.tables.append(table)
    if not (lanes := slot_lanes(df)).empty:
        section.plots.append(Plot(
            "slots", f"Trial slots over time: each bar is one training (a fused trial's candidates are one), from its "
            f"start to its finish, coloured by phase ({len(lanes)} trainings, reused rows left out). Lanes are a "
            f"packing of these intervals (each training takes the lowest lane free when it starts), not the actors "
            f"that ran them, so the {lanes['lane'].max() + 1} lane(s) are the peak concurrency.",
            figures.slots_figure(lanes)))
    return section


def _statistics_section(df: pd.DataFrame) -> Section:
    section = Section("Gradient and activation statistics (§3.1)")
    table = statistics_table(df)
    if table is None:
        section.notes.append("No final or selected rows: statistics left out.")
        return section
    section.tables.append(table)
    name, rows = statistics_source(df)
    figure = figures.histogram_figure(rows, densities(df))
    if figure is None:
        section.notes.append("No histograms in the results: histogram figure left out.")
    else:
        section.plots.append(Plot("histograms", f"Gradient and activation histograms per density ({name} rows), "
                                  "as in the paper's Fig. 1.", figure))
    return section


def _flatten(spec: dict, prefix: str = "") -> dict:
    """Nested fields as dotted keys (schedule.silo.epsilon), so the table stays two narrow columns."""
    flat = {}
    for key, value in spec.items():
        if isinstance(value, dict):
            flat |= _flatten(value, f"{prefix}{key}.")
        else:
            flat[f"{prefix}{key}"] = value
    return flat


GPU_ONLY = ("channels_last", "compile")


def _spec_cells(spec: dict) -> pd.DataFrame:
    """The settings that mattered to this run: GPU-only switches are dropped from CPU runs, and the schedule
    fields of schedules the run never used."""
    flat = _flatten(spec)
    if spec.get("device") == "cpu" or not spec.get("resources", {}).get("gpus_per_trial"):
        flat = {k: v for k, v in flat.items() if k not in GPU_ONLY}
    values = [v if isinstance(v, str) else json.dumps(v) for v in flat.values()]
    return pd.DataFrame({"key": list(flat), "value": values})


def markdown_page(title: str, spec: dict | None, sections: list[Section]) -> str:
    out = [f"# {title}\n"]
    for s in sections:
        out.append(f"## {s.title}\n")
        out += [f"_{n}_\n" for n in s.notes]
        tables = []
        for t in s.tables:
            tables += [f"### {t.title}\n"] * (t.title != s.title)
            tables += [f"{t.verdict}\n", render.markdown(t.cells, t.bold)] + [f"{t.note}\n"] * bool(t.note)
        plots = [f"![{p.caption}](figures/{p.name}.png)\n\n{p.caption} [SVG](figures/{p.name}.svg)\n"
                 for p in s.plots]
        out += plots + tables if s.plots_first else tables + plots
        out += [f"{n}\n" for n in s.notes_after]
        if s.reports:
            out.append("".join(f"- [{text}]({quote(folder)}/report.md)\n" for text, folder in s.reports))
    if spec:
        out += ["## Settings\n", render.markdown(_spec_cells(spec))]
    return "\n".join(out)


_CSS = """body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:0.5em 0 1em;display:block;overflow-x:auto;max-width:100%}th,td{border-bottom:1px solid #ccc;padding:3px 10px;text-align:right}
th:first-child,td:first-child{text-align:left}thead th{border-bottom:2px solid #444}
.verdict{color:#333}.note{font-style:italic;color:#666}img{max-width:100%}figcaption{color:#444}"""


def html_page(title: str, spec: dict | None, sections: list[Section]) -> str:
    e = html.escape
    out = [f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{e(title)}</title>",
           f"<style>{_CSS}</style></head><body>", f"<h1>{e(title)}</h1>"]
    for s in sections:
        out.append(f"<h2>{e(s.title)}</h2>")
        out += [f"<p class=\"note\">{e(n)}</p>" for n in s.notes]
        tables = []
        for t in s.tables:
            tables += [f"<h3>{e(t.title)}</h3>"] * (t.title != s.title)
            tables += [f"<p class=\"verdict\">{e(t.verdict)}</p>", render.html(t.cells, t.bold)]
            tables += [f"<p>{e(part)}</p>" for part in t.note.split("\n\n") if part]  # paragraphs
        plots = [f"<figure><img alt=\"{e(p.caption)}\" src=\"data:image/png;base64,"
                 f"{base64.b64encode(p.png).decode()}\"><figcaption>{e(p.caption)}</figcaption></figure>"
                 for p in s.plots]
        out += plots + tables if s.plots_first else tables + plots
        out += [f"<p>{e(n)}</p>" for n in s.notes_after]
        if s.reports:
            out.append("<ul>" + "".join(f"<li><a href=\"{e(quote(folder))}/report.html\">{e(text)}</a></li>"
                                        for text, folder in s.reports) + "</ul>")
    if spec:
        out += ["<details><summary><h2 style=\"display:inline\">Settings</h2></summary>", render.html(_spec_cells(spec)),
                "</details>"]
    out.append("</body></html>\n")
    return "\n".join(out)


def write_report(out_dir: Path, *, tolerance: float = TOLERANCE, rows: pd.DataFrame | None = None,
                 margin_per_cycle: float = MARGIN_PER_CYCLE, extra: list[Section] = ()) -> dict[str, Path]:
    """Write report.md, report.html, tables/*.csv|md|tex and figures/*.png|svg for `out_dir`; return them by name.
    `rows`: the table to report (default: `out_dir`'s results table); `extra`: sections after the summary."""
    out_dir = Path(out_dir)
    df, spec = (read_results(out_dir) if rows is None else rows), read_spec(out_dir)
    if df.empty:
        sections = [Section("Results", notes=["The results table is empty: nothing to report."])]
    else:
        df = results_frame(df.to_dict("records")) if set(REQUIRED) <= set(df.columns) else df
        r = analyse(df, margin_per_cycle)  # the regret once, for every table, figure and sentence
        sections = [_summary_section(df, spec, tolerance, r, out_dir), *extra, _end_to_end_section(r),
                    _oracle_section(df, spec, tolerance, read_racing(out_dir)), _diagnostic_section(df, r),
                    _accuracy_section(df), _cost_section(df, spec, out_dir), _statistics_section(df)]
    if not df.empty and (note := estimate_note(out_dir)) is not None:  # the cost expected, and the time taken
        next(s for s in sections if s.title == "Cost").notes.append(note)
    if not df.empty and (plots := [Plot(n, c, f) for n, c, f in study_figures(out_dir)]):
        sections.append(Section("The silo_fit study (Optuna)", plots=plots))
    title = "Oracle search report" + ("" if df.empty else f": {df['experiment'].iloc[0]}")
    written: dict[str, Path] = {}
    for s in sections:
        for t in s.tables:
            for ext, text in (("csv", t.data.to_csv(index=False)), ("md", render.markdown(t.cells, t.bold)),
                              ("tex", render.latex(t.cells, t.bold))):
                written[f"tables/{t.name}.{ext}"] = atomic_write_bytes(out_dir / "tables" / f"{t.name}.{ext}", text)
        for p in s.plots:
            written |= {f"figures/{f}": path for f, path in p.figure.write(out_dir / "figures", p.name).items()}
    shown = _with_options(spec, out_dir)
    written["report.md"] = atomic_write_bytes(out_dir / "report.md", markdown_page(title, shown, sections))
    written["report.html"] = atomic_write_bytes(out_dir / "report.html", html_page(title, shown, sections))
    return written


def _with_options(spec: dict | None, out_dir: Path) -> dict | None:
    """The settings shown: the spec, and the command options the run recorded (options.json), as `options.*`
    (e.g. options.oracle.mode, options.fit.trials, options.compare.eval_seeds)."""
    found = recorded(out_dir)
    return spec | {"options": found} if spec is not None and found else spec


def estimate_note(out: Path) -> str | None:
    """The report's line: the estimate made before the run next to the time it took, summed over the run's
    sessions (its first run and every resume, `oracle_search.sessions`), since the estimate is the whole job's.
    Compared only when every session was recorded and none runs."""
    path = Path(out) / ESTIMATE_FILE
    if not path.exists():
        return None
    r = json.loads(path.read_text())
    replicates = f", {r['replicates']} replicates side by side" if r.get("replicates", 1) > 1 else ""
    line = (f"Estimated before the run ({r['command']}{replicates}, {r['precision']}, {r['slots']} slot(s), "
            f"{r['seconds_per_epoch']:.4g} s per epoch, {r['source'].split(':')[0]}): "
            f"{duration(r['seconds'])} of training, at most {duration(r['seconds_at_most'])}")
    m = measured(out)
    if m is None:
        return line + "."
    killed = f"; {m.lost} session(s) left no end (killed): counted to their last finished training" if m.lost else ""
    if m.running:
        return line + f"; measured so far (still running, {m.sessions} session(s)): {duration(m.seconds)}{killed}."
    if m.ended != FINISHED:
        return line + (f"; measured: {duration(m.seconds)} over {m.sessions} session(s), the last of which stopped "
                       f"before the run finished: not compared with the whole job's estimate{killed}.")
    if not m.complete:
        return line + (f"; resumed {m.resumed} time(s), {m.unrecorded} of its sessions from before sessions were "
                       f"recorded (OUT/tune's experiments): measured over the last {m.sessions} only, "
                       f"{duration(m.seconds)}, not compared with the whole job's estimate{killed}.")
    ratio = f"{m.seconds / r['seconds']:.2f}x the estimate" if r.get("seconds") else "no estimate to compare"
    if m.sessions == 1:
        return line + f"; measured: {duration(m.seconds)} ({ratio}){killed}."
    resumed = f"; resumed {m.resumed} time(s)" if m.resumed else ""
    return line + f"{resumed}; measured over all {m.sessions} sessions: {duration(m.seconds)} ({ratio}){killed}."
