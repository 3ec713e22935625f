"""The report's figures as PNG bytes: max_lr against λ, test accuracy against λ, gradient/activation histograms,
trial slots over time."""
from __future__ import annotations

import io
import json

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, NullFormatter

from analysis.select import densities, label, methods
from oracle_search.compared import final_rows
from analysis.slots import PHASES
from analysis.tables import accuracy_stats
from analysis.theory import silo_curve, theory_lr


def png(fig: Figure) -> bytes:
    """The figure as PNG bytes (no metadata, so the output holds no links)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight", metadata={"Software": None})
    return buf.getvalue()


def _plain(v: float, _pos: object = None) -> str:
    return f"{v:.3g}"


def _log_label(v: float, _pos: object = None) -> str:
    """Plain labels at 1, 2 and 5 times a power of ten; other log ticks unlabelled."""
    mantissa = round(v / 10 ** np.floor(np.log10(v)), 6)
    return f"{v:g}" if mantissa in (1, 2, 5) else ""


def _density_axis(ax, lam: pd.Series) -> None:
    """λ on a log scale, decreasing to the right as pruning proceeds, ticked at the cycles' densities."""
    ax.set_xscale("log")
    ax.set_xticks(lam.to_numpy(), [_plain(v) for v in lam], minor=False)
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.invert_xaxis()
    ax.set_xlabel("density λ (%)")
    ax.grid(True, which="both", alpha=0.3)


SILO_STYLE = {"silo_paper": ("s--", "tab:red"), "silo_fit": ("D:", "tab:purple")}


def max_lr_figure(pooled: pd.DataFrame, per_seed: pd.DataFrame, silo: dict[str, dict], rate: float, cycles: int,
                  theory: dict) -> bytes:
    """Oracle b (seed mean) with the paper's interval as bars and the "not shown worse" span as a band, each seed's
    own best, every SILO variant's curve and the theory curve."""
    fig = Figure(figsize=(7, 4.5))
    ax = fig.add_subplot()
    if not per_seed.empty:
        ax.scatter(per_seed["density"], per_seed["best_max_lr"], marker="x", color="grey", alpha=0.6,
                   label="Oracle, each seed's own best")
    if not pooled.empty:
        n = int(pooled["n_seeds"].min())
        ax.fill_between(pooled["density"], pooled["noise_lo"], pooled["noise_hi"], color="tab:blue", alpha=0.15,
                        label=f"not shown worse, lenient (n = {n})")
        best = pooled["best_max_lr"]
        ax.errorbar(pooled["density"], best, yerr=[best - pooled["lo"], pooled["hi"] - best], fmt="o-", capsize=4,
                    color="tab:blue", label="Oracle (seed mean) and the paper's interval")
    m = np.arange(cycles + 1)
    lam = 100.0 * (1.0 - rate) ** m
    first = None
    for method, params in silo.items():
        curve = silo_curve(m, **params, rate=rate)
        first = curve[0] if first is None else first
        fmt, colour = SILO_STYLE.get(method, ("s--", None))
        ax.plot(lam, curve, fmt, color=colour, label=label(method))
    scale = pooled.set_index("cycle")["best_max_lr"].get(0, first) if not pooled.empty else first
    if scale is not None:
        k = np.linspace(0, cycles, 200)
        ax.plot(100.0 * (1.0 - rate) ** k, scale * theory_lr(k, rate, **theory), color="tab:green",
                label="theory α ∝ C^(-1/2) (σ_X={sigma_x:g}, σ_W={sigma_w:g}, d={d:g})".format(**theory))
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(_log_label))
    low, high = ax.get_ylim()
    # Within one decade the 1-2-5 ticks may all fall outside the view: then label every tick.
    ax.yaxis.set_minor_formatter(FuncFormatter(_log_label if high / low >= 10 else lambda v, _p=None: f"{v:g}"))
    ax.set_ylabel("max_lr")
    _density_axis(ax, pd.Series(lam))
    ax.legend(fontsize=8)
    return png(fig)


def accuracy_figure(df: pd.DataFrame) -> bytes:
    """Early-stop test accuracy (mean ± 95 % half-width over seeds) against λ, one line per method."""
    fig = Figure(figsize=(7, 4.5))
    ax = fig.add_subplot()
    lam = densities(df)
    for m in methods(df):
        stats = accuracy_stats(final_rows(df, m))
        if not stats.empty:
            ax.errorbar(lam[stats.index], stats["mean"], yerr=stats["ci95"].fillna(0), fmt="o-", capsize=3,
                        label=label(m))
    ax.set_ylabel("early-stop test accuracy (%)")
    _density_axis(ax, lam)
    ax.legend(fontsize=8)
    return png(fig)


def _histogram(text: object) -> tuple[np.ndarray, np.ndarray] | None:
    """(edges, normalised density) from a histogram JSON string, or None if absent."""
    if not isinstance(text, str) or not text:
        return None
    h = json.loads(text)
    edges, counts = np.asarray(h["edges"], dtype=float), np.asarray(h["counts"], dtype=float)
    if counts.sum() <= 0:
        return None
    return edges, counts / (counts.sum() * np.diff(edges))


def histogram_figure(rows: pd.DataFrame, lam: pd.Series) -> bytes | None:
    """Gradient and activation histograms per λ (first seed of `rows`), as in the paper's Fig. 1."""
    first = rows[rows["seed"] == rows["seed"].min()].sort_values("cycle").drop_duplicates("cycle")
    panels = [("grad_hist", "gradients"), ("act_hist", "activations")]
    hists = {col: [(c, _histogram(t)) for c, t in zip(first["cycle"], first[col])] for col, _ in panels}
    if not any(h for col in hists for _, h in hists[col]):
        return None
    fig = Figure(figsize=(11, 4))
    colours = {c: v for c, v in zip(first["cycle"], np.linspace(0.0, 0.9, len(first)))}
    for i, (col, title) in enumerate(panels):
        ax = fig.add_subplot(1, 2, i + 1)
        for cycle, h in hists[col]:
            if h is not None:
                ax.stairs(h[1], h[0], color=colormaps["viridis"](colours[cycle]), label=f"λ = {lam[cycle]:.3g}%")
        ax.set_yscale("log")
        ax.set_title(f"{title} (seed {first['seed'].iloc[0]})")
        ax.set_ylabel("density")
        ax.legend(fontsize=7)
    return png(fig)



REGRET_STYLE = {"silo_paper": ("s-", "tab:red"), "silo_fit": ("D-", "tab:purple"),
                "constant_dense": ("o--", "tab:grey"), "constant_best": ("^--", "tab:green")}


def regret_figure(regret: pd.DataFrame, lam: pd.Series, labels: dict[str, str], q: int | None = None) -> bytes:
    """Regret (validation-accuracy points below the leave-one-out Oracle) against cycle, one line per schedule
    with its 95 % CI as a band; cycle 0 (shown, not summed) and SILO (paper)'s cycles 1..q (it keeps ε) shaded."""
    fig = Figure(figsize=(7, 4.5))
    ax = fig.add_subplot()
    cycles = sorted(regret["cycle"].unique())
    ax.axvspan(-0.4, 0.5, color="0.85", label="cycle 0: shown, not summed")
    if q is not None and q >= 1:
        ax.axvspan(0.5, min(q, cycles[-1]) + 0.5, color="0.93", label=f"cycles ≤ q = {q}: SILO (paper) keeps ε")
    ax.axhline(0.0, color="black", linewidth=0.8)
    for name, group in regret.groupby("schedule", sort=False):
        group = group.sort_values("cycle")
        fmt, colour = REGRET_STYLE.get(name, ("o-", None))
        line = ax.plot(group["cycle"], group["regret"], fmt, color=colour, label=labels.get(name, name))[0]
        ax.fill_between(group["cycle"], group["ci_lo"], group["ci_hi"], color=line.get_color(), alpha=0.15)
    n = int(regret["n"].iloc[0]) if len(regret) else 0
    ax.set_xticks(cycles, [f"{c}\n{_plain(lam.get(c, float('nan')))} %" for c in cycles])
    ax.set_xlabel("cycle / density λ")
    ax.set_ylabel(f"regret (val. acc. points, mean ± 95 % CI, n = {n})")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return png(fig)


SLOT_HATCHES = ("", "//", "..", "xx", "\\\\", "++", "oo", "--")


def slots_figure(lanes: pd.DataFrame) -> bytes:
    """Trainings over time (`analysis.slots.slot_lanes`): one bar per training from its start to its finish, on its
    lane, coloured by phase and, when the lanes carry a `replicate` column, hatched by replicate. Lanes are a
    packing of the intervals, not actors."""
    present = set(lanes["phase"])
    phases = [p for p in PHASES if p in present] + sorted(present - set(PHASES))
    colours = {p: colormaps["tab10"](i % 10) for i, p in enumerate(phases)}
    if "replicate" in lanes:
        lanes = lanes.assign(replicate=lanes["replicate"].astype(str))
    replicates = list(dict.fromkeys(lanes["replicate"])) if "replicate" in lanes else []
    hatches = {r: SLOT_HATCHES[i % len(SLOT_HATCHES)] for i, r in enumerate(replicates)}
    n = int(lanes["lane"].max()) + 1 if len(lanes) else 0
    fig = Figure(figsize=(8, min(2.0 + 0.3 * n, 12.0)))
    ax = fig.add_subplot()
    keys = ["lane", "phase"] + (["replicate"] if replicates else [])
    for key, group in lanes.groupby(keys, sort=False, dropna=False):
        lane, name = key[0], key[1]
        bars = list(zip(group["start_s"], group["end_s"] - group["start_s"]))
        ax.broken_barh(bars, (lane - 0.4, 0.8), facecolors=colours[name], edgecolor="black", linewidth=0.4,
                       hatch=hatches[key[2]] if replicates else None)
    handles = [Patch(facecolor=colours[p], edgecolor="black", linewidth=0.4, label=p) for p in phases]
    if len(replicates) > 1:
        handles += [Patch(facecolor="white", edgecolor="black", hatch=hatches[r], label=str(r) if str(r).startswith("replicate") else f"replicate {r}")
                    for r in replicates]
    ax.set_yticks(range(n))
    ax.set_ylim(-0.6, n - 0.4)
    ax.invert_yaxis()
    ax.set_ylabel("lane (a packing, not an actor)")
    ax.set_xlabel("seconds since the first training started")
    ax.grid(True, axis="x", alpha=0.3)
    if handles:
        ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return png(fig)
