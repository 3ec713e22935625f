"""Checkpoints: exact round trip, hash-checked, tensors and primitives only (weights_only loading)."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from trainables.checkpoints import (HASH_FILE, STATE_FILE, CheckpointError, checkpoint_hash, load_checkpoint,
                                   save_checkpoint)


def payload() -> dict:
    return {"model": {"w": torch.randn(4, 3), "b": torch.zeros(3)}, "masks": {"w": torch.rand(4, 3) > 0.5},
            "cycle": 2, "fingerprint": "abc", "metrics": {"val_acc": 81.5, "seed": 0}}


def test_round_trip(tmp_path):
    p = payload()
    digest = save_checkpoint(tmp_path / "ck", p)
    assert checkpoint_hash(tmp_path / "ck") == digest and len(digest) == 64
    back = load_checkpoint(tmp_path / "ck")
    assert back.keys() == p.keys() and back["cycle"] == 2 and back["metrics"] == p["metrics"]
    for group in ("model", "masks"):
        assert all(torch.equal(back[group][k], p[group][k]) for k in p[group])
    assert back["masks"]["w"].dtype == torch.bool
    assert not list(tmp_path.glob(".ck.tmp-*"))  # the temporary folder was renamed into place


def test_overwrite_replaces_an_earlier_attempt(tmp_path):
    save_checkpoint(tmp_path / "ck", {"cycle": 0})
    save_checkpoint(tmp_path / "ck", {"cycle": 1})
    assert load_checkpoint(tmp_path / "ck")["cycle"] == 1


def test_truncated_file_raises_naming_it(tmp_path):
    save_checkpoint(tmp_path / "ck", payload())
    state = tmp_path / "ck" / STATE_FILE
    state.write_bytes(state.read_bytes()[:-100])
    with pytest.raises(CheckpointError, match="hash mismatch") as err:
        load_checkpoint(tmp_path / "ck")
    assert str(state) in str(err.value)


def test_altered_byte_raises_naming_it(tmp_path):
    save_checkpoint(tmp_path / "ck", payload())
    state = tmp_path / "ck" / STATE_FILE
    blob = bytearray(state.read_bytes())
    blob[len(blob) // 2] ^= 0x01
    state.write_bytes(bytes(blob))
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(tmp_path / "ck")
    assert str(state) in str(err.value)


def test_missing_files_raise_naming_the_directory(tmp_path):
    with pytest.raises(CheckpointError, match="not a checkpoint directory") as err:
        load_checkpoint(tmp_path / "nowhere")
    assert str(tmp_path / "nowhere") in str(err.value)
    save_checkpoint(tmp_path / "ck", payload())
    (tmp_path / "ck" / HASH_FILE).unlink()
    with pytest.raises(CheckpointError, match=str(tmp_path / "ck")):
        load_checkpoint(tmp_path / "ck")


class Payload:
    """Unpickling runs its __reduce__ callable: what weights_only loading must refuse to do."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (Path(self.marker).touch, ())


def test_loading_runs_no_pickled_code(tmp_path):
    marker = tmp_path / "code-ran"
    save_checkpoint(tmp_path / "ck", {"cycle": 0, "evil": Payload(str(marker))})  # hash is valid
    with pytest.raises(CheckpointError, match="unreadable") as err:
        load_checkpoint(tmp_path / "ck")
    assert str(tmp_path / "ck" / STATE_FILE) in str(err.value)
    assert not marker.exists()
    torch.load(tmp_path / "ck" / STATE_FILE, weights_only=False)  # the control: unrestricted loading runs it
    assert marker.exists()
