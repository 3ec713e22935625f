"""cycle_trainable through a real local Ray Tune Tuner matches the in-process run_cycle with the same seed."""
from __future__ import annotations

import dataclasses

import pytest
from ray import tune

from trainables.checkpoints import checkpoint_hash, load_checkpoint
from trainables.cycle import run_cycle, torch_threads
from trainables.presets import PRESETS
from trainables.tune_adapter import cycle_trainable

SPEC = dataclasses.replace(PRESETS["digits-mlp"].spec, epochs=10, device="cpu")
COMPARED = ("val_acc", "test_acc", "best_epoch", "density", "max_lr", "epochs", "diverged", "checkpoint_hash",
            "start_hash")


@pytest.mark.slow  # a real training of several seconds: the fast lane stays under a minute
def test_tuner_trials_match_in_process_cycles(ray_local, tmp_path):
    with torch_threads(1):  # a trial gets 1 CPU, so it trains on one thread
        local = [run_cycle(SPEC, cycle=0, max_lr=0.1, seed=1, checkpoint_dir=tmp_path / "c0")]
        local.append(run_cycle(SPEC, cycle=1, max_lr=0.1, seed=1, start_checkpoint=local[0].checkpoint,
                               checkpoint_dir=tmp_path / "c1"))
    start = local[0].checkpoint
    param_space = {"spec": SPEC, "cycle": tune.grid_search([0, 1]), "max_lr": 0.1, "seed": 1,
                   "start_checkpoint": tune.sample_from(lambda s: start if s.config["cycle"] else None),
                   "key": tune.sample_from(lambda s: f"c{s.config['cycle']}")}
    tuner = tune.Tuner(tune.with_resources(cycle_trainable, {"cpu": 1}), param_space=param_space,
                       run_config=tune.RunConfig(storage_path=str(tmp_path / "tune"), name="adapter", verbose=0))
    results = tuner.fit()
    assert not results.errors
    by_cycle = {r.metrics["cycle"]: r for r in results}
    assert sorted(by_cycle) == [0, 1]
    for expected in local:
        got = by_cycle[expected.cycle]
        for name in COMPARED:
            assert got.metrics[name] == getattr(expected, name), name
        assert got.metrics["grad_std"] == pytest.approx(expected.grad_std, rel=1e-6)
        assert got.metrics["key"] == f"c{expected.cycle}"
        assert got.metrics["gpu_ids"] == [] and got.metrics["node_id"]
        assert got.metrics["device"] == "cpu"
        # The checkpoint Tune persisted is the cycle's checkpoint, intact.
        assert checkpoint_hash(got.checkpoint.path) == expected.checkpoint_hash
        assert load_checkpoint(got.checkpoint.path)["cycle"] == expected.cycle
