"""Datasets as PyTorch writes them (`trainables.data.DatasetSplits`, streamed by a DataLoader) and a loss by import
path (`--loss`): the same batches with any number of workers, the same rows as TensorData through a Tune trial,
the loss in training, in the §3.1 statistics and in fused training, its place in the fingerprints, and every bad
input as one line, before a run (exit 2) and inside a trial (the trial fails, no row)."""
from __future__ import annotations

import dataclasses
import io
import random

import numpy as np
import pytest
import torch

import trainables.cycle
import trainables.fused
from conftest import ROOT, cli
from oracle_search.engine import Progress, RunFailed, own_runner
from oracle_search.identity import Training
from trainables.cycle import layer_statistics, run_cycle, torch_threads
from trainables.data import DatasetSplits, TensorData
from trainables.fused import run_fused_cycle
from trainables.plugins import build_model, load_data
from trainables.presets import PRESETS
from trainables.pruning import full_masks
from trainables.spec import ExperimentSpec, OptimizerSpec, Resources

PLUGINS = "tests.splits_plugins"
SPEC = dataclasses.replace(PRESETS["tiny"].spec, model="examples.custom_cnn.model:small_cnn", device="cpu",
                           precision="fp32", epochs=2, batch_size=64, cycles=1, num_samples=400)


@pytest.fixture(autouse=True)
def _from_the_repository_root(monkeypatch):
    monkeypatch.chdir(ROOT)  # the import paths resolve from here, as for a user in their project


class Noisy(torch.utils.data.Dataset):
    """Items whose transform draws from torch's, numpy's and `random`'s global generators."""

    def __init__(self, n: int = 150, augment: bool = True):
        g = torch.Generator().manual_seed(0)
        self.x, self.y, self.augment = torch.randn(n, 5, generator=g), torch.randint(0, 3, (n,), generator=g), augment

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int):
        x = self.x[i]
        if self.augment:
            x = x + torch.rand(5) + float(np.random.rand()) + random.random()
        return x, int(self.y[i])


def _splits(workers: int, augment: bool = True) -> DatasetSplits:
    return DatasetSplits(Noisy(augment=augment), Noisy(30, augment), Noisy(30, augment), 3, workers=workers).check("t")


def _epochs(data, n: int = 3, batch_size: int = 32) -> list[list[tuple[torch.Tensor, torch.Tensor]]]:
    generator = torch.Generator().manual_seed(7)
    return [list(data.batches("train", batch_size, generator)) for _ in range(n)]


def _same(a, b) -> bool:
    return len(a) == len(b) and all(len(ea) == len(eb) and all(torch.equal(xa, xb) and torch.equal(ya, yb)
                                                               for (xa, ya), (xb, yb) in zip(ea, eb))
                                    for ea, eb in zip(a, b))


# --- the DataLoader's batches -------------------------------------------------------------------------------------

def test_order_and_augmentation_are_the_same_with_0_1_and_2_workers():
    augmented = {w: _epochs(_splits(w)) for w in (0, 1, 2)}
    assert _same(augmented[0], augmented[1]) and _same(augmented[0], augmented[2])
    first = augmented[0]
    assert not torch.equal(first[0][0][0], first[1][0][0])  # each epoch its own order and draws
    # The order is TensorData's: a pass draws the same permutation from the training generator.
    plain = Noisy(augment=False)
    tensors = TensorData({s: plain.x for s in ("train", "val", "test")}, {s: plain.y for s in ("train", "val", "test")},
                         3)
    for w in (0, 2):
        assert _same(_epochs(_splits(w, augment=False)), _epochs(tensors))
    # Without a generator: in order, and the same draws every time.
    again = [list(_splits(2).batches("val", 8)) for _ in range(2)]
    assert _same(again[:1], again[1:]) and torch.equal(torch.cat([y for _, y in again[0]]), Noisy(30).y)
    # Each batch draws its own numbers (its seed is the pass's and its number's).
    zeros = _splits(1)
    zeros.train.x.zero_()
    noise = [x for x, _ in zeros.batches("train", 8)]
    assert not torch.equal(noise[0], noise[1])


def test_workers_persist_across_epochs_and_default_to_the_cpus_beyond_the_training_one(tmp_path):
    from tests.splits_plugins import bars_two_workers

    data = bars_two_workers(dataclasses.replace(SPEC, data_dir=str(tmp_path))).check("t")
    _epochs(data, n=3)
    assert sorted(p.name.split("-")[0] for p in tmp_path.iterdir()) == ["worker0", "worker1"]  # the same two
    default = DatasetSplits(Noisy(), Noisy(), Noisy(), 3)
    for threads, workers in ((1, 0), (3, 2)):
        with torch_threads(threads):
            assert default.loader_workers() == workers


@pytest.mark.parametrize("workers", [0, 2])
def test_a_pass_keeps_the_callers_random_state(workers):
    data = _splits(workers)
    torch.manual_seed(1)
    np.random.seed(1)
    random.seed(1)
    _epochs(data, n=1)
    after = torch.rand(3), np.random.rand(), random.random()
    torch.manual_seed(1)
    np.random.seed(1)
    random.seed(1)
    assert torch.equal(after[0], torch.rand(3)) and after[1:] == (np.random.rand(), random.random())


def _science(row: dict) -> dict:
    """A row's results: all but where and how long it ran, and the names and hashes of its checkpoint and of its
    start's (a checkpoint holds the chain fingerprint, which holds the dataset's import path)."""
    return {k: v for k, v in row.items() if k not in ("seconds", "checkpoint", "checkpoint_hash", "start_hash",
                                                      "trial_id", "key", "node_id", "gpu_ids", "experiment",
                                                      "queued", "started", "finished")}


@pytest.mark.slow
def test_dataset_splits_on_two_workers_give_tensor_datas_rows_through_a_tune_trial(ray_local, tmp_path):
    """The bars images as Datasets without a transform, on two DataLoader workers, against the same images as
    TensorData: every result of two chained cycles is the same, through Tune trials on the local Ray."""
    seen = tmp_path / "seen"
    seen.mkdir()
    rows = {}
    for name, dataset in (("tensors", "examples.custom_cnn.data:bars"), ("datasets", f"{PLUGINS}:bars_two_workers")):
        spec = dataclasses.replace(SPEC, dataset=dataset, data_dir=str(seen))
        with own_runner(out=tmp_path / name, spec=spec, experiment=name, progress=Progress(io.StringIO())) as runner:
            first = runner.run([Training(f"c0-lr{lr}", spec, 0, lr, 0, None) for lr in (0.05, 0.2)])
            start = first["c0-lr0.2"]["checkpoint"]
            second = runner.run([Training("c1", spec, 1, 0.2, 0, start)])
        rows[name] = [_science(r) for r in (first["c0-lr0.05"], first["c0-lr0.2"], second["c1"])]
    assert rows["datasets"] == rows["tensors"]
    lr_05, lr_2, pruned = rows["datasets"]
    assert lr_05["grad_std"] != lr_2["grad_std"] and pruned["density"] < 100  # it trained, and chained a pruned cycle
    assert {p.name.split("-")[0] for p in seen.iterdir()} == {"worker0", "worker1"}  # both workers fetched


# --- the loss -----------------------------------------------------------------------------------------------------

def test_the_default_loss_leaves_every_fingerprint_as_it_was():
    import hashlib

    d = SPEC.to_dict()
    assert d["loss"] == "cross_entropy"
    science = SPEC.science()
    assert "loss" not in science  # so earlier runs' training fingerprints and study names stay
    before = {k: v for k, v in d.items()  # data_seed: a later field too, at the value every earlier run had
              if k not in ("preset", "resources", "device", "data_dir", "loss", "data_seed")}
    assert {k: v for k, v in science.items() if not k.endswith("_sha256")} == before
    custom = dataclasses.replace(SPEC, loss=f"{PLUGINS}:squared_error")
    assert custom.training_fingerprint() != SPEC.training_fingerprint()
    assert custom.science()["loss_sha256"] == hashlib.sha256((ROOT / "tests" / "splits_plugins.py").read_bytes()
                                                              ).hexdigest()
    assert custom.chain_fingerprint() == SPEC.chain_fingerprint()  # a checkpoint chains whatever trained it


def test_the_loss_trains_and_the_statistics_differentiate_it():
    spec = dataclasses.replace(SPEC, dataset="examples.custom_cnn.data:bars", epochs=1)
    custom = dataclasses.replace(spec, loss=f"{PLUGINS}:squared_error")
    with torch_threads(1):
        plain, own = run_cycle(spec, cycle=0, max_lr=0.1, seed=0), run_cycle(custom, cycle=0, max_lr=0.1, seed=0)
    assert (own.val_acc, own.grad_std) != (plain.val_acc, plain.grad_std)
    data = load_data(custom)
    torch.manual_seed(0)
    model = build_model(custom.model, data.input_shape, data.num_classes)
    masks = full_masks(model)
    grad_std = layer_statistics(model, masks, data, custom, torch.device("cpu"))[0]
    from tests.splits_plugins import squared_error

    x, y = next(data.batches("train", custom.batch_size))
    model.zero_grad()
    squared_error(model(x), y).backward()
    grads = torch.cat([p.grad.flatten() for n, p in model.named_parameters() if n in masks])
    by_hand = grads.double().std(correction=0)
    assert grad_std == pytest.approx(float(by_hand), rel=1e-9)


def test_loss_is_an_option_and_an_experiment_file_field(tmp_path, capsys):
    toml = tmp_path / "e.toml"
    toml.write_text(f'preset = "tiny"\nloss = "{PLUGINS}:squared_error"\n')
    assert cli(["oracle", "--config", str(toml), "--out", "x", "--print-config"]) == 0
    assert f'loss = "{PLUGINS}:squared_error"' in capsys.readouterr().out
    assert cli(["oracle", "--preset", "tiny", "--loss", "cross_entropy", "--out", "x", "--print-config"]) == 0
    assert 'loss = "cross_entropy"' in capsys.readouterr().out


@pytest.fixture
def float64(monkeypatch):
    """Fused and separate trainings in float64, on the bars images as float64 Datasets."""
    from tests.splits_plugins import Items

    from examples.custom_cnn.data import _splits as bars_splits

    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)

    def load(spec: ExperimentSpec) -> DatasetSplits:
        parts = {s: Items(x.double(), y) for s, (x, y) in bars_splits(spec).items()}
        return DatasetSplits(**parts, num_classes=4, workers=1).check(spec.dataset)

    monkeypatch.setattr(trainables.cycle, "load_data", load)
    monkeypatch.setattr(trainables.fused, "load_data", load)
    yield
    torch.set_default_dtype(before)


def test_fused_training_applies_the_loss_per_candidate_on_dataset_splits(float64, one_thread):
    """point 3: fused, not a fallback: each candidate's row is that of its own run_cycle with the same loss."""
    spec = dataclasses.replace(SPEC, dataset="examples.custom_cnn.data:bars", loss=f"{PLUGINS}:squared_error",
                               optimizer=OptimizerSpec("sgd", 0.9, 5e-4), num_samples=200)
    lrs = [0.01, 0.05]
    fused = run_fused_cycle(spec, cycle=0, max_lrs=lrs, seed=1)
    for lr, f in zip(lrs, fused):
        s = run_cycle(spec, cycle=0, max_lr=lr, seed=1)
        assert (f.best_epoch, f.epochs, f.diverged) == (s.best_epoch, s.epochs, s.diverged)
        for name in ("val_acc", "test_acc", "grad_std", "act_std"):
            assert getattr(f, name) == pytest.approx(getattr(s, name), rel=1e-6), name


# --- bad input: one line naming the plug-in, before a run and inside a trial ----------------------------------------

BAD = [  # (option, value, what the line says)
    ("dataset", f"{PLUGINS}:string_labels", f"dataset: '{PLUGINS}:string_labels': split 'train' item 0 is "
                                            "(Tensor, str), not (tensor, int)"),
    ("dataset", f"{PLUGINS}:empty_val", f"dataset: '{PLUGINS}:empty_val': split 'val' is empty"),
    ("dataset", f"{PLUGINS}:first_bad_label", f"dataset: '{PLUGINS}:first_bad_label': split 'train' has label 9, "
                                              "outside range(num_classes=4)"),
    ("loss", f"{PLUGINS}:per_sample", f"loss: '{PLUGINS}:per_sample' returned a tensor of shape (32,) on the first "
                                      "batch, not a scalar"),
    ("loss", f"{PLUGINS}:nan_loss", f"loss: '{PLUGINS}:nan_loss' returned nan on the first batch, not a finite "
                                    "number"),
    ("loss", f"{PLUGINS}:no_such", f"loss: module '{PLUGINS}' has no attribute 'no_such'"),
]


def _spec_with(option: str, value: str) -> ExperimentSpec:
    base = dataclasses.replace(SPEC, dataset="examples.custom_cnn.data:bars_dataset")
    return dataclasses.replace(base, **{option: value})


@pytest.mark.parametrize("option, value, says", BAD, ids=[v.split(":")[1] for _, v, _ in BAD])
def test_bad_input_exits_2_with_one_line_before_a_run(option, value, says, tmp_path, monkeypatch, capsys):
    from oracle_search import cluster, engine

    def tripwire(*args, **kwargs):
        raise AssertionError("the command reached Ray before refusing its input")

    monkeypatch.setattr(engine, "connect", tripwire)
    monkeypatch.setattr(cluster, "connect", tripwire)
    capsys.readouterr()
    out = tmp_path / "out"
    spec = _spec_with(option, value)
    code = cli(["oracle", "--preset", "tiny", "--model", spec.model, "--dataset", spec.dataset, "--loss", spec.loss,
                "--num-samples", "400", "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith(f"oracle-search: error: {says}") and "\n" not in err, err
    assert not out.exists()


IN_TRIAL = [BAD[0], BAD[1], ("dataset", f"{PLUGINS}:late_bad_label",
                             f"dataset: '{PLUGINS}:late_bad_label': split 'train' has label 9, outside "
                             "range(num_classes=4)"), BAD[3], BAD[4]]


@pytest.mark.slow
@pytest.mark.parametrize("option, value, says", IN_TRIAL, ids=[v.split(":")[1] for _, v, _ in IN_TRIAL])
def test_bad_input_inside_a_trial_fails_it_with_the_line_and_writes_no_row(option, value, says, ray_local, tmp_path):
    """Past the command line's checks (a Runner driven directly, as the pipeline does): the trial fails with the same
    line in its error, and the ledger holds no row. A label out of range at the training split's last item is found
    only there, as the batch streams."""
    spec = dataclasses.replace(_spec_with(option, value), epochs=1, resources=Resources(cpus_per_trial=1))
    out = tmp_path / "out"
    with pytest.raises(RunFailed) as failed:
        with own_runner(out=out, spec=spec, experiment="bad", progress=Progress(io.StringIO()), max_failures=0) as runner:
            runner.run([Training("c0", spec, 0, 0.1, 0, None)])
    assert says in str(failed.value)
    assert not list((out / "ledger").glob("*.json"))


def test_tensor_data_labels_out_of_range_are_refused(tmp_path, monkeypatch, capsys):
    (tmp_path / "tensor_bad_labels.py").write_text(
        "import torch\nfrom trainables.data import TensorData\n"
        "def load(spec):\n"
        "    x = {s: torch.zeros(4, 3) for s in ('train', 'val', 'test')}\n"
        "    y = {s: torch.tensor([0, 1, 2, 5]) for s in ('train', 'val', 'test')}\n"
        "    return TensorData(x, y, 3)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert cli(["cycle", "--preset", "tiny", "--dataset", "tensor_bad_labels:load", "--max-lr", "0.1", "--cycle", "0",
                "--out", str(tmp_path / "out")]) == 2
    assert "dataset: 'tensor_bad_labels:load': split 'train' has label 5, outside range(num_classes=3)" in \
        capsys.readouterr().err
