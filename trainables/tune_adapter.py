"""The thin Ray Tune adapter: one trial = one `run_cycle` (or one fused `run_fused_cycle` of K candidates),
reported with its checkpoint. The only Ray import in `trainables`."""
from __future__ import annotations

import dataclasses
import json
import math
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import ray
import torch
from ray import tune

from trainables.checkpoints import CheckpointError
from trainables.cycle import run_cycle
from trainables.fused import run_fused_cycle
from trainables.spec import ExperimentSpec, trial_threads


# Each report hands the result between two threads of the trial's process: 3-4 ms measured on an idle 2-core
# machine, 10-30 ms on a busy one. A trial whose epochs are shorter than this interval reports only some of them.
EPOCH_REPORT_EVERY_S = 0.5


def trial_device(spec: ExperimentSpec) -> ExperimentSpec:
    """Use the GPU Ray assigned (Ray sets CUDA_VISIBLE_DEVICES, so it is cuda:0 here), else the CPU."""
    use_cuda = bool(ray.get_gpu_ids()) and torch.cuda.is_available()
    return dataclasses.replace(spec, device="cuda" if use_cuda else "cpu")


def _trial_spec(config: dict[str, Any]) -> ExperimentSpec:
    """The config's spec on this trial's device, torch limited to the trial's CPU share (not the whole machine)."""
    cpus = ray.get_runtime_context().get_assigned_resources().get("CPU", 1.0)
    torch.set_num_threads(trial_threads(cpus))
    return trial_device(config["spec"])


def _placement() -> dict[str, Any]:
    """Where the trial ran: the results table's gpu_ids and node_id."""
    return {"gpu_ids": [str(g) for g in ray.get_gpu_ids()], "node_id": ray.get_runtime_context().get_node_id()}


@contextmanager
def _local_start(start: str | None) -> Iterator[str | None]:
    """The start checkpoint as a local folder: a path in place, a cloud URI downloaded to a temporary copy;
    a CheckpointError names the URI, not its temporary copy."""
    if not start:
        yield None
        return
    with tune.Checkpoint(start).as_directory() as local:
        try:
            yield local
        except CheckpointError as err:
            if local == start:
                raise
            raise CheckpointError(f"{start}: {err}") from err


def cycle_trainable(config: dict[str, Any]) -> None:
    """Config keys: spec, cycle, max_lr, seed, start_checkpoint (path or URI, or None), key.

    Reports after each epoch `{"final": False, "cycle", "epoch", "timesteps_total" (= epoch), "epoch_val_acc",
    "train_loss", "lr"}` without a checkpoint (the curves in TensorBoard and other loggers), at most once every
    EPOCH_REPORT_EVERY_S, then last the cycle's row with `"final": True` and the checkpoint. Only the final report
    carries `val_acc`; a driver records only that one."""
    spec = _trial_spec(config)
    last_report = -math.inf

    def report_epoch(m: dict) -> None:
        nonlocal last_report
        if time.monotonic() - last_report < EPOCH_REPORT_EVERY_S:
            return
        last_report = time.monotonic()
        # timesteps_total is the step Tune's TensorBoard, MLflow and wandb loggers plot against.
        tune.report({"final": False, "cycle": config["cycle"], "epoch": m["epoch"], "timesteps_total": m["epoch"],
                     "epoch_val_acc": m["val_acc"], "train_loss": m["train_loss"], "lr": m["lr"]})

    with _local_start(config.get("start_checkpoint")) as start_dir, tempfile.TemporaryDirectory() as work:
        result = run_cycle(spec, cycle=config["cycle"], max_lr=config["max_lr"], seed=config["seed"],
                           start_checkpoint=start_dir, checkpoint_dir=Path(work) / "checkpoint",
                           on_epoch=report_epoch)
        metrics = result.row() | {"final": True, "key": config.get("key", "")} | _placement()
        tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(result.checkpoint))


def fused_cycle_trainable(config: dict[str, Any]) -> None:
    """K max_lr candidates of one (seed, cycle) trained as one fused network (`trainables.fused`): one trial,
    one result, one checkpoint.

    Config keys: spec, cycle, max_lrs (list of K), seed, start_checkpoint (path or URI, or None; shared by all
    candidates), keys (list of K, one per candidate). SILO specs are rejected (ValueError): SILO has one max_lr.

    Reports ONE result, ``{"fused_rows": "[...]", "gpu_ids": [...], "node_id": ...}``, where ``fused_rows`` is a JSON
    list (read it with `fused_rows`: Tune's TensorBoard logger takes a list of dicts for a histogram and prints the
    whole of it in a warning) whose item i is
    candidate i's ``CycleResult.row() | {"key": keys[i], "fused": K, "checkpoint_subdir": "cand%02d" % i}``
    (so it carries ``val_acc``, ``diverged``, ``checkpoint_hash``... like a cycle_trainable result), with ONE
    Tune checkpoint whose subfolder ``checkpoint_subdir`` is candidate i's chainable checkpoint: pass
    ``Path(result.checkpoint.path) / row["checkpoint_subdir"]`` as the next cycle's start_checkpoint. A row's
    own ``checkpoint`` field names a temporary folder of the trial and is meaningless afterwards. A row's
    ``seconds`` is its equal share of the trial's training time. Request the resources of one trial (one GPU):
    the K candidates share it.
    """
    keys, max_lrs = list(config["keys"]), list(config["max_lrs"])
    if len(keys) != len(max_lrs):
        raise ValueError(f"keys: {len(keys)} given for {len(max_lrs)} max_lrs")
    spec = _trial_spec(config)
    with _local_start(config.get("start_checkpoint")) as start_dir, tempfile.TemporaryDirectory() as work:
        root = Path(work) / "checkpoint"
        subdirs = [f"cand{i:02d}" for i in range(len(max_lrs))]
        results = run_fused_cycle(spec, cycle=config["cycle"], max_lrs=max_lrs, seed=config["seed"],
                                  start_checkpoint=start_dir, checkpoint_dirs=[root / s for s in subdirs])
        rows = [r.row() | {"key": key, "fused": len(max_lrs), "checkpoint_subdir": sub}
                for r, key, sub in zip(results, keys, subdirs)]
        tune.report({"fused_rows": json.dumps(rows)} | _placement(), checkpoint=tune.Checkpoint.from_directory(root))


def fused_rows(result: dict[str, Any]) -> list[dict[str, Any]] | None:
    """A fused trial's rows, one per candidate, from its result; None for any other result."""
    return json.loads(result["fused_rows"]) if "fused_rows" in result else None


def any_cycle_trainable(config: dict[str, Any]) -> None:
    """The engine's trainable: a fused trial when the config names several max_lrs, else one cycle."""
    (fused_cycle_trainable if "max_lrs" in config else cycle_trainable)(config)
