"""The report's figures as PNG bytes: max_lr against λ, test accuracy against λ, gradient/activation histograms,
trial slots over time."""
from __future__ import annotations

import io
import json
import re

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
    _log_max_lr_axis(ax)
    _density_axis(ax, pd.Series(lam))
    ax.legend(fontsize=8)
    return png(fig)


def _log_max_lr_axis(ax) -> None:
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(_log_label))
    low, high = ax.get_ylim()
    # Within one decade the 1-2-5 ticks may all fall outside the view: then label every tick.
    ax.yaxis.set_minor_formatter(FuncFormatter(_log_label if high / low >= 10 else lambda v, _p=None: f"{v:g}"))
    ax.set_ylabel("max_lr")


REPLICATE_SILO_STYLE = {"silo_paper": ("s", "--"), "silo_fit": ("D", ":")}


def max_lr_replicates_figure(reps: list[tuple[str, pd.DataFrame, dict[str, dict]]], rate: float, cycles: int,
                             theory: dict) -> bytes:
    """The paper's max_lr figure over replicates: per replicate (name, `oracle_intervals` frame, SILO parameters by
    method), in one colour each, the Oracle's b with its paper interval as bars and every SILO variant's curve (SILO
    (paper) dashed, SILO (fit) dotted); the replicates' bars side by side around each density; the theory curve
    scaled to the replicates' geometric-mean dense b."""
    fig = Figure(figsize=(9, 4.8))
    ax = fig.add_subplot()
    m = np.arange(cycles + 1)
    lam = 100.0 * (1.0 - rate) ** m
    dense = []
    for i, (name, pooled, silo) in enumerate(reps):
        colour = colormaps["tab10"](i % 10)
        shift = 1.025 ** (i - (len(reps) - 1) / 2)  # the replicates' bars apart, on the log axis
        if not pooled.empty:
            best = pooled["best_max_lr"]
            ax.errorbar(pooled["density"] * shift, best, yerr=[best - pooled["lo"], pooled["hi"] - best], fmt="o-",
                        capsize=3, color=colour, linewidth=1.2, label=f"{name}: Oracle b, paper interval")
            dense += list(pooled.loc[pooled["cycle"] == 0, "best_max_lr"])
        for method, params in silo.items():
            marker, style = REPLICATE_SILO_STYLE.get(method, ("s", "-."))
            ax.plot(lam, silo_curve(m, **params, rate=rate), marker=marker, linestyle=style, markersize=4,
                    color=colour, alpha=0.8, label=f"{name}: {label(method)}")
    if dense:
        scale = float(np.exp(np.mean(np.log(dense))))
        k = np.linspace(0, cycles, 200)
        ax.plot(100.0 * (1.0 - rate) ** k, scale * theory_lr(k, rate, **theory), color="black", linewidth=1.0,
                label="theory α ∝ C^(-1/2) (σ_X={sigma_x:g}, σ_W={sigma_w:g}, d={d:g}), at the mean dense b"
                .format(**theory))
    _log_max_lr_axis(ax)
    _density_axis(ax, pd.Series(lam))
    handles, labels = ax.get_legend_handles_labels()  # matplotlib lists error bars last: by replicate instead
    order = [lb for name, _, silo in reps for lb in (f"{name}: Oracle b, paper interval",
                                                     *(f"{name}: {label(m)}" for m in silo))]
    ranked = sorted(zip(handles, labels), key=lambda hl: order.index(hl[1]) if hl[1] in order else len(order))
    ax.legend(*zip(*ranked), fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
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


def replicate_order(names) -> list[str]:
    """Replicate names in their number's order (replicate-2 before replicate-10), whatever order they come in."""
    def key(name: str) -> tuple[int, str]:
        number = re.search(r"(\d+)$", name)
        return (int(number.group(1)) if number else 0, name)
    return sorted(dict.fromkeys(str(n) for n in names), key=key)


def replicate_colours(names: list[str]) -> dict[str, tuple]:
    """One colour each (Dark2, apart from the phases' tab10), in `replicate_order`."""
    return {r: colormaps["Dark2"](i % 8) for i, r in enumerate(replicate_order(names))}


def slots_figure(lanes: pd.DataFrame) -> bytes:
    """Trainings over time (`analysis.slots.slot_lanes`): one bar per training from its start to its finish, on its
    lane, coloured by phase; when the lanes carry a `replicate` column with several replicates, a second panel
    draws the same bars coloured by replicate (legend in the replicates' order). Lanes are a packing of the
    intervals, not actors."""
    present = set(lanes["phase"])
    phases = [p for p in PHASES if p in present] + sorted(present - set(PHASES))
    panels = [("phase", {p: colormaps["tab10"](i % 10) for i, p in enumerate(phases)})]
    if "replicate" in lanes:
        lanes = lanes.assign(replicate=lanes["replicate"].astype(str))
        if lanes["replicate"].nunique() > 1:
            panels.append(("replicate", replicate_colours(list(lanes["replicate"]))))
    n = int(lanes["lane"].max()) + 1 if len(lanes) else 0
    height = min(2.0 + 0.3 * n, 12.0 / len(panels))
    fig = Figure(figsize=(8, height * len(panels)))
    # Many short bars drawn with edges turn black: then the colours alone.
    edges = {"edgecolor": "black", "linewidth": 0.4} if len(lanes) <= 200 else {"edgecolor": "none"}
    first = None
    for i, (column, palette) in enumerate(panels):
        ax = fig.add_subplot(len(panels), 1, i + 1, sharex=first)
        first = first or ax
        for (lane, value), group in lanes.groupby(["lane", column], sort=False):
            bars = list(zip(group["start_s"], group["end_s"] - group["start_s"]))
            ax.broken_barh(bars, (lane - 0.4, 0.8), facecolors=palette[value], **edges)
        handles = [Patch(facecolor=c, edgecolor="black", linewidth=0.4,
                         label=v if column == "phase" or v.startswith("replicate") else f"replicate {v}")
                   for v, c in palette.items()]
        ax.set_yticks(range(n))
        ax.set_ylim(-0.6, n - 0.4)
        ax.invert_yaxis()
        ax.set_ylabel("lane (a packing)")
        ax.grid(True, axis="x", alpha=0.3)
        if len(panels) > 1:
            ax.set_title(f"coloured by {column}", fontsize=9, loc="left")
            ax.tick_params(labelbottom=i == len(panels) - 1)
        if handles:
            ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.axes[-1].set_xlabel("seconds since the first training started")
    return png(fig)
