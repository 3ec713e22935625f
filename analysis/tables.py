"""The report's tables: Oracle intervals, test accuracy, cost and §3.1 statistics, each with a verdict line."""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

import numpy as np
from scipy.stats import t as student_t

from analysis.intervals import count_inside, oracle_intervals, seed_intervals
from analysis.select import cost_rows, densities, final_rows, label, methods, oracle_trials
from oracle_search.schema import SILO_METHODS
from oracle_search.selection import TOLERANCE, Curve, choose, dense_best, lr_key

DASH = "–"


@dataclass(frozen=True)
class Table:
    """Display cells (first column holds row labels), the numbers behind them (CSV) and a verdict line."""

    name: str
    title: str
    cells: pd.DataFrame
    data: pd.DataFrame
    verdict: str
    bold: pd.DataFrame | None = None


def fmt_density(x: float) -> str:
    return f"{x:.3g}"


def fmt_lr(x: float) -> str:
    return DASH if pd.isna(x) else f"{x:.4g}"


def _yes_no(x: object) -> str:
    return DASH if pd.isna(x) else ("yes" if x else "no")


def _by_density(rows: dict[str, list[str]], lam: pd.Series) -> pd.DataFrame:
    """Paper layout: one row per quantity, one column per density λ."""
    columns = ["λ (%)", *map(fmt_density, lam)]
    return pd.DataFrame([[name, *values] for name, values in rows.items()], columns=columns)


def headline(pooled: pd.DataFrame, tol: float = TOLERANCE) -> list[str]:
    """The verdict per SILO variant: the noise-aware interval when n >= 3 seeds, else the paper's, said plainly."""
    if pooled.empty:
        return []
    n = int(pooled["n_seeds"].min())
    kind, column = (("noise-aware", "noise_inside") if n >= 3 else ("paper's", "inside"))
    lines = []
    for method in (m for m in SILO_METHODS if f"{m}_max_lr" in pooled):
        k, judged = count_inside(pooled, f"{method}_{column}")
        other = count_inside(pooled, f"{method}_{'inside' if column == 'noise_inside' else 'noise_inside'}")[0]
        lines.append(f"{label(method)} inside the {kind} Oracle interval at {k} of {judged} cycles "
                     f"(n = {n} tuning seed{'s' * (n != 1)}, tolerance {tol:g} points"
                     + (f", 95 % one-sided; the paper's interval: {other} of {judged})." if column == "noise_inside"
                        else f"; fewer than 3 seeds, so not the noise-aware interval, which gives {other} of {judged})."))
    if not lines:
        lines.append(f"No SILO rows; {int(pooled['noise_contiguous'].sum())} of {len(pooled)} noise-aware Oracle "
                     f"intervals contiguous (n = {n}).")
    return lines


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
        "noise-aware interval": [f"[{fmt_lr(lo)}, {fmt_lr(hi)}]"
                                 for lo, hi in zip(pooled["noise_lo"], pooled["noise_hi"])],
        "contiguous (paper / noise)": [f"{_yes_no(a)} / {_yes_no(b)}"
                                       for a, b in zip(pooled["contiguous"], pooled["noise_contiguous"])],
        "values trained": pooled["n_values"].astype(str).tolist(),
        "unimodal": [_yes_no(x) for x in pooled["unimodal"]],
    }
    for method in SILO_METHODS:
        if f"{method}_max_lr" in pooled:
            rows[f"{label(method)} max_lr"] = [fmt_lr(x) for x in pooled[f"{method}_max_lr"]]
            rows[f"{label(method)} inside (paper / noise)"] = [
                f"{_yes_no(a)} / {_yes_no(b)}" for a, b in zip(pooled[f"{method}_inside"], pooled[f"{method}_noise_inside"])]
    verdict = " ".join(headline(pooled, tol))
    return Table("oracle", "Oracle max_lr and intervals", _by_density(rows, pooled["density"]), pooled, verdict)


def values_table(df: pd.DataFrame, tol: float = TOLERANCE) -> Table | None:
    """(a, detail) Per cycle, every max_lr trained by all seeds: seed-mean ± s.e. and whether each interval holds it."""
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
        mean, se = curve.mean(), curve.standard_error()
        for v, a, b in zip(choice.values, choice.inside, choice.noise_inside):
            records.append({"cycle": int(cycle), "max_lr": v, "val_mean": float(mean[v]), "val_se": float(se[v]),
                            "paper_inside": a, "noise_inside": b, "best": v == choice.best})
    data = pd.DataFrame(records)
    lam = densities(df)
    cells = pd.DataFrame({
        "λ (%)": data["cycle"].map(lam).map(fmt_density),
        "max_lr": data["max_lr"].map(fmt_lr),
        "val. acc.": [f"{m:.2f}" + ("" if pd.isna(e) else f" ± {e:.2f}") for m, e in zip(data["val_mean"], data["val_se"])],
        "paper": data["paper_inside"].map(_yes_no),
        "noise-aware": data["noise_inside"].map(_yes_no),
        "best": data["best"].map(lambda b: "b" if b else ""),
    })
    bad = pooled.loc[~pooled["unimodal"].astype(bool), "density"]
    verdict = (f"{len(data)} (cycle, max_lr) values trained by every seed; "
               + ("every cycle's seed-mean curve is unimodal." if bad.empty else
                  "not unimodal at λ = " + ", ".join(fmt_density(x) for x in bad) + " %."))
    return Table("oracle_values", "Every value the Oracle trained", cells, data, verdict)


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


def accuracy_stats(rows: pd.DataFrame) -> pd.DataFrame:
    """Early-stop test accuracy per cycle: mean, sample std, n seeds and the 95 % confidence half-width."""
    per_seed = rows.groupby(["cycle", "seed"])["test_acc"].mean()
    stats = per_seed.groupby("cycle").agg(mean="mean", std="std", n_seeds="count")
    n = stats["n_seeds"].to_numpy()
    t = np.where(n > 1, student_t.ppf(0.975, np.maximum(n - 1, 1)), np.nan)
    stats["ci95"] = t * stats["std"] / np.sqrt(n)
    return stats


def _mean_ci(mean: float, ci: float, n: int) -> str:
    return f"{mean:.2f} (n={n})" if n < 2 else f"{mean:.2f} ± {ci:.2f} (n={n})"


def accuracy_table(df: pd.DataFrame) -> Table | None:
    """(b) Methods × λ: early-stop test accuracy, mean ± 95 % confidence half-width over seeds, with n; the
    Oracle on its tuning seeds' chains (it selects on validation), every other method on evaluation seeds."""
    stats = {m: accuracy_stats(final_rows(df, m)) for m in methods(df)}
    stats = {m: s for m, s in stats.items() if not s.empty}
    if not stats:
        return None
    lam = densities(df)
    cycles = sorted(set().union(*(s.index for s in stats.values())))
    means = pd.DataFrame({m: s["mean"].round(2) for m, s in stats.items()}).reindex(cycles).T
    best = means.eq(means.max(axis=0), axis=1)
    cells = pd.DataFrame(
        [[label(m), *(_mean_ci(s.loc[c, "mean"], s.loc[c, "ci95"], int(s.loc[c, "n_seeds"])) if c in s.index else DASH
                      for c in cycles)] for m, s in stats.items()],
        columns=["Method", *(fmt_density(lam[c]) for c in cycles)],
    )
    bold = pd.DataFrame(False, index=cells.index, columns=cells.columns)
    bold.iloc[:, 1:] = best.to_numpy()
    data = pd.concat({m: s for m, s in stats.items()}, names=["method"]).reset_index()
    data.insert(2, "density", data["cycle"].map(lam))
    verdict = _accuracy_verdict(stats, cycles)
    return Table("accuracy", "Early-stop test accuracy (%)", cells, data, verdict, bold)


def _accuracy_verdict(stats: dict[str, pd.DataFrame], cycles: list[int]) -> str:
    """Per SILO variant: at how many densities its mean is highest, and at how many that lead exceeds the
    runner-up's 95 % half-width (a lead within seed noise is not a finding)."""
    parts = []
    for m in (m for m in SILO_METHODS if m in stats):
        wins = clear = 0
        for c in cycles:
            if c not in stats[m].index:
                continue
            others = [(s.loc[c, "mean"], s.loc[c, "ci95"]) for k, s in stats.items() if k != m and c in s.index]
            if not others:
                continue
            top, top_ci = max(others)
            mean, ci = stats[m].loc[c, "mean"], stats[m].loc[c, "ci95"]
            if mean >= top:
                wins += 1
                clear += bool(mean - top > np.nanmax([ci, top_ci, 0.0]))
        parts.append(f"{label(m)} has the highest mean at {wins} of {len(cycles)} densities, beyond the 95 % "
                     f"half-widths at {clear}")
    if not parts:
        return "No SILO rows."
    return "; ".join(parts) + " (Oracle: its tuning chains; others: held-out evaluation seeds)."


def best_per_density(df: pd.DataFrame) -> str:
    """"λ: method" for each density, by mean test accuracy ("tie" when the top two lie within both half-widths)."""
    stats = {m: accuracy_stats(final_rows(df, m)) for m in methods(df)}
    stats = {m: s for m, s in stats.items() if not s.empty}
    lam, parts = densities(df), []
    for c in sorted(set().union(*(s.index for s in stats.values()))) if stats else []:
        ranked = sorted(((s.loc[c, "mean"], s.loc[c, "ci95"], m) for m, s in stats.items() if c in s.index),
                        reverse=True)
        (top, ci, m), rest = ranked[0], ranked[1:]
        close = rest and top - rest[0][0] <= np.nanmax([ci, rest[0][1], 0.0])
        parts.append(f"{fmt_density(lam[c])} %: {label(m)}{' (within noise of ' + label(rest[0][2]) + ')' if close else ''}")
    return "; ".join(parts)


def cost_table(df: pd.DataFrame) -> Table | None:
    """(c) Per method: trainings actually run (reused ones are free), epochs, device-hours, last-cycle accuracy."""
    last = int(df["cycle"].max()) if len(df) else 0
    records = []
    for m in methods(df):
        rows = cost_rows(df, m)
        final = final_rows(df, m)
        if rows.empty and final.empty:
            continue
        acc = final[final["cycle"] == last].groupby("seed")["test_acc"].mean().mean()
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
    by = data.set_index("method")
    parts = []
    if "oracle" in by.index and by.loc["oracle", "epochs"] > 0:
        for m in (m for m in SILO_METHODS if m in by.index):
            share = by.loc[m] / by.loc["oracle"]
            parts.append(f"{label(m)} cost {100 * share['epochs']:.0f}% of the Oracle's epochs and "
                         f"{100 * share['device_hours']:.0f}% of its device-hours")
    verdict = ("; ".join(parts) + ". SILO (paper) takes ε from the Oracle's cycle 0, which its cost does not count."
               if parts else "No SILO or no Oracle rows: no cost comparison.")
    return Table("cost", "Cost", cells, data, verdict)


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
