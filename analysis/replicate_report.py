"""The report over replicates of a whole study: `compare --replicates R` writes it in DIR, `report RUN ... --out
DIR` writes it for finished runs of one spec. The first screen is the verdict over replicates; under it, each
replicate's own labels side by side, why replicates that disagree beyond their own intervals did (the upstream
choice that differed), the choices themselves, and which replicate and phase held each slot over time."""
from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path

import pandas as pd

from analysis import figures, paper_table, premises, render
from analysis.files import read_spec
from analysis.intervals import oracle_intervals
from analysis.regret import Regret, analyse
from analysis.replicates import aggregate, comparisons
from analysis.over_replicates import Intervals, max_lr_plot, section_table
from analysis.report import (DEFAULT_DIM, INPUT_DIMS, THEORY, Plot, Section, estimate_note, html_page,
                             markdown_page, write_report)
from analysis.select import label, silo_params
from analysis.slots import slot_lanes
from analysis.tables import VERDICT_MARKS, Table
from analysis.verdict_sentences import ci_text, fmt_lr
from oracle_search.statistics import REPLICATE_BUDGET
from oracle_search.schema import read_results, results_frame
from trainables.atomic import atomic_write_bytes
from trainables.spec import ExperimentSpec, SpecError

VERSUS_NAMES = {"oracle": "vs the Oracle", "constant_dense": "vs not adapting (constant_dense)",
                "constant_best": "vs the best constant (optimistic)", "warmup": "vs LR warmup, end to end"}


# --- the edge: which runs may be replicates of one study ----------------------------------------------------------

def _spec_of(run: Path) -> ExperimentSpec:
    found = read_spec(run)
    if found is None:
        raise SpecError("RUN", f"{run} has no spec.json: cannot tell which experiment it ran")
    return ExperimentSpec.from_dict(found)


def _study(spec: ExperimentSpec) -> dict:
    """What makes two runs replicates of one study: the science of their specs but the base seed."""
    return dataclasses.replace(spec, seed=0).science()


def _seeds(run: Path) -> set[int]:
    return set(int(s) for s in read_results(run)["seed"].unique())


def check_replicates(runs: list[Path], out: Path | None) -> None:
    """SpecError (exit 2, one line, nothing written) unless the runs are of one spec but for the base seed and no
    seed is in two of them, and `out` (where given) is none of them."""
    resolved = [Path(r).resolve() for r in runs]
    if out is not None and Path(out).resolve() in resolved:
        raise SpecError("out", f"{out} is one of the runs: the report over them goes to a folder of its own")
    if len(set(resolved)) < len(resolved):
        raise SpecError("RUN", "a run is given twice")
    specs = [_spec_of(r) for r in runs]
    seeds = [_seeds(r) for r in runs]
    for i in range(len(runs)):
        for j in range(i + 1, len(runs)):
            if _study(specs[i]) != _study(specs[j]):
                differ = sorted(k for k, v in _study(specs[i]).items() if _study(specs[j]).get(k) != v)
                raise SpecError("RUN", f"{runs[i]} and {runs[j]} are different experiments (they differ in "
                                f"{', '.join(differ)}), not replicates of one")
            if shared := seeds[i] & seeds[j]:
                raise SpecError("RUN", f"{runs[i]} and {runs[j]} share seed(s) {', '.join(map(str, sorted(shared)))}"
                                "; replicates need seeds of their own (compare --replicates gives each replicate "
                                "base seed + 10000 (r - 1))")


# --- each replicate's choices -------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Replicate:
    """One replicate: its folder, its analysis and the choices made before its verdict."""

    name: str
    run: Path
    rows: pd.DataFrame
    regret: Regret
    seeds: str
    dense: float  # the Oracle's dense choice (constant_dense)
    b: dict[int, float]  # the Oracle's seed-mean best per cycle
    silo_paper: dict | None  # (ε, δ, q, β) of silo_paper
    silo_fit: dict | None

    @classmethod
    def read(cls, run: Path, name: str, margin_per_cycle: float) -> "Replicate":
        df = read_results(run)
        df = results_frame(df.to_dict("records"))
        r = analyse(df, margin_per_cycle)
        pooled = oracle_intervals(df)
        b = {int(c): float(x) for c, x in zip(pooled["cycle"], pooled["best_max_lr"])} if not pooled.empty else {}
        seeds = ", ".join(str(s) for s in sorted(int(s) for s in df["seed"].unique()))
        return cls(name, run, df, r, seeds, r.control_lr("constant_dense"),
                   b, silo_params(df, "silo_paper"), silo_params(df, "silo_fit"))


def _differs(a: float | None, b: float | None) -> bool:
    if a is None or b is None or (isinstance(a, float) and math.isnan(a)) or (isinstance(b, float) and math.isnan(b)):
        return False
    return not math.isclose(a, b, rel_tol=1e-6)


def upstream(a: Replicate, b: Replicate, schedule: str) -> list[str]:
    """The choices made before the verdict that differ between two replicates, in words."""
    out = []
    if _differs(a.dense, b.dense):
        out.append(f"the dense choice ({fmt_lr(a.dense)} vs {fmt_lr(b.dense)})")
    pa, pb = (a.silo_paper, b.silo_paper) if schedule == "silo_paper" else (a.silo_fit, b.silo_fit)
    if pa and pb:
        moved = [f"{k} {fmt_lr(pa[k])} vs {fmt_lr(pb[k])}" for k in ("epsilon", "delta", "q", "beta")
                 if _differs(float(pa[k]), float(pb[k]))]
        if moved:
            out.append(f"{label(schedule)}'s " + ", ".join(moved).replace("epsilon", "ε").replace("delta", "δ")
                       .replace("beta", "β"))
    cycles = [c for c in sorted(set(a.b) & set(b.b)) if c >= 1 and _differs(a.b[c], b.b[c])]
    if cycles:
        out.append(f"b at cycle{'s' * (len(cycles) > 1)} {', '.join(map(str, cycles))}")
    return out


def _disjoint(rows: pd.DataFrame) -> list[tuple[float, pd.Series, pd.Series]]:
    """Every pair of rows (replicates of one comparison) whose 95 % intervals are disjoint, as (gap, higher, lower),
    the gap being the distance between the two intervals; the largest gap first (ties: the larger difference of the
    advantages, then the order of the replicates)."""
    found = []
    records = [r for _, r in rows.iterrows()]
    for i, a in enumerate(records):
        for b in records[i + 1:]:
            high, low = (a, b) if a["advantage"] >= b["advantage"] else (b, a)
            if low["ci_hi"] < high["ci_lo"]:
                found.append((float(high["ci_lo"] - low["ci_hi"]), high, low))
    return sorted(found, key=lambda f: (-f[0], -(f[1]["advantage"] - f[2]["advantage"])))


def disagreements(reps: list[Replicate], per: pd.DataFrame) -> list[str]:
    """One sentence per comparison whose replicates disagree beyond their own intervals (two replicates whose 95 %
    intervals are disjoint): every pair is looked at, the pair with the largest gap between its intervals is named
    with the upstream choices that differed between its two replicates, and the other disjoint pairs are
    counted."""
    by_name = {r.name: r for r in reps}
    lines = []
    for (schedule, versus), rows in per.groupby(["schedule", "versus"], sort=False):
        rows = rows.dropna(subset=["ci_lo", "ci_hi"])
        pairs = _disjoint(rows)
        if not pairs:
            continue
        _, high, low = pairs[0]
        a, b = by_name[high["replicate"]], by_name[low["replicate"]]
        differed = upstream(a, b, schedule)
        why = ("; the upstream choices that differed: " + "; ".join(differed) if differed else
               "; no upstream choice differed: the finals' noise is larger than their intervals say")
        others = len(pairs) - 1
        more = (f" ({others} other pair{'s' * (others > 1)} of replicates disjoint too)" if others else "")
        lines.append(f"{label(schedule)} {VERSUS_NAMES[versus]}: {a.name} and {b.name} disagree beyond their own "
                     f"intervals ({high['advantage']:+.2f} {ci_text(high['ci_lo'], high['ci_hi'])} vs "
                     f"{low['advantage']:+.2f} {ci_text(low['ci_lo'], low['ci_hi'])}){more}{why}.")
    return lines


# --- tables ---------------------------------------------------------------------------------------------------

def _cell(verdict: str, advantage: float, lo: float, hi: float) -> str:
    """The label, the advantage and its interval; an equivalence whose interval also excludes 0 says so (both
    hold, and the label shows only one)."""
    if verdict == "undefined":
        return VERDICT_MARKS["undefined"] + ("" if pd.isna(advantage) else f" {advantage:+.2f}")
    also = (", also above 0" if lo > 0 else ", also below 0" if hi < 0 else "") if verdict == "equivalent" else ""
    return f"{VERDICT_MARKS[verdict]} {advantage:+.2f} {ci_text(lo, hi)}{also}"


def _count(replicates: int, n: int) -> str:
    """A row's own count and degrees of freedom where a replicate could not define it."""
    if replicates >= n:
        return ""
    return f" ({replicates} of {n} replicates, " + (f"{replicates - 1} df)" if replicates >= 2 else "no interval)")


def answer_table(verdict: pd.DataFrame, n: int) -> Table:
    """The first screen: rows the SILO variants, columns what they are compared with; each cell the label over
    replicates, the mean advantage and its 95 % interval over replicates, and whether Holm keeps the label."""
    rows = []
    for schedule, group in verdict.groupby("schedule", sort=False):
        row = {"SILO": label(schedule)}
        for _, c in group.iterrows():
            cell = _cell(c["verdict"], c["advantage"], c["ci_lo"], c["ci_hi"]) + _count(int(c["replicates"]), n)
            if not pd.isna(c["holm"]) and c["holm"] == "no":
                cell += " (not under Holm)"
            row[VERSUS_NAMES.get(c["versus"], c["versus"])] = cell
        rows.append(row)
    margins = ", ".join(sorted({f"±{m:g}" for m in verdict["margin"].dropna()}))
    line = (f"Over n = {n} replicates of the whole study (each its own Oracle chain, δ, silo_fit study, baseline "
            "tuning and finals, on seeds of its own): the mean of the replicates' advantages in points (validation "
            "accuracy on each replicate's Oracle chain summed over cycles 1–L; LR warmup: test accuracy of the "
            f"final chains) and its 95 % t interval on n − 1 = {n - 1} df"
            + ("" if (verdict["replicates"] >= n).all() else
               " (a comparison some replicate left undefined is over the others: its count and df are in its cell)")
            + f". = equivalent: the interval lies inside the margin ({margins}: 0.5 points per compared cycle; the "
            "95 % interval, stricter than the usual equivalence test at 0.05, which uses the 90 % one); "
            "▲ better / ▼ worse: it excludes 0; "
            "? inconclusive: neither. \"not under Holm\": the label does not survive Holm's correction across the "
            f"table's {len(verdict)} comparisons.")
    if n < 2:
        line = (f"One replicate: no interval over replicates, so every label over replicates is undefined; its own "
                "labels, conditional on its choices, are below.")
    return Table("replicate_answer", "The answer over replicates", pd.DataFrame(rows), verdict, line)


def replicates_table(per: pd.DataFrame, names: list[str]) -> Table:
    """Each replicate's own labels (over its seeds, conditional on its choices), side by side."""
    rows = []
    for (schedule, versus), group in per.groupby(["schedule", "versus"], sort=False):
        row = {"comparison": f"{label(schedule)} {VERSUS_NAMES.get(versus, versus)}"}
        cells = group.set_index("replicate")
        for name in names:
            c = cells.loc[name] if name in cells.index else None
            row[name] = "–" if c is None else _cell(c["verdict"], c["advantage"], c["ci_lo"], c["ci_hi"])
        rows.append(row)
    return Table("replicates", "Each replicate's labels (over its own seeds)", pd.DataFrame(rows), per,
                 "Each replicate's interval is over its own tuning (or evaluation) seeds and holds its choices fixed: "
                 "where two replicates' intervals are disjoint, that suggests the choices, not the seeds, decided the "
                 "label.")


def choices_table(reps: list[Replicate]) -> Table:
    """The choices each replicate made before its verdict."""
    cycles = sorted(set().union(*(r.b for r in reps)))

    def params(p: dict | None) -> str:
        return "–" if p is None else (f"ε {fmt_lr(p['epsilon'])}, δ {fmt_lr(p['delta'])}, q {p['q']}, "
                                      f"β {fmt_lr(p['beta'])}")

    records = [{"replicate": r.name, "seeds": r.seeds, "dense choice": fmt_lr(r.dense),
                "SILO (paper)": params(r.silo_paper), "SILO (fit)": params(r.silo_fit),
                **{f"b c{c}": fmt_lr(r.b.get(c, math.nan)) for c in cycles}} for r in reps]
    cells = pd.DataFrame(records)
    return Table("replicate_choices", "Each replicate's choices", cells, cells,
                 "The choices made before the verdict, which one run's interval holds fixed: the Oracle's dense "
                 "choice (kept by not adapting), SILO's parameters (silo_paper's δ; silo_fit's study) and the "
                 "Oracle's b at every cycle.")


SCIENCE = ("What a replicate is: one whole study (the Oracle's chain, silo_paper's δ search, silo_fit's study, the "
           "baselines' tuning and every method's finals) on tuning and evaluation seeds no other replicate uses. "
           "What the interval over replicates covers: the noise of every choice made from noisy data (the dense "
           "choice, δ, b, silo_fit's study) and of the final trainings, on this spec, this machine's arithmetic "
           "and this grid. What it does not cover: other models, data, grids or pruning rates, and the grid's own "
           "resolution (b can only be a value that was tried). The margin is 0.5 points per compared cycle, the "
           "paper's interval tolerance (§5.3: a max_lr within 0.5 points of the best is as good), summed over the "
           "cycles like the advantage; `equivalent` means the whole interval lies within it.")


def multiplicity(verdict: pd.DataFrame) -> str:
    """The one sentence on Holm: each row's hypothesis was chosen by its own label, which Holm's theorem does not
    cover, and what Bonferroni, which does (`analysis.replicates`), keeps."""
    held = verdict[verdict["holm"].notna()]
    m = int(verdict["p_value"].notna().sum())
    if held.empty:
        return ""
    differ = held[held["holm"] != held["bonferroni"]]
    where = ("keeps the same labels" if differ.empty else "differs on " + "; ".join(
        f"{label(r['schedule'])} {VERSUS_NAMES.get(r['versus'], r['versus'])} (Holm {r['holm']}, Bonferroni "
        f"{r['bonferroni']})" for _, r in differ.iterrows()))
    return (f"Holm's correction is across the table's {m} comparisons with a p-value, and each row's hypothesis (a "
            "difference for better or worse, equivalence for equivalent) was chosen by its own label, which Holm's "
            "theorem, made for hypotheses fixed in advance, does not cover; Bonferroni at 0.05/"
            f"{m} per row, which holds however each row's hypothesis was chosen, {where}.")


def _comparison(r: pd.Series) -> str:
    return f"{label(r['schedule'])} {VERSUS_NAMES.get(r['versus'], r['versus'])}"


def _plan_text(hypothesis: str, n: object, power: float) -> str:
    what = "equivalence" if hypothesis == "equivalence" else "a difference"
    if pd.isna(n):
        return f"{what}: not decidable at this budget (power {power:.2f} with {REPLICATE_BUDGET})"
    return f"{what} {int(n)} (power {power:.2f})"


def needed_line(verdict: pd.DataFrame) -> str:
    """What the comparisons labelled equivalent or inconclusive would need (`statistics.plans`, as
    `analysis.replicates` put them in the verdict frame): for an equivalent one, the replicates to show
    equivalence again if the true difference were 0; for an inconclusive one, the plan of the hypothesis its data
    point to, at its observed mean; each with its power at the observed mean."""
    if verdict["replicates"].max() < 2:
        return "Replicates needed: not computable from one replicate (the spread between whole studies is unknown)."
    equivalent = verdict[verdict["verdict"] == "equivalent"]
    open_rows = verdict[verdict["verdict"] == "inconclusive"]
    again = [f"{_comparison(r)}: " + (f"{int(r['plan_equivalence'])}" if not pd.isna(r["plan_equivalence"]) else
                                      f"not decidable at this budget") + f" (power {r['power_equivalence']:.2f})"
             for _, r in equivalent.iterrows() if not pd.isna(r["power_equivalence"])]
    planned = []
    for _, r in open_rows.iterrows():
        hypotheses = [h for h in ("equivalence", "difference") if not pd.isna(r[f"power_{h}"])]
        if not hypotheses:
            continue
        where = "outside" if abs(r["advantage"]) >= r["margin"] else "inside"
        planned.append(f"{_comparison(r)}, {r['advantage']:+.2f} {where} the margin: " + " or ".join(
            _plan_text(h, r[f"plan_{h}"], r[f"power_{h}"]) for h in hypotheses))
    unplanned = len(equivalent) + len(open_rows) - len(again) - len(planned)
    line = ("Replicates needed, each the smallest number whose 95 % interval would show the hypothesis with 80 % "
            "power, planned on an 80 % upper bound of the sd over replicates (power: the chance it does if the true "
            "difference were the observed mean, at that sd; a plan needing more than "
            f"{REPLICATE_BUDGET} replicates is not decidable at this budget). ")
    if again:
        line += ("To show equivalence again if the true difference were 0 — " + "; ".join(again) + ". ")
    if planned:
        line += ("Inconclusive, planned for the hypothesis the data point to, each plan assuming the true "
                 "difference is the observed mean: a difference where the mean lies outside the margin (there an "
                 "equivalence plan cannot succeed); inside it, equivalence and a difference — "
                 + "; ".join(planned) + ". ")
    if not again and not planned:
        line += "No comparison is equivalent or inconclusive. "
    if unplanned:
        line += f"{unplanned} comparison(s): no spread to plan on. "
    return line + "For a comparison labelled better or worse, tables/verdict.csv's replicates_needed is how many " \
                  "would reproduce the label if the true effect were the observed one: optimistic, not a plan."


# --- the paper's figure and tables over the replicates; the links --------------------------------------------

def _paper_sections(reps: list[Replicate], spec: dict | None, links: Section) -> list[Section]:
    """The paper's max_lr figure and §5.3 table over the replicates, the accuracy over them, the `links` to each
    replicate's report, and where the runs contradict the paper's premises (that section only where one does)."""
    sets = [Intervals.read(r.name, r.rows, spec) for r in reps]
    dataset = (spec or {}).get("dataset")
    theory = {**THEORY, "d": INPUT_DIMS.get(dataset, DEFAULT_DIM)}
    table = section_table(sets)
    max_lr = Section(table.title if table is not None else "max_lr per cycle over the replicates", plots_first=True)
    if (png := max_lr_plot(sets, theory)) is not None:
        max_lr.plots.append(Plot("max_lr", "max_lr against density over the replicates, one colour each: the "
                                 "Oracle's b (seed mean) with the paper's interval as bars (each replicate's bars "
                                 "drawn a little apart around its density), SILO (paper) dashed, SILO (fit) dotted, "
                                 "and the theory curve α ∝ C^(-1/2) (Theorem 2, Remark 2) scaled to the replicates' "
                                 "geometric-mean dense b" + ("" if dataset in INPUT_DIMS else
                                                            f"; d = {DEFAULT_DIM} assumed for {dataset!r}") + ".",
                                 png))
    if table is not None:
        max_lr.tables.append(table)
    sections = [max_lr]
    accuracy = _accuracy(reps)
    if not accuracy.empty:
        table = paper_table.interval_table(accuracy)
        sections.append(Section(table.title, tables=[table]))
    sections.append(links)
    if contradicted := premises.over_replicates({r.name: premises.findings(r.rows) for r in reps}):
        sections.append(Section("Where the runs contradict the paper's premises", notes_after=contradicted))
    return sections


def _accuracy(reps: list[Replicate]) -> pd.DataFrame:
    """Test accuracy per method and cycle over the replicates (`paper_table.summary`)."""
    return paper_table.summary(paper_table.units({r.name: r.rows for r in reps}, "replicate"))


def _paper_format(reps: list[Replicate]) -> Table | None:
    """tables/paper.md and .tex: the accuracy in the paper's format, mean ± std over the replicates."""
    accuracy = _accuracy(reps)
    return None if accuracy.empty else paper_table.paper_table(accuracy)


def _links_section(reps: list[Replicate], out: Path, own_reports: bool) -> Section:
    """Links to each replicate's own report (report.md from report.md, report.html from report.html), relative to
    `out`; a run without its own report yet is named, with the command that writes it."""
    section = Section("Each replicate's own report")
    for r in reps:
        folder = r.name if own_reports else os.path.relpath(Path(r.run).resolve(), Path(out).resolve())
        if own_reports or all((Path(r.run) / f"report.{ext}").exists() for ext in ("md", "html")):
            section.reports.append((f"{r.name}: {folder}", folder))
        else:
            section.notes.append(f"{r.name}: {folder} has no report yet (oracle-search report {folder} writes it).")
    return section


# --- the report -----------------------------------------------------------------------------------------------

def write_replicates_report(out: Path, runs: list[Path], margin_per_cycle: float, *,
                            own_reports: bool = False, of: int | None = None,
                            failed: dict[str, str] | None = None) -> dict[str, Path]:
    """DIR/report.md, report.html, tables/verdict.csv, tables/replicates.csv (and .md/.tex) and figures over the
    runs as replicates; with `own_reports`, each run's own report too (compare --replicates's folders). `of`: how
    many replicates the study planned, and `failed`: those that failed (folder name -> the line that ended it),
    said first: the answer is then over the finished ones only."""
    out = Path(out)
    names = [Path(r).name if Path(r).name.startswith("replicate-") else f"replicate-{i}"
             for i, r in enumerate(runs, 1)]
    names = names if len(set(names)) == len(names) else [f"replicate-{i}" for i in range(1, len(runs) + 1)]
    reps = [Replicate.read(Path(run), name, margin_per_cycle) for run, name in zip(runs, names)]
    per_replicate = {i: comparisons(r.regret) for i, r in enumerate(reps)}
    verdict, per = aggregate(per_replicate, margin_per_cycle)
    per["replicate"] = per["replicate"].map(dict(enumerate(names)))
    n = len(reps)
    spec = read_spec(Path(runs[0]))
    # The first screen: the verdict, then the paper's max_lr figure and §5.3 table over the replicates, then the
    # accuracy, the links to each replicate's report, and where the runs contradict the paper's premises.
    first = Section(f"The answer over {n} replicate{'s' * (n != 1)}")
    if failed:
        first.notes.append(f"{n} of {of or n + len(failed)} replicates; "
                           + "; ".join(f"{name} failed: {line}" for name, line in failed.items())
                           + ". Rerun the same command to resume it; this report is then written again over all.")
    first.tables.append(dataclasses.replace(answer_table(verdict, n), title=first.title))  # one heading, not two
    sections = [first, *_paper_sections(reps, spec, _links_section(reps, out, own_reports))]
    labels_table = replicates_table(per, names)
    labels = Section(labels_table.title, tables=[labels_table])
    labels.notes_after += disagreements(reps, per)
    labels.notes_after += [needed_line(verdict), " ".join(filter(None, [SCIENCE, multiplicity(verdict)]))]
    choices = Section("The choices each replicate made", tables=[choices_table(reps)])
    cost = Section("Cost")
    rows = pd.concat([r.rows.assign(replicate=r.name) for r in reps], ignore_index=True)
    lanes = slot_lanes(rows, "replicate")
    if not lanes.empty:
        cost.plots.append(Plot("slots", f"Slots over time: each bar one training, placed on the lowest lane free at "
                               f"its start (a packing, so the lanes are the peak concurrency, not named actors); "
                               f"coloured by its phase{', and below by its replicate' * (n > 1)}. "
                               f"{len(lanes)} trainings.", figures.slots_figure(lanes)))
    if (note := estimate_note(out)) is not None:
        cost.notes.append(note)
    sections += [labels, choices, cost]
    written: dict[str, Path] = {}
    if own_reports:
        for r in reps:
            write_report(r.run, margin_per_cycle=margin_per_cycle)
    for name, frame in (("verdict", verdict), ("replicates", per)):
        written[f"tables/{name}.csv"] = atomic_write_bytes(out / "tables" / f"{name}.csv", frame.to_csv(index=False))
    if (paper := _paper_format(reps)) is not None:
        for ext, text in (("md", render.markdown(paper.cells, paper.bold)), ("tex", render.latex(paper.cells, paper.bold))):
            written[f"tables/paper.{ext}"] = atomic_write_bytes(out / "tables" / f"paper.{ext}", text)
    for s in sections:
        for t in s.tables:
            for ext, text in (("md", render.markdown(t.cells, t.bold)), ("tex", render.latex(t.cells, t.bold))):
                written[f"tables/{t.name}.{ext}"] = atomic_write_bytes(out / "tables" / f"{t.name}.{ext}", text)
        for p in s.plots:
            written[f"figures/{p.name}.png"] = atomic_write_bytes(out / "figures" / f"{p.name}.png", p.png)
    title = f"Oracle search report over {n} replicate{'s' * (n != 1)}: {reps[0].rows['experiment'].iloc[0]}"
    written["report.md"] = atomic_write_bytes(out / "report.md", markdown_page(title, spec, sections))
    written["report.html"] = atomic_write_bytes(out / "report.html", html_page(title, spec, sections))
    return written
