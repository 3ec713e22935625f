"""Import paths for --model, --dataset and --pruner: resolution, edge validation (exit 2 naming the field, before
anything starts), the chain fingerprint and run identity, and the runtime environment that ships user code."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import sys

import pytest
import torch

from oracle_search.cli import main
from oracle_search.engine import own_runner
from trainables import plugins, sources
from trainables.cycle import run_cycle
from trainables.data import DATASETS
from trainables.models import MODELS
from trainables.plugins import build_model, load_data
from trainables.pruning import PRUNERS, full_masks, prune, prunable
from trainables.presets import PRESETS
from trainables.spec import SpecError

TINY = PRESETS["tiny"].spec

USER_MODULE = '''
import numpy as np
import torch
from torch import nn

from trainables.data import TensorData
from trainables.pruning import Pruner, magnitude_scores, select_layer

def wide(input_shape, num_classes):
    """A one-hidden-layer network of width 48: not in the registry."""
    return nn.Sequential(nn.Flatten(), nn.Linear(int(np.prod(input_shape)), 48), nn.ReLU(), nn.Linear(48, num_classes))

def blobs(spec):
    rng = np.random.default_rng(5)
    y = rng.integers(0, 3, 300)
    x = (np.eye(3)[y] * 3 + rng.normal(0, 1, (300, 3))).astype(np.float32)
    parts = {"train": slice(0, 200), "val": slice(200, 250), "test": slice(250, 300)}
    return TensorData({s: torch.from_numpy(x[i]) for s, i in parts.items()},
                      {s: torch.from_numpy(y[i]) for s, i in parts.items()}, 3)

def largest_first(model, masks, batches):
    """Scores that prune the LARGEST weights first (the opposite of magnitude pruning)."""
    return {name: -w.detach().abs() for name, w in model.named_parameters() if name in masks}

per_layer = Pruner(magnitude_scores, select_layer)

def seeded_random(model, masks, batches, seed):
    generator = torch.Generator().manual_seed(seed)
    return {name: torch.rand(w.shape, generator=generator) for name, w in model.named_parameters() if name in masks}

def not_tensor_data(spec):
    return {"train": []}

def two_args(a, b):
    return None

def one_arg(a):
    return None

NOT_CALLABLE = 3
'''


@pytest.fixture
def user_module(tmp_path, monkeypatch) -> str:
    """A module of the user's own, outside the package, importable from a fresh name per test."""
    name = f"user_{tmp_path.name.replace('-', '_').lower()}"
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / f"{name}.py").write_text(USER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path / "code"))
    yield name
    sys.modules.pop(name, None)


def test_registry_names_resolve_to_the_registries_entries():
    assert plugins.resolve("model", "resnet20") is MODELS["resnet20"]
    assert plugins.resolve("dataset", "digits") is DATASETS["digits"]
    assert plugins.resolve("pruner", "lamp") is PRUNERS["lamp"]


def test_import_paths_build_the_users_model_and_data(user_module):
    spec = dataclasses.replace(TINY, model=f"{user_module}:wide", dataset=f"{user_module}:blobs")
    data = load_data(spec)
    assert (data.size("train"), data.size("val"), data.size("test"), data.num_classes) == (200, 50, 50, 3)
    model = build_model(spec.model, data.input_shape, data.num_classes)
    assert [tuple(p.shape) for p in prunable(model).values()] == [(48, 3), (3, 48)]
    result = run_cycle(spec, cycle=0, max_lr=0.1, seed=0)
    assert result.val_acc > 60  # three well separated blobs: the user's data really was trained on


def test_a_score_function_prunes_globally_and_a_pruner_object_keeps_its_selection(user_module):
    torch.manual_seed(0)
    model = build_model("mlp", (8,), 4)
    weights = {n: p.detach().clone() for n, p in prunable(model).items()}
    masks = prune(model, full_masks(model), 0.2, plugins.resolve("pruner", f"{user_module}:largest_first"), lambda: [])
    cut = torch.cat([weights[n][~m] for n, m in masks.items()]).abs()
    kept = torch.cat([weights[n][m] for n, m in masks.items()]).abs()
    assert cut.min() >= kept.max()  # the user's scores decided: the largest 20 % of all weights went
    per_layer = prune(build_model("mlp", (8,), 4), full_masks(model), 0.2, plugins.resolve("pruner", f"{user_module}:per_layer"), lambda: [])
    for name, mask in per_layer.items():  # per-layer selection: every layer keeps 80 % (to rounding)
        assert abs(mask.float().mean().item() - 0.8) < 0.01, name


def test_a_score_function_taking_seed_gets_the_trial_seed(user_module):
    def masks(seed):
        torch.manual_seed(0)
        model = build_model("mlp", (8,), 4)
        return prune(model, full_masks(model), 0.5, plugins.resolve("pruner", f"{user_module}:seeded_random"), lambda: [], seed=seed)

    first, again, other = masks(1), masks(1), masks(2)
    assert all(torch.equal(first[n], again[n]) for n in first)
    assert not all(torch.equal(first[n], other[n]) for n in first)


@pytest.mark.parametrize("field, value, says", [
    ("model", "no_such_package_xyz.models:net", "cannot import 'no_such_package_xyz.models'"),
    ("model", "trainables.models:no_such_builder", "has no attribute 'no_such_builder'"),
    ("model", "{user}:NOT_CALLABLE", "not a callable"),
    ("model", "{user}:one_arg", "must accept (input_shape, num_classes)"),
    ("dataset", "{user}:two_args", "must accept (spec)"),
    ("pruner", "{user}:two_args", "must accept (model, masks, batches)"),
    ("model", "not_a_registered_model", "unknown 'not_a_registered_model'"),
    ("pruner", "a:b:c", "not an import path"),
    ("dataset", "{user}:not_tensor_data", "not a trainables.data.TensorData"),
])
def test_bad_import_paths_exit_2_naming_the_field_before_ray_starts(capsys, tmp_path, monkeypatch, user_module,
                                                                    field, value, says):
    from oracle_search import cluster, engine

    def tripwire(*args, **kwargs):
        raise AssertionError("the command reached Ray before refusing its input")

    # Ray may already be up for other tests, so whether it is connected says nothing: the one way a run reaches
    # Ray (cluster.connect, which starts or joins it) must not be taken.
    monkeypatch.setattr(engine, "connect", tripwire)
    monkeypatch.setattr(cluster, "connect", tripwire)
    capsys.readouterr()  # Ray's late worker-log lines are not this command's output
    out = tmp_path / "out"
    code = main(["oracle", "--preset", "tiny", f"--{field}", value.format(user=user_module), "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err.startswith(f"oracle-search: error: {field}: ") and says in err and "\n" not in err
    assert not out.exists()


def test_a_module_that_fails_on_import_exits_2(capsys, tmp_path, monkeypatch):
    (tmp_path / "broken_user_mod.py").write_text("raise RuntimeError('missing weights file')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["cycle", "--preset", "tiny", "--model", "broken_user_mod:net", "--max-lr", "0.1", "--cycle", "0",
                 "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "model: cannot import 'broken_user_mod'" in err and "missing weights file" in err
    assert not (tmp_path / "out").exists()


def test_spec_error_survives_pickling():
    import pickle

    err = pickle.loads(pickle.dumps(SpecError("model", "cannot import 'x'")))
    assert (err.field, str(err)) == ("model", "model: cannot import 'x'")


# --- identity ----------------------------------------------------------------------------------------------------

def test_registry_fingerprints_are_unchanged():
    """Checkpoints made before import paths existed still chain: a registry spec's fingerprint is the old formula."""
    keys = ("model", "dataset", "pruner", "rate", "prune_output", "weights", "rewind_epoch", "val_fraction",
            "test_fraction", "num_samples", "split_seed")
    old = hashlib.sha256(json.dumps({k: getattr(TINY, k) for k in keys}, sort_keys=True).encode()).hexdigest()[:16]
    assert TINY.chain_fingerprint() == old


def test_fingerprint_holds_the_import_path_and_the_module_files_hash(user_module):
    spec = dataclasses.replace(TINY, model=f"{user_module}:wide")
    before = spec.chain_fingerprint()
    assert before != TINY.chain_fingerprint()
    assert dataclasses.replace(TINY, model=f"{user_module}:wide").chain_fingerprint() == before  # deterministic
    training = spec.training_fingerprint()
    path = sources.source_file(spec.model)
    path.write_text(path.read_text() + "\n# edited\n")
    assert spec.chain_fingerprint() != before  # same import path, other code: another chain
    assert spec.training_fingerprint() != training  # and never a reused training


def test_a_rerun_on_the_same_out_with_edited_code_is_refused(tmp_path, user_module):
    spec = dataclasses.replace(TINY, model=f"{user_module}:wide")
    out = tmp_path / "run"
    own_runner(out=out, spec=spec, experiment="x")  # every flow runs its trials through a Runner on --out
    stored = json.loads((out / sources.SOURCES_FILE).read_text())
    assert stored["model"]["path"] == spec.model and len(stored["model"]["sha256"]) == 64
    own_runner(out=out, spec=spec, experiment="x")  # unchanged: resumes
    path = sources.source_file(spec.model)
    path.write_text(path.read_text() + "\n# edited\n")
    with pytest.raises(SpecError) as err:
        own_runner(out=out, spec=spec, experiment="x")
    assert err.value.field == "model"
    own_runner(out=tmp_path / "registry-run", spec=TINY, experiment="x")
    assert not (tmp_path / "registry-run" / sources.SOURCES_FILE).exists()


# --- clusters ----------------------------------------------------------------------------------------------------

def test_runtime_env_ships_only_the_users_own_top_level_module(user_module, tmp_path):
    assert sources.runtime_env(TINY) is None
    assert sources.runtime_env(dataclasses.replace(TINY, model="trainables.models:mlp")) is None  # installed
    assert sources.runtime_env(dataclasses.replace(TINY, model="operator:add")) is None  # the standard library
    spec = dataclasses.replace(TINY, model=f"{user_module}:wide", dataset=f"{user_module}:blobs")
    assert sources.runtime_env(spec) == {"py_modules": [str(tmp_path / "code" / f"{user_module}.py")]}


def test_runtime_env_ships_a_package_folder(tmp_path, monkeypatch):
    package = tmp_path / "userpkg_ship"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "nets.py").write_text("def net(input_shape, num_classes):\n    return None\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = dataclasses.replace(TINY, model="userpkg_ship.nets:net")
    assert sources.runtime_env(spec) == {"py_modules": [str(package)]}


def test_the_console_script_finds_a_module_in_the_folder_it_runs_in(tmp_path, monkeypatch, capsys):
    """`oracle-search` (a console script) has no working directory on sys.path, unlike `python -m`: run in
    process with that sys.path, from the folder holding the user's module."""
    (tmp_path / "here_user_net.py").write_text(USER_MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "here_user_net", raising=False)
    code = main(["cycle", "--preset", "tiny", "--model", "here_user_net:wide", "--epochs", "1", "--max-lr", "0.1",
                 "--cycle", "0", "--out", "out", "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err[-2000:]
    assert json.loads(captured.out)["epochs"] == 1
    sys.modules.pop("here_user_net", None)
