"""ImageNet from an ImageFolder (`--data-dir` holding train/ and val/, one subfolder per class), as
`trainables.data.DatasetSplits`: streamed from disk by the DataLoader every such dataset gets (workers, pinned
memory, seeded per-sample augmentation). Validation is carved out of train/; test is val/.

torchvision is imported lazily: it costs seconds, and every spec validation imports the dataset registry.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np
import torch

from trainables.streamed import SPLITS, DatasetSplits
from trainables.errors import DataError
from trainables.shapes import SHAPES

if TYPE_CHECKING:
    from trainables.spec import ExperimentSpec

IMAGE_SIZE = SHAPES["imagenet"].input_shape[-1]  # 224: the side of the training crop and of the evaluation center crop
RESIZE = 256  # evaluation resizes the short side to this first
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


class ImageFolderData(DatasetSplits):
    """ImageNet's splits: training images get random-resized-crop + flip (in every pass, the §3.1 statistics'
    batch too), validation and test resize + center crop."""

    @property
    def samples(self) -> dict[str, list[Sample]]:
        return {s: self.split(s).samples for s in SPLITS}


def transform(augment: bool, image_size: int = IMAGE_SIZE, resize: int = RESIZE) -> Callable:
    from torchvision import transforms as T

    head = ([T.RandomResizedCrop(image_size), T.RandomHorizontalFlip()] if augment
            else [T.Resize(resize), T.CenterCrop(image_size)])
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
    evaluate = transform(augment=False)
    return ImageFolderData(Images([train[i] for i in order[n_val:]], transform(augment=True)),
                           Images([train[i] for i in order[:n_val]], evaluate), Images(test, evaluate), len(classes))
