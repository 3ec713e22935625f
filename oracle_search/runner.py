"""The `Runner`: one results folder (its spec, ledger and progress) and the hand-over of its trainings to an
`engine.Engine`, its own or one shared with other folders (replicates). A training already in the ledger, or
trained by another row (the same identity), or in flight in another line of the same study, is not trained again
(which, by identity, is `oracle_search.dedup`'s to say); a start that is gone is trained again first; retention runs
after each batch (`oracle_search.retention`)."""
from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ray import tune

from oracle_search import identity, retention
from oracle_search.dedup import Trained
from oracle_search.cluster import trial_slots
from oracle_search.engine import BOOKKEEPING, RERUN, ROW_METRICS, Engine, RunFailed
from oracle_search.executor import Executor
from oracle_search.fusion import pack
from oracle_search.identity import Training
from oracle_search.ledger import Ledger
from oracle_search.progress import Progress
from oracle_search.schema import write_results
from trainables.checkpoints import CheckpointError, verify_checkpoint
from trainables.sources import record_sources
from trainables.spec import ExperimentSpec
from trainables.tune_adapter import any_cycle_trainable


@dataclass
class Started:
    """Trials handed to the experiment by `Runner.start`: the rows already known (ledger hits, reused trainings),
    the trials training now, the later trials of a training this batch runs (`twins`), and the Tune trial keys
    still running."""

    trials: list[Training]
    rows: dict[str, dict]
    todo: list[Training]
    twins: list[Training]
    waiting: set[str]
    need_checkpoints: bool = False  # a twin copies only a row whose checkpoint is there (`Runner.run`)



@dataclass
class Runner:
    """Runs trials for one results directory, each finished trial landing in its ledger at once, on an `Engine`:
    its own (one long-lived Tune experiment), or one shared with other results folders (`engine`: replicates).
    Use as a context manager, or call `close()`; leaving the context with an exception (Ctrl-C included) stops the
    running trials at once. A Runner on a shared engine leaves closing it to the engine's maker."""

    out: Path
    spec: ExperimentSpec
    experiment: str
    address: str | None = None
    trainable: Callable[[dict], None] = any_cycle_trainable
    max_failures: int = 2
    progress: Progress = field(default_factory=Progress)
    fuse: int = 1  # most max_lr candidates of one (seed, cycle) trained as one fused network per Tune trial
    callbacks: tuple[tune.Callback, ...] = ()  # more Tune callbacks, e.g. oracle_search.callbacks.logger_callbacks
    engine: Executor | None = None  # shared with other Runners; None: an `Engine` of its own

    def __post_init__(self) -> None:
        self.out = self.out.resolve()
        self.ledger = Ledger(self.out)
        record_sources(self.out, self.spec)  # a rerun with edited import-path code is refused (SpecError)
        self.storage = self.spec.resources.storage_path or str(self.out / "tune")
        self._own_engine = self.engine is None
        if self.engine is None:
            self.engine = Engine(self.spec, self.experiment, self.address, self.storage, self.progress,
                                 self.trainable, self.max_failures, self.callbacks)
        # Train once (`dedup`): the rows that trained each training, and the trials waiting for one in flight
        self.trained = Trained(self.ledger.rows, (*ROW_METRICS, "experiment", "trial_id", "checkpoint"))
        self._checked: set[str] = set()  # start checkpoints verified by _check_starts
        self._deleted: set[str] = set()  # checkpoints retention deleted or found deleted (not checked again)
        self._claims: dict[int, retention.Claim] = {}  # what the lines still running will train (`hold`)
        # Starts that were gone and were trained again (`_restore_starts`): the old path -> the new one; `_pinned`
        # keeps a new one from retention until the trials that wait for it are handed over.
        self._moved: dict[str, str] = {}
        self._remote_alive: set[str] = set()  # start URIs found there (`_gone`)
        self._pinned: set[str] = set()
        self._restoring = threading.RLock()  # a start restored may need its own start restored first
        # A study's phases start trainings from threads of their own (`study.run_study`): one hands over a batch
        # at a time, so a training another phase already runs is waited for, not trained twice.
        self._handing = threading.RLock()

    def __enter__(self) -> "Runner":
        return self

    def __exit__(self, exc_type, *exc) -> None:
        self.close(abort=exc_type is not None)

    def run(self, trials: list[Training], reuse: bool = True, need_checkpoints: bool = False) -> dict[str, dict]:
        """Rows of all `trials`, training only those not already in the ledger; blocks until they finish; then
        deletes the checkpoints no chain can start from any more (`prune_checkpoints`).

        A trial whose training an earlier row already did (the same `training` tag, e.g. the LR-warmup baseline's
        cycle-0 tuning and the Oracle's cycle-0 grid) is not trained again: that row is copied under the trial's
        key and tags, marked `reused`; with `reuse` False it is trained again (a checkpoint retention deleted).
        `need_checkpoints`: the trials' next cycles start from them (a final chain), so a row whose checkpoint
        retention deleted is not reused; the trial trains."""
        rows = self._wait(self.start(trials, reuse, need_checkpoints))
        self.prune_checkpoints()
        return rows

    def _wait(self, started: "Started") -> dict[str, dict]:
        """Block until every trial of `started` has its row; RunFailed naming those that failed."""
        engine = self.engine
        with engine.done:
            while not started.waiting <= (engine.finished.keys() | engine.failed):
                if not engine.alive():
                    break
                engine.done.wait(timeout=1.0)
        rows = self.ready(started, partial=False)
        missing = [t.key for t in started.trials if t.key not in rows]
        if missing:  # name a trial that failed (a missing twin waited on it) where there is one
            with engine.done:
                failed = [k for k in started.waiting if k in engine.failed]
            raise self._failure(failed + [k for k in missing if k not in failed])
        return rows

    def start(self, trials: list[Training], reuse: bool = True, need_checkpoints: bool = False) -> "Started":
        """Hand `trials` to the experiment and return at once (`run` without the wait); `ready` gives their rows
        as they finish. A trial whose start checkpoint is gone has it trained again first (`_restore_starts`)."""
        with self._handing:
            rows = {t.key: row for t in trials if (row := self._hit(t)) is not None}
            if reuse:
                rows |= self._reuse([t for t in trials if t.key not in rows], need_checkpoints)
            if not self._starts_gone([t for t in trials if t.key not in rows]):
                return self._hand_over(trials, rows, reuse, need_checkpoints)
        # Outside the lock: a start trained again lands through `landed`, which takes it.
        restored = {t.key: t for t in self._restore_starts([t for t in trials if t.key not in rows])}
        trials = [restored.get(t.key, t) for t in trials]
        with self._handing:
            if reuse:  # what landed while a start was trained again
                rows |= self._reuse([t for t in trials if t.key not in rows], need_checkpoints)
            return self._hand_over(trials, rows, reuse, need_checkpoints)

    def _hand_over(self, trials: list[Training], rows: dict[str, dict], reuse: bool,
                   need_checkpoints: bool) -> "Started":
        """`start`'s hand-over, under `_handing`: the trials without a row train, but those whose training this
        batch or (with `reuse`) another phase's already runs (`dedup.Trained.split`), which wait for its row."""
        flying = self.engine.trainings_in_flight(self) if reuse else {}
        batch = self.trained.split([t for t in trials if t.key not in rows], flying)
        waiting = set()
        for key, twin in batch.leaders:
            waiting.add(key)
            self.engine.prioritise(key, twin.priority)
        todo = batch.todo
        if todo:
            self._check_starts(todo)
            for t in todo:
                self.engine.owns(self, t.key, t)
            configs = pack(todo, self.fuse, lambda key, t: self.engine.owns(self, key, t))
            self.engine.submit(configs)
            waiting |= {c["key"] for c in configs}  # a fused trial's key stands for its candidates
            self._pinned -= {t.start_checkpoint for t in todo}  # now in flight: `starts_in_flight` keeps them
        return Started(trials, rows, todo + batch.running, batch.twins, waiting, need_checkpoints)

    def ready(self, started: "Started", partial: bool = True) -> dict[str, dict]:
        """The rows of `started`'s trials finished so far, without waiting. With `partial`, a trial that failed
        for good (or an experiment that ended) raises RunFailed now, naming it."""
        engine = self.engine
        with engine.done:
            rows = dict(started.rows) | {t.key: engine.finished[t.key] for t in started.todo
                                         if t.key in engine.finished}
            failed = [k for k in started.waiting if k in engine.failed]
            ended = not engine.alive()
        if started.twins:
            rows |= self._reuse([t for t in started.twins if t.key not in rows], started.need_checkpoints)
        if partial and (failed or (ended and len(rows) < len(started.trials))):
            raise self._failure(failed or [t.key for t in started.trials if t.key not in rows])
        return rows

    def running(self, started: "Started") -> int:
        """How many of `started`'s Tune trials (a fused trial once) have neither finished nor failed: the slots it
        holds."""
        engine = self.engine
        with engine.done:
            return sum(1 for k in started.waiting if k not in engine.finished and k not in engine.failed)

    def wait_for_news(self, seen: int, timeout: float = 1.0) -> int:
        """Block until a trial finishes or fails after the count `seen` (or `timeout` passes); the new count."""
        engine = self.engine
        with engine.done:
            if engine.news == seen:
                engine.done.wait(timeout=timeout)
            return engine.news

    def _failure(self, missing: list[str]) -> RunFailed:
        engine = self.engine
        cause = f" ({engine.tune_error})" if engine.tune_error else ""
        first = missing[0] + (f": {engine.failed[missing[0]]}" if missing[0] in engine.failed else "")
        return RunFailed(f"{len(missing)} trial(s) failed after {self.max_failures} retries{cause} "
                         f"(first: {first}); {RERUN}")

    def _check_starts(self, trials: list[Training]) -> None:
        """Check each start checkpoint this machine can read once, before any trial starts from it: a corrupt one
        would otherwise fail every trial of the next cycle, each attempt on a new actor, before the run gives up.
        A start in cloud storage or on another node's disk is checked by its trials."""
        for start in {t.start_checkpoint for t in trials if t.start_checkpoint} - self._checked:
            if "://" in start or not Path(start).is_dir():
                continue
            try:
                verify_checkpoint(start)
            except CheckpointError as err:
                n = sum(t.start_checkpoint == start for t in trials)
                raise RunFailed(f"{n} trial(s) not started: CheckpointError: {err}; finished trials are kept") from err
            self._checked.add(start)

    def _hit(self, t: Training) -> dict | None:
        """The ledger's row under t's key, unless it records another training than t's (`training` identity):
        such a row is never reused; it is moved to ledger/refused/, said so, and t is trained again."""
        row = self.ledger.get(t.key)
        if row is None or row.get("training") == t.tags.get("training"):
            return row
        kept = self.ledger.refuse(t.key)
        self.trained.refused(row.get("training"), t.key)
        self.progress.say(f"  ledger: {t.key} holds another training ({row.get('training')}, this trial is "
                          f"{t.tags.get('training')}); refused, not reused: moved to {kept.relative_to(self.out)}, "
                          "training it again")
        return None

    def _gone(self, path: str) -> bool:
        """Whether the checkpoint at `path` can no longer be started from: retention deleted it (its tombstone), or
        it is a local path under this run's storage that is not there (deleted by hand, a folder moved). A path
        elsewhere (another node's disk) is checked by the trials that start from it. A storage URI is asked once:
        each batch asks for its starts, and a bucket answers over the network."""
        if path in self._deleted:
            return True
        if "://" in path:
            if path not in self._remote_alive:
                if retention.is_deleted(path):
                    return True
                self._remote_alive.add(path)
            return False
        if retention.is_deleted(path):
            return True
        storage = self.engine.storage  # where every trial of the engine writes, a shared one's too
        return "://" not in storage and Path(path).is_relative_to(storage) and not Path(path).is_dir()

    def _starts_gone(self, trials: list[Training]) -> bool:
        """Whether a start of `trials` is gone (or was trained again already: `_moved`)."""
        return any(t.start_checkpoint in self._moved or self._gone(t.start_checkpoint)
                   for t in trials if t.start_checkpoint)

    def _restore_starts(self, trials: list[Training]) -> list[Training]:
        """`trials` with each start checkpoint that is gone trained again first (`_retrain`) and replaced by the
        new one. Identical trainings make identical checkpoints (on a CPU bitwise; on a GPU within rounding), so
        the trials train what they would have."""
        starts = {t.start_checkpoint for t in trials if t.start_checkpoint}
        if not self._starts_gone(trials):
            return trials
        with self._restoring:  # two lines needing the same start train it once
            for start in sorted(starts):
                if start not in self._moved and self._gone(start):
                    self._moved[start] = self._retrain(start, sum(t.start_checkpoint == start for t in trials))
        return [dataclasses.replace(t, start_checkpoint=self._moved[t.start_checkpoint])
                if t.start_checkpoint in self._moved else t for t in trials]

    def _retrain(self, path: str, waiting: int) -> str:
        """Train again the row whose checkpoint was `path` (from its own start, itself restored first when gone),
        under its own key; every row that holds `path` (its copies) then holds the new checkpoint. Returns the new
        path. RunFailed when no row of the ledger trained `path`, or its training cannot be rebuilt."""
        holders = [r for r in self.ledger.rows() if r.get("checkpoint") == path]
        original = next((r for r in holders if not r.get("reused")), holders[0] if holders else None)
        trial, why = (identity.rebuild(original, self.spec, self.ledger.rows(), self._gone,
                                       not_tags=(*ROW_METRICS, *BOOKKEEPING))
                      if original else (None, f"no row of {self.out / 'ledger'} trained it"))
        if trial is None:
            raise RunFailed(f"{waiting} trial(s) not started: their start checkpoint {path} is gone and cannot be "
                            f"trained again ({why}); rerun with a new --out, or keep every checkpoint with "
                            "--keep-checkpoints all")
        self.progress.say(f"  checkpoint gone: training {original['key']} again (cycle {original['cycle']}, seed "
                          f"{original['seed']}), {waiting} trial(s) start from it")
        self.ledger.refuse(original["key"])  # trained again under its key; the old row kept in ledger/refused/
        row = self._wait(self.start([trial], reuse=False))[trial.key]
        self._pinned.add(row["checkpoint"])
        with self._handing:
            for held in holders:
                if held["key"] != original["key"]:
                    self.ledger.record(held | {"checkpoint": row["checkpoint"]})
        if row.get("checkpoint_hash") != original.get("checkpoint_hash"):
            self.progress.say(f"  {original['key']}: trained again to another checkpoint hash (a GPU's rounding); "
                              "the trials after it keep their identities")
        return row["checkpoint"]

    def _reuse(self, trials: list[Training], need_checkpoints: bool = False) -> dict[str, dict]:
        """Copies of the rows that already trained `trials`' trainings (`dedup.Trained.copies`), recorded."""
        with self._handing:
            reused = self.trained.copies(trials, self._gone, need_checkpoints)
            for row in reused.values():
                self.ledger.record(row)
            return reused

    def slots(self, per: int = 1) -> int:
        """How many groups of `per` trials to run at once (`trial_slots`)."""
        return trial_slots(self.spec, self.address, per)

    def close(self, abort: bool = False) -> None:
        """End this Runner's own experiment (`Engine.close`); a shared engine is closed by its maker."""
        if self._own_engine:
            self.engine.close(abort)

    def hold(self, claims: list[retention.Claim]) -> Callable[[], None]:
        """Hold `claims` (what a line of work will train, from its plan): retention keeps every row on the
        claimed chains (`retention.Claim`) until the returned function is called (once the line has ended)."""
        with self._handing:
            ids = [id(c) for c in claims]
            self._claims.update(zip(ids, claims))

        def release() -> None:
            with self._handing:
                for i in ids:
                    self._claims.pop(i, None)
        return release

    def prune_checkpoints(self, finished: bool = False) -> int:
        """Under `--keep-checkpoints chain` (the default), delete this folder's checkpoints that no chain, resume
        or completion can start from (`oracle_search.retention`); `finished`: the command is done. Returns how
        many were deleted."""
        if self.spec.resources.keep_checkpoints != "chain":
            return 0
        with self._handing:  # no phase hands over a batch, or copies a row it reuses, while the rows are read
            in_flight = self.engine.starts_in_flight() | self._pinned
            deleted = retention.prune(self.ledger.rows(), finished=finished, in_flight=in_flight,
                                      known=self._deleted, claims=tuple(self._claims.values()))
        if deleted and finished:
            self.progress.say(f"checkpoints: deleted {deleted} that nothing starts from (--keep-checkpoints chain)")
        return deleted

    def write_results(self):
        return write_results(self.out, self.ledger.rows())

    def landed(self, row: dict) -> None:
        """A finished training's row, from the engine: into the ledger at once, then on screen."""
        self.ledger.record(row)
        # Trials of other batches waiting for this training get their copies now, not when their batch ends: a
        # copy keeps the checkpoint for its own chain (`retention`), which the leader's chain may move on from first.
        with self._handing:
            self._reuse(self.trained.landed(row))
        self.progress.trial(row)
