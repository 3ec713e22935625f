"""Training throughput (images/s) of each CIFAR model: the GPU-resident TensorData path against a torchvision
DataLoader path, measured in one run on synthetic random 32x32 images (throughput does not depend on content).

Both paths run the project's training step (masked SGD; bf16 autocast and channels_last on CUDA), so the ratio
isolates the data path. Usage (repo root; the package installed, or PYTHONPATH=.):
    python benchmarks/train_throughput.py [--models resnet20,alexnet] [--device cuda] [--compile]
`--smoke`: the smallest run (ResNet-20 on the CPU, one step of 8 images, the DataLoader in this process), to
check that the script runs (tests/test_benchmarks.py); its numbers mean nothing. The last line is the last model's.
"""
from __future__ import annotations

import argparse
import itertools
import os
import time
from typing import Iterator

import numpy as np
import torch
from PIL import Image
from torch import nn
from torchvision import transforms

from trainables.data import CIFAR_MEAN, CIFAR_STD, TensorData
from trainables.models import MODELS
from trainables.pruning import MaskedWeights, full_masks

CIFAR_MODELS = ("resnet20", "vgg19_bn", "densenet40", "mobilenetv2", "alexnet")
Batches = Iterator[tuple[torch.Tensor, torch.Tensor]]


class FakeCIFAR(torch.utils.data.Dataset):
    """torchvision.datasets.CIFAR10's layout and __getitem__: uint8 HWC images, a PIL image through the transform."""

    def __init__(self, data: np.ndarray, targets: list[int], transform: transforms.Compose):
        self.data, self.targets, self.transform = data, targets, transform

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return self.transform(Image.fromarray(self.data[i])), self.targets[i]


def resident_batches(images: np.ndarray, labels: np.ndarray, batch_size: int, device: torch.device) -> Batches:
    """TensorData on the device with on-device crop+flip, epoch after epoch; full batches only, like the
    DataLoader's drop_last (a new batch shape would re-run cuDNN autotuning or torch.compile in the timed steps)."""
    x = (torch.from_numpy(images).permute(0, 3, 1, 2).float() / 255 - torch.from_numpy(CIFAR_MEAN)) / torch.from_numpy(CIFAR_STD)
    data = TensorData({"train": x}, {"train": torch.from_numpy(labels)}, 10, augment=True).to(device)
    generator = torch.Generator().manual_seed(0)
    while True:
        yield from ((x, y) for x, y in data.batches("train", batch_size, generator) if len(y) == batch_size)


def loader_batches(images: np.ndarray, labels: np.ndarray, batch_size: int, device: torch.device,
                   workers: int) -> Batches:
    """The usual torchvision pipeline: CPU workers decode and augment, batches are copied to the device."""
    transform = transforms.Compose([
        transforms.RandomCrop(32, padding=4), transforms.RandomHorizontalFlip(), transforms.ToTensor(),
        transforms.Normalize(CIFAR_MEAN.flatten().tolist(), CIFAR_STD.flatten().tolist())])
    loader = torch.utils.data.DataLoader(
        FakeCIFAR(images, labels.tolist(), transform), batch_size=batch_size, shuffle=True, drop_last=True,
        num_workers=workers, pin_memory=device.type == "cuda", persistent_workers=workers > 0)
    while True:
        for x, y in loader:
            yield x.to(device, non_blocking=True), y.to(device, non_blocking=True)


def throughput(name: str, batches: Batches, device: torch.device, warmup: int, steps: int, compile: bool) -> float:
    """Images per second over `steps` training steps, after `warmup` untimed ones."""
    torch.manual_seed(0)
    model = MODELS[name]((3, 32, 32), 10).to(device)
    cuda = device.type == "cuda"
    if cuda:
        model = model.to(memory_format=torch.channels_last)
    forward = torch.compile(model) if compile else model
    masked = MaskedWeights(model, {n: m.to(device) for n, m in full_masks(model).items()})
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    model.train()

    def step(x: torch.Tensor, y: torch.Tensor) -> None:
        if cuda:
            x = x.contiguous(memory_format=torch.channels_last)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda):
            loss = nn.functional.cross_entropy(forward(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        masked.mask_gradients()
        optimizer.step()
        masked.apply()

    for x, y in itertools.islice(batches, warmup):
        step(x, y)
    if cuda:
        torch.cuda.synchronize(device)
    images, start = 0, time.perf_counter()
    for x, y in itertools.islice(batches, steps):
        step(x, y)
        images += len(y)
    if cuda:
        torch.cuda.synchronize(device)
    return images / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(CIFAR_MODELS), help="comma-separated model names")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--steps", type=int, help="timed steps per path (default: 40 on CUDA, 3 on CPU)")
    parser.add_argument("--batch-size", type=int, help="default: 512 on CUDA, 64 on CPU")
    parser.add_argument("--images", type=int, help="synthetic training images (default: 10,000 on CUDA, 512 on CPU)")
    parser.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)), help="DataLoader workers")
    parser.add_argument("--compile", action="store_true", help="torch.compile the model (both paths)")
    parser.add_argument("--smoke", action="store_true", help="the smallest run (CPU, ResNet-20, one step of 8 "
                        "images, no DataLoader workers): does it run?")
    args = parser.parse_args()
    if args.smoke:
        args.models, args.device, args.steps, args.batch_size, args.images, args.workers = (
            "resnet20", "cpu", 1, 8, 32, 0)

    device = torch.device(args.device)
    cuda = device.type == "cuda"
    steps = args.steps or (40 if cuda else 3)
    batch_size = args.batch_size or (512 if cuda else 64)
    n = args.images or (10_000 if cuda else 512)
    warmup = 5 if cuda else 1
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8)
    labels = rng.integers(0, 10, n)
    torch.backends.cudnn.benchmark = cuda

    print(f"device {device} ({torch.cuda.get_device_name(device) if cuda else os.cpu_count()} "
          f"{'' if cuda else 'CPUs'}), synthetic images {n}, batch {batch_size}, warm-up {warmup}, timed steps "
          f"{steps}, DataLoader workers {args.workers}, compile {args.compile}")
    print(f"{'model':<12} {'resident img/s':>15} {'DataLoader img/s':>17} {'ratio':>7}")
    for name in args.models.split(","):
        resident = throughput(name, resident_batches(images, labels, batch_size, device), device, warmup, steps,
                              args.compile)
        loaded = throughput(name, loader_batches(images, labels, batch_size, device, args.workers), device,
                            warmup, steps, args.compile)
        print(f"{name:<12} {resident:>15.0f} {loaded:>17.0f} {resident / loaded:>7.2f}", flush=True)


if __name__ == "__main__":
    main()
