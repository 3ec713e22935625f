"""Does bf16 autocast on a CPU change the Oracle's answer? Two Oracle runs of one experiment, float32 and bf16,
compared; plus the training step's speed in both precisions, measured in this run.

Make the two runs first (same seeds, same data order; only the arithmetic differs), then compare them:
    oracle-search oracle --precision fp32 --out runs/amp-fp32
    oracle-search oracle --precision bf16 --out runs/amp-bf16
    python benchmarks/cpu_amp.py runs/amp-fp32 runs/amp-bf16     # or: python benchmarks/cpu_amp.py --smoke

Printed: per cycle, each run's b and "not shown worse" interval and whether each b lies inside the other run's interval;
at cycle 0, where both runs start from the same initial weights, the paired differences in validation accuracy of
every (seed, max_lr) that neither run diverged on; every later cycle's differences of the same (seed, max_lr) for
scale (there the runs start from their own chained checkpoints, so these are not pairs); and the step time
ratio of the §3.1 MLP on one thread.

`--smoke` (no run folders): two small Oracle-shaped runs made here, fp32 and bf16 (the tiny preset, cycles 0 and
1 of one epoch, its grid on two seeds, each cycle chaining the seed-mean best; not the pipeline's Oracle), then the
comparison and a few timed steps, to check that the script runs (tests/test_benchmarks.py); its numbers mean
nothing.
"""
from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from scipy import stats

from oracle_search.schema import read_results
from analysis.intervals import oracle_intervals
from oracle_search.compared import oracle_trials
from trainables.cycle import train_step
from trainables.plugins import build_model
from trainables.presets import PRESETS
from trainables.pruning import MaskedWeights, full_masks

KEY = ["cycle", "seed", "max_lr"]


def step_ms(amp: bool, steps: int = 400, warmup: int = 50) -> float:
    """Milliseconds per training step of the embedded default's MLP (batch 128) on one thread."""
    spec = dataclasses.replace(PRESETS["mnist1d-mlp"].spec, precision="bf16" if amp else "fp32", device="cpu")
    torch.manual_seed(0)
    model = build_model(spec.model, (40,), 10)
    masked = MaskedWeights(model, full_masks(model))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x, y = torch.randn(spec.batch_size, 40), torch.randint(0, 10, (spec.batch_size,))
    cpu = torch.device("cpu")
    for _ in range(warmup):
        train_step(model, optimizer, masked, x, y, spec, cpu)
    start = time.perf_counter()
    for _ in range(steps):
        train_step(model, optimizer, masked, x, y, spec, cpu)
    return (time.perf_counter() - start) / steps * 1e3


def summary(d: pd.Series) -> str:
    n, mean, sd = len(d), d.mean(), d.std(ddof=1)
    half = stats.t.ppf(0.975, n - 1) * sd / np.sqrt(n) if n > 1 else float("nan")
    return f"n = {n}, mean {mean:+.2f}, 95 % CI [{mean - half:+.2f}, {mean + half:+.2f}], sd {sd:.2f}"


def smoke_runs(work: Path) -> tuple[Path, Path]:
    """--smoke's two runs (fp32, bf16): the tiny preset's grid on two seeds at cycles 0 and 1 of one epoch, each
    seed chaining the value with the best seed-mean validation accuracy, written as an Oracle's results table."""
    from oracle_search.schema import write_results
    from trainables.cycle import run_cycle

    base = dataclasses.replace(PRESETS["tiny"].spec, device="cpu", cycles=1, epochs=1)
    folders = []
    for precision in ("fp32", "bf16"):
        spec, out = dataclasses.replace(base, precision=precision), work / precision
        rows, start = [], {0: None, 1: None}
        for cycle in range(spec.cycles + 1):
            trained = {(seed, lr): run_cycle(spec, cycle=cycle, max_lr=lr, seed=seed, start_checkpoint=begin,
                                             checkpoint_dir=out / f"c{cycle}-s{seed}-{lr:g}")
                       for seed, begin in start.items() for lr in spec.grid}
            mean = {lr: np.mean([trained[s, lr].val_acc for s in start]) for lr in spec.grid
                    if not any(trained[s, lr].diverged for s in start)}
            best = max(mean, key=mean.get)
            rows += [{**r.row(), "experiment": "smoke", "method": "oracle", "stage": "grid",
                      "schedule": spec.schedule.name, "seed": seed, "selected": lr == best}
                     for (seed, lr), r in trained.items()]
            start = {s: trained[s, best].checkpoint for s in start}
        write_results(out, rows)
        folders.append(out)
    return folders[0], folders[1]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("fp32", type=Path, nargs="?", help="the run made with --precision fp32")
    p.add_argument("bf16", type=Path, nargs="?", help="the run made with bf16 autocast (--precision bf16)")
    p.add_argument("--smoke", action="store_true", help="two small runs made here instead: does it run?")
    args = p.parse_args()
    if args.smoke == (args.fp32 is not None):
        p.error("give the two run folders, or --smoke")
    torch.set_num_threads(1)  # as a 1-CPU trial trains, and the step timing's setting
    with tempfile.TemporaryDirectory() as work:
        if args.smoke:
            args.fp32, args.bf16 = smoke_runs(Path(work))
        compare_runs(args.fp32, args.bf16)
    steps, warmup = (20, 5) if args.smoke else (400, 50)
    fp32, bf16 = step_ms(False, steps, warmup), step_ms(True, steps, warmup)
    print(f"\nMLP training step, one thread, batch 128: float32 {fp32:.2f} ms, bf16 autocast {bf16:.2f} ms; "
          f"fp32 / bf16 = {fp32 / bf16:.2f}")


def compare_runs(fp32_run: Path, bf16_run: Path) -> None:
    frames = {"fp32": read_results(fp32_run), "bf16": read_results(bf16_run)}

    chosen = {name: oracle_intervals(df).set_index("cycle") for name, df in frames.items()}
    a, b = chosen["fp32"], chosen["bf16"]
    print("cycle  density  b fp32  not-shown-worse fp32   b bf16  not-shown-worse bf16  each b in the other's")
    for c in a.index.intersection(b.index):
        x, y = a.loc[c], b.loc[c]
        print(f"{c:5d}  {x['density']:6.2f}%  {x['best_max_lr']:6.4g}  [{x['noise_lo']:.4g}, {x['noise_hi']:.4g}]"
              f"{'':<6}{y['best_max_lr']:6.4g}  [{y['noise_lo']:.4g}, {y['noise_hi']:.4g}]{'':<6}"
              f"{y['noise_lo'] <= x['best_max_lr'] <= y['noise_hi']} / "
              f"{x['noise_lo'] <= y['best_max_lr'] <= x['noise_hi']}")  # within the other's span (b values are lr_key'd)

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


if __name__ == "__main__":
    main()
