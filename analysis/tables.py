"""The report's tables: the answer (the verdict's family, end to end on the evaluation seeds), Oracle intervals, the
§5.3 diagnostic on the Oracle's chain, test accuracy, cost and §3.1 statistics, each with a verdict line."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pandas as pd

import numpy as np

from analysis.intervals import count_inside, oracle_intervals, seed_intervals
from analysis.regret import BEST_BENCHMARK, Regret
from analysis.replicates import HELD
from analysis.select import (COST_STAGES, DEFAULT_STAGES, cost_rows, densities, label, methods, schedule_label,
                             silo_params)
from oracle_search.compared import final_rows, last_cycle, oracle_trials
from analysis.verdict_sentences import (DASH, DIAGNOSTIC, VERDICT_MARKS, cell, ci_text, family_line, fmt_lr,
                                        verdict_lines, versus_name)
from oracle_search.curve import refuse_duplicates
from oracle_search.schema import HELD_OUT, SILO_METHODS, Method, Stage, unused_finals
from oracle_search.selection import TOLERANCE, Curve, choose, dense_best, lr_key
from oracle_search.statistics import ALPHA, half_width, holm, mean_interval, p_value, replicates_lower_estimate

@dataclass(frozen=True)
class Table:
    """Display cells (first column holds row labels), the numbers behind them (CSV), a verdict line (above the
    cells) and a `note`, the first lines under them (the answer's: which labels hold across the family, then what
    its words mean), paragraphs apart by a blank line."""

    name: str
    title: str
    cells: pd.DataFrame
    data: pd.DataFrame
    verdict: str
    bold: pd.DataFrame | None = None
    note: str = ""


def fmt_density(x: float) -> str:
    return f"{x:.3g}"


def _yes_no(x: object) -> str:
    return DASH if pd.isna(x) else ("yes" if x else "no")


def _by_density(rows: dict[str, list[str]], lam: pd.Series) -> pd.DataFrame:
    """Paper layout: one row per quantity, one column per density λ."""
    columns = ["λ (%)", *map(fmt_density, lam)]
    return pd.DataFrame([[name, *values] for name, values in rows.items()], columns=columns)


def first_judged(df: pd.DataFrame, method: str) -> int:
    """The first cycle that tests a SILO variant: after q (at m ≤ q it keeps ε) and never cycle 0 (silo_paper's ε
    is the Oracle's dense best, inside by construction)."""
    params = silo_params(df, method)
    return max(int(params["q"]) + 1, 1) if params is not None else 1


def headline(pooled: pd.DataFrame, tol: float = TOLERANCE, first: dict[str, int] | None = None) -> list[str]:
    """Per SILO variant: at how many cycles after its q it is inside the paper's interval, "not shown worse"
    (lenient) and "shown within 0.5" (strict)."""
    if pooled.empty:
        return []
    n = int(pooled["n_seeds"].min())
    lines = []
    for method in (m for m in SILO_METHODS if f"{m}_max_lr" in pooled):
        start = (first or {}).get(method, 1)
        paper, judged = count_inside(pooled, f"{method}_inside", start)
        lenient = count_inside(pooled, f"{method}_noise_inside", start)[0]
        strict = count_inside(pooled, f"{method}_within", start)[0]
        lines.append(f"{label(method)} at the {judged} cycle{'s' * (judged != 1)} from {start} on: inside the "
                     f"paper's interval at {paper}, \"not shown worse\" (lenient) at {lenient}, \"shown within "
                     f"{tol:g}\" (strict) at {strict} (n = {n} tuning seed{'s' * (n != 1)}, 95 % one-sided; cycles "
                     f"< {start}, marked *, test nothing and are not counted).")
    if not lines:
        lines.append(f"No SILO rows; {int(pooled['noise_contiguous'].sum())} of {len(pooled)} \"not shown worse\" "
                     f"sets contiguous (n = {n}).")
    return lines


def _gap(x: float) -> str:
    """An edge's resolution: the relative gap to the next value tried outside it, or "open"."""
    return "open" if pd.isna(x) else f"{100 * x:.0f} %"


def _marked(flags: list[str], cycles: pd.Series, start: int) -> list[str]:
    return [f"{f}*" if c < start else f for f, c in zip(flags, cycles)]


def oracle_table(df: pd.DataFrame, tol: float = TOLERANCE) -> Table | None:
    """(a) The Oracle's max_lr, both intervals and each SILO variant's max_lr per density, on seed means."""
    pooled = oracle_intervals(df, tol)
    if pooled.empty:
        return None
    se = [DASH if pd.isna(e) else f"{a:.2f} ± {e:.2f}" for a, e in zip(pooled["best_val_acc"], pooled["best_se"])]
    rows = {
        "Oracle max_lr": [fmt_lr(x) for x in pooled["best_max_lr"]],
        "val. acc. (mean ± s.e.)": se,
        "Oracle interval (paper)": [f"[{fmt_lr(lo)}, {fmt_lr(hi)}]" for lo, hi in zip(pooled["lo"], pooled["hi"])],
        "not shown worse (lenient)": [f"[{fmt_lr(lo)}, {fmt_lr(hi)}]"
                                      for lo, hi in zip(pooled["noise_lo"], pooled["noise_hi"])],
        f"shown within {tol:g} (strict)": [f"[{fmt_lr(lo)}, {fmt_lr(hi)}]"
                                           for lo, hi in zip(pooled["strict_lo"], pooled["strict_hi"])],
        f"values shown within {tol:g}": pooled["n_strict"].astype(str).tolist(),
        "contiguous (paper / not shown worse)": [f"{_yes_no(a)} / {_yes_no(b)}"
                                                 for a, b in zip(pooled["contiguous"], pooled["noise_contiguous"])],
        "values trained": pooled["n_values"].astype(str).tolist(),
        "edge resolution (paper: lo / hi)": [f"{_gap(lo)} / {_gap(hi)}" for lo, hi in
                                             zip(pooled["lo_resolution"], pooled["hi_resolution"])],
        "edge resolution (not shown worse: lo / hi)": [f"{_gap(lo)} / {_gap(hi)}" for lo, hi in
                                                       zip(pooled["noise_lo_resolution"],
                                                           pooled["noise_hi_resolution"])],
        "unimodal": [_yes_no(x) for x in pooled["unimodal"]],
    }
    first = {m: first_judged(df, m) for m in SILO_METHODS if f"{m}_max_lr" in pooled}
    for method, start in first.items():
        rows[f"{label(method)} max_lr"] = [fmt_lr(x) for x in pooled[f"{method}_max_lr"]]
        rows[f"{label(method)} inside (paper / not shown worse / within)"] = _marked(
            [f"{_yes_no(a)} / {_yes_no(b)} / {_yes_no(c)}" for a, b, c in
             zip(pooled[f"{method}_inside"], pooled[f"{method}_noise_inside"], pooled[f"{method}_within"])],
            pooled["cycle"], start)
    verdict = " ".join(headline(pooled, tol, first))
    return Table("oracle", "Oracle max_lr and intervals", _by_density(rows, pooled["density"]), pooled, verdict)


def values_table(df: pd.DataFrame, tol: float = TOLERANCE, raced: dict[int, dict] | None = None) -> Table | None:
    """(a, detail) Per cycle, every max_lr the Oracle trained, with n (the seeds that trained it) and its status:
    complete (every seed), dropped (racing gave it fewer seeds), diverged, or not trained (a value racing's walk
    never reached, from racing.json); seed-mean ± s.e. and whether each set holds it."""
    pooled = oracle_intervals(df, tol)
    if pooled.empty:
        return None
    records = []
    rows = oracle_trials(df)
    for cycle, group in rows.groupby("cycle"):
        curve = Curve.from_rows(group)
        choice = choose(curve, tol)
        if choice is None:
            continue
        mean, se, n = curve.mean(), curve.standard_error(), curve.acc.count(axis=1)
        complete = set(curve.complete)
        for v, a, b, w in zip(choice.values, choice.inside, choice.noise_inside, choice.within):
            status = ("complete" if v in complete else "diverged" if curve.diverged.loc[v].any() else "dropped")
            records.append({"cycle": int(cycle), "max_lr": v, "n": int(n[v]), "status": status,
                            "val_mean": float(mean[v]), "val_se": float(se[v]), "paper_inside": a,
                            "noise_inside": b, "within": w, "best": v == choice.best})
        for v in (raced or {}).get(int(cycle), {}).get("not_trained", []):
            records.append({"cycle": int(cycle), "max_lr": float(v), "n": 0, "status": "not trained",
                            "val_mean": math.nan, "val_se": math.nan, "paper_inside": False, "noise_inside": False,
                            "within": False, "best": False})
    data = pd.DataFrame(records).sort_values(["cycle", "max_lr"], ignore_index=True)
    lam = densities(df)
    cells = pd.DataFrame({
        "λ (%)": data["cycle"].map(lam).map(fmt_density),
        "max_lr": data["max_lr"].map(fmt_lr),
        "n": data["n"].astype(str),
        "status": data["status"],
        "val. acc.": [DASH if pd.isna(m) else f"{m:.2f}" + ("" if pd.isna(e) else f" ± {e:.2f}")
                      for m, e in zip(data["val_mean"], data["val_se"])],
        "paper": data["paper_inside"].map(_yes_no),
        "not shown worse": data["noise_inside"].map(_yes_no),
        f"shown within {tol:g}": data["within"].map(_yes_no),
        "best": data["best"].map(lambda b: "b" if b else ""),
    })
    counts = data["status"].value_counts()
    seeds = int(pooled["n_seeds"].max())
    others = [f"{counts[s]} {s}" for s in ("dropped", "diverged", "not trained") if s in counts]
    bad = pooled.loc[~pooled["unimodal"].astype(bool), "density"]
    verdict = (f"{counts.get('complete', 0)} (cycle, max_lr) values trained by all {seeds} seed{'s' * (seeds != 1)}"
               + (f"; {', '.join(others)} (n says how many seeds trained each)" if others else "") + "; "
               + ("every cycle's seed-mean curve is unimodal." if bad.empty else
                  "not unimodal at λ = " + ", ".join(fmt_density(x) for x in bad) + " %."))
    return Table("oracle_values", "Every value the Oracle tried", cells, data, verdict)


RACING_COLUMNS = ["cycle", "max_lr", "change", "seeds", "gap", "look", "leader"]


def racing_table(df: pd.DataFrame, raced: dict[int, dict] | None) -> Table | None:
    """(a, racing) Per cycle, each value the race dropped (its seeds, its gap to the leader, the look that dropped
    it), each value its walk never trained, and each value completed so the sets stay exact (racing.json)."""
    if raced is None:
        return None
    records = []
    rows = oracle_trials(df)
    for cycle, summary in sorted(raced.items()):
        complete = set(Curve.from_rows(rows[rows["cycle"] == cycle]).complete)  # after the verdict's completions
        for d in summary["dropped"]:
            change = ("diverged" if d.get("why") == "diverged" else
                      "dropped, completed for the verdict" if lr_key(d["max_lr"]) in complete else "dropped")
            records.append({"cycle": cycle, "max_lr": d["max_lr"], "change": change,
                            "seeds": d["seeds"], "gap": d.get("gap"), "look": d.get("look"), "leader": d.get("leader")})
        records += [{"cycle": cycle, "max_lr": v, "change": "not trained", "seeds": 0} for v in summary["not_trained"]]
        records += [{"cycle": cycle, "max_lr": v, "change": "completed for the sets", "seeds": pd.NA}
                    for v in summary.get("completed_for_sets", [])]
    data = pd.DataFrame(records, columns=RACING_COLUMNS)
    lam = densities(df)
    number = lambda x, f: DASH if pd.isna(x) else f(x)  # noqa: E731
    cells = pd.DataFrame({
        "λ (%)": data["cycle"].map(lam).map(lambda x: DASH if pd.isna(x) else fmt_density(x)),
        "max_lr": data["max_lr"].map(fmt_lr),
        "what racing did": data["change"],
        "seeds": data["seeds"].map(lambda x: number(x, lambda y: str(int(y)))),
        "points behind the leader": data["gap"].map(lambda x: number(x, lambda y: f"{y:.2f}")),
        "at look (seeds)": data["look"].map(lambda x: number(x, lambda y: str(int(y)))),
        "leader": data["leader"].map(lambda x: number(x, fmt_lr)),
    })
    counts = data["change"].value_counts()
    verdict = (f"Racing left {counts.get('dropped', 0)} value(s) with fewer than all seeds, dropped "
               f"{counts.get('diverged', 0)} on a divergence, never trained {counts.get('not trained', 0)} beyond "
               f"them, and completed {counts.get('completed for the sets', 0)} so that the sets stay exact"
               + (f" and {counts['dropped, completed for the verdict']} dropped one(s) for the verdict"
                  if "dropped, completed for the verdict" in counts else "") + ".")
    return Table("racing", "What racing changed", cells, data, verdict)


def seed_table(df: pd.DataFrame, tol: float = TOLERANCE) -> Table | None:
    """(a, per seed) Each seed's own best and interval for every (seed, cycle)."""
    frame = seed_intervals(df, tol)
    if frame.empty:
        return None
    cells = pd.DataFrame({
        "seed": frame["seed"].astype(str),
        "λ (%)": frame["density"].map(fmt_density),
        "Oracle max_lr": frame["best_max_lr"].map(fmt_lr),
        "Oracle interval": [f"[{fmt_lr(lo)}, {fmt_lr(hi)}]" for lo, hi in zip(frame["lo"], frame["hi"])],
        "contiguous": frame["contiguous"].map(_yes_no),
    })
    spread = frame.groupby("cycle")["best_max_lr"].agg(["min", "max"])
    moves = int((spread["min"] < spread["max"]).sum())
    verdict = (f"Each seed's own best differs across seeds at {moves} of {len(spread)} cycles: one seed alone "
               "does not fix the Oracle's choice.")
    return Table("oracle_seeds", "Oracle per seed", cells, frame, verdict)


def per_seed_accuracy(rows: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(test accuracy, gone): cycle × seed. A seed is gone from the cycle its chain diverged on: its accuracy there
    and after is NaN (a diverged chain is counted, never averaged)."""
    refuse_duplicates(rows, ["cycle", "seed"], "final chains")
    cell = rows.assign(diverged=rows["diverged"].astype(bool)).groupby(["cycle", "seed"]).agg(
        test_acc=("test_acc", "mean"), diverged=("diverged", "max"))
    acc = cell["test_acc"].unstack("seed").sort_index()
    gone = cell["diverged"].unstack("seed").reindex_like(acc).fillna(False).astype(bool).cummax(axis=0)
    return acc.mask(gone), gone


def accuracy_stats(rows: pd.DataFrame) -> pd.DataFrame:
    """Early-stop test accuracy per cycle over the seeds whose chain has not diverged: mean, sample std, n seeds,
    the 95 % confidence half-width, and the seeds whose chain diverged at or before the cycle."""
    if rows.empty:
        return pd.DataFrame(columns=["mean", "std", "n_seeds", "ci95", "diverged"])
    acc, gone = per_seed_accuracy(rows)
    stats = pd.DataFrame({"mean": acc.mean(axis=1), "std": acc.std(axis=1, ddof=1), "n_seeds": acc.count(axis=1)})
    stats["ci95"] = half_width(stats["std"].to_numpy(), stats["n_seeds"].to_numpy())
    stats["diverged"] = gone.sum(axis=1).astype(int)
    return stats


def _mean_ci(mean: float, ci: float, n: int, diverged: int = 0) -> str:
    gone = f", {diverged} diverged" if diverged else ""
    if n == 0:
        return f"diverged (n={diverged})"
    return (f"{mean:.2f} (n={n}{gone})" if n < 2 else f"{mean:.2f} ± {ci:.2f} (n={n}{gone})")


def paired(a: pd.DataFrame, b: pd.DataFrame, cycle: int) -> tuple[float, float, float, int] | None:
    """Paired difference of test accuracy A − B at `cycle` on the seeds both ran and neither diverged on: (mean,
    ci_lo, ci_hi, n), NaN bounds with one seed; None without a shared seed."""
    if cycle not in a.index or cycle not in b.index:
        return None
    d = (a.loc[cycle] - b.loc[cycle].reindex(a.columns)).dropna().to_numpy(dtype=float)
    if len(d) == 0:
        return None
    return (*mean_interval(d), len(d))


def accuracy_table(df: pd.DataFrame) -> Table | None:
    """(b) Methods × λ: early-stop test accuracy, mean ± 95 % confidence half-width over seeds, with n and the
    chains that diverged (not averaged); the Oracle on its tuning seeds' chains (it selects on validation), every
    other method on evaluation seeds."""
    stats = {m: accuracy_stats(final_rows(df, m)) for m in methods(df)}
    stats = {m: s for m, s in stats.items() if not s.empty}
    if not stats:
        return None
    lam = densities(df)
    cycles = sorted(set().union(*(s.index for s in stats.values())))
    means = pd.DataFrame({m: s["mean"].round(2) for m, s in stats.items()}).reindex(cycles).T
    best = means.eq(means.max(axis=0), axis=1)
    cells = pd.DataFrame(
        [[label(m), *(_mean_ci(s.loc[c, "mean"], s.loc[c, "ci95"], int(s.loc[c, "n_seeds"]), int(s.loc[c, "diverged"]))
                      if c in s.index else DASH for c in cycles)] for m, s in stats.items()],
        columns=["Method", *(fmt_density(lam[c]) for c in cycles)],
    )
    bold = pd.DataFrame(False, index=cells.index, columns=cells.columns)
    bold.iloc[:, 1:] = best.to_numpy()
    data = pd.concat({m: s for m, s in stats.items()}, names=["method"]).reset_index()
    data.insert(2, "density", data["cycle"].map(lam))
    verdict = _accuracy_verdict(df, cycles)
    return Table("accuracy", "Early-stop test accuracy (%)", cells, data, verdict, bold)


def _accuracy_verdict(df: pd.DataFrame, cycles: list[int]) -> str:
    """Per SILO variant, against every other method it shares evaluation seeds with: at how many densities its
    paired mean difference is ≥ 0 against all of them, and at how many the paired 95 % CI lies above 0 against all
    of them (a lead within seed noise is not a finding)."""
    acc = {m: per_seed_accuracy(final_rows(df, m))[0] for m in methods(df) if not final_rows(df, m).empty}
    parts = []
    for m in (m for m in SILO_METHODS if m in acc):
        lead = clear = judged = 0
        for c in cycles:
            diffs = [d for k, a in acc.items() if k != m and (d := paired(acc[m], a, c)) is not None]
            if not diffs:
                continue
            judged += 1
            lead += all(d[0] >= 0 for d in diffs)
            clear += all(d[1] > 0 for d in diffs)
        parts.append(f"{label(m)} is ahead of every method it shares evaluation seeds with at {lead} of {judged} "
                     f"densities, with the paired 95 % CI above 0 at {clear}")
    if not parts:
        return "No SILO rows."
    return ("; ".join(parts) + " (paired differences on the shared evaluation seeds; the Oracle runs on its tuning "
            "seeds, so it is not paired; a diverged chain is counted, not averaged).")


def best_per_density(df: pd.DataFrame) -> str:
    """"λ: method" for each density, by mean test accuracy; "within noise of M" when the paired 95 % CI of the
    leader against M, the best method sharing seeds with it, contains 0; "not paired" when none shares a seed."""
    acc = {m: per_seed_accuracy(final_rows(df, m))[0] for m in methods(df) if not final_rows(df, m).empty}
    lam, parts = densities(df), []
    for c in sorted(set().union(*(a.index for a in acc.values()))) if acc else []:
        ranked = sorted(((float(a.loc[c].mean()), m) for m, a in acc.items()
                         if c in a.index and a.loc[c].notna().any()), reverse=True)
        if not ranked:
            continue
        leader = ranked[0][1]
        rivals = [(m, d) for _, m in ranked[1:] if (d := paired(acc[leader], acc[m], c)) is not None]
        note = " (not paired)" if not rivals else (
            f" (within noise of {label(rivals[0][0])})" if not rivals[0][1][1] > 0 else "")
        parts.append(f"{fmt_density(lam[c])} %: {label(leader)}{note}")
    return "; ".join(parts)


def cost_table(df: pd.DataFrame, oracle: Any = None) -> Table | None:
    """(c) Per method: trainings actually run (reused ones are free), epochs, device-hours, last-cycle accuracy;
    said against both Oracles (`cost_sentence`; `oracle`: the run's `premises.OracleCost`, the report's, which
    reads the spec's grid and the Oracle's options)."""
    last = last_cycle(df)
    records = []
    for m in methods(df):
        rows = cost_rows(df, m)
        final = final_rows(df, m)
        if rows.empty and final.empty:
            continue
        alive = accuracy_stats(final)["mean"] if not final.empty else pd.Series(dtype=float)
        acc = alive.get(last, np.nan)
        records.append({"method": m, "trainings": len(rows), "epochs": int(rows["epochs"].sum()),
                        "device_hours": rows["seconds"].sum() / 3600, "last_cycle_test_acc": acc,
                        "reused": int((df["method"] == m).mul(df["reused"].astype(bool)).sum())})
    if not records:
        return None
    data = pd.DataFrame(records)
    cells = pd.DataFrame({
        "Method": data["method"].map(label),
        "trainings": data["trainings"].astype(str),
        "reused": data["reused"].astype(str),
        "epochs": data["epochs"].astype(str),
        "device-hours": data["device_hours"].map(lambda h: f"{h:.3f}"),
        f"test acc. at λ = {fmt_density(densities(df)[last])}": data["last_cycle_test_acc"].map(
            lambda a: DASH if pd.isna(a) else f"{a:.2f}"),
    })
    return Table("cost", "Cost", cells, data, cost_sentence(df, oracle) + _unused_finals(df))


def _spent(df: pd.DataFrame, method: str, stages: tuple[str, ...]) -> pd.DataFrame:
    """A method's trainings actually run (reused rows are free) in `stages`."""
    return df[(df["method"] == method) & df["stage"].isin(stages) & ~df["reused"].astype(bool)]


def _pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.0f} %"


# What a SILO variant's own search is called (its cost stages but "final": silo_paper's "tune", silo_fit's "fit").
SEARCH_WORDS = {Method.SILO_PAPER.value: "its δ search", Method.SILO_FIT.value: "its study"}


def _search_stages(method: str) -> tuple[str, ...]:
    return tuple(s for s in COST_STAGES.get(method, DEFAULT_STAGES) if s != Stage.FINAL.value)


def cost_sentence(df: pd.DataFrame, oracle: Any = None) -> str:
    """What SILO cost against both Oracles, as the report over replicates says it: the Oracle as run (racing by
    default) and the exhaustive Oracle it stands for (`oracle`, the run's `premises.OracleCost`: its plan along this
    run's chain to the plan at most; one Oracle where it ran exhaustive; without it, the Oracle as run alone); each
    SILO variant's own search (silo_paper's δ search, silo_fit's study) apart from its final chains (what the SILO
    schedule itself costs); and the held-out references' trainings, what the end-to-end verdict adds, on a line of
    their own."""
    oracle_rows = _spent(df, Method.ORACLE.value, COST_STAGES[Method.ORACLE.value])
    silo = [m for m in SILO_METHODS if not _spent(df, m, COST_STAGES.get(m, DEFAULT_STAGES)).empty]
    if oracle_rows.empty or not oracle_rows["epochs"].sum() > 0 or not silo:
        return "No SILO or no Oracle rows: no cost comparison."
    epochs, seconds = int(oracle_rows["epochs"].sum()), float(oracle_rows["seconds"].sum())
    racing = oracle is not None and oracle.racing
    run = "racing Oracle" if racing else "Oracle"

    def shares(part: int) -> str:
        said = f"{_pct(part, epochs)} of the {run}'s"
        return said + (f", {oracle.share(part / oracle.per_training)} of the exhaustive one's" if racing else "")

    if racing:
        per = oracle.per_training
        head = (f"Against the racing Oracle as run ({len(oracle_rows):,} trainings, {epochs:,} epochs) and the "
                f"exhaustive Oracle it stands for ({oracle.exhaustive()}, {round(oracle.low * per):,}–"
                f"{round(oracle.high * per):,} epochs at the racing Oracle's epochs per training: its plan along this "
                "run's chain with this run's refinements, and the plan at most)")
    else:
        ran = "exhaustive: " if oracle is not None else ""
        head = f"Against the Oracle as run ({ran}{len(oracle_rows):,} trainings, {epochs:,} epochs)"
    parts = []
    for m in silo:
        what = SEARCH_WORDS.get(m, "its search")
        search, finals = _spent(df, m, _search_stages(m)), _spent(df, m, (Stage.FINAL.value,))
        s_epochs, f_epochs = int(search["epochs"].sum()), int(finals["epochs"].sum())
        total = s_epochs + f_epochs
        hours = float(search["seconds"].sum() + finals["seconds"].sum())
        whole = (f"{_pct(total, epochs)} of the {run}'s epochs as run and {_pct(hours, seconds)} of its "
                 "device-hours" + (f"; {oracle.share(total / oracle.per_training)} of the exhaustive one's epochs"
                                   if racing else ""))
        parts.append(f"{label(m)} cost {total:,} epochs ({whole}): {what} {s_epochs:,} ({shares(s_epochs)}) and the "
                     f"SILO schedule itself, its final chains on the evaluation seeds, {f_epochs:,} "
                     f"({shares(f_epochs)})")
    said = head + ": " + "; ".join(parts) + "."
    if Method.SILO_PAPER.value in silo:
        said += " SILO (paper) takes ε from the Oracle's cycle 0, which its cost does not count."
    held = df[df["method"].isin(HELD_OUT) & (df["stage"] == Stage.FINAL.value)]
    if not held.empty:
        trained = held[~held["reused"].astype(bool)]
        h_epochs = int(trained["epochs"].sum())
        copied = len(held) - len(trained)
        said += (f" The held-out references (the Oracle's schedule, not adapting and the best constant as final "
                 f"chains on the evaluation seeds: what the end-to-end verdict adds): {len(trained):,} trainings, "
                 f"{h_epochs:,} epochs ({shares(h_epochs)})"
                 + (f"; {copied:,} more copied from identical trainings of other chains, free" if copied else "")
                 + ".")
    return said


def _unused_finals(df: pd.DataFrame) -> str:
    """Final runs trained and read by nothing (`schema.unused_finals`): on many slots, the final runs a wide δ
    search started for a δ that did not win, or a chain a rerun with other parameters replaced. They count in
    their method's cost above and in no accuracy."""
    unused = unused_finals(df.to_dict("records"))
    if not unused:
        return ""
    by = pd.Series([row["method"] for row in unused]).value_counts(sort=False).sort_index()
    return (" Not current and counted in the cost: " + ", ".join(f"{n} final run(s) of {label(m)}"
                                                                for m, n in by.items())
            + " (speculative runs of a δ that did not win, or a chain a rerun replaced; read by no decision).")


def statistics_source(df: pd.DataFrame) -> tuple[str, pd.DataFrame] | None:
    """Rows for §3.1's statistics at one fixed max_lr per cycle, so they show the effect of pruning alone: the
    Oracle's chain at its dense best (the paper's "tuned LR"; the Oracle trains it at every cycle), else the
    first method's final rows."""
    oracle = oracle_trials(df)
    best = dense_best(oracle) if not oracle.empty else None
    if best is not None:
        at = oracle[oracle["max_lr"].map(lr_key) == lr_key(best)]
        if at["cycle"].nunique() == oracle["cycle"].nunique():
            return f"Oracle chain at its dense best max_lr {best:.4g}", at
    for m in methods(df):
        rows = final_rows(df, m)
        if not rows.empty:
            return label(m), rows
    return None


def statistics_table(df: pd.DataFrame) -> Table | None:
    """(d) §3.1: gradient and activation standard deviation per λ, mean over seeds."""
    source = statistics_source(df)
    if source is None:
        return None
    name, rows = source
    per_seed = rows.groupby(["cycle", "seed"])[["grad_std", "act_std"]].mean()
    data = per_seed.groupby("cycle").mean()
    data.insert(0, "density", densities(df).reindex(data.index))
    data = data.reset_index()
    cells = pd.DataFrame({
        "λ (%)": data["density"].map(fmt_density),
        "gradient σ": data["grad_std"].map(lambda x: f"{x:.4g}"),
        "activation σ": data["act_std"].map(lambda x: f"{x:.4g}"),
    })
    first, last = data.iloc[0], data.iloc[-1]
    verdict = (f"From λ = {fmt_density(first.density)}% to {fmt_density(last.density)}%, gradient σ changes "
               f"{last.grad_std / first.grad_std:.2f}× and activation σ {last.act_std / first.act_std:.2f}× "
               f"({name}, mean over seeds).")
    return Table("statistics", "Gradient and activation statistics (§3.1)", cells, data, verdict)


# --- the answer: the verdict's family, end to end; the §5.3 diagnostic on the Oracle's chain ----------------------

def _judgement_cells(data: pd.DataFrame) -> dict[str, object]:
    """The columns a diagnostic and an end-to-end table share."""
    return {
        "Schedule": data["schedule"].map(label),
        "advantage (points)": data["advantage"].map(lambda a: DASH if pd.isna(a) else f"{a:+.2f}"),
        "95 % CI": [ci_text(lo, hi) for lo, hi in zip(data["ci_lo"], data["ci_hi"])],
        "verdict": data["verdict"],
        "margin": data["margin"].map(lambda m: DASH if pd.isna(m) else f"±{m:.2f}"),
        "seeds needed": data["seeds_needed"].map(lambda k: DASH if pd.isna(k) else str(int(k))),
        "n": data["n"].astype(str),
    }


def seed_advantages(df: pd.DataFrame, row: pd.Series, last: int) -> np.ndarray:
    """The per-seed advantages a family row's interval is over (`regret.paired`): on each of the row's `seeds`,
    Σ_{m=1..L} (test accuracy of the SILO variant − the other method's), summed in cycle order as `paired` does."""
    versus = row["chosen"] if row["versus"] == BEST_BENCHMARK else row["versus"]
    seeds = [int(s) for s in str(row["seeds"]).split()]
    ours, theirs = (per_seed_accuracy(final_rows(df, m))[0] for m in (row["schedule"], versus))
    return np.array([sum(float(ours.at[m, s]) - float(theirs.at[m, s]) for m in range(1, last + 1)) for s in seeds],
                    dtype=float)


def family_corrections(r: Regret, df: pd.DataFrame) -> pd.DataFrame:
    """One run's family (`r.end_to_end`) with, per row, `p_value` (`statistics.p_value` of the hypothesis its label
    rests on, from its per-seed advantages), `holm` (whether the label survives Holm's step-down across the family
    at 0.05: "yes"/"no", NA for inconclusive and undefined) and `bonferroni` (the same at 0.05/m), as
    `analysis.replicates.aggregate` does over replicates, here over this run's evaluation seeds."""
    data = r.end_to_end.reset_index(drop=True)
    p = []
    for _, row in data.iterrows():
        values = seed_advantages(df, row, r.last) if row["verdict"] != "undefined" else np.array([])
        if len(values) and not math.isclose(float(np.mean(values)), float(row["advantage"]), abs_tol=1e-9):
            raise ValueError(f"{row['schedule']} vs {row['versus']}: the per-seed advantages do not give the row's")
        p.append(p_value(values, row["verdict"], float(row["margin"])) if len(values) else math.nan)
    kept = holm(p)
    tested = sum(not math.isnan(x) for x in p)
    held = data["verdict"].isin(HELD)
    return data.assign(
        p_value=p,
        holm=pd.Series([("yes" if k else "no") if h else pd.NA for h, k in zip(held, kept)], dtype=object),
        bonferroni=pd.Series([("yes" if x <= ALPHA / tested else "no") if h else pd.NA for h, x in zip(held, p)],
                             dtype=object))


def _answer_cell(row: pd.Series) -> str:
    """The mark and the label in words, as over replicates (`verdict_sentences.cell`: "(uncorrected)" where Holm does
    not keep it, "by more than the margin" or ", not shown beyond the margin", an equivalence "also above 0"), † (it
    holds this run's choices fixed), the advantage and its 95 % CI over the seeds; the seeds that would tell an
    inconclusive one."""
    if row["verdict"] == "undefined":
        return VERDICT_MARKS["undefined"] + (f" (n = {row['n']} < 2 seeds)" if row["n"] < 2 else "")
    text = cell(row["verdict"], row["advantage"], row["ci_lo"], row["ci_hi"], row["margin"], row.get("holm"), "†")
    if row["verdict"] == "inconclusive" and row["advantage"] != 0:
        text += ("; > 1000 seeds to tell" if pd.isna(row["seeds_needed"]) else
                 f"; ~{int(row['seeds_needed'])} seeds to tell")
    return text


def _held_out_lr(df: pd.DataFrame, name: str) -> str:
    """A held-out constant's max_lr, from its own final chains ("" where they hold more than one value)."""
    values = {lr_key(x) for x in final_rows(df, name)["max_lr"]}
    return f" (max_lr {fmt_lr(values.pop())})" if len(values) == 1 else ""


def compared_with(row: pd.Series, df: pd.DataFrame) -> str:
    """What a family row compares SILO with, in words (`verdict_sentences.versus_name`: the best benchmark with the
    benchmark it was); a held-out constant with its max_lr."""
    name = versus_name(row["versus"], row.get("chosen"))
    return name + (_held_out_lr(df, row["versus"]) if row["versus"] in (Method.CONSTANT_DENSE.value,
                                                                        Method.CONSTANT_BEST.value) else "")


SINGLE_RUN = ("† Every label is conditional on this run's choices (the dense choice, δ, b, silo_fit's study, each "
              "benchmark's tuned peak, the held-out references' max_lr and which benchmark is the best): its interval "
              "is over the evaluation seeds alone. Replicates of the whole study (compare --replicates R) measure "
              "that noise.")


def answer_table(r: Regret, df: pd.DataFrame) -> Table | None:
    """The report's first table, the verdict's family end to end on the evaluation seeds (`r.end_to_end`): one row
    per comparison (the Oracle's schedule held out, not adapting, the best constant, every benchmark, the best
    benchmark naming which), one column per SILO variant; each cell worded as over replicates, with † (conditional
    on this run's choices). The data: the family with `family_corrections`' columns. The note under it: which labels
    hold across the family (`verdict_sentences.family_line`)."""
    if r.end_to_end.empty:
        return None
    data = family_corrections(r, df)
    rows: dict[str, dict] = {}
    for _, row in data.iterrows():
        rows.setdefault(row["versus"], {"compared with": compared_with(row, df)})[label(row["schedule"])] = \
            _answer_cell(row)
    cells = pd.DataFrame(list(rows.values())).fillna(DASH)
    seeds = sorted(set(int(n) for n in data["n"]))
    n = (f"n = {seeds[0]} evaluation seeds" if len(seeds) == 1 else
         f"n = {seeds[0]}–{seeds[-1]} evaluation seeds (a diverged chain leaves its seed out of its pairs)")
    margins = ", ".join(sorted({f"±{m:.2f}" for m in data["margin"].dropna()}))
    chosen = data.loc[data["versus"] == BEST_BENCHMARK, "chosen"]
    best = (f"the benchmark its tuning seeds scored highest ({label(chosen.iloc[0])})" if len(chosen) and
            chosen.iloc[0] else "the benchmark its tuning seeds scored highest")
    # Short above the table, so that it ends on the first screen; what the marks and words mean goes under it,
    # after the line saying which labels hold.
    verdict = (
        "Does SILO beat the Oracle's schedule, not adapting, the best constant and every benchmark? Each SILO "
        "variant against the method of the row, end to end on this run's evaluation seeds (which made no choice): "
        f"held-out test accuracy summed over cycles 1–{r.last}, paired per seed, SILO minus the other, in points "
        f"with its 95 % t interval over the {n}; the words are explained under the table.")
    details = (
        "The Oracle's schedule (b at every cycle), not adapting (the dense choice kept) and the best constant are "
        "the held-out references: final chains on the evaluation seeds with their max_lr fixed on the tuning "
        f"seeds; the best benchmark is {best}, chosen before its evaluation seeds were read. = equivalent: the "
        f"interval lies inside the margin ({margins} points: {r.margin_per_cycle:g} per compared cycle, summed "
        "like the advantage; bounds inclusive); ▲ better / ▼ worse: it excludes 0, \"by more than the margin\" "
        "where it lies wholly beyond it, \"not shown beyond the margin\" where it only excludes 0; ? "
        "inconclusive: neither, with the seeds that would tell. \"(uncorrected)\": the label does not survive "
        f"Holm's correction across the family's {len(data)} comparisons; a label without it does. {SINGLE_RUN} "
        + replicates_sentence(data))
    note = family_line(data, count="n", where=", over this run's evaluation seeds") + "\n\n" + details
    return Table("answer", "The answer", cells, data, verdict, note=note)


def replicates_sentence(data: pd.DataFrame) -> str:
    """How many replicates one run's table needs: not computable from one run (the spread between whole studies
    is unknown), but roughly estimated from below by each comparison's seed-level spread
    (`statistics.replicates_lower_estimate`: the sd between studies is at least the seed-level se on average, not
    in every comparison)."""
    bounds = [replicates_lower_estimate(row["ci_lo"], row["ci_hi"], int(row["n"]), float(row["margin"]),
                                        row["verdict"])
              for _, row in data.iterrows()]
    known = [b for b in bounds if b is not None]
    if not known:
        return "How many replicates this table needs cannot be told from it."
    beyond = len(data) - len(known)
    return (f"This table needs roughly {max(known)} or more replicates of the whole study (the most any of its "
            f"comparisons needs to show equivalence within the margin, or to reproduce its label, with 80 % power, "
            f"from this run's seed-level spread alone: a rough lower estimate, since the choices' noise adds to it "
            f"on average, though not in every comparison"
            + (f"; {beyond} comparison(s) give no estimate" if beyond else "") + ").")


def verdict_table(r: Regret) -> Table | None:
    """tables/verdict.csv, the §5.3 diagnostic: each SILO variant's max_lr against the leave-one-out Oracle and both
    controls on the Oracle's chain, over the tuning seeds; in-sample, not part of the verdict."""
    data = r.verdict
    if data.empty:
        return None
    cells = pd.DataFrame(_judgement_cells(data))
    cells.insert(1, "versus", data["versus"].map(schedule_label).replace({"oracle": "Oracle"}))
    return Table("verdict", "SILO against the Oracle and the controls on the Oracle's chain (in-sample)",
                 cells, data, " ".join(verdict_lines(r)))


def end_to_end_table(r: Regret) -> Table | None:
    """tables/end_to_end.csv, the verdict's family in full: each SILO variant's own final chains against each of
    `regret.FAMILY` on the evaluation seeds, with the seeds that would tell, n and the chains left out."""
    data = r.end_to_end
    if data.empty:
        return None
    cells = pd.DataFrame(_judgement_cells(data))
    cells.insert(1, "versus", [versus_name(v, c) for v, c in zip(data["versus"], data["chosen"])])
    cells["diverged (SILO / versus)"] = [f"{a} / {b}" for a, b in zip(data["diverged"], data["versus_diverged"])]
    verdict = (f"Every comparison of the answer with its numbers: each SILO variant's own final chains against the "
               f"method of the row, end to end on the evaluation seeds both ran (held-out test accuracy summed over "
               f"cycles 1–{r.last} and paired per seed, SILO minus the other, with its 95 % t interval over the n "
               "seeds), labelled against the margin; seeds needed: the evaluation seeds that would exclude 0 with 80 % "
               "power at the observed effect; diverged: the seeds whose chain diverged at a cycle ≤ "
               f"{r.last}, left out of the pairs. The labels here are each at 95 %, uncorrected; the answer says which "
               "hold across the family (Holm).")
    return Table("end_to_end", END_TO_END_TITLE, cells, data, verdict)


END_TO_END_TITLE = "End to end: the verdict's family in full (held-out test accuracy)"


def regret_table(df: pd.DataFrame, r: Regret) -> Table | None:
    """tables/regret.csv: per schedule and cycle, max_lr and regret with its 95 % CI (paper layout)."""
    data = r.regret
    if data.empty:
        return None
    lam = densities(df)
    cycles = sorted(data["cycle"].unique())
    rows = {}
    for name, group in data.groupby("schedule", sort=False):
        group = group.set_index("cycle")
        first = first_judged(df, name) if name in SILO_METHODS else 1
        rows[f"{schedule_label(name)} max_lr"] = [fmt_lr(group.loc[c, "max_lr"]) for c in cycles]
        rows[f"{schedule_label(name)} regret"] = _marked(
            [DASH if pd.isna(group.loc[c, "regret"]) else
             f"{group.loc[c, 'regret']:+.2f} {ci_text(group.loc[c, 'ci_lo'], group.loc[c, 'ci_hi'])}" for c in cycles],
            pd.Series(cycles), first)
    n = int(data["n"].iloc[0])
    verdict = (f"The §5.3 diagnostic, {DIAGNOSTIC}. Regret in validation-accuracy points against a leave-one-out "
               f"Oracle on its chain, mean and 95 % CI over n = {n} tuning seeds; – where undefined; * cycle 0 "
               "(shown, not summed) and a SILO variant's cycles ≤ q (it keeps ε).")
    return Table("regret", "Regret per cycle on the Oracle's chain", _by_density(rows, lam.reindex(cycles)), data,
                 verdict)
