"""The fusion policy: how many max_lr candidates of a (seed, cycle) one trial trains as one fused network."""
from __future__ import annotations

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
