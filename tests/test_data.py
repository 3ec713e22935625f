"""Datasets: seeded disjoint splits, the per-process cache, batching, and the real CIFAR loader on a fake folder."""
from __future__ import annotations

import dataclasses
import pickle

import numpy as np
import pytest
import torch

from trainables.data import CIFAR_MEAN, CIFAR_STD, DATASETS, DataError, TensorData, crop_offsets, random_crop_flip
from trainables.plugins import load_data
from trainables.presets import PRESETS
from trainables.spec import ExperimentSpec

TINY = PRESETS["tiny"].spec


def rows(t: torch.Tensor) -> set[bytes]:
    return {r.numpy().tobytes() for r in t}


def test_splits_are_disjoint_sized_and_seeded():
    d = DATASETS["synthetic"](TINY)
    assert {s: d.size(s) for s in ("train", "val", "test")} == {"train": 840, "val": 180, "test": 180}
    train, val, test = rows(d.x["train"]), rows(d.x["val"]), rows(d.x["test"])
    assert len(train | val | test) == 1200 and not (train & val or train & test or val & test)
    again = DATASETS["synthetic"](TINY)
    assert torch.equal(again.x["val"], d.x["val"])
    other = DATASETS["synthetic"](dataclasses.replace(TINY, split_seed=1))
    assert not torch.equal(other.x["val"], d.x["val"])


def test_load_data_is_cached_per_process():
    assert load_data(TINY) is load_data(dataclasses.replace(TINY, epochs=9, seed=5))
    assert load_data(TINY) is not load_data(dataclasses.replace(TINY, split_seed=2))


def test_mnist1d_embedded_default():
    d = load_data(PRESETS["mnist1d-mlp"].spec)
    assert d.input_shape == (40,) and d.num_classes == 10
    assert (d.size("train"), d.size("val"), d.size("test")) == (7000, 20000, 3000)
    assert set(d.y["train"].unique().tolist()) == set(range(10))


def test_digits():
    d = load_data(PRESETS["digits-mlp"].spec)
    assert d.input_shape == (64,) and d.size("train") + d.size("val") + d.size("test") == 1797
    assert 0.0 <= float(d.x["train"].min()) and float(d.x["train"].max()) <= 1.0


def test_digits_come_from_the_cache_as_scikit_learn_ships_them(tmp_path, monkeypatch):
    """The first load writes digits.npz from scikit-learn; later ones read it without importing scikit-learn."""
    import sys

    from sklearn.datasets import load_digits

    spec = dataclasses.replace(PRESETS["digits-mlp"].spec, data_dir=str(tmp_path))
    first = DATASETS["digits"](spec)  # not load_data, whose in-process cache would answer the second call
    assert (tmp_path / "digits.npz").exists()
    with np.load(tmp_path / "digits.npz") as cached:
        shipped = load_digits()
        assert np.array_equal(cached["x"], shipped.data.astype(np.float32) / 16.0)
        assert np.array_equal(cached["y"], shipped.target)
    monkeypatch.setitem(sys.modules, "sklearn", None)  # any import of scikit-learn now fails
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)
    again = DATASETS["digits"](spec)
    assert all(torch.equal(first.x[s], again.x[s]) and torch.equal(first.y[s], again.y[s])
               for s in ("train", "val", "test"))


def test_digits_num_samples_limits_the_pool():
    spec = ExperimentSpec(dataset="digits", num_samples=500)
    data = load_data(spec)
    assert sum(data.size(s) for s in ("train", "val", "test")) == 500
    full = load_data(dataclasses.replace(spec, num_samples=0))
    assert sum(full.size(s) for s in ("train", "val", "test")) == 1797
    with pytest.raises(DataError, match="num-samples"):
        load_data(dataclasses.replace(spec, num_samples=1798))


def test_batches_cover_the_split_once_and_shuffle_by_generator():
    d = load_data(TINY)
    seq = torch.cat([y for _, y in d.batches("train", 64)])
    assert torch.equal(seq, d.y["train"])  # no generator: in order
    epoch = [x for x, _ in d.batches("train", 64, torch.Generator().manual_seed(3))]
    assert [len(x) for x in epoch] == [64] * 13 + [8]
    assert rows(torch.cat(epoch)) == rows(d.x["train"])
    same = torch.cat([x for x, _ in d.batches("train", 64, torch.Generator().manual_seed(3))])
    assert torch.equal(same, torch.cat(epoch)) and not torch.equal(same, d.x["train"])


def test_random_crop_flip_is_a_window_of_the_padded_image():
    x = torch.arange(2 * 3 * 8 * 8, dtype=torch.float32).reshape(2, 3, 8, 8)
    out = random_crop_flip(x, crop_offsets(2, 2, torch.Generator().manual_seed(0), x.device, pad=2), pad=2)
    assert out.shape == x.shape
    padded = torch.nn.functional.pad(x, (2, 2, 2, 2))
    for i in range(2):
        windows = [w for dy in range(5) for dx in range(5)
                   for w in (padded[i, :, dy:dy + 8, dx:dx + 8], padded[i, :, dy:dy + 8, dx:dx + 8].flip(2))]
        assert any(torch.equal(out[i], w) for w in windows)


def _crops_drawn_per_batch(data, batch_size: int, seed: int) -> list[torch.Tensor]:
    """The augmented batches as the loop drew them before the draws moved to once per epoch: per batch, dy, dx
    and flip on the CPU generator, each copied to the data's device."""
    g = torch.Generator().manual_seed(seed)
    x, n, pad = data.x["train"], len(data.y["train"]), 4
    order, out = torch.randperm(n, generator=g), []
    for start in range(0, n, batch_size):
        xb = x[order[start:start + batch_size]]
        m, _, h, w = xb.shape
        dy, dx = (torch.randint(0, 2 * pad + 1, (m,), generator=g) for _ in range(2))
        flip = torch.rand(m, generator=g) < 0.5
        padded = torch.nn.functional.pad(xb, (pad, pad, pad, pad))
        rows = dy[:, None] + torch.arange(h)
        cols = torch.where(flip[:, None], (dx[:, None] + torch.arange(w)).flip(1), dx[:, None] + torch.arange(w))
        out.append(padded.permute(0, 2, 3, 1)[torch.arange(m)[:, None, None], rows[:, :, None], cols[:, None, :]]
                   .permute(0, 3, 1, 2))
    return out


def test_an_epochs_crops_are_drawn_once_the_same_as_per_batch_and_moved_once(monkeypatch):
    """The issue's host round trip: three draws and copies per step. Now an epoch's draws are made up front, in the
    same order (so every crop equals the per-batch draws'), and moved to the device once: iterating the batches
    calls `Tensor.to` on none of them."""
    x = torch.arange(70 * 3 * 8 * 8, dtype=torch.float32).reshape(70, 3, 8, 8)
    data = TensorData({"train": x}, {"train": torch.arange(70) % 10}, 10, augment=True)
    expected = _crops_drawn_per_batch(data, 32, seed=5)
    batches = data.batches("train", 32, torch.Generator().manual_seed(5))
    first = next(batches)[0]  # the epoch's draws are made (and moved) here
    moves = []
    original = torch.Tensor.to
    monkeypatch.setattr(torch.Tensor, "to", lambda self, *a, **k: moves.append(a) or original(self, *a, **k))
    rest = [xb for xb, _ in batches]
    assert moves == [] and len(rest) == 2
    assert all(torch.equal(a, b) for a, b in zip([first, *rest], expected))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: sync-debug mode is CUDA's")
def test_on_a_gpu_an_augmented_epoch_issues_no_synchronising_copy():
    data = TensorData({"train": torch.rand(300, 3, 32, 32)}, {"train": torch.arange(300) % 10}, 10,
                      augment=True).to(torch.device("cuda"))
    batches = data.batches("train", 128, torch.Generator().manual_seed(0))
    next(batches)  # the epoch's one upload of the order and the crops
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in batches:
            pass
    finally:
        torch.cuda.set_sync_debug_mode("default")


def write_fake_cifar10(root, per_batch: int = 4) -> np.ndarray:
    """torchvision's on-disk CIFAR-10 format: pickled dicts of uint8 rows; returns the first training image."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    first = None
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        data = rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8)
        first = data[0] if first is None else first
        with open(folder / name, "wb") as f:
            pickle.dump({b"data": data, b"labels": list(range(per_batch))}, f)
    return first


def test_cifar10_reads_torchvision_folder(tmp_path):
    first = write_fake_cifar10(tmp_path)
    spec = ExperimentSpec(dataset="cifar10", model="resnet20", data_dir=str(tmp_path), val_fraction=0.2)
    d = DATASETS["cifar10"](spec)
    assert d.input_shape == (3, 32, 32) and d.num_classes == 10 and d.augment
    assert (d.size("train"), d.size("val"), d.size("test")) == (16, 4, 4)  # its own test set
    expected = (first.reshape(3, 32, 32).astype(np.float32) / 255.0 - CIFAR_MEAN) / CIFAR_STD
    pool = torch.cat([d.x["train"], d.x["val"]])
    assert any(np.allclose(img.numpy(), expected) for img in pool)


def test_cifar_missing_folder_or_file_names_data_dir(tmp_path):
    with pytest.raises(DataError) as err:
        DATASETS["cifar10"](ExperimentSpec(dataset="cifar10", data_dir=str(tmp_path / "absent")))
    assert err.value.field == "data-dir"
    write_fake_cifar10(tmp_path)
    (tmp_path / "cifar-10-batches-py" / "data_batch_3").unlink()
    with pytest.raises(DataError, match="data_batch_3") as err:
        DATASETS["cifar10"](ExperimentSpec(dataset="cifar10", data_dir=str(tmp_path)))
    assert err.value.field == "data-dir"
