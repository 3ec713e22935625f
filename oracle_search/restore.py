"""Start checkpoints, beside retention (`oracle_search.retention`, which says which to delete): a folder's trials
start from checkpoints its ledger's rows wrote. `Starts` checks each one this machine can read once before any trial
starts from it, says which are gone (retention deleted them, or a path under the run's storage is not there), trains
a gone one again from its own start, under its own key, before the trials that need it are handed over, and prunes
what no start needs (what the lines still running will start from, `hold`, kept). The Runner
(`oracle_search.runner`) asks it at each hand-over; the training again goes through the Runner like any other."""
from __future__ import annotations

import dataclasses
import threading
from pathlib import Path
from typing import Callable

from oracle_search import identity, retention
from oracle_search.executor import BOOKKEEPING, ROW_METRICS, RunFailed
from oracle_search.identity import Training
from oracle_search.ledger import Ledger
from trainables.checkpoints import CheckpointError, verify_checkpoint
from trainables.spec import ExperimentSpec


class Starts:
    """The start checkpoints of one results folder (`out`, its `spec` and `ledger`); `storage`: where every trial
    of its executor writes (a shared one's too); `say`: its progress; `handing`: the lock its Runner hands batches
    over and records rows under."""

    def __init__(self, out: Path, spec: ExperimentSpec, ledger: Ledger, storage: str, say: Callable[[str], None],
                 handing: threading.RLock):
        self.out, self.spec, self.ledger, self.storage = out, spec, ledger, storage
        self.say, self.handing = say, handing
        self.checked: set[str] = set()  # start checkpoints verified (`check`)
        self.deleted: set[str] = set()  # checkpoints retention deleted or found deleted (not checked again)
        # Starts that were gone and were trained again (`restore`): the old path -> the new one; `pinned` keeps a
        # new one from retention until the trials that wait for it are handed over.
        self.moved: dict[str, str] = {}
        self.pinned: set[str] = set()
        self._remote_alive: set[str] = set()  # start URIs found there (`gone`)
        self._restoring = threading.RLock()  # a start restored may need its own start restored first
        self._claims: dict[int, retention.Claim] = {}  # what the lines still running will train (`hold`)

    def hold(self, claims: list[retention.Claim]) -> Callable[[], None]:
        """Hold `claims` (what a line of work will train, from its plan): retention keeps every row on the
        claimed chains (`retention.Claim`) until the returned function is called (once the line has ended)."""
        with self.handing:
            ids = [id(c) for c in claims]
            self._claims.update(zip(ids, claims))

        def release() -> None:
            with self.handing:
                for i in ids:
                    self._claims.pop(i, None)
        return release

    def prune(self, in_flight: Callable[[], set[str]], finished: bool) -> int:
        """Under `--keep-checkpoints chain` (the default), delete the folder's checkpoints that no chain, resume or
        completion can start from (`retention.prune`), but those trials in flight start from (`in_flight()`);
        `finished`: the command is done. Returns how many were deleted."""
        if self.spec.resources.keep_checkpoints != "chain":
            return 0
        with self.handing:  # no phase hands over a batch, or copies a row it reuses, while the rows are read
            deleted = retention.prune(self.ledger.rows(), finished=finished, in_flight=in_flight() | self.pinned,
                                      known=self.deleted, claims=tuple(self._claims.values()))
        if deleted and finished:
            self.say(f"checkpoints: deleted {deleted} that nothing starts from (--keep-checkpoints chain)")
        return deleted

    def check(self, trials: list[Training]) -> None:
        """Check each start checkpoint this machine can read once, before any trial starts from it: a corrupt one
        would otherwise fail every trial of the next cycle, each attempt on a new actor, before the run gives up.
        A start in cloud storage or on another node's disk is checked by its trials."""
        for start in {t.start_checkpoint for t in trials if t.start_checkpoint} - self.checked:
            if "://" in start or not Path(start).is_dir():
                continue
            try:
                verify_checkpoint(start)
            except CheckpointError as err:
                n = sum(t.start_checkpoint == start for t in trials)
                raise RunFailed(f"{n} trial(s) not started: CheckpointError: {err}; finished trials are kept") from err
            self.checked.add(start)

    def gone(self, path: str) -> bool:
        """Whether the checkpoint at `path` can no longer be started from: retention deleted it (its tombstone), or
        it is a local path under the run's storage that is not there (deleted by hand, a folder moved). A path
        elsewhere (another node's disk) is checked by the trials that start from it. A storage URI is asked once:
        each batch asks for its starts, and a bucket answers over the network."""
        if path in self.deleted:
            return True
        if "://" in path:
            if path not in self._remote_alive:
                if retention.is_deleted(path):
                    return True
                self._remote_alive.add(path)
            return False
        if retention.is_deleted(path):
            return True
        storage = self.storage
        return "://" not in storage and Path(path).is_relative_to(storage) and not Path(path).is_dir()

    def any_gone(self, trials: list[Training]) -> bool:
        """Whether a start of `trials` is gone (or was trained again already: `moved`)."""
        return any(t.start_checkpoint in self.moved or self.gone(t.start_checkpoint)
                   for t in trials if t.start_checkpoint)

    def restore(self, trials: list[Training], train: Callable[[Training], dict]) -> list[Training]:
        """`trials` with each start checkpoint that is gone trained again first (`train(training)` gives its row)
        and replaced by the new one. Identical trainings make identical checkpoints (on a CPU bitwise; on a GPU
        within rounding), so the trials train what they would have."""
        starts = {t.start_checkpoint for t in trials if t.start_checkpoint}
        if not self.any_gone(trials):
            return trials
        with self._restoring:  # two lines needing the same start train it once
            for start in sorted(starts):
                if start not in self.moved and self.gone(start):
                    self.moved[start] = self._retrain(start, sum(t.start_checkpoint == start for t in trials), train)
        return [dataclasses.replace(t, start_checkpoint=self.moved[t.start_checkpoint])
                if t.start_checkpoint in self.moved else t for t in trials]

    def _retrain(self, path: str, waiting: int, train: Callable[[Training], dict]) -> str:
        """Train again the row whose checkpoint was `path` (from its own start, itself restored first when gone),
        under its own key; every row that holds `path` (its copies) then holds the new checkpoint. Returns the new
        path. RunFailed when no row of the ledger trained `path`, or its training cannot be rebuilt."""
        holders = [r for r in self.ledger.rows() if r.get("checkpoint") == path]
        original = next((r for r in holders if not r.get("reused")), holders[0] if holders else None)
        trial, why = (identity.rebuild(original, self.spec, self.ledger.rows(), self.gone,
                                       not_tags=(*ROW_METRICS, *BOOKKEEPING))
                      if original else (None, f"no row of {self.out / 'ledger'} trained it"))
        if trial is None:
            raise RunFailed(f"{waiting} trial(s) not started: their start checkpoint {path} is gone and cannot be "
                            f"trained again ({why}); rerun with a new --out, or keep every checkpoint with "
                            "--keep-checkpoints all")
        self.say(f"  checkpoint gone: training {original['key']} again (cycle {original['cycle']}, seed "
                 f"{original['seed']}), {waiting} trial(s) start from it")
        self.ledger.refuse(original["key"])  # trained again under its key; the old row kept in ledger/refused/
        row = train(trial)
        self.pinned.add(row["checkpoint"])
        with self.handing:
            for held in holders:
                if held["key"] != original["key"]:
                    self.ledger.record(held | {"checkpoint": row["checkpoint"]})
        if row.get("checkpoint_hash") != original.get("checkpoint_hash"):
            self.say(f"  {original['key']}: trained again to another checkpoint hash (a GPU's rounding); "
                     "the trials after it keep their identities")
        return row["checkpoint"]
