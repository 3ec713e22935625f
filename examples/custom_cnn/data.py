"""The bars dataset, used by import path in either of its two forms:

- `--dataset examples.custom_cnn.data:bars`: `TensorData`, every split held as tensors (the fast path);
- `--dataset examples.custom_cnn.data:bars_dataset`: `DatasetSplits`, three `torch.utils.data.Dataset`s as PyTorch
  writes them, the training one with a per-sample transform (a random shift of up to one pixel), streamed by a
  DataLoader.

Four classes of 12x12 grey images: a horizontal bar, a vertical bar, a diagonal, a hollow square, each at a
random place, with pixel noise. A dataset takes the experiment spec and returns its own train/val/test split,
seeded by `spec.split_seed` and sized by `spec.val_fraction` / `spec.test_fraction`.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from trainables.data import DatasetSplits, TensorData

SIZE, CLASSES = 12, 4


def _image(label: int, rng: np.random.Generator) -> np.ndarray:
    img = np.zeros((SIZE, SIZE), dtype=np.float32)
    length = int(rng.integers(5, 9))
    r, c = (int(v) for v in rng.integers(0, SIZE - length + 1, 2))
    if label == 0:
        img[r, c:c + length] = 1
    elif label == 1:
        img[r:r + length, c] = 1
    elif label == 2:
        img[np.arange(length) + r, np.arange(length) + c] = 1
    else:
        img[r, c:c + length] = img[r + length - 1, c:c + length] = 1
        img[r:r + length, c] = img[r:r + length, c + length - 1] = 1
    return img + rng.normal(0, 0.55, img.shape).astype(np.float32)


def _splits(spec) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """`spec.num_samples` images (default 1,200), the same ones for every spec; the split follows the spec."""
    n = spec.num_samples or 1200
    rng = np.random.default_rng(2024)
    y = rng.integers(0, CLASSES, n)
    x = np.stack([_image(int(label), rng) for label in y])  # (n, 12, 12)
    order = np.random.default_rng(spec.split_seed).permutation(n)
    n_val, n_test = round(spec.val_fraction * n), round(spec.test_fraction * n)
    parts = {"val": order[:n_val], "test": order[n_val:n_val + n_test], "train": order[n_val + n_test:]}
    # (n, 1, 12, 12) in torch's own strides: a convolution's kernel, and so its rounding, follows the strides
    return {s: (torch.from_numpy(x[i]).unsqueeze(1), torch.from_numpy(y[i]).long()) for s, i in parts.items()}


def bars(spec) -> TensorData:
    """The splits as tensors."""
    splits = _splits(spec)
    return TensorData({s: x for s, (x, _) in splits.items()}, {s: y for s, (_, y) in splits.items()}, CLASSES)


class Bars(torch.utils.data.Dataset):
    """Images and labels; `transform`, if given, applied to each image as it is read (torchvision's convention)."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, transform: Callable | None = None):
        self.images, self.targets, self.transform = images, labels.tolist(), transform

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        image = self.images[i]
        return (self.transform(image) if self.transform else image), self.targets[i]


def random_shift(image: torch.Tensor) -> torch.Tensor:
    """The image moved by up to one pixel each way (zero padding, then a random crop of the original size). It
    draws from torch's global generator: the DataLoader path seeds it per sample, so the shifts repeat."""
    dy, dx = torch.randint(0, 3, (2,)).tolist()
    return torch.nn.functional.pad(image, (1, 1, 1, 1))[:, dy:dy + SIZE, dx:dx + SIZE]


def bars_dataset(spec) -> DatasetSplits:
    """The same images as `bars`, as Datasets; the training split shifted at random, sample by sample."""
    splits = _splits(spec)
    return DatasetSplits(Bars(*splits["train"], transform=random_shift), Bars(*splits["val"]), Bars(*splits["test"]),
                         CLASSES)
