"""Random inputs of a known dataset's shape (`trainables.shapes`), in splits of the sizes the real data's would
have, for timing training steps where the data is absent: a dry run prices a study before anything is downloaded
(`oracle_search.estimate.time_epoch`). Only the sizes are real, so an epoch has the real epoch's steps; no input is
read from disk. The values do not change a step's time: the models' kernels do the same work on any input."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterator

import torch

from trainables.errors import DataError
from trainables.shapes import SHAPES

if TYPE_CHECKING:
    from trainables.spec import ExperimentSpec


@dataclass
class StandIn:
    """What a probe reads of a dataset (`input_shape`, `num_classes`, `size`, `to`, `batches`), with random
    batches: one of each size, drawn once and then given again (a whole ImageNet epoch of inputs would not fit)."""

    name: str  # the dataset it stands in for
    input_shape: tuple[int, ...]
    num_classes: int
    sizes: dict[str, int]
    device: str = "cpu"
    _drawn: dict[int, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict, repr=False, compare=False)

    def size(self, split: str) -> int:
        return self.sizes[split]

    def to(self, device: torch.device | str) -> "StandIn":
        return self if str(device) == self.device else dataclasses.replace(self, device=str(device), _drawn={})

    def capped(self, split: str, n: int) -> "StandIn":
        """The same stand-in with `split` cut to at most `n` samples: a pass over it times a part of the pass."""
        return dataclasses.replace(self, sizes=self.sizes | {split: min(n, self.sizes[split])})

    def batches(self, split: str, batch_size: int, generator: torch.Generator | None = None
                ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """A split's batches, lazily: as many as the real split has, of the same sizes."""
        n = self.sizes[split]
        for start in range(0, n, batch_size):
            yield self._batch(min(batch_size, n - start))

    def _batch(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        if n not in self._drawn:
            g = torch.Generator().manual_seed(n)
            x = torch.randn((n, *self.input_shape), generator=g)
            y = torch.randint(self.num_classes, (n,), generator=g)
            self._drawn[n] = (x.to(self.device), y.to(self.device))
        return self._drawn[n]


def stand_in(spec: "ExperimentSpec") -> StandIn | None:
    """The stand-in for `spec`'s data where it is absent: a dataset of a known shape and no `--data-dir`. None
    where there is data to time on (or no known shape to stand in for it)."""
    shape = SHAPES.get(spec.dataset)
    if shape is None or spec.data_dir is not None:
        return None
    if spec.num_samples > shape.train:  # as the loader would refuse it
        raise DataError("num-samples", f"{spec.dataset} holds {shape.train} samples, fewer than {spec.num_samples}")
    return StandIn(spec.dataset, shape.input_shape, shape.num_classes,
                   shape.splits(spec.val_fraction, spec.num_samples))
