"""Training throughput (images/s) of K max_lr candidates fused into one network (trainables.fused, HFTA) against
the same K candidates trained as separate runs back to back, on one device, in one run.

Both paths take the engine's training step (masked gradients, SGD with momentum and weight decay, re-zeroed
pruned weights; bf16 autocast and channels_last inputs on CUDA); the separate path is run_cycle's
(torch.optim.SGD), the fused one run_fused_cycle's. Synthetic random 32x32 images already on the device, so only
training is timed; warm-up steps are excluded and CUDA is synchronised around each timing. An image counts once
per candidate that trains on it. Needs only torch and numpy. Goal: >= 3x at K = 8 for ResNet-20.
Usage (repo root): python benchmarks/fused_throughput.py [--quick] [--models resnet20,vgg19_bn] [--ks 1,4,8,16]
"""
from __future__ import annotations

import argparse
import itertools
import os
import sys
import time
from pathlib import Path
from typing import Callable

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a bare checkout, nothing installed

from trainables.cycle import make_optimizer, train_step  # noqa: E402
from trainables.fused import Fused, FusedOptimizer, fused_step  # noqa: E402
from trainables.models import MODELS  # noqa: E402
from trainables.pruning import MaskedWeights, full_masks  # noqa: E402
from trainables.spec import ExperimentSpec  # noqa: E402

Batches = list[tuple[torch.Tensor, torch.Tensor]]


def timed(step: Callable[[torch.Tensor, torch.Tensor], None], batches: Batches, warmup: int, steps: int,
          device: torch.device) -> float:
    """Seconds for `steps` calls of `step`, after `warmup` untimed ones."""
    cycle = itertools.cycle(batches)
    for x, y in itertools.islice(cycle, warmup):
        step(x, y)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    for x, y in itertools.islice(cycle, steps):
        step(x, y)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start


def separate_seconds(spec: ExperimentSpec, model: nn.Module, k: int, batches: Batches, warmup: int, steps: int,
                     device: torch.device) -> float:
    """K runs one after the other, each run_cycle's step with its own torch.optim.SGD."""
    total = 0.0
    for i in range(k):
        net = MODELS[spec.model]((3, 32, 32), 10).to(device)
        net.load_state_dict(model.state_dict())
        if device.type == "cuda":
            net = net.to(memory_format=torch.channels_last)
        masked = MaskedWeights(net, {n: m.to(device) for n, m in full_masks(net).items()})
        optimizer = make_optimizer(spec.optimizer, net.parameters(), 0.01 * (i + 1))
        net.train()

        def step(x: torch.Tensor, y: torch.Tensor) -> None:
            train_step(net, optimizer, masked, x, y, spec, device)

        total += timed(step, batches, warmup, steps, device)
        del net, optimizer
    return total


def fused_seconds(spec: ExperimentSpec, model: nn.Module, k: int, batches: Batches, warmup: int, steps: int,
                  device: torch.device) -> float:
    """The same K candidates as one fused network, one fused step per batch."""
    fused = Fused.replicate(model, k)
    fused.train()
    masks = {n: m.to(device, fused.params[n].dtype) for n, m in full_masks(model).items()}  # as run_fused_cycle's
    optimizer = FusedOptimizer(spec.optimizer, fused.params)
    lr = torch.tensor([0.01 * (i + 1) for i in range(k)], device=device)
    return timed(lambda x, y: fused_step(fused, optimizer, masks, x, y, lr, spec, device), batches, warmup,
                 steps, device)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet20,vgg19_bn", help="comma-separated model names")
    parser.add_argument("--ks", default="1,4,8,16", help="comma-separated candidate counts K")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--steps", type=int, help="timed steps per run (default 300; --quick: 50)")
    parser.add_argument("--warmup", type=int, help="untimed steps per run (default 30; --quick: 10)")
    parser.add_argument("--quick", action="store_true", help="fewer steps, for a first look")
    args = parser.parse_args(argv)

    device = torch.device(args.device)
    steps = args.steps or (50 if args.quick else 300)
    warmup = args.warmup or (10 if args.quick else 30)
    ks = [int(k) for k in args.ks.split(",")]
    torch.backends.cudnn.benchmark = device.type == "cuda"
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randn(args.batch_size, 3, 32, 32, generator=g).to(device),
                torch.randint(0, 10, (args.batch_size,), generator=g).to(device)) for _ in range(8)]
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"{os.cpu_count()} CPUs"
    print(f"device {device} ({name}), torch {torch.__version__}, batch {args.batch_size}, warm-up {warmup}, "
          f"timed steps {steps} per run, bf16 autocast {device.type == 'cuda'}")
    print(f"{'model':<10} {'K':>3} {'separate img/s':>15} {'fused img/s':>12} {'ratio':>6}")
    for model_name in args.models.split(","):
        spec = ExperimentSpec(model=model_name, device=device.type)
        torch.manual_seed(0)
        model = MODELS[model_name]((3, 32, 32), 10).to(device)
        for k in ks:
            images = k * steps * args.batch_size
            separate = images / separate_seconds(spec, model, k, batches, warmup, steps, device)
            fused = images / fused_seconds(spec, model, k, batches, warmup, steps, device)
            print(f"{model_name:<10} {k:>3} {separate:>15.0f} {fused:>12.0f} {fused / separate:>6.2f}", flush=True)
            if device.type == "cuda":
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
