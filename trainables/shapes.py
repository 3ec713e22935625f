"""What the datasets read from files look like, known without reading them: one sample's input shape, the classes,
and how many images the published training and test sets hold. The one place these sizes live: the paper's presets
turn its iteration counts into epochs with them, and a dry run without the data counts an epoch's steps from them
and times its steps on random inputs of the shape (`trainables.standin`). No torch: the presets import this."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DatasetShape:
    input_shape: tuple[int, ...]
    num_classes: int
    train: int  # images in the published training set; the validation split is carved out of it
    test: int  # images in the published test set (ImageNet's: its validation set, the test split here)

    def splits(self, val_fraction: float, num_samples: int = 0) -> dict[str, int]:
        """Each split's size as the loaders make them (`data._split` with the dataset's own test set,
        `imagenet.imagenet`): `num_samples` (0: all) of the training images, of which the validation split takes
        round(val_fraction · n)."""
        pool = num_samples or self.train
        val = int(round(val_fraction * pool))
        return {"train": pool - val, "val": val, "test": self.test}


SHAPES: dict[str, DatasetShape] = {
    # Krizhevsky 2009: 60,000 32x32 colour images, 50,000 to train and 10,000 to test, in both CIFARs.
    "cifar10": DatasetShape((3, 32, 32), 10, 50_000, 10_000),
    "cifar100": DatasetShape((3, 32, 32), 100, 50_000, 10_000),
    # ILSVRC 2012 (ImageNet-1k): 1,281,167 training and 50,000 validation images, trained on 224 px crops.
    "imagenet": DatasetShape((3, 224, 224), 1000, 1_281_167, 50_000),
}
