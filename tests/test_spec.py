"""ExperimentSpec: validated on construction, naming the field; round-trips; chain fingerprint."""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

from trainables.presets import PRESETS
from trainables.schedules import ScheduleSpec, SiloParams
from trainables.plugins import check_names
from trainables.spec import ExperimentSpec, OptimizerSpec, Resources, SpecError

BASE = PRESETS["tiny"].spec


@pytest.mark.parametrize("field", ["model", "dataset", "pruner"])
def test_unknown_names_are_named_when_checked_at_the_edge(field):
    spec = dataclasses.replace(BASE, **{field: "nope"})  # resolving a name imports torch: not on construction
    with pytest.raises(SpecError) as err:
        check_names(spec)
    assert err.value.field == field and str(err.value).startswith(f"{field}: unknown 'nope'")
    assert check_names(BASE) is BASE


def test_help_and_presets_start_without_torch_or_ray():
    code = ("import sys; from oracle_search import cli; cli.build_parser(); cli.main(['presets']); "
            "print(sorted(m for m in ('torch', 'ray', 'optuna') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "mnist1d-mlp" in out and out.strip().splitlines()[-1] == "[]"


@pytest.mark.parametrize("changes, field", [
    ({"rate": 0.0}, "rate"),
    ({"rate": 1.0}, "rate"),
    ({"cycles": -1}, "cycles"),
    ({"epochs": 0}, "epochs"),
    ({"batch_size": 0}, "batch-size"),
    ({"optimizer": OptimizerSpec("lbfgs")}, "optimizer"),
    ({"optimizer": OptimizerSpec(momentum=1.0)}, "momentum"),
    ({"schedule": ScheduleSpec("step")}, "schedule"),
    ({"schedule": ScheduleSpec(drops=(0.6, 1.5))}, "drops"),
    ({"schedule": ScheduleSpec(silo=SiloParams(epsilon=0.0))}, "epsilon"),
    ({"schedule": ScheduleSpec(silo=SiloParams(delta=-0.1))}, "delta"),
    ({"schedule": ScheduleSpec(silo=SiloParams(q=-1))}, "q"),
    ({"schedule": ScheduleSpec(silo=SiloParams(beta=0.0))}, "beta"),
    ({"weights": "keep"}, "weights"),
    ({"rewind_epoch": 99}, "rewind-epoch"),
    ({"val_fraction": 0.6, "test_fraction": 0.5}, "val-fraction"),
    ({"grid": ()}, "grid"),
    ({"grid": (0.1, float("nan"))}, "grid"),
    ({"resources": Resources(cpus_per_trial=0)}, "cpus-per-trial"),
    ({"resources": Resources(max_concurrent=-1)}, "max-concurrent"),
])
def test_invalid_field_is_named(changes, field):
    with pytest.raises(SpecError) as err:
        dataclasses.replace(BASE, **changes)
    assert err.value.field == field
    assert str(err.value).startswith(f"{field}: ")


def test_round_trip_through_json():
    for preset in ("mnist1d-mlp", "digits-mlp", "tiny"):
        spec = PRESETS[preset].spec.with_schedule(name="silo", silo=SiloParams(0.04, 0.06, 2, 4.0))
        again = ExperimentSpec.from_dict(json.loads(json.dumps(spec.to_dict())))
        assert again == spec


def test_chain_fingerprint_covers_network_data_and_pruning_only():
    fp = BASE.chain_fingerprint()
    for same in ({"epochs": 9}, {"batch_size": 32}, {"grid": (0.5,)}, {"seed": 3},
                 {"resources": Resources(cpus_per_trial=2)}):
        assert dataclasses.replace(BASE, **same).chain_fingerprint() == fp
    assert BASE.with_schedule(name="cosine").chain_fingerprint() == fp
    for other in ({"model": "resnet20"}, {"dataset": "digits"}, {"pruner": "random"}, {"rate": 0.3},
                  {"weights": "rewind"}, {"split_seed": 1}, {"num_samples": 600}):
        assert dataclasses.replace(BASE, **other).chain_fingerprint() != fp
