"""The report's tables: Oracle intervals, test accuracy, cost and §3.1 statistics, each with a verdict line."""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from analysis.intervals import TOLERANCE, count_inside, pooled_intervals, seed_intervals
from analysis.select import cost_rows, densities, final_rows, label, methods

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


def oracle_table(df: pd.DataFrame, tol: float = TOLERANCE) -> Table | None:
    """(a) Oracle max_lr, interval and SILO's max_lr per density, on seed-mean validation accuracy."""
    pooled = pooled_intervals(df, tol)
    if pooled.empty:
        return None
    rows = {
        "Oracle max_lr": [fmt_lr(x) for x in pooled["best_max_lr"]],
        "Oracle interval": [f"[{fmt_lr(lo)}, {fmt_lr(hi)}]" for lo, hi in zip(pooled["lo"], pooled["hi"])],
        "contiguous": [_yes_no(x) for x in pooled["contiguous"]],
    }
    seeds = int(pooled["n_seeds"].max())
    inside, judged = count_inside(pooled)
    if judged:
        rows["SILO max_lr"] = [fmt_lr(x) for x in pooled["silo_max_lr"]]
        rows["SILO inside"] = [_yes_no(x) for x in pooled["inside"]]
        verdict = f"SILO inside the Oracle interval at {inside} of {judged} cycles"
    else:
        verdict = f"No SILO rows; {int(pooled['contiguous'].sum())} of {len(pooled)} Oracle intervals contiguous"
    verdict += f" (seed-mean validation accuracy over {seeds} seed{'s' * (seeds != 1)}, tolerance {tol:g} points)."
    return Table("oracle", "Oracle max_lr and interval", _by_density(rows, pooled["density"]), pooled, verdict)


def seed_table(df: pd.DataFrame, tol: float = TOLERANCE) -> Table | None:
    """(a, per seed) The Oracle's choice and interval for every (seed, cycle)."""
    frame = seed_intervals(df, tol)
    if frame.empty:
        return None
    cells = pd.DataFrame({
        "seed": frame["seed"].astype(str),
        "λ (%)": frame["density"].map(fmt_density),
        "Oracle max_lr": frame["best_max_lr"].map(fmt_lr),
        "Oracle interval": [f"[{fmt_lr(lo)}, {fmt_lr(hi)}]" for lo, hi in zip(frame["lo"], frame["hi"])],
        "contiguous": frame["contiguous"].map(_yes_no),
        "SILO inside": frame["inside"].map(_yes_no),
    })
    inside, judged = count_inside(frame)
    contiguous = f"{int(frame['contiguous'].sum())} of {len(frame)} intervals contiguous"
    verdict = (f"SILO inside the per-seed Oracle interval at {inside} of {judged} (seed, cycle) pairs; {contiguous}."
               if judged else f"No SILO rows; {contiguous}.")
    return Table("oracle_seeds", "Oracle per seed", cells, frame, verdict)


def accuracy_stats(rows: pd.DataFrame) -> pd.DataFrame:
    """Early-stop test accuracy per cycle: mean and sample std over seeds (repeats within a seed averaged)."""
    per_seed = rows.groupby(["cycle", "seed"])["test_acc"].mean()
    return per_seed.groupby("cycle").agg(mean="mean", std="std", n_seeds="count")


def _mean_std(mean: float, std: float, n: int) -> str:
    return f"{mean:.2f}" if n < 2 else f"{mean:.2f} ± {std:.2f}"


def accuracy_table(df: pd.DataFrame) -> Table | None:
    """(b) Schedules × λ: early-stop test accuracy mean ± std over seeds, the best mean per column in bold."""
    stats = {m: accuracy_stats(final_rows(df, m)) for m in methods(df)}
    stats = {m: s for m, s in stats.items() if not s.empty}
    if not stats:
        return None
    lam = densities(df)
    cycles = sorted(set().union(*(s.index for s in stats.values())))
    means = pd.DataFrame({m: s["mean"].round(2) for m, s in stats.items()}).reindex(cycles).T
    best = means.eq(means.max(axis=0), axis=1)
    cells = pd.DataFrame(
        [[label(m), *(_mean_std(*s.loc[c]) if c in s.index else DASH for c in cycles)] for m, s in stats.items()],
        columns=["Schedule", *(fmt_density(lam[c]) for c in cycles)],
    )
    bold = pd.DataFrame(False, index=cells.index, columns=cells.columns)
    bold.iloc[:, 1:] = best.to_numpy()
    data = pd.concat({m: s for m, s in stats.items()}, names=["method"]).reset_index()
    data.insert(2, "density", data["cycle"].map(lam))
    wins = best.sum(axis=1)
    who = "silo" if "silo" in stats else wins.idxmax()
    verdict = f"{label(who)} best at {int(wins[who])} of {len(cycles)} densities (highest mean test accuracy)."
    return Table("accuracy", "Early-stop test accuracy (%)", cells, data, verdict, bold)


def cost_table(df: pd.DataFrame) -> Table | None:
    """(c) Per method: trainings, epochs, device-hours and last-cycle test accuracy."""
    last = int(df["cycle"].max()) if len(df) else 0
    records = []
    for m in methods(df):
        rows = cost_rows(df, m)
        if rows.empty:
            continue
        final = final_rows(df, m)
        acc = final[final["cycle"] == last].groupby("seed")["test_acc"].mean().mean()
        records.append({"method": m, "trainings": len(rows), "epochs": int(rows["epochs"].sum()),
                        "device_hours": rows["seconds"].sum() / 3600, "last_cycle_test_acc": acc})
    if not records:
        return None
    data = pd.DataFrame(records)
    cells = pd.DataFrame({
        "Method": data["method"].map(label),
        "trainings": data["trainings"].astype(str),
        "epochs": data["epochs"].astype(str),
        "device-hours": data["device_hours"].map(lambda h: f"{h:.3f}"),
        f"test acc. at λ = {fmt_density(densities(df)[last])}": data["last_cycle_test_acc"].map(
            lambda a: DASH if pd.isna(a) else f"{a:.2f}"),
    })
    by = data.set_index("method")
    if {"oracle", "silo"} <= set(by.index):
        share = by.loc["silo"] / by.loc["oracle"]
        verdict = (f"SILO cost {100 * share['epochs']:.0f}% of the Oracle's epochs "
                   f"and {100 * share['device_hours']:.0f}% of its device-hours.")
    else:
        verdict = "No SILO or no Oracle rows: no cost comparison."
    return Table("cost", "Cost", cells, data, verdict)


def statistics_source(df: pd.DataFrame) -> tuple[str, pd.DataFrame] | None:
    """Rows for §3.1's statistics: the Oracle's selected rows, else the first method with final rows."""
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
               f"({name} rows, mean over seeds).")
    return Table("statistics", "Gradient and activation statistics (§3.1)", cells, data, verdict)
