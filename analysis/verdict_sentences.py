"""The verdict in words: one sentence per SILO variant against the Oracle and both controls, the controls
named, the multiplicity said, and the end-to-end comparison. Every number comes from `analysis.regret.Regret`.

`VERSUS` names what a SILO variant is compared with, end to end on the evaluation seeds (the family of the verdict
over replicates): the held-out Oracle's schedule and controls, each benchmark schedule by its `schema.METHODS`
label, and the best benchmark. The per-cycle comparison on the Oracle's chain (`Regret.verdict`, against `oracle`,
`constant_dense` and `constant_best` there) is the §5.3 diagnostic, said with `DIAGNOSTIC`."""
from __future__ import annotations

import pandas as pd

from analysis.regret import Regret
from analysis.select import label
from oracle_search.schema import BASELINES

DASH = "–"
VERSUS = {"oracle_schedule": "the Oracle's schedule (held out)", "constant_dense": "not adapting",
          "constant_best": "the best constant", **{b: label(b) for b in BASELINES},
          "best_benchmark": "the best benchmark (chosen on tuning seeds)"}
DIAGNOSTIC = ("conditional on the Oracle's chain, on the tuning seeds, in-sample; not part of the verdict")


def versus_name(versus: str, chosen: object = None) -> str:
    """What a comparison is against, in words; the best benchmark with the benchmark it was (`chosen`)."""
    if versus == "best_benchmark" and isinstance(chosen, str) and chosen:
        return f"the best benchmark ({label(chosen)}, chosen on tuning seeds)"
    return VERSUS.get(versus, label(versus))


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
        lines.append(f"Does {label(method)} beat not adapting and the best constant in hindsight? It "
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


def end_to_end_line(r: Regret) -> str:
    """Each SILO variant's own final chains against each other method's final chains (`VERSUS`), in words."""
    frame = r.end_to_end
    if frame.empty:
        return "No final rows to compare SILO with: no end-to-end comparison."
    parts = []
    for _, row in frame.iterrows():
        name = versus_name(row["versus"], row.get("chosen"))
        gone = (f"; diverged chains left out: {row['diverged']} of {label(row['schedule'])}, "
                f"{row['versus_diverged']} of {name}" if row["diverged"] or row["versus_diverged"] else "")
        parts.append(f"{label(row['schedule'])} {judged(row, name)}{gone}")
    return (f"End to end, each method's own final chains on the evaluation seeds (test accuracy, paired per seed, "
            f"summed over cycles 1–{r.last}): " + "; ".join(parts) + ".")
