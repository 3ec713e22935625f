"""How much of the seed-to-seed spread of validation accuracy is evaluation noise (a finite validation set), and
how much is training (issue 20, item 6).

For each seed, one dense training (cycle 0) at one max_lr; its best-epoch network is evaluated sample by sample
on the validation set. The Oracle compares networks on one validation set, so the spread that matters is that of the
difference of two networks' accuracies: across pairs of seeds, its variance is the whole spread; bootstrapping the
validation samples (one resample for both networks of a pair) gives its evaluation part; the rest is training. Run by hand:

    python benchmarks/eval_noise.py --seeds 8                       # the embedded default as shipped
    python benchmarks/eval_noise.py --seeds 8 --num-samples 14000 --val-fraction 0.35 --test-fraction 0.15

Prints one line per seed, then the variance shares and the rule's decision (evaluation noise above a quarter of
the spread: enlarge the validation set). `--smoke`: the smallest run (the tiny preset, 3 seeds, 100 resamples), to
check that the script runs (tests/test_benchmarks.py); its numbers mean nothing."""
from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time

import numpy as np
import torch

from trainables.checkpoints import load_checkpoint
from trainables.cycle import run_cycle
from trainables.plugins import build_model, load_data
from trainables.precision import autocast, resolve_precision
from trainables.presets import PRESETS


def correct_per_sample(spec, checkpoint: str) -> np.ndarray:
    """1/0 per validation sample for the checkpoint's (best-epoch) network, in the precision it trained in."""
    data = load_data(spec)
    model = build_model(spec.model, data.input_shape, data.num_classes)
    model.load_state_dict(load_checkpoint(checkpoint)["model"])
    model.eval()
    cpu = torch.device("cpu")
    with torch.no_grad(), autocast(cpu, resolve_precision(spec.precision, cpu)):
        return (model(data.x["val"]).argmax(1) == data.y["val"]).numpy().astype(float)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", default="mnist1d-mlp")
    p.add_argument("--seeds", type=int, default=8)
    p.add_argument("--first-seed", type=int, default=500, help="seeds no reported run uses")
    p.add_argument("--max-lr", type=float, default=0.16)
    p.add_argument("--num-samples", type=int)
    p.add_argument("--val-fraction", type=float)
    p.add_argument("--test-fraction", type=float)
    p.add_argument("--boot", type=int, default=2000)
    p.add_argument("--smoke", action="store_true", help="the smallest run (tiny preset, 3 seeds): does it run?")
    args = p.parse_args()
    if args.smoke:
        args.preset, args.seeds, args.boot = "tiny", 3, 100
    torch.set_num_threads(1)
    changes = {k: v for k in ("num_samples", "val_fraction", "test_fraction") if (v := getattr(args, k)) is not None}
    spec = dataclasses.replace(PRESETS[args.preset].spec, device="cpu", **changes)
    data = load_data(spec)
    print(f"{args.preset}: {data.size('train')} training, {data.size('val')} validation samples; "
          f"max_lr {args.max_lr}, precision {spec.precision}, {args.seeds} seeds from {args.first_seed}")
    correct = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            started = time.perf_counter()
            r = run_cycle(spec, cycle=0, max_lr=args.max_lr, seed=seed, checkpoint_dir=f"{tmp}/s{seed}")
            c = correct_per_sample(spec, f"{tmp}/s{seed}")
            correct.append(c)
            print(f"  seed {seed}: val {r.val_acc:.2f} (recomputed {100 * c.mean():.2f}), "
                  f"{time.perf_counter() - started:.1f}s")
    c = np.stack(correct)  # seeds x samples
    acc = 100 * c.mean(1)
    rng = np.random.default_rng(0)
    idx = rng.integers(0, c.shape[1], size=(args.boot, c.shape[1]))
    boot = 100 * c[:, idx].mean(2)  # seeds x resamples, every seed on the same resample
    # The Oracle compares networks on one validation set, so the noise that matters is that of a difference of
    # two networks' accuracies: the samples both get right or wrong cancel. Over every pair of seeds:
    pairs = [(i, j) for i in range(len(acc)) for j in range(i + 1, len(acc))]
    eval_var = np.mean([(boot[i] - boot[j]).var(ddof=1) for i, j in pairs])
    total_var = 2 * acc.var(ddof=1)  # the variance of the difference of two seeds' accuracies
    share = eval_var / total_var
    print(f"accuracy: mean {acc.mean():.2f}, seed-to-seed sd {acc.std(ddof=1):.3f} points (n = {len(acc)})")
    print(f"difference of two seeds: sd {np.sqrt(total_var):.3f}; of which evaluation (bootstrap over "
          f"{c.shape[1]} validation samples, {args.boot} resamples) sd {np.sqrt(eval_var):.3f}, training sd "
          f"{np.sqrt(max(total_var - eval_var, 0)):.3f}")
    print(f"evaluation share of the variance = {share:.2f}: "
          + ("above a quarter: enlarge the validation set" if share > 0.25 else "at most a quarter: keep it"))

if __name__ == "__main__":
    main()
