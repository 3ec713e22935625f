"""The premise's files (`oracle_search.premise`): premise.csv (one row per λ, moment and reading), premise.png and
premise.svg (the paper's Fig. 1 (a)/(b) in both readings and at both moments, and σ against λ) and premise.md (the
figure, the one sentence saying which reading reproduces the paper's shape, the table)."""
from __future__ import annotations

import csv
import io
import math
from pathlib import Path

import numpy as np
from matplotlib import colormaps
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter

from analysis.figures import Rendered, render
from oracle_search.premise import PremiseResult
from oracle_search.premise_settings import MOMENTS, PAPER_OUTSIDE, PAPER_SIGMA, READINGS, WINDOW
from trainables.atomic import atomic_write_bytes

COLUMNS = ("lambda", "cycle", "moment", "reading", "batches", "sigma_grad", "sigma_act", "outside_window",
           "outside_scaled_window", "sigma_grad_first_batch", "sigma_grad_sd_over_batches", "zeros",
           "layer_statistics_grad_std", "best_epoch", "val_acc", "test_acc")
READING_WORDS = {"all": "over all weights (pruned ones as zeros)", "surviving": "over the surviving weights"}
MOMENT_WORDS = {"start": "at the cycle's start (pruned, before training)", "end": "at the cycle's end (trained)"}
PANEL_TITLES = {"all": "weight gradients, all weights", "surviving": "weight gradients, surviving weights",
                "act": "hidden representations"}
BINS = 60
# A σ within this fraction of its dense value at the last λ has neither fallen nor risen: on the embedded default
# the per-batch σ's spread over 10 batches, over √10, was 2.5-8.3 % of the pooled σ.
FLAT = 0.10


def _num(v: object) -> str:
    if isinstance(v, float):
        return "" if math.isnan(v) else f"{v:.6g}"
    return str(v)


def premise_csv(rows: list[dict]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(COLUMNS)
    for row in rows:
        w.writerow([_num(row[c]) for c in COLUMNS])
    return buf.getvalue()


def _pick(rows: list[dict], moment: str, reading: str) -> list[dict]:
    return sorted((r for r in rows if r["moment"] == moment and r["reading"] == reading), key=lambda r: r["cycle"])


def trends(rows: list[dict]) -> dict[tuple[str, str], tuple[float, float, float, float]]:
    """(moment, reading) -> (σ at the first cycle, σ at the last, their ratio, λ at the last)."""
    out = {}
    for moment in MOMENTS:
        for reading in READINGS:
            picked = _pick(rows, moment, reading)
            if len(picked) >= 2:
                first, last = picked[0]["sigma_grad"], picked[-1]["sigma_grad"]
                out[(moment, reading)] = (first, last, last / first if first else float("nan"), picked[-1]["lambda"])
    return out


def _g(v: float) -> str:
    return f"{v:.2g}" if abs(v) >= 1e-2 or v == 0 else f"{v:.2e}".replace("e-0", "e-")


def shape_sentence(rows: list[dict]) -> str:
    """One sentence: which (reading, moment) sees the gradients' σ fall from the dense cycle to the last, as the
    paper's Fig. 1(a) (8.4e-3 → 3.3e-3), and which sees it rise."""
    found = trends(rows)
    if not found:
        return "Too few cycles to say whether the gradients' σ falls or rises."
    lam = next(iter(found.values()))[3]
    falls = [k for k, t in found.items() if t[2] < 1 - FLAT]
    rises = [k for k, t in found.items() if t[2] > 1 + FLAT]
    flat = [k for k in found if k not in falls and k not in rises]

    def said(keys: list[tuple[str, str]]) -> str:
        parts = []
        for reading in READINGS:
            at = [(m, found[(m, r)]) for m, r in keys if r == reading]
            if at:
                moments = " and ".join(f"{MOMENT_WORDS[m]} ({_g(t[0])} → {_g(t[1])}, ×{t[2]:.2f})" for m, t in at)
                parts.append(f"{READING_WORDS[reading]} {moments}")
        return "; ".join(parts)

    paper = f"{_g(PAPER_SIGMA[0])} → {_g(PAPER_SIGMA[1])}, ×{PAPER_SIGMA[1] / PAPER_SIGMA[0]:.2f}"
    others = [f"rises {said(rises)}" if rises else "",
              f"stays within ±{100 * FLAT:.0f} % {said(flat)}" if flat else ""]
    rest = " and ".join(o for o in others if o)
    if falls:
        head = f"From λ = 100 to λ = {lam:.3g}, the weight gradients' σ falls as in the paper's Fig. 1(a) ({paper})"
        if not rest:
            return f"{head} in every reading and at both moments: {said(falls)}."
        return f"{head} {said(falls)}; it {rest}."
    return (f"No reading reproduces the paper's shape ({paper} from λ = 100 to λ = 13.4): from λ = 100 to "
            f"λ = {lam:.3g} the weight gradients' σ {rest}.")


def _edges(result: PremiseResult) -> dict[str, np.ndarray]:
    """Shared bin edges per panel kind, over every λ and moment shown: the gradients symmetric about 0 to the
    largest 99.9th percentile of the surviving weights' |gradient| (at least the paper's window), the hidden
    representations from 0."""
    grad = max([float(np.quantile(np.abs(v["surviving"]), 0.999)) for v in result.values.values()
                if len(v["surviving"])] + [1.5 * max(abs(WINDOW[0]), WINDOW[1])])
    acts = [float(np.quantile(v["act"], 0.999)) for v in result.values.values() if len(v["act"])]
    top = max(acts) if acts and max(acts) > 0 else 1.0
    return {"grad": np.linspace(-grad, grad, BINS + 1), "act": np.linspace(0.0, top, BINS + 1)}


def premise_figure(result: PremiseResult) -> Rendered:
    """Rows: the cycle's start and end. Columns: the weight gradients over all weights and over the surviving ones,
    the hidden representations (the fraction of values per bin, log scale, as the paper's broken axis), and σ of
    the gradients against λ in both readings with the paper's two values."""
    edges = _edges(result)
    lam = {r["cycle"]: r["lambda"] for r in result.rows}
    shown = result.figure_cycles
    shown_lam = {round(lam[c], 1) for c in shown} | {13.4}
    colours = {c: colormaps["viridis"](x) for c, x in zip(shown, np.linspace(0.0, 0.85, len(shown)))}
    fig = Figure(figsize=(17, 7.5))
    for i, moment in enumerate(MOMENTS):
        for j, kind in enumerate(("all", "surviving", "act")):
            ax = fig.add_subplot(2, 4, 4 * i + j + 1)
            e = edges["act" if kind == "act" else "grad"]
            for cycle in shown:
                v = result.values.get((cycle, moment), {}).get(kind)
                if v is None or not len(v):
                    continue
                counts, _ = np.histogram(v, bins=e)
                s = float(np.std(v.astype(np.float64)))
                ax.stairs(np.maximum(counts / len(v), 1e-12), e, color=colours[cycle],
                          label=f"λ = {lam[cycle]:.3g}%, σ = {s:.2g}")
            if kind != "act":
                for x in WINDOW:
                    ax.axvline(x, color="grey", lw=0.8, ls=":")
            ax.set_yscale("log")
            ax.set_ylim(bottom=max(1e-7, 0.5 / max(len(v) for v in (result.values[(c, moment)][kind] for c in shown
                                                                    if (c, moment) in result.values))))
            ax.set_title(f"{'(a)' if kind != 'act' else '(b)'} {PANEL_TITLES[kind]}, {moment}", fontsize=9)
            ax.set_ylabel("fraction per bin")
            ax.legend(fontsize=7)
        ax = fig.add_subplot(2, 4, 4 * i + 4)
        for reading, style in (("all", "o-"), ("surviving", "s--")):
            picked = _pick(result.rows, moment, reading)
            ax.plot([r["lambda"] for r in picked], [r["sigma_grad"] for r in picked], style, label=reading)
        ax.plot([100.0, 13.4], PAPER_SIGMA, "k*", ms=10, label="paper (CIFAR-10)")
        ax.set_xscale("log")
        ticks = sorted({round(r["lambda"], 1) for r in result.rows} | {13.4}, reverse=True)
        ax.set_xticks(ticks, [f"{t:g}" if t in (ticks[0], ticks[-1]) or t in shown_lam else "" for t in ticks])
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.invert_xaxis()
        ax.set_yscale("log")
        ax.set_xlabel("density λ (%)")
        ax.set_ylabel("σ of the weight gradients")
        ax.set_title(f"σ against λ, {moment} ({result.rows[0]['batches']} batches)", fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    return render(fig)


def _table(rows: list[dict]) -> str:
    lines = ["| λ (%) | moment | σ grad, all | σ grad, surviving | outside, all | outside, surviving | "
             "outside scaled, all | outside scaled, surviving | σ act | val acc |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    by = {(r["cycle"], r["moment"], r["reading"]): r for r in rows}
    for cycle in sorted({r["cycle"] for r in rows}):
        for moment in MOMENTS:
            a, s = by.get((cycle, moment, "all")), by.get((cycle, moment, "surviving"))
            if a is None or s is None:
                continue
            acc = "" if math.isnan(a["val_acc"]) else f"{a['val_acc']:.1f}"
            lines.append(f"| {a['lambda']:.3g} | {moment} | {a['sigma_grad']:.3e} | {s['sigma_grad']:.3e} | "
                         f"{100 * a['outside_window']:.1f} % | {100 * s['outside_window']:.1f} % | "
                         f"{100 * a['outside_scaled_window']:.1f} % | {100 * s['outside_scaled_window']:.1f} % | "
                         f"{a['sigma_act']:.3g} | {acc} |")
    return "\n".join(lines)


def premise_markdown(result: PremiseResult) -> str:
    spec, st = result.spec, result.settings
    norm = "no normalisation layer" if result.norm_layers == 0 else f"{result.norm_layers} normalisation layers"
    last = max(r["cycle"] for r in result.rows)
    lam_last = 100.0 * (1.0 - spec.rate) ** last
    today = ", ".join(f"{r['layer_statistics_grad_std']:.3e}" for r in _pick(result.rows, "end", "surviving"))
    return "\n".join([
        "# The premise, as the paper measures it (§3.1, Fig. 1)",
        "",
        shape_sentence(result.rows),
        "",
        f"Setup: {spec.model} ({norm}) on {spec.dataset} ({spec.num_samples or 'default'} samples), {spec.pruner} "
        f"pruning at rate {spec.rate:g} for {spec.cycles} cycles (λ = 100 → {lam_last:.3g} %), {spec.epochs} epochs "
        f"per cycle at one fixed max_lr = {st.max_lr:g} ({spec.schedule.name} schedule, {spec.optimizer.name}, "
        f"momentum {spec.optimizer.momentum:g}, weight decay {spec.optimizer.weight_decay:g}, batch "
        f"{spec.batch_size}), weights {spec.weights} after pruning, seed {spec.seed}, {spec.precision} training on "
        f"{result.device} ({result.threads} thread(s)); {result.seconds:.0f} s in all.",
        "",
        f"Each σ pools the gradients of the training loss on the first {result.rows[0]['batches']} training batches "
        "(unshuffled: the same inputs at every λ and moment), and the hidden ReLU outputs on them. `all`: every "
        "prunable weight's gradient, a pruned one's counted as zero (as the training applies it); `surviving`: the "
        "unpruned weights' only. `start`: the pruned network before it trains (Theorem 1's setting); `end`: the "
        "weights the cycle chains (its best-validation epoch's), where the results table's grad_std is read "
        f"(on one batch, the surviving weights: {today} at each λ). "
        "`outside`: the fraction of gradients outside the paper's window "
        f"[{WINDOW[0]}, {WINDOW[1]}] (the paper: more than {100 * PAPER_OUTSIDE[0]:.0f} % at λ = 100, fewer than "
        f"{100 * PAPER_OUTSIDE[1]:.0f} % at λ = 13.4; its σ {PAPER_SIGMA[0]:.1e} → {PAPER_SIGMA[1]:.1e} on "
        "CIFAR-10); "
        "`outside scaled`: outside that window times this reading's σ at λ = 100 over the paper's 8.4e-3 (the "
        "paper's tails at this network's gradient scale). The σ are measured in fp32, whatever the training's "
        "precision.",
        "",
        "![The paper's Fig. 1 in both readings and at both moments](premise.png)",
        "",
        "The same figure as vector graphics: [premise.svg](premise.svg).",
        "",
        _table(result.rows),
        "",
        "Every row, with σ on the first batch alone and the spread of the per-batch σ: premise.csv.",
        "",
    ])


def write_premise(result: PremiseResult, out: Path) -> dict[str, Path]:
    """premise.csv, premise.png, premise.svg and premise.md in `out` (each written whole), by extension."""
    out = Path(out)
    figure = {Path(name).suffix[1:]: path for name, path in premise_figure(result).write(out, "premise").items()}
    return {"csv": atomic_write_bytes(out / "premise.csv", premise_csv(result.rows)), **figure,
            "md": atomic_write_bytes(out / "premise.md", premise_markdown(result))}
