"""Plug-ins for tests/test_replicate_failure.py, by import path `tests.fault_plugins:NAME` (as tests/splits_plugins.py
is found by the driver and the local Ray's workers): a model that fails on purpose for one replicate's trainings
while a flag file exists, so a test can break one replicate mid-run and then let a rerun complete it."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import torch

from trainables.plugins import build_model

FLAG = Path(tempfile.gettempdir()) / f"oracle-search-test-fault-{os.getuid()}"
# Replicate 2's first evaluation seed (base seed 10000, evaluation seeds from 11000): only its final runs, which
# start once the tuning is under way, fail; no seed of replicate 1 is 11000.
DOOMED_SEEDS = {11000}


def mlp_failing_replicate_2(input_shape: tuple[int, ...], num_classes: int) -> torch.nn.Module:
    """The built-in MLP, except that it raises for replicate 2's first evaluation seed while FLAG exists (the
    trainable seeds torch with the trial's seed just before it builds the model)."""
    if torch.initial_seed() in DOOMED_SEEDS and FLAG.exists():
        raise RuntimeError("a fault on purpose (tests/fault_plugins.py): replicate 2's evaluation seed")
    return build_model("mlp", input_shape, num_classes)
