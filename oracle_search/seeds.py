"""The seed plan, in one place. A study with base seed `spec.seed` tunes on its tuning seeds (base + 0..n−1) and runs
every tuned method's final runs on evaluation seeds (base + EVAL_SEED_OFFSET + 0..n−1) that no tuning row used, so
no method is judged on the seeds it was tuned on. Replicate r (1-based) of a study is the study with base seed
`spec.seed + SEED_STRIDE·(r − 1)`, so replicate 1 is exactly the run `--replicates 1` makes, and the replicates'
seeds are disjoint while a run's seeds fit below the stride (`check_seed_room`, at the edge). Every source of
variance moves with the replicate: its data split (`split_seed`) and, for a generated dataset such as MNIST-1D, its
generation seed (`data_seed`) move by the same stride, so replicate r differs from replicate 1 in the
initialisations and batch orders, the train/validation/test split and the generated data, and in nothing else."""
from __future__ import annotations

import dataclasses

from trainables.errors import SpecError
from trainables.spec import ExperimentSpec

EVAL_SEED_OFFSET = 1000
SEED_STRIDE = 10_000


def tuning_seeds(spec: ExperimentSpec, n: int) -> list[int]:
    return list(range(spec.seed, spec.seed + n))


def evaluation_seeds(spec: ExperimentSpec, n: int) -> list[int]:
    return list(range(spec.seed + EVAL_SEED_OFFSET, spec.seed + EVAL_SEED_OFFSET + n))


def replicate_spec(spec: ExperimentSpec, r: int) -> ExperimentSpec:
    """Replicate r's spec (r = 1, 2, ...): the base seed, the split seed and the data generation seed each moved
    by SEED_STRIDE per replicate (replicate 1 is the spec itself)."""
    step = SEED_STRIDE * (r - 1)
    return dataclasses.replace(spec, seed=spec.seed + step, split_seed=spec.split_seed + step,
                               data_seed=spec.data_seed + step)


def check_seed_room(seeds: int, eval_seeds: int, fit_seeds: int) -> None:
    """SpecError when a replicate's seeds would reach into the next replicate's (or its tuning seeds into its own
    evaluation seeds)."""
    for option, n in (("seeds", seeds), ("fit-seeds", fit_seeds)):
        if n > EVAL_SEED_OFFSET:
            raise SpecError(option, f"at most {EVAL_SEED_OFFSET} with replicates (the evaluation seeds start "
                            f"there), got {n}")
    if eval_seeds > SEED_STRIDE - EVAL_SEED_OFFSET:
        raise SpecError("eval-seeds", f"at most {SEED_STRIDE - EVAL_SEED_OFFSET} with replicates (the next "
                        f"replicate's seeds start {SEED_STRIDE} above), got {eval_seeds}")
