"""Issue 59: every source of variance is randomised per replicate. Replicate r moves the base seed, the split seed
and the data generation seed by the stride; replicate 1 is the `--replicates 1` run; rows say what they ran on;
the report says what a replicate varies and what it holds fixed."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from analysis.replicate_report import _study
from analysis.variance import variance_sentence
from oracle_search.engine import ROW_METRICS
from oracle_search.schema import read_results, results_frame, write_results
from oracle_search.seeds import SEED_STRIDE, replicate_spec
from oracle_search.trainings import cycle_training
from trainables.cycle import run_cycle, torch_threads
from trainables.data import DATASETS
from trainables.plugins import load_data
from trainables.presets import PRESETS
from trainables.spec import ExperimentSpec

TINY = dataclasses.replace(PRESETS["tiny"].spec, device="cpu")


def test_replicate_one_is_the_base_spec_and_the_others_move_every_seed():
    spec = ExperimentSpec()
    assert replicate_spec(spec, 1) == spec  # the --replicates 1 run, unchanged
    two = replicate_spec(spec, 2)
    assert (two.seed, two.split_seed, two.data_seed) == (SEED_STRIDE, SEED_STRIDE, 42 + SEED_STRIDE)
    assert dataclasses.replace(two, seed=0, split_seed=0, data_seed=42) == spec  # nothing else moves
    assert _study(two) == _study(spec)  # still replicates of one study
    assert _study(dataclasses.replace(spec, rate=0.3)) != _study(spec)


def test_an_old_spec_json_loads_with_the_default_data_seed_and_keeps_its_fingerprints():
    spec = ExperimentSpec()
    old = spec.to_dict()
    old.pop("data_seed")
    assert ExperimentSpec.from_dict(json.loads(json.dumps(old))) == spec
    assert "data_seed" not in spec.science()  # earlier runs' identities stay
    moved = dataclasses.replace(spec, data_seed=43)
    assert moved.science()["data_seed"] == 43
    assert moved.chain_fingerprint() != spec.chain_fingerprint()
    assert moved.training_fingerprint() != spec.training_fingerprint()


def test_replicates_draw_their_own_split_and_generated_data(tmp_path):
    base = dataclasses.replace(ExperimentSpec(), num_samples=400, data_dir=str(tmp_path))  # MNIST-1D
    one, two = replicate_spec(base, 1), replicate_spec(base, 2)
    a, b = load_data(one), load_data(two)
    assert a.x["train"].shape == b.x["train"].shape
    assert not np.array_equal(a.x["train"].numpy(), b.x["train"].numpy())
    made = {p.name for p in tmp_path.glob("mnist1d-*.npz")}
    assert made == {"mnist1d-400-seed42.npz", f"mnist1d-400-seed{42 + SEED_STRIDE}.npz"}
    with np.load(tmp_path / "mnist1d-400-seed42.npz") as f, \
            np.load(tmp_path / f"mnist1d-400-seed{42 + SEED_STRIDE}.npz") as g:
        assert not np.array_equal(f["x"], g["x"])  # other data generated, not only another split of it
    # the same split seed, another generation seed: still other data (the loader cache keys on data_seed too)
    other = load_data(dataclasses.replace(one, data_seed=two.data_seed))
    assert not np.array_equal(a.x["train"].numpy(), other.x["train"].numpy())


def test_synthetic_default_generation_is_unchanged_and_data_seed_moves_it():
    def draw(seed):  # what the synthetic loader drew before data_seed existed, from its fixed seed 1234
        rng = np.random.default_rng(seed)
        centers = rng.normal(0, 1.0, (10, 32))
        y = rng.integers(0, 10, 1200)
        return (centers[y] + rng.normal(0, 1.6, (1200, 32))).astype(np.float32), y

    x, y = draw(1234)
    spec = dataclasses.replace(TINY, num_samples=0)
    got = DATASETS["synthetic"](spec)
    order = np.random.default_rng(spec.split_seed).permutation(1200)
    n_val = int(round(spec.val_fraction * 1200))
    np.testing.assert_array_equal(got.x["val"].numpy(), x[order[:n_val]])
    moved = DATASETS["synthetic"](dataclasses.replace(spec, data_seed=43))
    assert not np.array_equal(moved.x["val"].numpy(), got.x["val"].numpy())


def test_rows_of_a_real_training_carry_their_replicates_split_and_data_seeds(tmp_path):
    rows = []
    specs = {r: replicate_spec(dataclasses.replace(TINY, epochs=1, num_samples=300), r) for r in (1, 2)}
    with torch_threads(1):
        for r, spec in specs.items():
            t = cycle_training(spec, f"r{r}", 0, spec.seed, 0.1, None, {"method": "oracle", "stage": "tune"})
            result = run_cycle(spec, cycle=0, max_lr=0.1, seed=spec.seed)
            measured = result.row()
            rows.append({k: measured[k] for k in ROW_METRICS if k in measured} | t.tags
                        | {"experiment": spec.preset, "key": t.key})  # as the engine makes a row
    write_results(tmp_path, rows)
    table = read_results(tmp_path).set_index("key")
    for r, spec in specs.items():
        assert (table.loc[f"r{r}", "split_seed"], table.loc[f"r{r}", "data_seed"]) == (spec.split_seed,
                                                                                       spec.data_seed)
    assert table.loc["r1", "split_seed"] != table.loc["r2", "split_seed"]
    assert table.loc["r1", "data_seed"] != table.loc["r2", "data_seed"]


def test_a_table_without_the_columns_reads_as_the_values_every_run_had():
    old = {"method": "oracle", "stage": "tune", "seed": 0, "cycle": 0, "max_lr": 0.1, "val_acc": 50.0,
           "test_acc": 50.0, "epochs": 1, "seconds": 1.0, "diverged": False, "selected": True, "key": "old"}
    frame = results_frame([old, old | {"key": "new", "split_seed": 10000, "data_seed": 10042}]).set_index("key")
    assert (frame.loc["old", "split_seed"], frame.loc["old", "data_seed"]) == (0, 42)
    assert (frame.loc["new", "split_seed"], frame.loc["new", "data_seed"]) == (10000, 10042)
    assert frame["split_seed"].dtype.kind == "i"


# --- what the report says ----------------------------------------------------------------------------------------

def _specs(r: int, **changes) -> list[dict]:
    base = dataclasses.replace(ExperimentSpec(), **changes)
    return [replicate_spec(base, i).to_dict() for i in range(1, r + 1)]


def test_the_sentence_names_every_seed_a_replicate_varies_and_what_stays_fixed():
    text = variance_sentence(_specs(3, precision="bf16"))
    varies, fixed = text.split("What stays fixed")
    assert "base seeds 0, 10000, 20000" in varies and "initialisation" in varies and "batch order" in varies
    assert "train/validation/test split, split_seed 0, 10000, 20000" in varies
    assert "MNIST-1D, data_seed 42, 10042, 20042" in varies
    for kept in ("the code", "precision bf16", "the max_lr grid", "the rest of the spec"):
        assert kept in fixed


def test_the_sentence_says_a_dataset_keeps_its_own_test_set_and_a_user_loader_may_ignore_the_seeds():
    cifar = variance_sentence(_specs(2, dataset="cifar10"))
    assert "train/validation split" in cifar and "cifar10's own test set" in cifar
    assert "data_seed" not in cifar  # nothing generated
    user = variance_sentence([dict(s, dataset="pkg.mod:load") for s in _specs(2)])
    assert "pkg.mod:load" in user and "may ignore" in user and "split_seed 0, 10000" in user


def test_the_sentence_over_old_replicates_says_they_shared_the_split():
    old = [{"dataset": "mnist1d", "seed": 0, "precision": "fp32"}, {"dataset": "mnist1d", "seed": 10000,
                                                                      "precision": "fp32"}]
    varies, fixed = variance_sentence(old).split("What stays fixed")
    assert "base seeds 0, 10000" in varies
    assert "split_seed 0" in fixed and "data_seed 42" in fixed
    assert variance_sentence([]) == ""


@pytest.mark.parametrize("dataset", ["digits", "synthetic"])
def test_the_sentence_is_one_or_two_sentences(dataset):
    assert variance_sentence(_specs(2, dataset=dataset)).count(". ") <= 1
