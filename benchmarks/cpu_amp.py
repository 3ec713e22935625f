"""Does bf16 autocast on a CPU change the Oracle's answer? Two Oracle runs of one experiment, float32 and bf16,
compared; plus the training step's speed in both precisions, measured in this run.

Make the two runs first (same seeds, same data order; only the arithmetic differs), then compare them:
    oracle-search oracle --no-amp --out runs/amp-fp32
    oracle-search oracle --out runs/amp-bf16
    python benchmarks/cpu_amp.py runs/amp-fp32 runs/amp-bf16

Printed: per cycle, each run's b and "not shown worse" interval and whether each b lies inside the other run's interval;
at cycle 0, where both runs start from the same initial weights, the paired differences in validation accuracy of
every (seed, max_lr) that neither run diverged on; every later cycle's differences of the same (seed, max_lr) for
scale (there the runs start from their own chained checkpoints, so these are not pairs); and the step time
ratio of the §3.1 MLP on one thread.
"""
from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from scipy import stats

from oracle_search.schema import read_results
from analysis.intervals import oracle_intervals
from analysis.select import oracle_trials
from oracle_search.selection import inside
from trainables.cycle import train_step
from trainables.plugins import build_model
from trainables.presets import PRESETS
from trainables.pruning import MaskedWeights, full_masks

KEY = ["cycle", "seed", "max_lr"]


def step_ms(amp: bool, steps: int = 400) -> float:
    """Milliseconds per training step of the embedded default's MLP (batch 128) on one thread."""
    spec = dataclasses.replace(PRESETS["mnist1d-mlp"].spec, amp=amp, device="cpu")
    torch.manual_seed(0)
    model = build_model(spec.model, (40,), 10)
    masked = MaskedWeights(model, full_masks(model))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x, y = torch.randn(spec.batch_size, 40), torch.randint(0, 10, (spec.batch_size,))
    cpu = torch.device("cpu")
    for _ in range(50):
        train_step(model, optimizer, masked, x, y, spec, cpu)
    start = time.perf_counter()
    for _ in range(steps):
        train_step(model, optimizer, masked, x, y, spec, cpu)
    return (time.perf_counter() - start) / steps * 1e3


def summary(d: pd.Series) -> str:
    n, mean, sd = len(d), d.mean(), d.std(ddof=1)
    half = stats.t.ppf(0.975, n - 1) * sd / np.sqrt(n) if n > 1 else float("nan")
    return f"n = {n}, mean {mean:+.2f}, 95 % CI [{mean - half:+.2f}, {mean + half:+.2f}], sd {sd:.2f}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("fp32", type=Path, help="the run made with --no-amp")
    p.add_argument("bf16", type=Path, help="the run made with bf16 autocast (the default)")
    args = p.parse_args()
    frames = {name: read_results(getattr(args, name)) for name in ("fp32", "bf16")}

    chosen = {name: oracle_intervals(df).set_index("cycle") for name, df in frames.items()}
    a, b = chosen["fp32"], chosen["bf16"]
    print("cycle  density  b fp32  not-shown-worse fp32   b bf16  not-shown-worse bf16  each b in the other's")
    for c in a.index.intersection(b.index):
        x, y = a.loc[c], b.loc[c]
        print(f"{c:5d}  {x['density']:6.2f}%  {x['best_max_lr']:6.4g}  [{x['noise_lo']:.4g}, {x['noise_hi']:.4g}]"
              f"{'':<6}{y['best_max_lr']:6.4g}  [{y['noise_lo']:.4g}, {y['noise_hi']:.4g}]{'':<6}"
              f"{inside(x['best_max_lr'], y['noise_lo'], y['noise_hi'])} / "
              f"{inside(y['best_max_lr'], x['noise_lo'], x['noise_hi'])}")

    rows = {name: oracle_trials(df).groupby(KEY).agg(val=("val_acc", "mean"), diverged=("diverged", "any"))
            for name, df in frames.items()}
    both = rows["fp32"].merge(rows["bf16"], left_index=True, right_index=True, suffixes=("_fp32", "_bf16"))
    both = both.reset_index()
    diverged = both[both["diverged_fp32"] | both["diverged_bf16"]]
    print(f"\n(seed, cycle, max_lr) trained by both runs: {len(both)}; diverged in fp32 only "
          f"{int((both['diverged_fp32'] & ~both['diverged_bf16']).sum())}, in bf16 only "
          f"{int((~both['diverged_fp32'] & both['diverged_bf16']).sum())}, in both "
          f"{int((both['diverged_fp32'] & both['diverged_bf16']).sum())}")
    if len(diverged):
        print("  diverged:", ", ".join(f"c{r.cycle} s{r.seed} {r.max_lr:.4g} ({'fp32' if r.diverged_fp32 else ''}"
                                       f"{'+' if r.diverged_fp32 and r.diverged_bf16 else ''}"
                                       f"{'bf16' if r.diverged_bf16 else ''})" for r in diverged.itertuples()))
    finite = both[~(both["diverged_fp32"] | both["diverged_bf16"])]
    diff = finite["val_bf16"] - finite["val_fp32"]
    first = finite["cycle"] == 0
    print(f"cycle 0, paired (bf16 - fp32 validation accuracy, points): {summary(diff[first])}")
    seeds = rows["fp32"].reset_index()
    seeds = seeds[(seeds["cycle"] == 0) & ~seeds["diverged"]].groupby("max_lr")["val"].std(ddof=1)
    print(f"  against seed noise: fp32 at cycle 0, the sd across seeds of one max_lr, pooled over "
          f"{len(seeds)} values: {np.sqrt((seeds ** 2).mean()):.2f} (a difference of two seeds: "
          f"{np.sqrt(2 * (seeds ** 2).mean()):.2f})")
    for c, d in diff[~first].groupby(finite.loc[~first, "cycle"]):
        print(f"cycle {c}, same (seed, max_lr), own starts: {summary(d)}")

    torch.set_num_threads(1)
    fp32, bf16 = step_ms(False), step_ms(True)
    print(f"\nMLP training step, one thread, batch 128: float32 {fp32:.2f} ms, bf16 autocast {bf16:.2f} ms; "
          f"fp32 / bf16 = {fp32 / bf16:.2f}")


if __name__ == "__main__":
    main()
