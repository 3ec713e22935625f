"""The validation pass of the default (MNIST-1D, the §3.1 MLP, 20,000 validation samples) at several evaluation
batches, one thread, CPU time, interleaved over the repeats (medians): the cost that `trainables.cycle.eval_batch`
chooses its batch by. Each batch size gives the same accuracy (checked here, and bitwise per sample in
tests/test_cycle.py).

Usage (repo root; the package installed, or PYTHONPATH=.):
    python benchmarks/eval_batch.py [--precision auto|fp32|bf16] [--repeats 15] [--smoke]
The last line is `eval_batch: 512 / chosen (N) = R`.
"""
from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

import torch

from trainables.cycle import eval_batch, forward_autocast
from trainables.plugins import build_model, load_data
from trainables.precision import resolve_precision
from trainables.presets import PRESETS

CPU = torch.device("cpu")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--precision", default="auto")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--smoke", action="store_true", help="3,000 samples, 2 repeats")
    args = parser.parse_args()
    torch.set_num_threads(1)
    spec = PRESETS["mnist1d-mlp"].spec
    spec = dataclasses.replace(spec, precision=resolve_precision(args.precision, CPU),
                               num_samples=3000 if args.smoke else spec.num_samples)
    repeats = 2 if args.smoke else args.repeats
    data = load_data(spec)
    torch.manual_seed(0)
    model = build_model(spec.model, data.input_shape, data.num_classes).eval()
    chosen = eval_batch(spec, data, CPU)

    @torch.no_grad()
    def correct(batch: int) -> int:
        total = torch.zeros((), dtype=torch.long)
        with forward_autocast(CPU, spec):
            for x, y in data.batches("val", batch):
                total += (model(x).argmax(1) == y).sum()
        return int(total)

    sizes = sorted({512, 2048, chosen, 8192})
    counts = {batch: correct(batch) for batch in sizes}  # also the warm-up
    assert len(set(counts.values())) == 1, counts  # the accuracy does not depend on the batch
    seconds: dict[int, list[float]] = {batch: [] for batch in sizes}
    for _ in range(repeats):
        for batch in sizes:
            start = time.thread_time()
            correct(batch)
            seconds[batch].append(time.thread_time() - start)
    median = {batch: statistics.median(v) for batch, v in seconds.items()}
    print(f"{spec.precision}, {data.size('val')} validation samples, one thread, median of {repeats}: " +
          ", ".join(f"batch {b}: {1e3 * s:.1f} ms" for b, s in median.items()))
    print(f"eval_batch: 512 / chosen ({chosen}) = {median[512] / median[chosen]:.2f}")


if __name__ == "__main__":
    main()
