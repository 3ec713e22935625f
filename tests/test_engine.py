"""The Runner on a real local Ray Tune: the ledger, retries of crashed trials, failures, and skipping finished
trials on a rerun."""
from __future__ import annotations

import io
import json
import os
import sys
from functools import partial
from pathlib import Path

import pytest
from ray import cloudpickle

from oracle_search import results
from oracle_search.engine import Ledger, Progress, RunFailed, Runner, Trial
from trainables.presets import PRESETS
from trainables.tune_adapter import cycle_trainable

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Ray workers cannot import this test module

TINY = PRESETS["tiny"].spec


def trial(key: str, max_lr: float = 0.1, seed: int = 0) -> Trial:
    return Trial(key=key, spec=TINY, cycle=0, max_lr=max_lr, seed=seed, start_checkpoint=None,
                 tags={"method": "test", "stage": "grid"})


def runner(out: Path, **kw) -> Runner:
    return Runner(out=out, spec=TINY, experiment="engine", progress=Progress(io.StringIO()), **kw)


def trial_dirs(out: Path) -> list[str]:
    return sorted(d.name for d in (out / "tune").glob("*/*") if d.is_dir())


# --- the ledger --------------------------------------------------------------------------------------------------

def test_ledger_records_one_file_per_trial_and_reads_them_back(tmp_path):
    ledger = Ledger(tmp_path)
    assert ledger.get("a") is None and ledger.rows() == []
    ledger.record({"key": "b", "val_acc": 1.0})
    ledger.record({"key": "a", "val_acc": 2.0})
    ledger.record({"key": "b", "val_acc": 3.0, "selected": True})  # a later record replaces the row
    assert ledger.get("b") == {"key": "b", "val_acc": 3.0, "selected": True}
    assert [r["key"] for r in ledger.rows()] == ["a", "b"]
    assert sorted(p.name for p in (tmp_path / "ledger").iterdir()) == ["a.json", "b.json"]  # no temp files left


def test_ledger_record_is_atomic(tmp_path, monkeypatch):
    ledger = Ledger(tmp_path)
    ledger.record({"key": "a", "val_acc": 1.0})

    def crash(src, dst):  # the process dies between writing the temp file and renaming it
        raise OSError("killed")

    monkeypatch.setattr(results.os, "replace", crash)
    with pytest.raises(OSError):
        ledger.record({"key": "a", "val_acc": 2.0})
    assert json.loads((tmp_path / "ledger" / "a.json").read_text()) == {"key": "a", "val_acc": 1.0}
    assert ledger.rows() == [{"key": "a", "val_acc": 1.0}]  # a stray temp file is not a row


def test_trials_already_in_the_ledger_are_not_run(tmp_path):
    Ledger(tmp_path).record({"key": "done", "val_acc": 5.0})
    with runner(tmp_path, address="ray://nowhere:1") as r:  # would fail if it tried to start Ray
        assert r.run([trial("done")]) == {"done": {"key": "done", "val_acc": 5.0}}
    assert not (tmp_path / "tune").exists()


# --- on Ray ------------------------------------------------------------------------------------------------------

def crash_once(markers: str, config: dict) -> None:
    """The first attempt of each trial dies (`exit-*` keys kill the worker process, others raise); later attempts
    train normally."""
    marker = Path(markers) / config["key"]
    if not marker.exists():
        marker.touch()
        if config["key"].startswith("exit-"):
            os._exit(1)
        raise RuntimeError("crash once")
    cycle_trainable(config)


def always_fail_bad(config: dict) -> None:
    if config["key"] == "bad":
        raise RuntimeError("always")
    cycle_trainable(config)


@pytest.mark.slow
def test_crashed_trials_are_retried_and_complete(ray_local, tmp_path):
    markers = tmp_path / "markers"
    markers.mkdir()
    with runner(tmp_path / "run", trainable=partial(crash_once, str(markers))) as r:
        rows = r.run([trial("raise-a", 0.1), trial("exit-b", 0.03)])
    assert sorted(p.name for p in markers.iterdir()) == ["exit-b", "raise-a"]
    assert {k: row["max_lr"] for k, row in rows.items()} == {"raise-a": 0.1, "exit-b": 0.03}
    assert all(row["val_acc"] > 50 and len(row["checkpoint_hash"]) == 64 for row in rows.values())
    assert sorted(row["key"] for row in Ledger(tmp_path / "run").rows()) == ["exit-b", "raise-a"]
    # Each trial's first attempt is on record as an error in its Tune trial directory.
    for key in rows:
        (trial_dir,) = (tmp_path / "run" / "tune").glob(f"*/{key}")
        assert (trial_dir / "error.txt").exists()


@pytest.mark.slow
def test_a_trial_failing_every_retry_raises_and_keeps_the_others(ray_local, tmp_path):
    with runner(tmp_path, trainable=always_fail_bad, max_failures=1) as r:
        with pytest.raises(RunFailed, match="1 trial"):
            r.run([trial("bad"), trial("good")])
    assert [row["key"] for row in Ledger(tmp_path).rows()] == ["good"]


@pytest.mark.slow
def test_a_rerun_trains_only_the_trials_missing_from_the_ledger(ray_local, tmp_path):
    with runner(tmp_path) as r:
        first = r.run([trial("a", 0.1), trial("b", 0.3)])
    with runner(tmp_path) as r:
        second = r.run([trial("a", 0.1), trial("b", 0.3), trial("c", 0.03, seed=1)])
    assert {k: second[k] for k in first} == first
    assert second["c"]["trial_id"] not in {row["trial_id"] for row in first.values()}
    assert trial_dirs(tmp_path) == ["a", "b", "c"]  # a and b ran once, in the first experiment
    assert r.write_results()["key"].tolist() == ["a", "b", "c"]
