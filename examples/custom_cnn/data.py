"""A dataset made here, used by import path: `--dataset examples.custom_cnn.data:bars`.

Four classes of 12x12 grey images: a horizontal bar, a vertical bar, a diagonal, a hollow square, each at a
random place, with pixel noise. A dataset takes the experiment spec and returns `TensorData` with its own
train/val/test split, seeded by `spec.split_seed` and sized by `spec.val_fraction` / `spec.test_fraction`.
"""
from __future__ import annotations

import numpy as np
import torch

from trainables.data import TensorData

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


def bars(spec) -> TensorData:
    """`spec.num_samples` images (default 1,200), the same ones for every spec; the split follows the spec."""
    n = spec.num_samples or 1200
    rng = np.random.default_rng(2024)
    y = rng.integers(0, CLASSES, n)
    x = np.stack([_image(int(label), rng) for label in y])[:, None]  # (n, 1, 12, 12)
    order = np.random.default_rng(spec.split_seed).permutation(n)
    n_val, n_test = round(spec.val_fraction * n), round(spec.test_fraction * n)
    parts = {"val": order[:n_val], "test": order[n_val:n_val + n_test], "train": order[n_val + n_test:]}
    return TensorData({s: torch.from_numpy(x[i]) for s, i in parts.items()},
                      {s: torch.from_numpy(y[i]).long() for s, i in parts.items()}, CLASSES)
