"""The report's figures, each drawn once and saved as PNG (embedded in the HTML report) and SVG (vector, for a
paper): max_lr against λ, test accuracy against λ, gradient/activation histograms, trial slots over time."""
from __future__ import annotations

import io
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib import colormaps, rc_context
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, NullFormatter

from analysis.select import densities, label, methods
from oracle_search.compared import final_rows
from analysis.slots import PHASES
from analysis.tables import accuracy_stats
from analysis.theory import silo_curve, theory_lr
from trainables.atomic import atomic_write_bytes

FORMATS = ("png", "svg")  # every figure file is written in each
# No metadata (matplotlib's names a web address and the date) and a fixed salt for the SVG's element ids: the
# same figure gives the same bytes, and the files hold no links. The SVG's dpi applies only to what it holds as an
# image (`slots_figure`'s many bars).
_SAVE = {"png": {"dpi": 110, "metadata": {"Software": None}},
         "svg": {"dpi": 200, "metadata": {"Creator": None, "Date": None, "Format": None, "Type": None}}}
# Text as paths: the SVG looks the same without the fonts; each text is still in it, as a comment.
_SVG_RC = {"svg.hashsalt": "oracle-search", "svg.fonttype": "path"}


@dataclass(frozen=True)
class Rendered:
    """One figure in both formats: `png` for the HTML report, which embeds it; `svg`, vector, for a paper."""

    png: bytes
    svg: bytes

    def write(self, folder: Path, name: str) -> dict[str, Path]:
        """folder/name.png and folder/name.svg, each written whole; by file name (name.png, name.svg)."""
        return {f"{name}.{ext}": atomic_write_bytes(Path(folder) / f"{name}.{ext}", getattr(self, ext))
                for ext in FORMATS}


def render(fig: Figure) -> Rendered:
    """The figure as PNG and SVG bytes, cropped alike to what is drawn."""
    saved = {}
    with rc_context(_SVG_RC):
        for ext in FORMATS:
            buf = io.BytesIO()
            fig.savefig(buf, format=ext, bbox_inches="tight", **_SAVE[ext])
            saved[ext] = buf.getvalue()
    return Rendered(**saved)


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
# The Oracle's b with its interval: wide and pale, under the SILO curves drawn thin on top, so that a variant on
# the Oracle's values (SILO (paper) keeps the dense b for q cycles) still shows.
ORACLE_STYLE = {"fmt": "o-", "capsize": 4, "color": "tab:blue", "alpha": 0.45, "linewidth": 4, "markersize": 8,
                "elinewidth": 1.5, "zorder": 2}
DENSE_SCALE = "scaled to the dense max_lr"  # the one-run figure's theory curve; its caption says the same


def max_lr_figure(pooled: pd.DataFrame, per_seed: pd.DataFrame, silo: dict[str, dict], rate: float, cycles: int,
                  theory: dict) -> Rendered:
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
        ax.errorbar(pooled["density"], best, yerr=[best - pooled["lo"], pooled["hi"] - best], **ORACLE_STYLE,
                    label="Oracle (seed mean) and the paper's interval")
    m = np.arange(cycles + 1)
    lam = 100.0 * (1.0 - rate) ** m
    first = None
    for method, params in silo.items():
        curve = silo_curve(m, **params, rate=rate)
        first = curve[0] if first is None else first
        fmt, colour = SILO_STYLE.get(method, ("s--", None))
        ax.plot(lam, curve, fmt, color=colour, markersize=5, linewidth=1.5, zorder=3, label=label(method))
    scale = pooled.set_index("cycle")["best_max_lr"].get(0, first) if not pooled.empty else first
    if scale is not None:
        k = np.linspace(0, cycles, 200)
        ax.plot(100.0 * (1.0 - rate) ** k, scale * theory_lr(k, rate, **theory), color="tab:green", zorder=1,
                label=theory_label(theory, DENSE_SCALE))
    _log_max_lr_axis(ax)
    _density_axis(ax, pd.Series(lam))
    ax.legend(fontsize=9, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2, frameon=False)  # off the data
    return render(fig)


def _log_max_lr_axis(ax) -> None:
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(_log_label))
    low, high = ax.get_ylim()
    # Within one decade the 1-2-5 ticks may all fall outside the view: then label every tick.
    ax.yaxis.set_minor_formatter(FuncFormatter(_log_label if high / low >= 10 else lambda v, _p=None: f"{v:g}"))
    ax.set_ylabel("max_lr")


# In the replicates' figure: (marker, line style, colour) per SILO variant, drawn thin over the Oracle's wide pale
# line (`ORACLE_STYLE`).
REPLICATE_SILO_STYLE = {"silo_paper": ("s", "--", "tab:red"), "silo_fit": ("D", ":", "tab:purple")}
OTHER_SILO_STYLE = ("^", "-.", "tab:brown")
LINE_WORDS = {"--": "dashed", ":": "dotted", "-.": "dash-dotted"}
PANELS_PER_ROW = 3
# The replicates' figure's legend entries; its caption (`analysis.replicate_report`) says the same words.
ORACLE_BARS = "the Oracle's b (seed mean), the paper's interval as bars"
PANEL_THEORY = "theory α ∝ C^(-1/2), scaled to each panel's dense max_lr"  # σ_X, σ_W and d: in the caption


def theory_label(theory: dict, scaled: str) -> str:
    """The theory curve's legend entry: Theorem 1's σ_X, σ_W and d, and what the curve is scaled to."""
    return "theory α ∝ C^(-1/2) (σ_X={sigma_x:g}, σ_W={sigma_w:g}, d={d:g}), ".format(**theory) + scaled


def silo_line(method: str) -> str:
    """A SILO variant as the replicates' figure draws it, in words: "SILO (paper) dashed"."""
    return f"{label(method)} {LINE_WORDS[REPLICATE_SILO_STYLE.get(method, OTHER_SILO_STYLE)[1]]}"


def max_lr_replicates_figure(reps: list[tuple[str, pd.DataFrame, dict[str, dict]]], rate: float, cycles: int,
                             theory: dict) -> Rendered:
    """The paper's max_lr figure over replicates, one panel per replicate (name, `oracle_intervals` frame, SILO
    parameters by method), on one max_lr scale, `PANELS_PER_ROW` to a row, with one legend under them. In each
    panel: the Oracle's b with the paper's interval as bars, wide and pale, under every SILO variant's curve (SILO
    (paper) dashed, SILO (fit) dotted), and the theory curve scaled to the panel's dense max_lr (the Oracle's b at
    λ = 100 %, else its first SILO curve's). One replicate's lines never hide another's."""
    n = len(reps)
    ncols = min(n, PANELS_PER_ROW)
    nrows = math.ceil(n / ncols)
    fig = Figure(figsize=(0.8 + 3.6 * ncols, 1.0 + 3.2 * nrows), layout="constrained")
    # Shared y only: inverting shared x axes once per panel would flip them back and forth.
    axes = fig.subplots(nrows, ncols, sharey=True, squeeze=False).ravel()
    for ax in axes[n:]:
        ax.remove()
    m = np.arange(cycles + 1)
    lam = 100.0 * (1.0 - rate) ** m
    k = np.linspace(0, cycles, 200)
    entries: dict[str, object] = {}  # legend entry -> its first handle, in the order drawn
    for ax, (name, pooled, silo) in zip(axes, reps):
        dense = None
        if not pooled.empty:
            best = pooled["best_max_lr"]
            entries.setdefault(ORACLE_BARS, ax.errorbar(
                pooled["density"], best, yerr=[best - pooled["lo"], pooled["hi"] - best], **ORACLE_STYLE))
            dense = pooled.set_index("cycle")["best_max_lr"].get(0)
        for method, params in silo.items():
            curve = silo_curve(m, **params, rate=rate)
            dense = curve[0] if dense is None else dense
            marker, style, colour = REPLICATE_SILO_STYLE.get(method, OTHER_SILO_STYLE)
            entries.setdefault(label(method), ax.plot(lam, curve, marker=marker, linestyle=style, color=colour,
                                                      markersize=4, linewidth=1.5, zorder=3)[0])
        if dense is not None:
            entries.setdefault(PANEL_THEORY, ax.plot(
                100.0 * (1.0 - rate) ** k, dense * theory_lr(k, rate, **theory), color="black", linewidth=1.0,
                zorder=1)[0])
        ax.set_title(name, fontsize=11)
        _density_axis(ax, pd.Series(lam))
    for i, ax in enumerate(axes[:n]):  # once every panel is drawn: the shared limits are final
        _log_max_lr_axis(ax)
        if i % ncols:
            ax.set_ylabel("")
    fig.legend(list(entries.values()), list(entries), loc="outside lower center", ncol=1 if ncols == 1 else 2,
               fontsize=11, frameon=False)
    return render(fig)


def accuracy_figure(df: pd.DataFrame) -> Rendered:
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
    return render(fig)


def _histogram(text: object) -> tuple[np.ndarray, np.ndarray] | None:
    """(edges, normalised density) from a histogram JSON string, or None if absent."""
    if not isinstance(text, str) or not text:
        return None
    h = json.loads(text)
    edges, counts = np.asarray(h["edges"], dtype=float), np.asarray(h["counts"], dtype=float)
    if counts.sum() <= 0:
        return None
    return edges, counts / (counts.sum() * np.diff(edges))


def histogram_figure(rows: pd.DataFrame, lam: pd.Series) -> Rendered | None:
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
    return render(fig)



REGRET_STYLE = {"silo_paper": ("s-", "tab:red"), "silo_fit": ("D-", "tab:purple"),
                "constant_dense": ("o--", "tab:grey"), "constant_best": ("^--", "tab:green")}


def regret_figure(regret: pd.DataFrame, lam: pd.Series, labels: dict[str, str], q: int | None = None) -> Rendered:
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
    return render(fig)


def replicate_order(names) -> list[str]:
    """Replicate names in their number's order (replicate-2 before replicate-10), whatever order they come in."""
    def key(name: str) -> tuple[int, str]:
        number = re.search(r"(\d+)$", name)
        return (int(number.group(1)) if number else 0, name)
    return sorted(dict.fromkeys(str(n) for n in names), key=key)


def replicate_colours(names: list[str]) -> dict[str, tuple]:
    """One colour each (Dark2, apart from the phases' tab10), in `replicate_order`."""
    return {r: colormaps["Dark2"](i % 8) for i, r in enumerate(replicate_order(names))}


def slots_figure(lanes: pd.DataFrame) -> Rendered:
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
    # Many bars: drawn as an image inside the SVG too (its axes and text stay vector), which keeps it near the
    # PNG's size instead of growing by a path per training (1,615 trainings: 0.59 MB as paths).
    edges = ({"edgecolor": "black", "linewidth": 0.4} if len(lanes) <= 200
             else {"edgecolor": "none", "rasterized": True})
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
    return render(fig)
