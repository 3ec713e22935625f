"""ImageNet from an ImageFolder (`--data-dir` holding train/ and val/, one subfolder per class), streamed from
disk by a DataLoader behind TensorData's interface. Validation is carved out of train/; test is val/.

torchvision is imported lazily: it costs seconds, and every spec validation imports the dataset registry.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

import numpy as np
import torch

from trainables.errors import DataError

if TYPE_CHECKING:
    from trainables.spec import ExperimentSpec

IMAGE_SIZE = 224  # the side of the training crop and of the evaluation center crop
RESIZE = 256  # evaluation resizes the short side to this first
WORKERS = min(8, os.cpu_count() or 1)
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)

Sample = tuple[str, int]  # (image path, class index)


class Images(torch.utils.data.Dataset):
    """Decoded, transformed images of a list of samples."""

    def __init__(self, samples: list[Sample], transform: Callable):
        self.samples, self.transform = samples, transform

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        from torchvision.datasets.folder import default_loader

        path, label = self.samples[i]
        return self.transform(default_loader(path)), label


@dataclass(frozen=True)
class ImageFolderData:
    """Samples per split, read on demand: training batches (with a generator) get random-resized-crop + flip,
    everything else resize + center crop. Batches arrive on `device`."""

    samples: dict[str, list[Sample]]
    num_classes: int
    image_size: int
    resize: int
    device: torch.device = torch.device("cpu")

    @property
    def input_shape(self) -> tuple[int, ...]:
        return (3, self.image_size, self.image_size)

    def size(self, split: str) -> int:
        return len(self.samples[split])

    def to(self, device: torch.device | str) -> "ImageFolderData":
        return replace(self, device=torch.device(device))

    def batches(self, split: str, batch_size: int, generator: torch.Generator | None = None
                ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Batches of a split; shuffled when a generator is given (and augmented, for train)."""
        n = len(self.samples[split])
        order = torch.randperm(n, generator=generator).tolist() if generator is not None else list(range(n))
        augment = split == "train" and generator is not None
        # Workers seed their augmentation from the loader's generator, so a seeded generator fixes the crops.
        seed = int(torch.randint(2**62, (1,), generator=generator)) if generator is not None else 0
        loader = torch.utils.data.DataLoader(
            Images(self.samples[split], self._transform(augment)), batch_size=batch_size, sampler=order,
            num_workers=WORKERS, pin_memory=self.device.type == "cuda",
            generator=torch.Generator().manual_seed(seed))
        for x, y in loader:
            yield x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)

    def _transform(self, augment: bool) -> Callable:
        from torchvision import transforms as T

        head = ([T.RandomResizedCrop(self.image_size), T.RandomHorizontalFlip()] if augment
                else [T.Resize(self.resize), T.CenterCrop(self.image_size)])
        return T.Compose([*head, T.ToTensor(), T.Normalize(MEAN, STD)])


def imagenet(spec: "ExperimentSpec") -> ImageFolderData:
    """ImageNet (or any ImageFolder) from `--data-dir`; `num_samples` > 0 keeps that many training images."""
    from torchvision.datasets.folder import IMG_EXTENSIONS, find_classes, make_dataset


    if spec.data_dir is None:
        raise DataError("data-dir", "imagenet needs --data-dir, a folder holding train/ and val/ (ImageFolder layout)")
    root = Path(spec.data_dir)
    for sub in ("train", "val"):
        if not (root / sub).is_dir():
            raise DataError("data-dir", f"no {sub}/ folder in {root} (ImageFolder layout: {sub}/<class>/<image>)")
    try:
        classes, class_to_idx = find_classes(str(root / "train"))
        train = make_dataset(str(root / "train"), class_to_idx, IMG_EXTENSIONS)
        test = make_dataset(str(root / "val"), class_to_idx, IMG_EXTENSIONS)
    except FileNotFoundError as err:  # no class folders, or a class without images
        raise DataError("data-dir", str(err)) from err
    order = np.random.default_rng(spec.split_seed).permutation(len(train))
    if spec.num_samples:
        order = order[:spec.num_samples]
    n_val = int(round(spec.val_fraction * len(order)))
    samples = {"train": [train[i] for i in order[n_val:]], "val": [train[i] for i in order[:n_val]], "test": test}
    return ImageFolderData(samples, len(classes), IMAGE_SIZE, RESIZE)
