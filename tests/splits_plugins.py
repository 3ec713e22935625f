"""Plug-ins for tests/test_splits.py, by import path `tests.splits_plugins:NAME`: the driver imports them from the
repository root (the working folder, which `trainables.sources` adds to sys.path) and so do the local Ray's workers
(Ray adds the driver's working folder to theirs). Datasets as `DatasetSplits`, good and bad, and losses."""
from __future__ import annotations

import os
from pathlib import Path

import torch

from examples.custom_cnn.data import CLASSES, _splits
from trainables.data import DatasetSplits


class Items(torch.utils.data.Dataset):
    """(image, label) pairs of tensors; `seen`, a folder: each DataLoader worker leaves a file there once."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, seen: str | None = None):
        self.images, self.labels, self.seen = images, labels.tolist(), seen

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int):
        info = torch.utils.data.get_worker_info()
        if self.seen and info is not None:
            mark = Path(self.seen) / f"worker{info.id}-pid{os.getpid()}"
            if not mark.exists():
                mark.touch()
        return self.images[i], self.labels[i]


def _bars(spec, seen: str | None = None, workers: int | None = None, **changes) -> DatasetSplits:
    parts = {s: Items(x, y, seen) for s, (x, y) in _splits(spec).items()}
    return DatasetSplits(**(parts | changes), num_classes=CLASSES, workers=workers)


def bars_two_workers(spec) -> DatasetSplits:
    """examples.custom_cnn.data:bars as Datasets with no transform, on two DataLoader workers, which record
    themselves in `spec.data_dir`."""
    return _bars(spec, seen=spec.data_dir, workers=2)


class StringLabels(Items):
    def __getitem__(self, i: int):
        return self.images[i], "bar"


def string_labels(spec) -> DatasetSplits:
    parts = _splits(spec)
    return _bars(spec, train=StringLabels(*parts["train"]))


def empty_val(spec) -> DatasetSplits:
    return _bars(spec, val=Items(torch.zeros(0, 1, 12, 12), torch.zeros(0, dtype=torch.long)))


class LateBadLabel(Items):
    """Label 9 (of 4 classes) at its last item: only a pass that reaches it can tell."""

    def __getitem__(self, i: int):
        image, label = super().__getitem__(i)
        return image, 9 if i == len(self) - 1 else label


def late_bad_label(spec) -> DatasetSplits:
    parts = _splits(spec)
    return _bars(spec, train=LateBadLabel(*parts["train"]))


def first_bad_label(spec) -> DatasetSplits:
    """Label 9 at item 0 of the training split: seen before a run."""
    x, y = _splits(spec)["train"]
    return _bars(spec, train=Items(x, torch.cat([torch.tensor([9]), y[1:]])))


def per_sample(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Forgot the reduction: one loss per sample."""
    return torch.nn.functional.cross_entropy(logits, targets, reduction="none")


def nan_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return torch.log(logits - logits.max() - 1).mean()  # the log of negative numbers


def squared_error(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """A loss unlike cross-entropy: the squared error to the one-hot targets."""
    one_hot = torch.nn.functional.one_hot(targets, logits.shape[-1]).to(logits.dtype)
    return ((logits - one_hot) ** 2).sum(-1).mean()
