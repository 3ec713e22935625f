"""Training throughput of K max_lr candidates fused into one network (trainables.fused, HFTA) against the same
candidates trained as separate runs, on one device, in one run.

Fair by construction:
- both paths take the engine's training step (masked gradients, SGD with momentum and weight decay, re-zeroed
  pruned weights): the separate one is run_cycle's `train_step` with torch.optim.SGD, the fused one
  run_fused_cycle's `fused_step`;
- both in the same precision (`--precision`, default: what `auto` resolves to on the device) and the same memory
  format (`--channels-last`, default on CUDA: the separate model's weights and the fused stack's flat weight views
  are channels_last, and so are the inputs);
- the separate baseline is one model's step, measured once per model as the median of `--repeats` timings: K
  separate runs take K times as long, so separate images/s do not depend on K;
- each fused K is likewise the median of `--repeats` timings. Warm-up steps are untimed; CUDA is synchronised
  around each timing. Synthetic random 32x32 images already on the device, so only training is timed. An image
  counts once per candidate that trains on it.
Prints ms per step and images/s of both paths and their ratio. `--graphs` (CUDA) times a third path: the same
fused step replayed from a CUDA graph (trainables.fused.GraphedStep; its eager warm-up and capture fall in the
untimed warm-up), with its speed-up over the eager fused step. Needs only torch and numpy.
Usage (repo root): python benchmarks/fused_throughput.py [--quick] [--models resnet20,vgg19_bn] [--ks 1,4,8,16,32]
`--smoke`: the smallest run (ResNet-20 on the CPU, K = 1, 2, one step of 4 images), to check that the script runs
(tests/test_benchmarks.py); its numbers mean nothing. The last line is the last model's largest K.
"""
from __future__ import annotations

import argparse
import dataclasses
import itertools
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a bare checkout, nothing installed

from trainables.cycle import make_optimizer, train_step  # noqa: E402
from trainables.fused import Fused, FusedOptimizer, GraphedStep, step_function  # noqa: E402
from trainables.models import MODELS  # noqa: E402
from trainables.precision import resolve_precision  # noqa: E402
from trainables.pruning import MaskedWeights, full_masks  # noqa: E402
from trainables.spec import PRECISIONS, ExperimentSpec, Resources  # noqa: E402

Batches = list[tuple[torch.Tensor, torch.Tensor]]


def median_seconds(step: Callable[[torch.Tensor, torch.Tensor], None], batches: Batches, warmup: int, steps: int,
                   repeats: int, device: torch.device) -> tuple[float, list[float]]:
    """Median seconds per step over `repeats` timings of `steps` calls each, after `warmup` untimed calls; and
    every timing, for the spread."""
    cycle = itertools.cycle(batches)
    for x, y in itertools.islice(cycle, warmup):
        step(x, y)
    per_step = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        for x, y in itertools.islice(cycle, steps):
            step(x, y)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        per_step.append((time.perf_counter() - start) / steps)
    return statistics.median(per_step), per_step


def separate_step(spec: ExperimentSpec, model: nn.Module, device: torch.device, channels_last: bool):
    """One separate run's step: its own copy of the network and torch.optim.SGD."""
    net = MODELS[spec.model]((3, 32, 32), 10).to(device)
    net.load_state_dict(model.state_dict())
    if channels_last:
        net = net.to(memory_format=torch.channels_last)
    masked = MaskedWeights(net, {n: m.to(device) for n, m in full_masks(net).items()})
    optimizer = make_optimizer(spec.optimizer, net.parameters(), 0.05)
    net.train()
    return lambda x, y: train_step(net, optimizer, masked, x, y, spec, device)


def fused_step_of(spec: ExperimentSpec, model: nn.Module, k: int, device: torch.device, channels_last: bool):
    """The K candidates as one fused network, one fused step per batch (native layers where the model has them),
    as run_fused_cycle takes it: replayed from a CUDA graph where `spec.resources.cuda_graphs` says so."""
    fused = Fused.replicate(model, k)
    if channels_last and fused.net is not None:
        fused.to_channels_last()
    fused.train()
    masks = {n: m.to(device, fused.params[n].dtype) for n, m in full_masks(model).items()}  # as run_fused_cycle's
    optimizer = FusedOptimizer(spec.optimizer, fused.params)
    lr = torch.tensor([0.01 * (i + 1) for i in range(k)], device=device)
    step = step_function(fused, optimizer, masks, spec, device)
    return (lambda x, y: step(x, y, lr)), fused.net is not None


def _spread(values: list[float]) -> str:
    return f"{1e3 * min(values):.2f}-{1e3 * max(values):.2f}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet20,vgg19_bn", help="comma-separated model names")
    parser.add_argument("--ks", default="1,4,8,16,32", help="comma-separated candidate counts K")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--precision", default="auto", choices=PRECISIONS, help="both paths' arithmetic")
    parser.add_argument("--channels-last", default=None, action=argparse.BooleanOptionalAction,
                        help="both paths' memory format (default: on CUDA)")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--steps", type=int, help="timed steps per repeat (default 100; --quick: 20)")
    parser.add_argument("--warmup", type=int, help="untimed steps per path (default 20; --quick: 5)")
    parser.add_argument("--repeats", type=int, default=3, help="timings per path; the median is reported")
    parser.add_argument("--graphs", action="store_true", help="also time the fused step replayed from a CUDA graph")
    parser.add_argument("--cudnn-benchmark", default=None, action=argparse.BooleanOptionalAction,
                        help="cuDNN's per-shape algorithm search (default: on CUDA)")
    parser.add_argument("--quick", action="store_true", help="fewer steps, for a first look")
    parser.add_argument("--smoke", action="store_true", help="the smallest run (CPU, ResNet-20, K = 1, 2, one "
                        "step of 4 images): does it run?")
    args = parser.parse_args(argv)
    if args.smoke:
        args.device, args.models, args.ks, args.batch_size = "cpu", "resnet20", "1,2", 4
        args.steps, args.warmup, args.repeats = 1, 1, 1
    if args.repeats < 1:
        parser.error("--repeats: at least 1")
    if args.graphs and not args.device.startswith("cuda"):
        parser.error("--graphs: CUDA graphs need --device cuda")

    device = torch.device(args.device)
    steps = args.steps or (20 if args.quick else 100)
    warmup = args.warmup or (5 if args.quick else 20)
    channels_last = device.type == "cuda" if args.channels_last is None else args.channels_last
    precision = resolve_precision(args.precision, device)
    ks = [int(k) for k in args.ks.split(",")]
    cudnn_benchmark = device.type == "cuda" if args.cudnn_benchmark is None else args.cudnn_benchmark
    torch.backends.cudnn.benchmark = cudnn_benchmark
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randn(args.batch_size, 3, 32, 32, generator=g).to(device),
                torch.randint(0, 10, (args.batch_size,), generator=g).to(device)) for _ in range(8)]
    if channels_last:
        batches = [(x.contiguous(memory_format=torch.channels_last), y) for x, y in batches]
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"{os.cpu_count()} CPUs"
    print(f"device {device} ({name}), torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"precision {precision}, channels_last {channels_last}, cudnn.benchmark {cudnn_benchmark}, "
          f"batch {args.batch_size}, warm-up {warmup}, "
          f"{steps} timed steps x {args.repeats} repeats (median; min-max in brackets)")
    print(f"{'model':<10} {'K':>3} {'path':<8} {'sep ms/step':>11} {'fused ms/step':>13} {'sep img/s':>10} "
          f"{'fused img/s':>11} {'ratio':>6}  spread ms (sep | fused)"
          + (f" {'graph ms/step':>13} {'graph/eager':>11}  graph spread ms" if args.graphs else ""))
    for model_name in args.models.split(","):
        # The spec's switch converts inputs on CUDA only; the batches are laid out above for any device.
        # The eager step, said so: on CUDA the default would replay SGD's fused step from a graph, timed below.
        spec = ExperimentSpec(model=model_name, device=device.type, precision=precision, batch_size=args.batch_size,
                              channels_last=channels_last, resources=Resources(cuda_graphs=False))
        torch.manual_seed(0)
        model = MODELS[model_name]((3, 32, 32), 10).to(device)
        sep, sep_all = median_seconds(separate_step(spec, model, device, channels_last), batches, warmup, steps,
                                      args.repeats, device)
        for k in ks:
            step, native = fused_step_of(spec, model, k, device, channels_last)
            fused, fused_all = median_seconds(step, batches, warmup, steps, args.repeats, device)
            sep_rate, fused_rate = args.batch_size / sep, k * args.batch_size / fused
            graph_cols = ""
            if args.graphs:
                del step
                graphed = dataclasses.replace(spec, resources=Resources(cuda_graphs=True))
                step, _ = fused_step_of(graphed, model, k, device, channels_last)
                graph, graph_all = median_seconds(step, batches, max(warmup, GraphedStep.WARMUP + 1), steps,
                                                  args.repeats, device)
                graph_cols = f" {1e3 * graph:>13.2f} {fused / graph:>11.2f}  {_spread(graph_all)}"
            print(f"{model_name:<10} {k:>3} {'native' if native else 'vmap':<8} {1e3 * sep:>11.2f} "
                  f"{1e3 * fused:>13.2f} {sep_rate:>10.0f} {fused_rate:>11.0f} {fused_rate / sep_rate:>6.2f}  "
                  f"{_spread(sep_all)} | {_spread(fused_all)}{graph_cols}", flush=True)
            del step
            if device.type == "cuda":
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
