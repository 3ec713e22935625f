"""A run's data, in one of two forms, with seeded disjoint train/val/test splits, cached once per worker process.

- `TensorData`: every split held as tensors (on the device once it is there): the fast path, for data that fits
  in memory. MNIST-1D, digits, the synthetic set and CIFAR come this way.
- `DatasetSplits`: three map-style `torch.utils.data.Dataset`s, with any per-sample transforms inside them,
  streamed by a DataLoader: for data that does not fit, or has transforms of its own. ImageNet comes this way.

A dataset is a loader `(spec) -> TensorData | DatasetSplits` plus a registry entry. Nothing here downloads: MNIST-1D
comes from the `mnist1d` package's own generator (cached on disk), digits ships inside scikit-learn, CIFAR is read
from a local folder in torchvision's on-disk format.
"""
from __future__ import annotations

import os
import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, Union

import numpy as np
import torch

from trainables.atomic import atomic_write
from trainables.errors import DataError  # noqa: F401  (re-exported)
from trainables.imagenet import imagenet as load_imagenet  # torchvision only when it loads (it imports that lazily)
from trainables.shapes import SHAPES
from trainables.streamed import SPLITS, DatasetSplits, _Seeded, batch_seed  # noqa: F401  (DatasetSplits re-exported)

if TYPE_CHECKING:
    from trainables.spec import ExperimentSpec



@dataclass
class TensorData:
    """Inputs and labels per split, on one device; `augment` turns on CIFAR crop+flip for training batches."""

    x: dict[str, torch.Tensor]
    y: dict[str, torch.Tensor]
    num_classes: int
    augment: bool = False
    _on_device: dict[str, "TensorData"] = field(default_factory=dict, repr=False)

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x["train"].shape[1:])

    def size(self, split: str) -> int:
        return len(self.y[split])

    def to(self, device: torch.device) -> "TensorData":
        """A copy on `device`, made once and kept (the data stays resident, as airbench does on GPU)."""
        key = str(device)
        if key == str(self.x["train"].device):
            return self
        if key not in self._on_device:
            self._on_device[key] = TensorData(
                {s: t.to(device) for s, t in self.x.items()}, {s: t.to(device) for s, t in self.y.items()},
                self.num_classes, self.augment)
        return self._on_device[key]

    def batches(self, split: str, batch_size: int, generator: torch.Generator | None = None
                ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Batches of a split; shuffled (and augmented, for CIFAR) when a generator is given."""
        x, y = self.x[split], self.y[split]
        n = len(y)
        order = torch.randperm(n, generator=generator).to(x.device) if generator is not None else None
        crops = crop_offsets(n, batch_size, generator, x.device) if self.augment and generator is not None else None
        for start in range(0, n, batch_size):
            idx = order[start:start + batch_size] if order is not None else slice(start, start + batch_size)
            xb, yb = x[idx], y[idx]
            if crops is not None:
                xb = random_crop_flip(xb, crops[:, start:start + batch_size])
            yield xb, yb


def crop_offsets(n: int, batch_size: int, generator: torch.Generator, device: torch.device,
                 pad: int = 4) -> torch.Tensor:
    """An epoch's crop and flip draws, (3, n): row offset, column offset, flip (0/1) per sample. Drawn on the CPU
    generator batch by batch, in the order the per-batch draws always had, so a seed gives the same crops on any
    device and as before; then moved to the data's device once per epoch, not three blocking copies per step (on
    CUDA from pinned memory, without waiting)."""
    draws = []
    for start in range(0, n, batch_size):
        m = min(batch_size, n - start)
        dy = torch.randint(0, 2 * pad + 1, (m,), generator=generator)
        dx = torch.randint(0, 2 * pad + 1, (m,), generator=generator)
        flip = (torch.rand(m, generator=generator) < 0.5).long()
        draws.append(torch.stack([dy, dx, flip]))
    offsets = torch.cat(draws, dim=1)
    if torch.device(device).type == "cuda":
        return offsets.pin_memory().to(device, non_blocking=True)
    return offsets.to(device)


def random_crop_flip(x: torch.Tensor, offsets: torch.Tensor, pad: int = 4) -> torch.Tensor:
    """Random crop with `pad` px zero padding and horizontal flip, on the batch's own device; `offsets` (3, n) on
    that device (`crop_offsets`)."""
    n, _, h, w = x.shape
    dy, dx, flip = offsets[0], offsets[1], offsets[2].bool()
    padded = torch.nn.functional.pad(x, (pad, pad, pad, pad))
    rows = dy[:, None] + torch.arange(h, device=x.device)
    cols = dx[:, None] + torch.arange(w, device=x.device)
    cols = torch.where(flip[:, None], cols.flip(1), cols)
    batch = torch.arange(n, device=x.device)[:, None, None]
    return padded.permute(0, 2, 3, 1)[batch, rows[:, :, None], cols[:, None, :]].permute(0, 3, 1, 2).contiguous()


def _split(x: np.ndarray, y: np.ndarray, spec: "ExperimentSpec", test: tuple[np.ndarray, np.ndarray] | None,
           num_classes: int, augment: bool = False) -> TensorData:
    """Seeded disjoint split; a dataset with its own test set only carves validation out of training."""
    if spec.num_samples > len(y):
        raise DataError("num-samples", f"{spec.dataset} holds {len(y)} samples, fewer than {spec.num_samples}")
    rng = np.random.default_rng(spec.split_seed)
    order = rng.permutation(len(y))
    if spec.num_samples:  # a smaller pool, for quick runs (generated datasets already made exactly this many)
        order = order[:spec.num_samples]
    n_val = int(round(spec.val_fraction * len(order)))
    n_test = 0 if test is not None else int(round(spec.test_fraction * len(order)))
    parts = {"val": order[:n_val], "test": order[n_val:n_val + n_test], "train": order[n_val + n_test:]}
    xs = {s: torch.as_tensor(x[i], dtype=torch.float32) for s, i in parts.items()}
    ys = {s: torch.as_tensor(y[i], dtype=torch.long) for s, i in parts.items()}
    if test is not None:
        xs["test"] = torch.as_tensor(test[0], dtype=torch.float32)
        ys["test"] = torch.as_tensor(test[1], dtype=torch.long)
    return TensorData(xs, ys, num_classes, augment)


def cache_dir(spec: "ExperimentSpec") -> Path:
    return Path(spec.data_dir or os.environ.get("ORACLE_SEARCH_CACHE") or Path.home() / ".cache" / "oracle-search")


def mnist1d(spec: "ExperimentSpec") -> TensorData:
    """MNIST-1D (Greydanus 2020) from the package's own generator, never its download path; cached on disk."""
    n = spec.num_samples or 10_000
    path = cache_dir(spec) / f"mnist1d-{n}-seed{spec.data_seed}.npz"
    if not path.exists():
        from mnist1d.data import get_dataset_args, make_dataset

        args = get_dataset_args()
        args.num_samples, args.train_split, args.seed = n, 1.0, spec.data_seed
        state = np.random.get_state()  # the generator reseeds numpy's global state; keep the caller's
        made = make_dataset(args)
        np.random.set_state(state)
        atomic_write(path, lambda f: np.savez(f, x=made["x"].astype(np.float32), y=made["y"].astype(np.int64)))
    with np.load(path) as f:
        x, y = f["x"], f["y"]
    return _split(x, y, spec, None, 10)


def digits(spec: "ExperimentSpec") -> TensorData:
    """scikit-learn's 8x8 digits (1,797 images, shipped inside the package), scaled to [0, 1]; cached on disk,
    since importing scikit-learn costs each new trial process about a second, several times its training here."""
    path = cache_dir(spec) / "digits.npz"
    if not path.exists():
        from sklearn.datasets import load_digits

        d = load_digits()
        atomic_write(path, lambda f: np.savez(f, x=d.data.astype(np.float32) / 16.0, y=d.target.astype(np.int64)))
    with np.load(path) as f:
        x, y = f["x"], f["y"]
    return _split(x, y, spec, None, 10)


def synthetic(spec: "ExperimentSpec") -> TensorData:
    """Ten Gaussian clusters in 32 dimensions: a tiny, learnable dataset for tests."""
    rng = np.random.default_rng(1234 + spec.data_seed - 42)  # the default data_seed (42) draws what 1234 always drew
    n = spec.num_samples or 1200
    centers = rng.normal(0, 1.0, (10, 32))
    y = rng.integers(0, 10, n)
    x = centers[y] + rng.normal(0, 1.6, (n, 32))
    return _split(x.astype(np.float32), y, spec, None, 10)


CIFAR_FOLDERS = {
    "cifar10": ("cifar-10-batches-py", [f"data_batch_{i}" for i in range(1, 6)], ["test_batch"], b"labels"),
    "cifar100": ("cifar-100-python", ["train"], ["test"], b"fine_labels"),
}
CIFAR_MEAN = np.array([0.4914, 0.4822, 0.4465], dtype=np.float32)[:, None, None]
CIFAR_STD = np.array([0.2470, 0.2435, 0.2616], dtype=np.float32)[:, None, None]


def _read_cifar(root: Path, files: list[str], label_key: bytes) -> tuple[np.ndarray, np.ndarray]:
    xs, ys = [], []
    for name in files:
        path = root / name
        if not path.exists():
            raise DataError("data-dir", f"missing CIFAR file {path}")
        with open(path, "rb") as f:
            batch = pickle.load(f, encoding="bytes")
        xs.append(np.asarray(batch[b"data"], dtype=np.uint8).reshape(-1, 3, 32, 32))
        ys.append(np.asarray(batch[label_key], dtype=np.int64))
    x = (np.concatenate(xs).astype(np.float32) / 255.0 - CIFAR_MEAN) / CIFAR_STD
    return x, np.concatenate(ys)


def cifar(spec: "ExperimentSpec") -> TensorData:
    """CIFAR-10/100 from `--data-dir` in torchvision's format (the extracted python pickles); never downloads."""
    folder, train_files, test_files, label_key = CIFAR_FOLDERS[spec.dataset]
    if spec.data_dir is None:
        raise DataError("data-dir", f"{spec.dataset} needs --data-dir, the folder holding {folder}/")
    root = Path(spec.data_dir) / folder
    if not root.is_dir():
        raise DataError("data-dir", f"no {folder}/ folder in {spec.data_dir} (torchvision's format; nothing is downloaded)")
    return _split(*_read_cifar(root, train_files, label_key), spec, _read_cifar(root, test_files, label_key),
                  SHAPES[spec.dataset].num_classes, augment=True)


def imagenet(spec: "ExperimentSpec") -> "DatasetSplits":
    """ImageNet from `--data-dir` (trainables.imagenet, which imports torchvision: only when asked for)."""
    return load_imagenet(spec)


Data = Union[TensorData, DatasetSplits]


def first_batch(data: Data, n: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The first batch of `n` training samples of a pass without a generator, read in this process (no DataLoader
    workers started for one batch)."""
    if isinstance(data, TensorData):
        return next(data.to(device).batches("train", n))
    items = _Seeded(data.train).__getitems__((batch_seed(0, 0), list(range(min(n, data.size("train"))))))
    x, y = torch.utils.data.default_collate(items)
    return x.to(device), data._checked_labels(y, "train").to(device)


DATASETS: dict[str, Callable[["ExperimentSpec"], Data]] = {
    "mnist1d": mnist1d,
    "digits": digits,
    "synthetic": synthetic,
    "cifar10": cifar,
    "cifar100": cifar,
    "imagenet": imagenet,
}
