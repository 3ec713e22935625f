"""The report over replicates of a whole study: `compare --replicates R` writes it in DIR, `report RUN ... --out
DIR` writes it for finished runs of one spec. The first screen is the verdict over replicates (the family: each
SILO variant end to end on the evaluation seeds against the held-out Oracle's schedule and controls, every
benchmark and the best benchmark), the line saying which labels hold across the family, the §5.3 table with the
controls beside SILO, the accuracy and the cost per method; under it, each replicate's own labels side by side, why
replicates that disagree beyond their own intervals did (the upstream choice that differed), the choices
themselves, the §5.3 diagnostic on each replicate's Oracle chain (in-sample, not part of the verdict), and which
replicate and phase held each slot over time."""
from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path

import numpy as np
import pandas as pd

from analysis import figures, paper_table, premises, render
from analysis.files import read_spec
from analysis.intervals import oracle_intervals
from analysis.regret import Regret, analyse
from analysis.replicates import HELD, aggregate, comparisons
from analysis.over_replicates import Intervals, max_lr_plot, section_table
from analysis.report import (DEFAULT_DIM, INPUT_DIMS, THEORY, Plot, Section, estimate_note, html_page,
                             markdown_page, write_report)
from analysis.select import label, silo_params
from analysis.slots import slot_lanes
from analysis.tables import Table
from analysis.variance import variance_sentence
from analysis.verdict_sentences import DIAGNOSTIC, VERSUS, ci_text, family_line, fmt_lr
# The words of a cell, moved to verdict_sentences so that one run's answer (analysis.tables) says them alike.
from analysis.verdict_sentences import cell as _cell, words as _words  # noqa: F401
from oracle_search.options import OracleOptions, recorded_oracle
from oracle_search.sequential import LOOKS, sequential_section
from oracle_search.statistics import POWER, REPLICATE_BUDGET, power, sd_upper
from oracle_search.schema import BASELINES, HELD_OUT, Method, Stage, read_results, results_frame
from trainables.atomic import atomic_write_bytes
from trainables.spec import ExperimentSpec, SpecError

# The family of the verdict over replicates: each SILO variant end to end on the evaluation seeds against these
# (`verdict_sentences.VERSUS`: the held-out Oracle's schedule and controls, each benchmark, the best benchmark).
VERSUS_NAMES = {k: f"vs {v}" for k, v in VERSUS.items()}
# The §5.3 diagnostic on the Oracle's chain (each replicate's tables/verdict.csv), never in the family.
DIAGNOSTIC_NAMES = {"oracle": "vs the Oracle (leave-one-out)",
                    "constant_dense": "vs not adapting, on the Oracle's chain",
                    "constant_best": "vs the best constant, on the Oracle's chain (optimistic)"}


# --- the edge: which runs may be replicates of one study ----------------------------------------------------------

def _spec_of(run: Path) -> ExperimentSpec:
    found = read_spec(run)
    if found is None:
        raise SpecError("RUN", f"{run} has no spec.json: cannot tell which experiment it ran")
    return ExperimentSpec.from_dict(found)


def _study(spec: ExperimentSpec) -> dict:
    """What makes two runs replicates of one study: the science of their specs but what a replicate varies (the base
    seed, the split seed and the data generation seed, `oracle_search.seeds.replicate_spec`)."""
    return dataclasses.replace(spec, seed=0, split_seed=0, data_seed=42).science()


def _seeds(run: Path) -> set[int]:
    return set(int(s) for s in read_results(run)["seed"].unique())


def check_replicates(runs: list[Path], out: Path | None) -> None:
    """SpecError (exit 2, one line, nothing written) unless the runs are of one spec but for their seeds (`_study`) and no
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
        lines.append(f"{label(schedule)} {_versus(versus)}: {a.name} and {b.name} disagree beyond their own "
                     f"intervals ({high['advantage']:+.2f} {ci_text(high['ci_lo'], high['ci_hi'])} vs "
                     f"{low['advantage']:+.2f} {ci_text(low['ci_lo'], low['ci_hi'])}){more}{why}.")
    return lines


# --- tables ---------------------------------------------------------------------------------------------------

def _versus(key: str) -> str:
    """A comparison's column or row name: the family's (`VERSUS_NAMES`), the diagnostic's, or the method's label."""
    return VERSUS_NAMES.get(key) or DIAGNOSTIC_NAMES.get(key) or f"vs {label(key)}"


def _count(replicates: int, n: int) -> str:
    """A row's own count and degrees of freedom where a replicate could not define it."""
    if replicates >= n:
        return ""
    return f" ({replicates} of {n} replicates, " + (f"{replicates - 1} df)" if replicates >= 2 else "no interval)")


def answer_table(verdict: pd.DataFrame, n: int) -> Table:
    """The first screen: one row per comparison of the family (what SILO is compared with), one column per SILO
    variant; each cell the label over replicates in words (`_words`: "(uncorrected)" where Holm does not keep it,
    "by more than the margin" where the interval lies wholly beyond it), the mean advantage and its 95 % interval
    over replicates."""
    rows: dict[str, dict] = {}
    for _, c in verdict.iterrows():
        row = rows.setdefault(c["versus"], {"compared with": _versus(c["versus"])[3:]})
        row[label(c["schedule"])] = (_cell(c["verdict"], c["advantage"], c["ci_lo"], c["ci_hi"], c["margin"],
                                           c["holm"]) + _count(int(c["replicates"]), n))
    cells = pd.DataFrame(list(rows.values())).fillna("–") if rows else pd.DataFrame()
    margins = ", ".join(sorted({f"±{m:g}" for m in verdict["margin"].dropna()}))
    line = (f"Over n = {n} replicates of the whole study (each its own Oracle chain, δ, silo_fit study, baseline "
            "tuning, held-out references and finals, on seeds of its own): SILO minus the method of the row, the "
            "held-out test accuracy of both methods' final chains on the replicate's evaluation seeds, summed over "
            "cycles 1–L and paired per seed; the mean of the replicates' advantages in points and its 95 % t "
            f"interval on n − 1 = {n - 1} df"
            + ("" if (verdict["replicates"] >= n).all() else
               " (a comparison some replicate left undefined is over the others: its count and df are in its cell)")
            + f". = equivalent: the interval lies inside the margin ({margins}: 0.5 points per compared cycle; the "
            "95 % interval, stricter than the usual equivalence test at 0.05, which uses the 90 % one); "
            "▲ better / ▼ worse: it excludes 0, \"by more than the margin\" where it lies wholly beyond it, \"not "
            "shown beyond the margin\" where it only excludes 0; ? inconclusive: neither. \"(uncorrected)\": the "
            f"label does not survive Holm's correction across the family's {len(verdict)} comparisons; a label "
            "without it does.")
    if n < 2:
        line = (f"One replicate: no interval over replicates, so every label over replicates is undefined; its own "
                "labels, conditional on its choices, are below.")
    return Table("replicate_answer", "The answer over replicates", cells, verdict, line)


def replicates_table(per: pd.DataFrame, names: list[str], margin: float | None = None) -> Table:
    """Each replicate's own labels (over its seeds, conditional on its choices), side by side; `margin` (the
    comparisons' summed margin) tells an interval beyond it from one that only excludes 0."""
    rows = []
    for (schedule, versus), group in per.groupby(["schedule", "versus"], sort=False):
        row = {"comparison": f"{label(schedule)} {_versus(versus)}"}
        cells = group.set_index("replicate")
        for name in names:
            c = cells.loc[name] if name in cells.index else None
            row[name] = "–" if c is None else _cell(c["verdict"], c["advantage"], c["ci_lo"], c["ci_hi"], margin)
        rows.append(row)
    return Table("replicates", "Each replicate's labels (over its own seeds)", pd.DataFrame(rows), per,
                 "Each replicate's interval is over its own tuning (or evaluation) seeds and holds its choices fixed: "
                 "where two replicates' intervals are disjoint, that suggests the choices, not the seeds, decided the "
                 "label.")


def diagnostic_table(reps: list[Replicate]) -> Table | None:
    """The §5.3 diagnostic, per replicate: each SILO variant's max_lr on the replicate's own Oracle chain against the
    leave-one-out Oracle and both controls (its tables/verdict.csv), over its tuning seeds; not part of the verdict."""
    frames = [r.regret.verdict.assign(replicate=r.name) for r in reps
              if r.regret is not None and not r.regret.verdict.empty]
    if not frames:
        return None
    data = pd.concat(frames, ignore_index=True)
    rows = []
    for (schedule, versus), group in data.groupby(["schedule", "versus"], sort=False):
        row = {"comparison": f"{label(schedule)} {DIAGNOSTIC_NAMES.get(versus, _versus(versus))}"}
        cells = group.set_index("replicate")
        for r in reps:
            c = cells.loc[r.name] if r.name in cells.index else None
            row[r.name] = ("–" if c is None else
                           _cell(c["verdict"], c["advantage"], c["ci_lo"], c["ci_hi"], c["margin"]))
        rows.append(row)
    return Table("diagnostic", "The §5.3 diagnostic: SILO's max_lr on each replicate's Oracle chain",
                 pd.DataFrame(rows), data,
                 f"The §5.3 diagnostic, {DIAGNOSTIC}. Per replicate, validation accuracy on its own Oracle chain at "
                 "each schedule's max_lr (linear in ln max_lr between values every tuning seed trained), SILO minus "
                 "the other, summed over cycles 1–L, with its 95 % interval over the replicate's tuning seeds: "
                 "against a leave-one-out Oracle, not adapting (the dense choice kept) and the best constant (chosen "
                 "on the same chain, so optimistic). The seeds that chose δ, silo_fit's study and both controls score "
                 "them here; the verdict above reads every method's own final chains on evaluation seeds that chose "
                 "nothing.")


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
    cover, so Bonferroni, which does (`analysis.replicates`), is computed beside it; how many of the labels each
    keeps, and where they differ."""
    m = int(verdict["p_value"].notna().sum())
    if m == 0:
        return ""
    labelled = verdict[verdict["verdict"].isin(HELD)]
    head = (f"Holm's correction is across the family's {m} comparisons with a p-value, and each row's hypothesis (a "
            "difference for better or worse, equivalence for equivalent) was chosen by its own label, which Holm's "
            "theorem, made for hypotheses fixed in advance, does not cover; so Bonferroni at 0.05/"
            f"{m} per row, which holds however each row's hypothesis was chosen, is computed beside it. ")
    if labelled.empty:
        return head + ("No comparison is labelled better, worse or equivalent, so neither correction has a label to "
                       "keep.")
    holm, bonferroni = (int((labelled[c] == "yes").sum()) for c in ("holm", "bonferroni"))
    differ = labelled[labelled["holm"] != labelled["bonferroni"]]

    def kept(k: int) -> str:
        return "none" if k == 0 else "all" if k == len(labelled) else str(k)

    where = ("; they differ on " + "; ".join(
        f"{_comparison(r)} (Holm {r['holm']}, Bonferroni {r['bonferroni']})" for _, r in differ.iterrows())
             if not differ.empty else ", the same ones" if holm else "")
    return (head + f"Of the {len(labelled)} label{'s' * (len(labelled) != 1)} (better, worse or equivalent), Holm "
            f"keeps {kept(holm)} and Bonferroni keeps {kept(bonferroni)}{where}.")


def _comparison(r: pd.Series) -> str:
    return f"{label(r['schedule'])} {_versus(r['versus'])}"


def _planned(n: int | None) -> str:
    return f"> {REPLICATE_BUDGET}" if n is None else str(n)


def _span(low: int | None, high: int | None) -> str:
    """A plan's range: one number where both ends agree."""
    return _planned(low) if low == high else f"{_planned(low)}–{_planned(high)}"


def plan_range(hypothesis: str, mean: float, sd: float, n: int, margin: float) -> dict:
    """A fixed-R plan as a range (issue 61): the replicates whose one 95 % interval would show `hypothesis` with
    80 % power (`statistics.plan_at`'s exact power, `_smallest`) if the true difference were the observed mean, and if it were one
    standard error (sd/√n) to the unfavourable side (further from 0 for equivalence, nearer to it for a difference,
    0 at most), each on the sd's 80 % upper bound (`sd_upper`, the bound the plans use) and on its 95 % bound. None:
    more than `REPLICATE_BUDGET`."""
    se = sd / math.sqrt(n)
    sign = 1.0 if mean >= 0 else -1.0
    worse = sign * (abs(mean) + se) if hypothesis == "equivalence" else sign * max(abs(mean) - se, 0.0)
    bounds = {"80": sd_upper(sd, n), "95": sd_upper(sd, n, 0.95)}
    out = {"se": se, "unfavourable": worse, "sd_80": bounds["80"], "sd_95": bounds["95"]}
    for level, bound in bounds.items():
        for where, at in (("observed", mean), ("unfavourable", worse)):
            out[f"{where}_{level}"] = _smallest(hypothesis, at, bound, margin)
    return out


def _smallest(hypothesis: str, at: float, sd: float, margin: float) -> int | None:
    """`statistics.plan_at`'s number (the smallest n in 2..budget with power ≥ 80 %) by bisection: the power
    rises with n, so a handful of power integrals instead of one per n (the tests check it against plan_at)."""
    if power(hypothesis, REPLICATE_BUDGET, at, sd, margin) < POWER:
        return None
    low, high = 1, REPLICATE_BUDGET  # power(low) < POWER (n = 1: none), power(high) ≥ POWER
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if power(hypothesis, mid, at, sd, margin) >= POWER else (mid, high)
    return high


def _range_text(hypothesis: str, found: dict) -> str:
    what = "equivalence" if hypothesis == "equivalence" else "a difference"
    return (f"{what} {_span(found['observed_80'], found['unfavourable_80'])} (sd bound {found['sd_80']:.2f}; "
            f"on the 95 % bound {found['sd_95']:.2f}: {_span(found['observed_95'], found['unfavourable_95'])})")


def needed_line(verdict: pd.DataFrame, auto: bool = False) -> str:
    """What the comparisons labelled equivalent or inconclusive would need, planned for a fixed R, as ranges
    (`plan_range`): for an equivalent one, to show equivalence again; for an inconclusive one, the hypothesis its
    data point to (`statistics.plans`' choice: a difference where the mean lies outside the margin, else both);
    and whether the replicates already run count toward the plan, under which rule (`auto`: the run went in waves
    under the sequential rule)."""
    if verdict["replicates"].max() < 2:
        return "Replicates needed: not computable from one replicate (the spread between whole studies is unknown)."
    R = int(verdict["replicates"].max())
    rows = []
    for _, r in verdict[verdict["verdict"].isin(["equivalent", "inconclusive"])].iterrows():
        n, sd, mean, margin = int(r["replicates"]), float(r["sd"]), float(r["advantage"]), float(r["margin"])
        if n < 2 or not sd > 0 or not math.isfinite(margin):
            continue
        hypotheses = (["equivalence"] if r["verdict"] == "equivalent" else
                      ["difference"] if abs(mean) >= margin else ["equivalence", "difference"])
        ranges = [(h, plan_range(h, mean, sd, n, margin)) for h in hypotheses]
        rows.append(f"{_comparison(r)} ({r['verdict']}, mean {mean:+.2f} ± se {ranges[0][1]['se']:.2f}, sd "
                    f"{sd:.2f}): " + "; ".join(_range_text(h, found) for h, found in ranges))
    skipped = int(verdict["verdict"].isin(["equivalent", "inconclusive"]).sum()) - len(rows)
    line = ("Replicates needed, planned for a fixed R: the smallest number of replicates whose one 95 % interval, "
            "read once at that number, would show the hypothesis with 80 % power, as a range a–b: a if the true "
            "difference were the observed mean, b if it were one standard error to the unfavourable side (further "
            "from 0 for equivalence, nearer to it for a difference), both on the sd bound given (the 80 % upper "
            "bound of the sd over replicates), then both again on its 95 % upper bound. Equivalent rows are planned "
            "to show equivalence again, inconclusive ones for the hypothesis their data point to (a difference where "
            f"the mean lies outside the margin, else both); > {REPLICATE_BUDGET}: not decidable at this budget. ")
    line += ("; ".join(rows) + ". ") if rows else "No comparison is equivalent or inconclusive with a spread to plan on. "
    if skipped > 0:
        line += f"{skipped} comparison(s): no spread to plan on. "
    if auto:
        line += (f"These plans are for a fixed R; this run went in waves under the sequential rule, and its {R} "
                 "replicates count toward its own N under that rule: a rerun with a larger --max-replicates extends "
                 "it within the rule (the α its looks spent stays spent; a comparison that stopped as futile reopens "
                 "on the rest of its own share, and one open at the last look before N goes on). ")
    else:
        line += (f"Whether the {R} replicates already run count toward a plan depends on the rule: under the fixed-R "
                 f"95 % rule these plans assume, only if the planned number is read once and the labels at R = {R} "
                 "are set aside, because choosing it from them and reading the labels again is a second look "
                 "(optional stopping), which the 95 % does not cover; under the sequential rule they count: "
                 "`compare --replicates auto --max-replicates N` on the run's folder takes them into its first look and "
                 "spends α over that look and the later ones (Lan–DeMets O'Brien–Fleming across the looks, "
                 "Bonferroni across the family), so its rate holds when N is set by the budget, at the price of "
                 "wider intervals at each look than these plans assume. ")
    return line + "For a comparison labelled better or worse, tables/verdict.csv's replicates_needed is how many " \
                  "would reproduce the label if the true effect were the observed one: optimistic, not a plan."


# --- the paper's figure and tables over the replicates; the links --------------------------------------------

def max_lr_caption(sets: list[Intervals], theory: dict, dataset: str | None) -> str:
    """The caption of `figures.max_lr_replicates_figure`, in its legend's words: each legend entry is said here."""
    oracle = [figures.ORACLE_BARS] * any(not s.pooled.empty for s in sets)
    drawn = dict.fromkeys(m for s in sets for m in s.silo)  # the SILO variants, in the legend's order
    unknown = "" if dataset in INPUT_DIMS else f", assumed for {dataset!r}"
    return ("max_lr against density, one panel per replicate on one max_lr scale: "
            + "; ".join([*oracle, *map(figures.silo_line, drawn),
                         f"the {figures.PANEL_THEORY} (Theorem 2, Remark 2, with σ_X = {theory['sigma_x']:g}, "
                         f"σ_W = {theory['sigma_w']:g}, d = {theory['d']:g}{unknown}), the dense max_lr being the "
                         "Oracle's b at λ = 100 % (else the first SILO variant's max_lr there)"]) + ".")


def _paper_sections(reps: list[Replicate], spec: dict | None, links: Section) -> list[Section]:
    """The paper's max_lr figure and §5.3 table over the replicates (with the controls' counts), the accuracy over
    them, the cost per method (`cost_table`), the `links` to each replicate's report, and where the runs contradict
    the paper's premises, "adapting has nothing to find" among them (that section only where one does)."""
    sets = [Intervals.read(r.name, r.rows, spec) for r in reps]
    dataset = (spec or {}).get("dataset")
    theory = {**THEORY, "d": INPUT_DIMS.get(dataset, DEFAULT_DIM)}
    table = section_table(sets)
    max_lr = Section(table.title if table is not None else "max_lr per cycle over the replicates", plots_first=True)
    if (figure := max_lr_plot(sets, theory)) is not None:
        max_lr.plots.append(Plot("max_lr", max_lr_caption(sets, theory, dataset), figure))
    if table is not None:
        max_lr.tables.append(table)
    sections = [max_lr]
    accuracy = _accuracy(reps)
    if not accuracy.empty:
        table = paper_table.interval_table(accuracy)
        sections.append(Section(table.title, tables=[table]))
    if (cost := cost_table(reps, spec)) is not None:
        sections.append(Section(cost.title, tables=[cost]))
    sections.append(links)
    grid = (spec or {}).get("grid")
    contradicted = premises.over_replicates({r.name: premises.findings(r.rows, grid) for r in reps})
    if (nothing := premises.nothing_to_find({r.name: r.rows for r in reps}, reps[0].regret.margin_per_cycle)):
        contradicted.append(nothing)
    if contradicted:
        sections.append(Section("Where the runs contradict the paper's premises", notes_after=contradicted))
    return sections


# --- what each method cost, over the replicates --------------------------------------------------------------------

def _cost_lines() -> list[tuple[str, str, tuple[str, ...]]]:
    """(line, method, stages) of the cost table: the Oracle as run; each SILO variant's own search and its final
    chains apart; each benchmark's tuning and finals; each held-out reference's finals."""
    tune, final = Stage.TUNE.value, Stage.FINAL.value
    return [("Oracle (as run)", Method.ORACLE.value, (Stage.GRID.value, Stage.REFINE.value)),
            ("SILO (paper): δ search", Method.SILO_PAPER.value, (tune,)),
            ("SILO (paper): final chains", Method.SILO_PAPER.value, (final,)),
            ("SILO (fit): study", Method.SILO_FIT.value, (Stage.FIT.value,)),
            ("SILO (fit): final chains", Method.SILO_FIT.value, (final,)),
            *((f"{label(b)}: tuning and final chains", b, (tune, final)) for b in BASELINES),
            *((f"{label(h)}: final chains", h, (final,)) for h in HELD_OUT)]


def _mean_sd(values: list[float], fmt: str) -> str:
    """mean ± sd over the replicates (ddof 1); the mean alone for one replicate."""
    mean = float(np.mean(values))
    if len(values) < 2:
        return format(mean, fmt)
    return f"{format(mean, fmt)} ± {format(float(np.std(values, ddof=1)), fmt)}"


def cost_table(reps: list[Replicate], spec: dict | None) -> Table | None:
    """Per method (the lines of `_cost_lines`, each with any training in some replicate): trainings actually run
    (rows with `reused` False), their epochs and device-hours (the sum of their `seconds` / 3600), mean ± sd over
    the replicates, and their share of the exhaustive Oracle's trainings (`premises.OracleCost`: exact where the
    Oracle ran exhaustive; for a racing Oracle, from the plan at most to the plan along the replicate's chain);
    then the exhaustive Oracle itself (not run) and every training run."""
    grid = (spec or {}).get("grid")
    oracles = {}
    for r in reps:
        options = recorded_oracle(r.run) or OracleOptions()
        oracles[r.name] = premises.OracleCost.of(r.rows, grid, options.refine, options.bracket)
    records = []
    for line, method, stages in _cost_lines():
        for r in reps:
            rows = r.rows[(r.rows["method"] == method) & r.rows["stage"].isin(stages) & ~r.rows["reused"].astype(bool)]
            records.append({"line": line, "method": method, "replicate": r.name, "trainings": len(rows),
                            "epochs": int(rows["epochs"].sum()), "device_hours": float(rows["seconds"].sum()) / 3600,
                            "devices": " ".join(sorted({str(d) for d in rows["device"] if str(d)}))})
    data = pd.DataFrame(records)
    if data.empty or not data["trainings"].any():
        return None
    data = data[data.groupby("line", sort=False)["trainings"].transform("sum") > 0]
    total = data.groupby("replicate", sort=False)[["trainings", "epochs", "device_hours"]].sum().reset_index()
    data = pd.concat([data, total.assign(line="every training run", method="", devices="")], ignore_index=True)
    known = {name: o for name, o in oracles.items() if o is not None}
    if known:
        data = pd.concat([data, pd.DataFrame([
            {"line": "Oracle, exhaustive (not run)", "method": "oracle", "replicate": name, "trainings": o.low,
             "trainings_at_most": o.high, "epochs": round(o.low * o.per_training),
             "device_hours": o.low * o.seconds / o.trainings / 3600} for name, o in known.items()])],
            ignore_index=True)
    data["exhaustive"] = data["replicate"].map({n: o.low for n, o in known.items()})
    data["exhaustive_at_most"] = data["replicate"].map({n: o.high for n, o in known.items()})
    racing = any(o.racing for o in known.values())
    cells = []
    for line, group in data.groupby("line", sort=False):
        share = "–"
        if group["exhaustive"].notna().all():
            low = float(np.mean(group["trainings"] / group["exhaustive_at_most"]))
            high = float(np.mean(group["trainings"] / group["exhaustive"]))
            share = (f"{100 * high:.0f} %" if line.startswith("Oracle, exhaustive") or not racing else
                     f"{100 * low:.0f}–{100 * high:.0f} %")
        trainings = _mean_sd(list(group["trainings"]), ",.0f")
        if line.startswith("Oracle, exhaustive") and racing:
            trainings += f" (at most {_mean_sd(list(group['trainings_at_most']), ',.0f')})"
        cells.append({"method": line, "trainings": trainings, "epochs": _mean_sd(list(group["epochs"]), ",.0f"),
                      "device-hours": _mean_sd(list(group["device_hours"]), ".3f"),
                      "share of the exhaustive Oracle's trainings": share})
    devices = sorted({d for ds in data["devices"].dropna() for d in str(ds).split(" ") if d})
    n = len(reps)
    oracle_words = ("The exhaustive Oracle's trainings are exact where the Oracle ran exhaustive. Where it raced, the "
                    "exhaustive Oracle it stands for is given from the plan along the replicate's own chain (every "
                    "first-round value of each cycle, the grid at cycle 0, later the bracket around the previous b "
                    "and the dense best, and the values the run refined, each on every seed; its epochs and "
                    "device-hours at the racing Oracle's per training) to the plan at most (3 refinement rounds of "
                    "4 values at every cycle, the dry run's closed form), so each share reads from the most to the "
                    "fewest." if racing else
                    "The Oracle ran exhaustive: the exhaustive Oracle's trainings are its own.")
    verdict = (f"What each method cost, per replicate, mean ± sd over the {n} replicate{'s' * (n != 1)}: the "
               "trainings actually run (a row reused from an identical training is free and not counted), their "
               "epochs and their device-hours (the trainings' own seconds / 3600, on "
               + (", ".join(devices) if devices else "a device the rows do not name") + "), and their share of "
               "the exhaustive Oracle's trainings. SILO (paper)'s δ search and SILO (fit)'s study are the "
               "search for the schedule; its final chains are what the SILO schedule itself costs. " + oracle_words)
    return Table("replicate_cost", "Cost per method over the replicates", pd.DataFrame(cells), data, verdict)


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
    # The first screen: the verdict and, under it, which labels hold across the family; then the paper's max_lr
    # figure and §5.3 table over the replicates, the accuracy, the cost per method, the links to each replicate's
    # report, and where the runs contradict the paper's premises.
    first = Section(f"The answer over {n} replicate{'s' * (n != 1)}")
    if failed:
        first.notes.append(f"{n} of {of or n + len(failed)} replicates; "
                           + "; ".join(f"{name} failed: {line}" for name, line in failed.items())
                           + ". Rerun the same command to resume it; this report is then written again over all.")
    first.tables.append(dataclasses.replace(answer_table(verdict, n), title=first.title))  # one heading, not two
    first.notes_after.append(family_line(verdict))  # the first line under the table: which labels hold
    # Then what the labels are across looks: the sequential rule where the run went in waves, else fixed-R labels.
    if out is not None and (lines := sequential_section(Path(out), per, n)) is not None:
        first.notes_after += lines
    sections = [first, *_paper_sections(reps, spec, _links_section(reps, out, own_reports))]
    margins = verdict["margin"].dropna()
    labels_table = replicates_table(per, names, float(margins.iloc[0]) if len(margins) else None)
    labels = Section(labels_table.title, tables=[labels_table])
    labels.notes_after += disagreements(reps, per)
    varied = variance_sentence([s for r in runs if (s := read_spec(Path(r)))])  # what a replicate varies
    auto = out is not None and (Path(out) / LOOKS).exists()  # an auto run: its replicates count under its rule
    labels.notes_after += [needed_line(verdict, auto),
                           " ".join(filter(None, [SCIENCE, varied, multiplicity(verdict)]))]
    choices = Section("The choices each replicate made", tables=[choices_table(reps)])
    diagnostic = diagnostic_table(reps)
    diagnostics = [] if diagnostic is None else [Section(diagnostic.title, tables=[diagnostic])]
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
    sections += [labels, choices, *diagnostics, cost]
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
            if t.name in ("replicate_cost", "diagnostic"):  # the numbers behind them, as the verdict's
                written[f"tables/{t.name}.csv"] = atomic_write_bytes(out / "tables" / f"{t.name}.csv",
                                                                     t.data.to_csv(index=False))
            for ext, text in (("md", render.markdown(t.cells, t.bold)), ("tex", render.latex(t.cells, t.bold))):
                written[f"tables/{t.name}.{ext}"] = atomic_write_bytes(out / "tables" / f"{t.name}.{ext}", text)
        for p in s.plots:
            written |= {f"figures/{f}": path for f, path in p.figure.write(out / "figures", p.name).items()}
    title = f"Oracle search report over {n} replicate{'s' * (n != 1)}: {reps[0].rows['experiment'].iloc[0]}"
    written["report.md"] = atomic_write_bytes(out / "report.md", markdown_page(title, spec, sections))
    written["report.html"] = atomic_write_bytes(out / "report.html", html_page(title, spec, sections))
    return written
