"""Train once, without Tune (`oracle_search.dedup`): a batch's twins, their leaders in flight, the twins of other
batches that wait for a leader's row, and copies of the rows that already trained a training."""
from __future__ import annotations

import subprocess
import sys

from oracle_search.dedup import Trained
from oracle_search.identity import Training
from trainables.presets import PRESETS

TINY = PRESETS["tiny"].spec
MEASURED = ("val_acc", "checkpoint")


def trial(key: str, training: str | None, priority: float = 0.0) -> Training:
    tags = {"method": "test"} | ({"training": training} if training else {})
    return Training(key=key, spec=TINY, cycle=0, max_lr=0.1, seed=0, start_checkpoint=None, tags=tags,
                    priority=priority)


def test_a_batch_trains_each_training_once_and_waits_for_one_in_flight():
    trained = Trained(lambda: [], MEASURED)
    batch = [trial("a", "A"), trial("a2", "A"), trial("b", "B", priority=3.0), trial("c", "C"), trial("x", None),
             trial("y", None), trial("c2", "C", priority=5.0)]
    # B is in flight under another batch's key "b0", C under the key "c" itself (handed over before)
    split = trained.split(batch, {"B": "b0", "C": "c"})
    assert [t.key for t in split.todo] == ["a", "x", "y"]  # no identity: each trains
    assert [t.key for t in split.running] == ["c"]
    assert [t.key for t in split.twins] == ["a2", "b", "c2"]
    assert [(key, t.key) for key, t in split.leaders] == [("b0", "b"), ("c", "c"), ("c", "c2")]
    # b and c2 wait for rows that land in another batch: handed their trials when those land, once
    assert trained.landed({"key": "b0", "training": "B", "val_acc": 0.5, "checkpoint": "/b0"}) == [batch[2]]
    assert trained.landed({"key": "b0", "training": "B", "val_acc": 0.5, "checkpoint": "/b0"}) == []
    assert [t.key for t in trained.landed({"key": "c", "training": "C", "checkpoint": "/c"})] == ["c2"]
    assert trained.landed({"key": "a", "training": "A", "checkpoint": "/a"}) == []  # a2 is this batch's twin


def test_copies_come_from_a_row_that_trained_the_training_and_prefer_one_whose_checkpoint_is_there():
    ledger = [{"key": "old", "training": "A", "val_acc": 0.4, "checkpoint": "/gone", "method": "oracle"},
              {"key": "copy", "training": "A", "val_acc": 0.9, "checkpoint": "/copy", "reused": True},
              {"key": "b", "training": "B", "val_acc": 0.7, "checkpoint": "/gone-b"}]
    reads = []
    trained = Trained(lambda: reads.append(1) or ledger, MEASURED)
    gone = {"/gone", "/gone-b"}.__contains__
    assert trained.copies([trial("x", None)], gone) == {} and not reads  # nothing to look up: the ledger unread
    got = trained.copies([trial("a1", "A"), trial("b1", "B"), trial("n", "N")], gone)
    # A copy is never copied from; a gone checkpoint is copied when nothing starts from the copy
    assert got == {"a1": {"val_acc": 0.4, "checkpoint": "/gone", "method": "test", "training": "A", "key": "a1",
                          "reused": True},
                   "b1": {"val_acc": 0.7, "checkpoint": "/gone-b", "method": "test", "training": "B", "key": "b1",
                          "reused": True}}
    assert trained.copies([trial("a1", "A"), trial("b1", "B")], gone, need_checkpoints=True) == {}
    # A's same key trained again lands: it replaces the old row, whose checkpoint is there
    trained.landed({"key": "old", "training": "A", "val_acc": 0.6, "checkpoint": "/new"})
    assert trained.copies([trial("a2", "A")], gone, need_checkpoints=True)["a2"]["checkpoint"] == "/new"
    trained.refused("A", "old")  # the ledger refused it: no copy from it
    assert trained.copies([trial("a3", "A")], gone) == {}
    assert len(reads) == 1  # the ledger is read once


def test_train_once_needs_neither_tune_nor_ray():
    # In a fresh interpreter: other test files of one session import Ray
    code = "import sys, oracle_search.dedup; assert 'ray' not in sys.modules and 'torch' not in sys.modules"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
