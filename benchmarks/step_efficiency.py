"""How close is the §3.1 MLP's training step to the matmuls it must do, and what does a training spend outside
its training steps?

    python benchmarks/step_efficiency.py [--repeats 7] [--preset mnist1d-mlp] [--smoke]

1. The step. `run_cycle`'s own inner loop (batches drawn as a training draws them, the LR schedule, the step
   `make_step` chooses, with the masks of a pruned network: for this MLP on a CPU the lean step of
   `trainables.lean`; `--autograd` adds `train_step` through autograd, for comparison) on ONE thread, against a
   bare loop of the same matmuls with `torch.mm`: per batch the forward products and, for the backward pass,
   the gradient of each layer's input (all but the first) and of each weight, in the precision's compute dtype.
   Both loops run the same batches, interleaved, `--repeats` times; each repeat gives one ratio (printed: median
   and range). Precisions: what `auto` resolves to on this CPU, and fp32.
2. The overhead. One default training (`run_cycle`, cycle 0 and cycle 1 with their checkpoints), timed by phase
   (`run_cycle(timings=...)`, wall clock): data, preparing the network (pruning included), training steps,
   evaluation (the validation pass of every epoch, the test pass at the end), statistics, checkpoint. Printed as
   fractions of the training: outside the epochs (everything but steps and evaluation), and evaluation.
   Tune's per-epoch report is not in it (it runs in a Ray trial; at most one every 0.5 s, docs/design.md).

Times are this thread's CPU time (`time.thread_time`) for the step loops, so other processes on a busy machine
do not count; the phases are wall-clock.

The last line is `step / matmul = R` for the default precision (`auto` on this CPU). `--smoke`: the smallest run
(the tiny preset, one repeat), to check that the script runs (tests/test_benchmarks.py); its numbers mean nothing.
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
import tempfile
import time
from itertools import islice
from pathlib import Path

import torch
from torch import nn

from trainables.cycle import data_order, make_optimizer, make_step, run_cycle, train_step
from trainables.plugins import build_model, load_data, resolve
from trainables.precision import DTYPES, cpu_flags, resolve_precision
from trainables.presets import PRESETS
from trainables.pruning import MaskedWeights, full_masks, prune
from trainables.schedules import lr_at
from trainables.spec import ExperimentSpec

CPU = torch.device("cpu")


def linear_shapes(model: nn.Module) -> list[tuple[int, int]]:
    """(in_features, out_features) of each Linear layer, in order."""
    return [(m.in_features, m.out_features) for m in model.modules() if isinstance(m, nn.Linear)]


def matmul_loop(shapes: list[tuple[int, int]], batch_sizes: list[int], dtype: torch.dtype) -> float:
    """Seconds for the bare matmuls of one epoch: per batch of n, forward X[n, i] @ W^T[i, o] per layer; backward
    dX = dY[n, o] @ W[o, i] (every layer but the first) and dW = dY^T[o, n] @ X[n, i]."""
    torch.manual_seed(0)
    weights = [torch.randn(o, i, dtype=dtype) for i, o in shapes]
    by_n = {}
    for n in set(batch_sizes):
        acts = [torch.randn(n, i, dtype=dtype) for i, _ in shapes]
        grads = [torch.randn(n, o, dtype=dtype) for _, o in shapes]
        by_n[n] = (acts, grads)
    start = time.thread_time()
    for n in batch_sizes:
        acts, grads = by_n[n]
        for w, a in zip(weights, acts):
            torch.mm(a, w.t())
        for k, (w, a, g) in enumerate(zip(weights, acts, grads)):
            if k > 0:
                torch.mm(g, w)
            torch.mm(g.t(), a)
    return time.thread_time() - start


class StepLoop:
    """`run_cycle`'s inner loop on a network pruned once (the masks of cycle 1), for timing whole epochs."""

    def __init__(self, spec: ExperimentSpec, pruned: bool = True, autograd: bool = False):
        self.spec, data = spec, load_data(spec)
        self.data = data
        torch.manual_seed(0)
        self.model = build_model(spec.model, data.input_shape, data.num_classes)
        masks = full_masks(self.model)
        if pruned:  # as run_cycle prunes for cycle 1 (a pruner that scores on data gets the batches it would)
            order = data_order(0, 1)
            masks = prune(self.model, masks, spec.rate, resolve("pruner", spec.pruner),
                          lambda: islice(data.batches("train", spec.batch_size, order), spec.score_batches), seed=0,
                          prune_output=spec.prune_output)
        self.masked = MaskedWeights(self.model, masks)
        self.masked.apply()
        self.optimizer = make_optimizer(spec.optimizer, self.model.parameters(), 0.1)
        self.train = make_step(self.model, self.optimizer, self.masked, spec, CPU) if not autograd else \
            lambda x, y: train_step(self.model, self.optimizer, self.masked, x, y, spec, CPU)
        self.generator = torch.Generator().manual_seed(0)
        self.steps_per_epoch = math.ceil(data.size("train") / spec.batch_size)
        self.total = spec.epochs * self.steps_per_epoch
        self.step = 0
        self.batch_sizes = [min(spec.batch_size, data.size("train") - s)
                            for s in range(0, data.size("train"), spec.batch_size)]

    def epoch(self) -> float:
        spec, start = self.spec, time.thread_time()
        self.model.train()
        loss = torch.zeros(())
        for x, y in self.data.batches("train", spec.batch_size, self.generator):
            lr = lr_at(self.step % self.total, self.total, 0.1, spec.schedule)
            for group in self.optimizer.param_groups:
                group["lr"] = lr
            loss += self.train(x, y)
            self.step += 1
        return time.thread_time() - start


def step_ratio(spec: ExperimentSpec, repeats: int, pruned: bool = True, autograd: bool = False
               ) -> tuple[list[float], list[float], list[float]]:
    """Per repeat: ms per step, ms per bare-matmul step, and their ratio (interleaved, so load hits both)."""
    loop = StepLoop(spec, pruned, autograd)
    dtype = DTYPES.get(spec.precision, torch.float32)
    shapes = linear_shapes(loop.model)
    loop.epoch()
    matmul_loop(shapes, loop.batch_sizes, dtype)  # warm-up
    steps, mms = [], []
    for _ in range(repeats):
        steps.append(loop.epoch() / loop.steps_per_epoch * 1e3)
        mms.append(matmul_loop(shapes, loop.batch_sizes, dtype) / loop.steps_per_epoch * 1e3)
    return steps, mms, [s / m for s, m in zip(steps, mms)]


def overhead(spec: ExperimentSpec) -> list[dict[str, float]]:
    """Phase timings of cycle 0 and cycle 1 of one default training each (checkpoints written)."""
    out = []
    with tempfile.TemporaryDirectory() as work:
        start = None
        for cycle in (0, 1):
            timings: dict[str, float] = {}
            ckpt = Path(work) / f"c{cycle}"
            run_cycle(spec, cycle=cycle, max_lr=0.16, seed=0, start_checkpoint=start, checkpoint_dir=ckpt,
                      timings=timings)
            start = str(ckpt)
            out.append(timings)
    return out


def describe(values: list[float], fmt: str = "{:.3f}") -> str:
    return f"median {fmt.format(statistics.median(values))} (range {fmt.format(min(values))}-" \
           f"{fmt.format(max(values))}, n = {len(values)})"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="mnist1d-mlp")
    p.add_argument("--repeats", type=int, default=7, help="interleaved epochs of each loop per precision")
    p.add_argument("--skip-overhead", action="store_true")
    p.add_argument("--autograd", action="store_true", help="also time the autograd step (train_step)")
    p.add_argument("--smoke", action="store_true", help="the smallest run (tiny preset, 1 repeat): does it run?")
    args = p.parse_args()
    if args.smoke:
        args.preset, args.repeats = "tiny", 1
    torch.set_num_threads(1)
    base = dataclasses.replace(PRESETS[args.preset].spec, device="cpu")
    auto = resolve_precision("auto", CPU)
    isa = " ".join(sorted(f for f in cpu_flags() if f.startswith(("avx", "amx", "fma")))) or "unknown"
    print(f"CPU flags seen: {isa}; torch {torch.__version__}, ATen capability "
          f"{torch.backends.cpu.get_cpu_capability()}; auto -> {auto}; 1 thread")
    precisions = [auto] + [q for q in ("fp32",) if q != auto]
    ratios: dict[str, float] = {}
    for precision in precisions:
        spec = dataclasses.replace(base, precision=precision)
        for pruned in (False, True):
            for autograd in (False, True) if args.autograd else (False,):
                steps, mms, r = step_ratio(spec, args.repeats, pruned, autograd)
                label = f"{precision}, {'pruned (cycle >= 1)' if pruned else 'dense (cycle 0)'}" + \
                    (", autograd step" if autograd else "")
                print(f"{label}: step {describe(steps)} ms, matmuls {describe(mms)} ms, ratio {describe(r, '{:.2f}')}")
                if pruned and not autograd:
                    ratios[precision] = statistics.median(r)
    if not args.skip_overhead:
        spec = dataclasses.replace(base, precision=auto)
        for cycle, t in enumerate(overhead(spec)):
            total = t["total"]
            parts = ", ".join(f"{k} {v * 1e3:.0f} ms" for k, v in t.items() if k != "total")
            outside = total - t["train"] - t.get("evaluate", 0.0)
            print(f"training, cycle {cycle} ({auto}): {total:.2f} s; {parts}; outside the epochs (data, prepare "
                  f"incl. pruning, statistics, checkpoint, report) {outside / total:.1%}, evaluation "
                  f"{t.get('evaluate', 0.0) / total:.1%}")
    print(f"step / matmul = {ratios[auto]:.2f}")


if __name__ == "__main__":
    main()
