"""Throughput of the two data forms on the same in-memory images: `TensorData` (batches indexed out of resident
tensors) against `DatasetSplits` (a map-style Dataset of the same tensors, no transform, streamed by the project's
DataLoader with 0, 1, ... workers), each shuffled by a training generator as `run_cycle` does.

Two measurements per form, interleaved over the repeats (medians reported, wall clock):
- data: images/s of whole epochs of batches, nothing done with them (the data path's own cost);
- train: images/s of whole epochs of `trainables.cycle.train_step` on the §3.1 MLP (fp32 unless --precision),
  torch on --threads threads, as a trial with that many CPUs trains (its loader workers are extra processes).

Usage (repo root; the package installed, or PYTHONPATH=.):
    python benchmarks/loader_throughput.py [--images 20000] [--workers 0,1] [--repeats 5] [--smoke]
The last line is one summary, `loader_throughput: data img/s tensor=N w0=N w1=N ... | train img/s tensor=N w0=N ...`.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import torch

from trainables.cycle import make_optimizer, resolve_device, torch_threads, train_step
from trainables.data import DatasetSplits, TensorData
from trainables.models import MODELS
from trainables.pruning import MaskedWeights, full_masks
from trainables.spec import ExperimentSpec, OptimizerSpec

SPLITS = ("train", "val", "test")
CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")


class Items(torch.utils.data.Dataset):
    """The resident tensors as a Dataset: item i is (image i, label i), with no transform."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor):
        self.x, self.y = x, y.tolist()

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return self.x[i], self.y[i]


def cpu_line() -> str:
    """The CPU's model name, family/model numbers (a hypervisor may report a bare "AMD EPYC") and the flags that
    decide torch's CPU kernels."""
    info: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if not line.strip():
                    break  # the first CPU's block is enough
                info.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    flags = set(info.get("flags", "").split())
    have = " ".join(f for f in CPU_FLAGS if f in flags) or "none of " + " ".join(CPU_FLAGS)
    return (f"CPU {info.get('model name', platform.processor() or 'unknown')} (family {info.get('cpu family', '?')}, "
            f"model {info.get('model', '?')}), {os.cpu_count()} CPUs, flags {have}")


def data_epochs(data, batch_size: int, epochs: int) -> float:
    """Images/s of `epochs` shuffled passes over the training split."""
    generator = torch.Generator().manual_seed(0)
    start, n = time.perf_counter(), 0
    for _ in range(epochs):
        for _, y in data.batches("train", batch_size, generator):
            n += len(y)
    return n / (time.perf_counter() - start)


def train_epochs(data, spec: ExperimentSpec, epochs: int) -> float:
    """Images/s of `epochs` training epochs of the MLP through `train_step`."""
    device = resolve_device(spec.device)
    torch.manual_seed(0)
    model = MODELS["mlp"](data.input_shape, data.num_classes).to(device)
    optimizer = make_optimizer(spec.optimizer, model.parameters(), 0.01)
    masked = MaskedWeights(model, full_masks(model))
    generator = torch.Generator().manual_seed(0)
    model.train()
    start, n = time.perf_counter(), 0
    for _ in range(epochs):
        for x, y in data.batches("train", spec.batch_size, generator):
            loss = train_step(model, optimizer, masked, x, y, spec, device)
            n += len(y)
    float(loss)  # waits for the device
    return n / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=20_000, help="training images, 3x32x32 float32 (default 20,000)")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=2, help="epochs per measurement (default 2)")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved repeats; medians are reported")
    parser.add_argument("--workers", default="0,1", help="DataLoader workers to measure, comma-separated")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of the training process (default 1)")
    parser.add_argument("--precision", default="fp32", choices=("fp32", "bf16", "auto"))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--smoke", action="store_true", help="a few seconds: 512 images, 1 epoch, 1 repeat")
    args = parser.parse_args()
    if args.smoke:
        args.images, args.epochs, args.repeats = 512, 1, 1
    workers = [int(w) for w in args.workers.split(",")]
    spec = ExperimentSpec(model="mlp", batch_size=args.batch_size, device=args.device, precision=args.precision,
                          optimizer=OptimizerSpec("sgd", 0.9, 1e-4))
    device = resolve_device(spec.device)

    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(args.images, 3, 32, 32, generator=g), torch.randint(0, 10, (args.images,), generator=g)
    small = slice(0, 64)  # validation and test are not read here
    forms = {"tensor": TensorData({"train": x, "val": x[small], "test": x[small]},
                                  {"train": y, "val": y[small], "test": y[small]}, 10).to(device)}
    for w in workers:
        forms[f"w{w}"] = DatasetSplits(Items(x, y), Items(x[small], y[small]), Items(x[small], y[small]), 10,
                                       workers=w).check("benchmark").to(device)

    print(cpu_line())
    print(f"torch {torch.__version__}, device {device}, {args.threads} torch thread(s), precision {args.precision}, "
          f"{args.images} images 3x32x32, batch {args.batch_size}, {args.epochs} epoch(s) per measurement, "
          f"{args.repeats} interleaved repeat(s), load average {os.getloadavg()[0]:.2f}")
    data: dict[str, list[float]] = {name: [] for name in forms}
    train: dict[str, list[float]] = {name: [] for name in forms}
    with torch_threads(args.threads):
        for name, form in forms.items():  # untimed: starts the persistent workers, builds oneDNN's kernels
            data_epochs(form, args.batch_size, 1)
        for _ in range(args.repeats):
            for name, form in forms.items():
                data[name].append(data_epochs(form, args.batch_size, args.epochs))
                train[name].append(train_epochs(form, spec, args.epochs))
    med = {k: {name: statistics.median(v) for name, v in d.items()} for k, d in (("data", data), ("train", train))}
    print(f"{'form':<10} {'data img/s':>12} {'(min-max)':>20} {'train img/s':>12} {'(min-max)':>18} "
          f"{'train vs tensor':>16}")
    for name in forms:
        print(f"{name:<10} {med['data'][name]:>12.0f} {min(data[name]):>9.0f}-{max(data[name]):<10.0f} "
              f"{med['train'][name]:>12.0f} {min(train[name]):>8.0f}-{max(train[name]):<9.0f} "
              f"{med['train'][name] / med['train']['tensor']:>16.2f}")
    print("loader_throughput: data img/s " + " ".join(f"{k}={v:.0f}" for k, v in med["data"].items())
          + " | train img/s " + " ".join(f"{k}={v:.0f}" for k, v in med["train"].items()))


if __name__ == "__main__":
    main()
