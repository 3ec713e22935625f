"""The paper's six presets: their recipes match the Appendix tables, and each runs a dense and a pruned cycle on a
tiny fake copy of its dataset in the real on-disk format (CIFAR python pickles, an ImageNet ImageFolder)."""
import dataclasses
import math
import pickle

import numpy as np
import pytest
import torch
from PIL import Image

from trainables.presets import PRESETS  # before paper_presets: presets.py registers them on import
from trainables.checkpoints import load_checkpoint
from trainables.cycle import forward_autocast, run_cycle
from trainables.data import DataError
from trainables.plugins import build_model, load_data
from trainables.imagenet import ImageFolderData
from trainables.paper_presets import CIFAR_TRAIN, IMAGENET_TRAIN, PAPER_PRESETS
from trainables.standin import stand_in

# name: (table, train iterations, batch, warmup end and drops in iterations, SILO epsilon, delta)
TABLES = {
    "resnet20-cifar10": (13, 63_000, 128, (20_000, 20_000, 25_000), 3e-2, 4e-2),
    "vgg19-cifar10": (14, 63_000, 128, (10_000, 32_000, 48_000), 4e-2, 6e-2),
    "densenet40-cifar100": (15, 117_000, 128, (58_000, 58_000, 92_000), 7e-2, 5e-2),
    "mobilenetv2-cifar100": (16, 78_000, 128, (23_000, 23_000, 46_000, 62_000), 5e-2, 5e-2),
    "resnet50-imagenet": (17, 70_000, 128, (4_000, 23_000, 46_000, 62_000), 5e-2, 5e-2),
    "vit-b16-cifar10": (18, 2_000, 1024, (300, 500, 900, 1_300), 1e-4, 3e-4),
}


def test_presets_are_registered():
    assert set(PAPER_PRESETS) == set(TABLES)
    assert all(PRESETS[name] is PAPER_PRESETS[name] for name in TABLES)


@pytest.mark.parametrize("name", sorted(TABLES))
def test_recipe_matches_the_table(name):
    table, iters, batch, points, epsilon, delta = TABLES[name]
    preset = PAPER_PRESETS[name]
    s = preset.spec
    train = IMAGENET_TRAIN if s.dataset == "imagenet" else CIFAR_TRAIN
    assert f"Table {table}" in preset.source
    assert s.batch_size == batch and s.rate == 0.2 and s.cycles == 13 and s.data_dir is None
    assert abs(s.epochs * train / batch - iters) <= train / batch / 2  # rounded to whole epochs
    assert (s.schedule.warmup, *s.schedule.drops) == pytest.approx(tuple(p / iters for p in points))
    assert (s.schedule.silo.epsilon, s.schedule.silo.delta, s.schedule.silo.q, s.schedule.silo.beta) == (
        epsilon, delta, 1, 5.0)
    assert min(s.grid) == pytest.approx(1e-4) and max(s.grid) == pytest.approx(1e-1) and len(s.grid) == 8
    assert all(b / a == pytest.approx(10 ** (3 / 7), rel=1e-2) for a, b in zip(s.grid, s.grid[1:]))  # 3 digits
    assert (s.weights, s.rewind_epoch) == (("rewind", 6) if s.pruner == "imp" else ("continue", 0))
    assert s.optimizer.name == ("adam" if s.model == "vit_b16" else "sgd")


def test_lap_preset_names_its_mode():
    """LAP has per-layer, global and BatchNorm modes (alinlab/lookahead_pruning); the preset says which it runs."""
    from trainables.pruning import PRUNERS, select_layer
    preset = PAPER_PRESETS["mobilenetv2-cifar100"]
    assert preset.spec.pruner == "lap" and PRUNERS["lap"].select is select_layer
    assert "per layer" in preset.source and "lap_bn" in preset.source


# --- fake datasets in their real formats --------------------------------------------------------------------------

def write_cifar(root, folder, files, label_key, classes, per_file=5):
    rng = np.random.default_rng(0)
    (root / folder).mkdir(parents=True)
    for name in files:
        batch = {b"data": rng.integers(0, 256, (per_file, 3072), dtype=np.uint8),
                 label_key: rng.integers(0, classes, per_file).tolist()}
        with open(root / folder / name, "wb") as f:
            pickle.dump(batch, f)


def write_imagefolder(root, classes=("n01440764", "n01443537"), per_class=3):
    rng = np.random.default_rng(0)
    for split in ("train", "val"):
        for c in classes:
            (root / split / c).mkdir(parents=True)
            for i in range(per_class):
                pixels = rng.integers(0, 256, (24, 30, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(root / split / c / f"{c}_{i}.JPEG", format="JPEG")


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    write_cifar(root, "cifar-10-batches-py", [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"],
                b"labels", 10)
    write_cifar(root, "cifar-100-python", ["train", "test"], b"fine_labels", 100, per_file=12)
    write_imagefolder(root / "imagenet")
    return root


def quick(name, data_root):
    """The preset shrunk to one short epoch on the fake data; everything else as the paper has it."""
    s = PAPER_PRESETS[name].spec
    imagenet = s.dataset == "imagenet"
    return dataclasses.replace(
        s, data_dir=str(data_root / "imagenet" if imagenet else data_root), epochs=1,
        rewind_epoch=min(s.rewind_epoch, 1), num_samples=0 if imagenet else 10, batch_size=4, cycles=1,
        score_batches=1, device="cpu", val_fraction=0.34 if imagenet else 0.2,
        precision="fp32")  # as `counted` below evaluates: bf16 could flip one of these few samples


@pytest.mark.parametrize("name", ["resnet20-cifar10", "densenet40-cifar100", "resnet50-imagenet"])
def test_the_stand_in_splits_and_shapes_its_data_as_the_loader_does(name, data_root):
    """A dry run without the data counts an epoch's steps from `trainables.shapes`' sizes split as
    `DatasetShape.splits` says, and times random inputs of its shape: on a fake copy in the real format (all of its
    training images as `num_samples`), the loader's training and validation splits and input shape are the
    stand-in's (ImageNet's 224 px crops of 24x30 images too), and so are CIFAR's classes."""
    spec = quick(name, data_root)
    data = load_data(spec)
    pool = data.size("train") + data.size("val")
    standin = stand_in(dataclasses.replace(spec, data_dir=None, num_samples=pool))
    assert [standin.size(s) for s in ("train", "val")] == [data.size(s) for s in ("train", "val")]
    assert standin.input_shape == data.input_shape
    if spec.dataset != "imagenet":  # the fake ImageNet has 2 classes
        assert standin.num_classes == data.num_classes


@pytest.mark.slow  # a real (if short) training of each paper network: 15-35 s apiece on 2 cores
@pytest.mark.parametrize("name", [
    "resnet20-cifar10", "vgg19-cifar10", "densenet40-cifar100", "mobilenetv2-cifar100", "resnet50-imagenet",
    "vit-b16-cifar10",
])
def test_preset_runs_a_dense_and_a_pruned_cycle(name, data_root, tmp_path):
    spec = quick(name, data_root)
    dense = run_cycle(spec, cycle=0, max_lr=spec.schedule.silo.epsilon, seed=0, checkpoint_dir=tmp_path / "c0")
    pruned = run_cycle(spec, cycle=1, max_lr=spec.schedule.silo.epsilon, seed=0,
                       start_checkpoint=str(tmp_path / "c0"), checkpoint_dir=tmp_path / "c1")
    assert dense.density == 100.0
    assert pruned.density == pytest.approx(80.0, abs=0.01)
    data = load_data(spec)
    for r, folder in ((dense, tmp_path / "c0"), (pruned, tmp_path / "c1")):
        assert r.epochs == 1 and not r.diverged and math.isfinite(r.grad_std)
        # The accuracies, counted here: the checkpoint's network (its one epoch is the best) on each split
        model = build_model(spec.model, data.input_shape, data.num_classes)
        model.load_state_dict(load_checkpoint(folder)["model"])
        assert (r.val_acc, r.test_acc) == pytest.approx((counted(model, data, "val", spec),
                                                         counted(model, data, "test", spec)), abs=1e-9)


@torch.no_grad()
def counted(model: torch.nn.Module, data, split: str, spec) -> float:
    """100 x the share of `split`'s samples whose largest logit is their label, one sample at a time."""
    model.eval()
    hits = 0
    with forward_autocast(torch.device("cpu"), spec):  # the run's own precision
        for x, y in data.batches(split, 1):
            hits += int(model(x).argmax(1).item() == y.item())
    return 100.0 * hits / data.size(split)


# --- the ImageNet loader --------------------------------------------------------------------------------------------

def test_imagenet_splits_and_batches(data_root):
    spec = quick("resnet50-imagenet", data_root)
    data = load_data(spec)
    assert isinstance(data, ImageFolderData)
    assert (data.num_classes, data.input_shape) == (2, (3, 224, 224))
    assert (data.size("train"), data.size("val"), data.size("test")) == (4, 2, 6)
    assert not set(data.samples["train"]) & set(data.samples["val"])
    shuffled = list(data.to("cpu").batches("train", 3, torch.Generator().manual_seed(0)))
    assert [tuple(x.shape) for x, _ in shuffled] == [(3, 3, 224, 224), (1, 3, 224, 224)]
    x, y = next(data.batches("test", 6))
    assert x.shape == (6, 3, 224, 224) and y.tolist() == [0, 0, 0, 1, 1, 1]


@pytest.mark.parametrize("missing", ["train", "val"])
def test_imagenet_missing_folder_is_a_data_error(data_root, tmp_path, missing):
    write_imagefolder(tmp_path)
    for f in (tmp_path / missing).rglob("*.JPEG"):
        f.unlink()
    for d in sorted((tmp_path / missing).iterdir()):
        d.rmdir()
    (tmp_path / missing).rmdir()
    spec = dataclasses.replace(quick("resnet50-imagenet", data_root), data_dir=str(tmp_path))
    with pytest.raises(DataError) as err:
        load_data(spec)
    assert err.value.field == "data-dir" and f"{missing}/" in str(err.value)
