"""The fusion policy: how many max_lr candidates of a (seed, cycle) one trial trains as one fused network, and
the packing of trainings into Tune trial configs (`pack`)."""
from __future__ import annotations

from typing import Callable

from oracle_search.identity import Training
from trainables.spec import ExperimentSpec

ALL = 64  # "every candidate of a (seed, cycle)": more values than any cycle trains


def fuse_size(spec: ExperimentSpec, fuse: int) -> int:
    """Candidates per fused trial: as asked, else all of a (seed, cycle) on GPUs and 1 on CPUs (a CPU step is
    compute-bound: 8 batched MLPs ran only 1.0-1.1x faster than 8 separate runs here)."""
    return fuse or (ALL if spec.resources.gpus_per_trial > 0 else 1)


def fusable(spec: ExperimentSpec, max_lr: float | None) -> bool:
    """Whether a training may share a fused trial with others of its (spec, cycle, seed, start): it has a max_lr
    of its own (SILO derives its own) and is not fp16 (the fused step has no gradient scaler)."""
    return max_lr is not None and spec.schedule.name != "silo" and spec.precision != "fp16"


def pack(trainings: list[Training], fuse: int, own: Callable[[str, Training], None]) -> list[dict]:
    """Tune trial configs: trainings of one (spec, cycle, seed, start) that differ only in max_lr go together, up
    to `fuse` per Tune trial, as one fused network (`trainables.fused`); the rest one per Tune trial. `own(key,
    training)` is told the key of each fused trial and the training that stands for it."""
    if fuse <= 1:
        return [t.config() for t in trainings]
    groups: dict[tuple, list[Training]] = {}
    configs = []
    for t in trainings:
        if not fusable(t.spec, t.max_lr):
            configs.append(t.config())
        else:
            groups.setdefault((t.spec, t.cycle, t.seed, t.start_checkpoint), []).append(t)
    for group in groups.values():
        for i in range(0, len(group), fuse):
            chunk = group[i:i + fuse]
            if len(chunk) == 1:
                configs.append(chunk[0].config())
                continue
            key = f"{chunk[0].key}-fused{len(chunk)}"
            own(key, chunk[0])
            configs.append(chunk[0].config() | {"key": key, "max_lr": None, "max_lrs": [t.max_lr for t in chunk],
                                                "keys": [t.key for t in chunk]})
    return configs
