"""The verdict in words, for one run's report and the report over replicates alike: a cell's label in words
(`words`, `cell`: "(uncorrected)" where Holm does not keep it, "by more than the margin"), the line saying which
labels hold across the family (`family_line`), and the §5.3 diagnostic's sentences (one per SILO variant against
the Oracle and both controls on the Oracle's chain, the controls named). Every number comes from
`analysis.regret.Regret` or the verdict over replicates.

`VERSUS` names what a SILO variant is compared with, end to end on the evaluation seeds (the verdict's family):
the held-out Oracle's schedule and controls, each benchmark schedule by its `schema.METHODS` label, and the best
benchmark. The per-cycle comparison on the Oracle's chain (`Regret.verdict`, against `oracle`, `constant_dense`
and `constant_best` there) is the §5.3 diagnostic, said with `DIAGNOSTIC`."""
from __future__ import annotations

import pandas as pd

from analysis.regret import Regret
from analysis.replicates import HELD
from analysis.select import label
from oracle_search.schema import BASELINES

DASH = "–"
# Each label with a mark, so that a table reads without colour (one run's answer and the answer over replicates).
VERDICT_MARKS = {"better": "▲ better", "worse": "▼ worse", "equivalent": "= equivalent",
                 "inconclusive": "? inconclusive", "undefined": "– undefined"}
VERSUS = {"oracle_schedule": "the Oracle's schedule (held out)", "constant_dense": "not adapting",
          "constant_best": "the best constant", **{b: label(b) for b in BASELINES},
          "best_benchmark": "the best benchmark (chosen on tuning seeds)"}
DIAGNOSTIC = ("conditional on the Oracle's chain, on the tuning seeds, in-sample; not part of the verdict")


def versus_name(versus: str, chosen: object = None) -> str:
    """What a comparison is against, in words; the best benchmark with the benchmark it was (`chosen`)."""
    if versus == "best_benchmark" and isinstance(chosen, str) and chosen:
        return f"the best benchmark ({label(chosen)}, chosen on tuning seeds)"
    return VERSUS.get(versus, label(versus))


def _held(holm: object) -> bool | None:
    """Whether Holm keeps the label: True, False, or None where the row has no Holm answer (NA)."""
    return None if holm is None or pd.isna(holm) else holm == "yes"


def words(verdict: str, lo: float, hi: float, margin: float | None = None, holm: object = None) -> tuple[str, str]:
    """(the label in words, what follows the numbers), from `statistics.label`'s verdict, the interval, the margin
    and Holm's answer; the one label rule stays `statistics.label`, this only says it (one run's answer and the
    answer over replicates alike):
    - better / worse whose interval lies wholly beyond the margin (lo > +margin, hi < −margin): "better by more than
      the margin"; one that only excludes 0: "better", followed by ", not shown beyond the margin";
    - "(uncorrected)" after a label Holm does not keep (`holm` "no"); plain where it does, or where there is no
      correction to speak of (`holm` None: each replicate's own labels);
    - an equivalence whose interval also excludes 0 is followed by ", also above 0" or ", also below 0" (both hold,
      and the label shows only one)."""
    word, after = verdict, ""
    known = margin is not None and not pd.isna(margin)
    if verdict == "better":
        word, after = (("better by more than the margin", "") if known and lo > margin else
                       ("better", ", not shown beyond the margin" if known else ""))
    elif verdict == "worse":
        word, after = (("worse by more than the margin", "") if known and hi < -margin else
                       ("worse", ", not shown beyond the margin" if known else ""))
    elif verdict == "equivalent":
        after = ", also above 0" if lo > 0 else ", also below 0" if hi < 0 else ""
    if verdict in HELD and _held(holm) is False:
        word += " (uncorrected)"
    return word, after


def cell(verdict: str, advantage: float, lo: float, hi: float, margin: float | None = None,
         holm: object = None, note: str = "") -> str:
    """The mark and the label in words (`words`), `note` right after them (one run's †), the advantage and its
    interval."""
    mark = VERDICT_MARKS[verdict].split(" ")[0]
    if verdict == "undefined":
        return VERDICT_MARKS["undefined"] + note + ("" if pd.isna(advantage) else f" {advantage:+.2f}")
    word, after = words(verdict, lo, hi, margin, holm)
    return f"{mark} {word}{note} {advantage:+.2f} {ci_text(lo, hi)}{after}"


def family_line(verdict: pd.DataFrame, count: str = "replicates", where: str = "") -> str:
    """The first line under the answer: in words, which labels hold across the family at 5 % (Holm decides;
    Bonferroni beside it). "none" is an answer. `verdict`: the family's rows with `holm` and `bonferroni`; `count`:
    the column of what each interval is over (replicates; one run's `n`, its seeds); `where`: said after "Holm"
    (one run: over which seeds)."""
    m = len(verdict)
    if m == 0:
        return "No comparison: no family."
    if (verdict[count] < 2).all():
        return f"Across the family of {m} comparisons at 5 %, no label can hold: no comparison has an interval."
    labelled = verdict[verdict["verdict"].isin(HELD)]
    kept = labelled[labelled["holm"] == "yes"]
    both = int((labelled["bonferroni"] == "yes").sum())
    head = f"Across the family of {m} comparisons at 5 % (Holm{where})"
    if kept.empty:
        said = f"{head}, none of the labels holds"
    else:
        said = (f"{head}, {len(kept)} hold{'s' * (len(kept) == 1)}: " + "; ".join(
            f"{label(r['schedule'])} {_claim(r)}" for _, r in kept.iterrows()))
    count_kept = "none" if both == 0 else str(both)
    return f"{said} (Bonferroni keeps {count_kept})."


def _claim(r: pd.Series) -> str:
    """A label that holds, as a claim: "worse than Cosine", "better than LR warmup by more than the margin",
    "equivalent to the best constant"."""
    word, _ = words(r["verdict"], r["ci_lo"], r["ci_hi"], r["margin"])
    name = versus_name(r["versus"], r.get("chosen"))
    if r["verdict"] == "equivalent":
        return f"equivalent to {name} within ±{r['margin']:g}"
    base, _, beyond = word.partition(" by ")
    return f"{base} than {name}" + (f" by {beyond}" if beyond else "")


def fmt_lr(x: float) -> str:
    return DASH if pd.isna(x) else f"{x:.4g}"


def ci_text(lo: float, hi: float) -> str:
    return DASH if pd.isna(lo) else f"[{lo:+.2f}, {hi:+.2f}]"


def _need(seeds: object) -> str:
    return "more than 1000 seeds would be needed" if pd.isna(seeds) else f"about {int(seeds)} seeds would tell"


def margin_text(margin: object) -> str:
    """±m points, or a dash without a margin."""
    return DASH if pd.isna(margin) else f"±{margin:.2f} points"


def judged(row: pd.Series, name: str) -> str:
    """One comparison in words: better, worse, equivalent (the 95 % CI inside ±margin), inconclusive (with the seeds
    needed), or not comparable. A comparison whose seeds all gave the same difference says so: its interval has no
    width to trust."""
    if row["verdict"] == "undefined":
        why = (f"n = {row['n']} < 2 seeds" if row["n"] < 2 else
               "a max_lr lies outside the values the Oracle trained on every seed, or next to a diverged one")
        return f"cannot be compared with {name} ({why})"
    numbers = f"{row['advantage']:+.2f} points (95 % CI {ci_text(row['ci_lo'], row['ci_hi'])})"
    if row["ci_lo"] == row["ci_hi"] and row["advantage"] != 0:
        numbers += f", zero spread: all {row['n']} seeds gave the same difference"
    if row["verdict"] == "equivalent":
        return f"is equivalent to {name} within {margin_text(row['margin'])}: {numbers}"
    if row["verdict"] == "better":
        return f"beats {name}: {numbers}"
    if row["verdict"] == "worse":
        return f"loses to {name}: {numbers}"
    need = "no difference at all" if row["advantage"] == 0 else _need(row["seeds_needed"])
    return (f"is inconclusive against {name} at n = {row['n']} (neither a difference nor equivalence within "
            f"{margin_text(row['margin'])} shown): {numbers}, {need}")


def control_names(r: Regret) -> dict[str, str]:
    """The controls in words, with their max_lr."""
    return {"oracle": "the Oracle",
            "constant_dense": f"not adapting (constant_dense = {fmt_lr(r.control_lr('constant_dense'))})",
            "constant_best": f"the best constant in hindsight (constant_best = "
                             f"{fmt_lr(r.control_lr('constant_best'))}, optimistic)"}


def verdict_lines(r: Regret) -> list[str]:
    """Per SILO variant, does it beat not adapting and the best constant in hindsight (and how far is it from the
    Oracle); the controls named; the multiplicity said."""
    verdict = r.verdict
    if verdict.empty:
        return ["No Oracle or no SILO rows: no verdict against the controls."]
    names = control_names(r)
    lines = []
    for method, rows in verdict.groupby("schedule", sort=False):
        by = rows.set_index("versus")
        lines.append(f"On the Oracle's chain, does {label(method)} beat not adapting and the best constant in "
                     f"hindsight? It "
                     f"{judged(by.loc['constant_dense'], names['constant_dense'])}; it "
                     f"{judged(by.loc['constant_best'], names['constant_best'])}; it "
                     f"{judged(by.loc['oracle'], names['oracle'])} (validation accuracy on the Oracle's chain, summed "
                     f"over cycles 1–{r.last}, n = {by['n'].iloc[0]} tuning seeds).")
    lines.append(controls_line(r))
    lines.append(f"These are {len(verdict)} comparisons ({len(verdict) // 3} SILO variant"
                 f"{'s' * (len(verdict) != 3)} × the Oracle, constant_dense and constant_best), each at 95 %, not "
                 f"corrected for multiplicity: the §5.3 diagnostic, {DIAGNOSTIC}.")
    return lines


def controls_line(r: Regret) -> str:
    """Where the controls come from and what the regret is."""
    dense, best = fmt_lr(r.control_lr("constant_dense")), fmt_lr(r.control_lr("constant_best"))
    return (f"The controls come from the Oracle's rows, with no extra training: constant_dense = {dense}, the "
            "Oracle's dense choice kept at every cycle (what LR warmup, tuned on cycle 0, does); constant_best = "
            f"{best}, the best single max_lr in hindsight, chosen on the same data, so an optimistic control. "
            "Regret: per tuning seed, the validation accuracy of a leave-one-out Oracle's choice minus the accuracy "
            "at the schedule's max_lr (linear in ln max_lr between values every seed trained), with a 95 % t "
            "interval.")
