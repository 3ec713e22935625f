"""Datasets streamed by a DataLoader (`DatasetSplits`): three map-style `torch.utils.data.Dataset`s with any
per-sample transforms inside them, and the seeding that makes their batches repeat with any number of workers.
`trainables.data` re-exports it beside `TensorData`; the ImageNet loader (`trainables.imagenet`) builds one."""
from __future__ import annotations

import contextlib
import copy
import os
import random
import threading
from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np
import torch

from trainables.errors import DataError

SPLITS = ("train", "val", "test")


Batches = Iterator[tuple[torch.Tensor, torch.Tensor]]
MASK64 = (1 << 64) - 1


@dataclass(eq=False)
class DatasetSplits:
    """Three map-style `torch.utils.data.Dataset`s whose items are `(input tensor, int label)`, with any per-sample
    transforms inside them, and the number of classes. Batches come from a DataLoader, by one rule:

    - `workers` worker processes (None: the trial's CPUs beyond the one that trains, i.e. torch's threads - 1,
      since a trial runs torch on its whole CPUs), kept alive from one epoch (and trial) to the next;
    - pinned memory when the batches go to a GPU;
    - a pass with a generator (training's, seeded from (seed, cycle), one pass per epoch) draws the same shuffled
      order from it as `TensorData` does, and then one seed for the pass; before a batch's items are read, the
      random state their transforms draw from (torch's CPU generator, numpy's, `random`'s) is set from that seed
      and the batch's number, in whichever worker fetches the batch: a seed gives the same batches with any number
      of workers, and a trial run again repeats them. A pass without a generator runs in order, seed 0.
    """

    train: Any
    val: Any
    test: Any
    num_classes: int
    workers: int | None = None
    name: str = field(default="dataset", init=False, repr=False)  # the plug-in, for error lines (set by `check`)
    _device: torch.device = field(default=torch.device("cpu"), init=False, repr=False)
    _shape: tuple[int, ...] | None = field(default=None, init=False, repr=False)
    _views: dict[str, "DatasetSplits"] = field(default_factory=dict, init=False, repr=False)
    _idle: dict[tuple[str, int], list] = field(default_factory=dict, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def split(self, name: str) -> Any:
        return {"train": self.train, "val": self.val, "test": self.test}[name]

    def size(self, split: str) -> int:
        return len(self.split(split))

    @property
    def input_shape(self) -> tuple[int, ...]:
        if self._shape is None:
            self._shape = tuple(self.item("train", 0)[0].shape)
        return self._shape

    def to(self, device: torch.device | str) -> "DatasetSplits":
        """The same splits, batches arriving on `device`: one view per device, kept with its DataLoaders."""
        device = torch.device(device)
        if device == self._device:
            return self
        key = str(device)
        with self._lock:
            if key not in self._views:
                view = copy.copy(self)
                view._device, view._views, view._idle, view._lock = device, {}, {}, threading.Lock()
                self._views[key] = view
            return self._views[key]

    def item(self, split: str, index: int) -> Any:
        """One item, read in this process as the first of a batch of a pass without a generator."""
        return _Seeded(self.split(split)).__getitems__((batch_seed(0, 0), [index]))[0]

    def batches(self, split: str, batch_size: int, generator: torch.Generator | None = None) -> Batches:
        """Batches of a split on the device; shuffled when a generator is given (the same order as TensorData)."""
        n = self.size(split)
        order = torch.randperm(n, generator=generator) if generator is not None else torch.arange(n)
        seed = pass_seed(generator) if generator is not None else 0
        with self._borrow(split) as loader:
            loader.batch_sampler.plan(order, batch_size, seed)
            for x, y in loader:
                y = self._checked_labels(y, split)
                yield x.to(self._device, non_blocking=True), y.to(self._device, non_blocking=True)

    def loader_workers(self) -> int:
        return self.workers if self.workers is not None else max(0, torch.get_num_threads() - 1)

    @contextlib.contextmanager
    def _borrow(self, split: str) -> Iterator[torch.utils.data.DataLoader]:
        """A DataLoader of `split` that no other pass is using (a persistent loader has one iterator), made on
        first use and kept for the next pass; two threads iterating at once (the time probe) get one each."""
        key = (split, self.loader_workers())
        with self._lock:
            idle = self._idle.setdefault(key, [])
            loader = idle.pop() if idle else None
        if loader is None:
            workers = key[1]
            # A generator of its own: without one, each new iterator draws its workers' base seed from torch's
            # global generator, the training's (which dropout draws from); the samples' seeds are ours anyway.
            loader = torch.utils.data.DataLoader(
                _Seeded(self.split(split)), batch_sampler=_Plan(), num_workers=workers,
                pin_memory=self._device.type == "cuda", persistent_workers=workers > 0,
                generator=torch.Generator().manual_seed(0))
        try:
            yield loader
        finally:
            with self._lock:
                self._idle[key].append(loader)

    def _checked_labels(self, y: torch.Tensor, split: str) -> torch.Tensor:
        """A batch's labels as int64, each in range(num_classes): checked as they stream (two reductions of a
        CPU tensor), since a dataset too large to hold cannot be checked before; on a GPU an index out of range
        would be a device-side assert that ends the process."""
        if not isinstance(y, torch.Tensor) or y.dim() != 1 or not _integer(y.dtype):
            raise DataError("dataset", f"{self.name!r}: split {split!r} gave a batch of labels "
                            f"{_describe(y)}, not one int per sample")
        low, high = int(y.min()), int(y.max())
        if low < 0 or high >= self.num_classes:
            raise DataError("dataset", f"{self.name!r}: split {split!r} has label {low if low < 0 else high}, "
                            f"outside range(num_classes={self.num_classes})")
        return y.long()

    def check(self, name: str) -> "DatasetSplits":
        """Validate what can be seen before training, raising DataError with one line naming the plug-in: every
        split a non-empty map-style dataset whose first item is (tensor, int) with the label in
        range(num_classes), of one input shape; a `targets` list (torchvision's convention), where a dataset
        has one, wholly in range. Later items' labels are checked as they stream."""
        self.name = name

        def bad(message: str) -> DataError:
            return DataError("dataset", f"{name!r}: {message}")

        if isinstance(self.num_classes, bool) or not isinstance(self.num_classes, int) or self.num_classes < 1:
            raise bad(f"num_classes must be an integer >= 1, got {self.num_classes!r}")
        if self.workers is not None and (isinstance(self.workers, bool) or not isinstance(self.workers, int)
                                         or self.workers < 0):
            raise bad(f"workers must be None or an integer >= 0, got {self.workers!r}")
        shapes = {}
        for split in SPLITS:
            data = self.split(split)
            if isinstance(data, torch.utils.data.IterableDataset) or not (
                    hasattr(data, "__getitem__") and hasattr(data, "__len__")):
                raise bad(f"split {split!r} is a {type(data).__name__}, not a map-style torch.utils.data.Dataset "
                          "(__getitem__ and __len__)")
            if len(data) == 0:
                raise bad(f"split {split!r} is empty")
            item = self.item(split, 0)
            if not (isinstance(item, (tuple, list)) and len(item) == 2 and isinstance(item[0], torch.Tensor)
                    and _is_label(item[1])):
                raise bad(f"split {split!r} item 0 is {_describe(item)}, not (tensor, int)")
            targets = getattr(data, "targets", None)
            known = isinstance(targets, (list, tuple, np.ndarray, torch.Tensor))
            labels = np.append(np.asarray(targets if known else [], dtype=np.int64).ravel(), int(item[1]))
            outside = labels[(labels < 0) | (labels >= self.num_classes)]
            if outside.size:
                raise bad(f"split {split!r} has label {int(outside[0])}, outside range(num_classes={self.num_classes})")
            shapes[split] = tuple(item[0].shape)
        if len(set(shapes.values())) > 1:
            raise bad("the splits' inputs differ in shape: " + ", ".join(f"{s} {v}" for s, v in shapes.items()))
        self._shape = shapes["train"]
        return self


class _Seeded(torch.utils.data.Dataset):
    """The user's dataset, fetched a batch at a time, the batch's seed setting the random state its items'
    transforms draw from; the caller's own random state is kept (a pass without workers runs in the training
    process). Per batch, not per item: seeding three generators costs about what reading a small item does."""

    def __init__(self, dataset: Any):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> Any:  # DataLoader fetches batches through __getitems__
        return self.__getitems__((batch_seed(0, 0), [index]))[0]

    def __getitems__(self, batch: tuple[int, list[int]]) -> list:
        seed, indices = batch
        with own_random_state():
            seed_everything(seed)
            return [self.dataset[i] for i in indices]


class _Plan(torch.utils.data.Sampler):
    """A DataLoader's batch sampler, told each pass's order, batch size and seed before the pass begins (a
    persistent loader keeps its sampler). A batch is (its seed, its indices): the seed travels to the worker
    with it."""

    def __init__(self) -> None:
        self.order, self.batch_size, self.seed = [], 1, 0

    def plan(self, order: torch.Tensor, batch_size: int, seed: int) -> None:
        self.order, self.batch_size, self.seed = order.tolist(), batch_size, seed

    def __iter__(self) -> Iterator[tuple[int, list[int]]]:
        order, size, seed = self.order, self.batch_size, self.seed
        return ((batch_seed(seed, number), order[start:start + size])
                for number, start in enumerate(range(0, len(order), size)))

    def __len__(self) -> int:
        return -(-len(self.order) // self.batch_size)


def pass_seed(generator: torch.Generator) -> int:
    """A pass's seed, read from a copy of `generator` (the shuffle's): the generator itself moves only as
    TensorData's does, so the two forms shuffle alike."""
    copy_ = torch.Generator()
    copy_.set_state(generator.get_state())
    return int(torch.randint(2**62, (1,), generator=copy_))


def batch_seed(seed: int, number: int) -> int:
    """SplitMix64 of (pass seed, batch number): well-spread 63-bit seeds, also for neighbouring batches."""
    z = (seed + (number + 1) * 0x9E3779B97F4A7C15) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return (z ^ (z >> 31)) >> 1


def seed_everything(seed: int) -> None:
    """Seed what a transform may draw from: torch's CPU generator (not CUDA's: a pass without workers runs in the
    training process), numpy's global generator and `random`."""
    torch.random.default_generator.manual_seed(seed)
    np.random.seed(seed & 0xFFFFFFFF)
    random.seed(seed)


@contextlib.contextmanager
def own_random_state() -> Iterator[None]:
    """Restore torch's CPU, numpy's and `random`'s global states afterwards (dropout draws from torch's)."""
    states = torch.random.get_rng_state(), np.random.get_state(), random.getstate()
    try:
        yield
    finally:
        torch.random.set_rng_state(states[0])
        np.random.set_state(states[1])
        random.setstate(states[2])


def _integer(dtype: torch.dtype) -> bool:
    return not dtype.is_floating_point and not dtype.is_complex and dtype != torch.bool


def _is_label(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return value.dim() == 0 and _integer(value.dtype)
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _describe(value: Any) -> str:
    """`(Tensor, str)` for an item, `a Tensor of shape (4, 2) float32` for a tensor, else the type's name."""
    if isinstance(value, torch.Tensor):
        return f"a Tensor of shape {tuple(value.shape)} {str(value.dtype).removeprefix('torch.')}"
    if isinstance(value, (tuple, list)):
        return "(" + ", ".join(type(v).__name__ for v in value) + ")"
    return f"a {type(value).__name__}"
