"""The `Runner`: one results folder (its spec, ledger and progress) and the hand-over of its trainings to an executor
(`executor.Executor`: always the caller's, Ray Tune's or the simulated clock's; the Runner calls only the contract's
methods). A training already in the ledger, or trained by another row (the same identity), or in flight in another
line of the same study, is not trained again (`dedup`); a start that is gone is trained again first, and retention
runs after each batch (`restore.Starts`). Runners are set up in one place, `open_runners`. No Ray here."""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Hashable

from oracle_search.dedup import Trained
from oracle_search.executor import ROW_METRICS, Executor
from oracle_search.fusion import fuse_size
from oracle_search.identity import Training
from oracle_search.ledger import Ledger
from oracle_search.progress import Progress
from oracle_search.restore import Starts
from oracle_search.retention import Claim
from oracle_search.schema import write_results
from trainables.sources import record_sources
from trainables.spec import ExperimentSpec


@dataclass
class Started:
    """Trials handed over by `Runner.start`: the rows already known (ledger hits, reused trainings), the trials
    training now, the later trials of a training this batch runs (`twins`), and the trial keys still running."""

    trials: list[Training]
    rows: dict[str, dict]
    todo: list[Training]
    twins: list[Training]
    waiting: set[str]
    need_checkpoints: bool = False  # a twin copies only a row whose checkpoint is there (`Runner.run`)


@dataclass
class Runner:
    """Runs trials for one results directory on `executor`, each finished row landing in its ledger at once. A
    context manager: leaving it with an exception (Ctrl-C too) stops the running trials at once when the executor is
    this Runner's own (`closes`); a shared one is closed by its maker."""

    out: Path
    spec: ExperimentSpec
    experiment: str
    executor: Executor
    progress: Progress = field(default_factory=Progress)
    fuse: int = 1  # most max_lr candidates of one (seed, cycle) trained as one fused network per trial
    closes: bool = False

    def __post_init__(self) -> None:
        self.out = self.out.resolve()
        self.ledger = Ledger(self.out)
        record_sources(self.out, self.spec)  # a rerun with edited import-path code is refused (SpecError)
        self.trained = Trained(self.ledger.rows, (*ROW_METRICS, "experiment", "trial_id", "checkpoint"))
        # A study's phases hand batches over from threads of their own (`study.run_study`), one at a time: a
        # training another phase already runs is waited for, not trained twice.
        self._handing = threading.RLock()
        self.starts = Starts(self.out, self.spec, self.ledger, self.executor.where(), self.progress.say, self._handing)

    def __enter__(self) -> "Runner":
        return self

    def __exit__(self, exc_type, *exc) -> None:
        self.close(abort=exc_type is not None)

    def close(self, abort: bool = False) -> None:
        if self.closes:  # a shared executor is closed by its maker
            self.executor.close(abort)

    def run(self, trials: list[Training], reuse: bool = True, need_checkpoints: bool = False) -> dict[str, dict]:
        """Rows of all `trials`, blocking until they finish, then `prune_checkpoints`. A trial whose training a row
        did (its `training` tag) gets that row's copy, marked `reused` (with `reuse` False it trains again; with
        `need_checkpoints`, as the next cycles start from them, only a row whose checkpoint is there)."""
        rows = self._wait(self.start(trials, reuse, need_checkpoints))
        self.prune_checkpoints()
        return rows

    def _wait(self, started: Started) -> dict[str, dict]:
        news = self.executor.wait()  # the count now: a trial ending from here on ends the next wait at once
        while self.running(started) and self.executor.alive():
            news = self.executor.wait(news)
        rows = self.ready(started, partial=False)
        if missing := [t.key for t in started.trials if t.key not in rows]:  # a failed trial named first
            failed = list(self.executor.failures(started.waiting))
            raise self.executor.failure(failed + [k for k in missing if k not in failed])
        return rows

    def start(self, trials: list[Training], reuse: bool = True, need_checkpoints: bool = False) -> Started:
        """Hand `trials` over and return at once (`run` without the wait); `ready` gives their rows as they finish.
        A trial whose start checkpoint is gone has it trained again first (`restore.Starts.restore`)."""
        with self._handing:
            rows = {t.key: row for t in trials if (row := self._hit(t)) is not None}
            if reuse:
                rows |= self._reuse([t for t in trials if t.key not in rows], need_checkpoints)
            if not self.starts.any_gone([t for t in trials if t.key not in rows]):
                return self._hand_over(trials, rows, reuse, need_checkpoints)
        # Outside the lock: a start trained again lands through `landed`, which takes it.
        restored = self.starts.restore([t for t in trials if t.key not in rows],
                                       lambda t: self._wait(self.start([t], reuse=False))[t.key])
        trials = [{t.key: t for t in restored}.get(t.key, t) for t in trials]
        with self._handing:
            if reuse:  # what landed while a start was trained again
                rows |= self._reuse([t for t in trials if t.key not in rows], need_checkpoints)
            return self._hand_over(trials, rows, reuse, need_checkpoints)

    def _hand_over(self, trials: list[Training], rows: dict[str, dict], reuse: bool, need_checkpoints: bool) -> Started:
        """Under `_handing`: the trials without a row train, but those whose training this batch or (with `reuse`)
        another phase's already runs (`dedup.Trained.split`), which wait for its row."""
        batch = self.trained.split([t for t in trials if t.key not in rows],
                                   self.executor.in_flight(self) if reuse else {})
        waiting = set()
        for key, twin in batch.leaders:
            waiting.add(key)
            self.executor.prioritise(key, twin.priority)
        if batch.todo:
            self.starts.check(batch.todo)
            waiting |= self.executor.submit(self, batch.todo, self.fuse)
            self.starts.pinned -= {t.start_checkpoint for t in batch.todo}  # in flight: `starts_in_flight` keeps them
        return Started(trials, rows, batch.todo + batch.running, batch.twins, waiting, need_checkpoints)

    def ready(self, started: Started, partial: bool = True) -> dict[str, dict]:
        """The rows of `started`'s trials finished so far, without waiting. With `partial`, a trial that failed
        for good (or an executor that ended) raises RunFailed now, naming it."""
        ended = not self.executor.alive()  # first: what ended before it stopped is in what is read next
        rows = dict(started.rows) | self.executor.rows([t.key for t in started.todo])
        failed = list(self.executor.failures(started.waiting))
        if started.twins:
            rows |= self._reuse([t for t in started.twins if t.key not in rows], started.need_checkpoints)
        if partial and (failed or (ended and len(rows) < len(started.trials))):
            raise self.executor.failure(failed or [t.key for t in started.trials if t.key not in rows])
        return rows

    def running(self, started: Started) -> int:
        """How many of `started`'s trials (a fused trial once) have neither finished nor failed: the slots it holds."""
        left = started.waiting - self.executor.rows(started.waiting).keys()
        return len(left - self.executor.failures(left).keys())

    def wait_for_news(self, seen: int, timeout: float = 1.0) -> int:
        """Block until a trial finishes or fails after the count `seen` (or `timeout` passes); the new count."""
        return self.executor.wait(seen, timeout)

    def _hit(self, t: Training) -> dict | None:
        """The ledger's row under t's key, unless it records another training than t's: that row is moved to
        ledger/refused/, said so, and t trains again."""
        row = self.ledger.get(t.key)
        if row is None or row.get("training") == t.tags.get("training"):
            return row
        kept = self.ledger.refuse(t.key)
        self.trained.refused(row.get("training"), t.key)
        self.progress.say(f"  ledger: {t.key} holds another training ({row.get('training')}, this trial is "
                          f"{t.tags.get('training')}); refused, not reused: moved to {kept.relative_to(self.out)}, "
                          "training it again")
        return None

    def _reuse(self, trials: list[Training], need_checkpoints: bool = False) -> dict[str, dict]:
        """Copies of the rows that already trained `trials`' trainings (`dedup.Trained.copies`), recorded."""
        with self._handing:
            reused = self.trained.copies(trials, self.starts.gone, need_checkpoints)
            for row in reused.values():
                self.ledger.record(row)
            return reused

    def landed(self, row: dict) -> None:
        """A finished row, from the executor: into the ledger at once, then on screen. Trials of other batches
        waiting for its training take their copies now: each keeps the checkpoint for its own chain."""
        self.ledger.record(row)
        with self._handing:
            self._reuse(self.trained.landed(row))
        self.progress.trial(row)

    def slots(self, per: int = 1) -> int:
        return self.executor.slots(per)

    def hold(self, claims: list[Claim]) -> Callable[[], None]:
        return self.starts.hold(claims)  # retention keeps what a line will train until it calls the release

    def prune_checkpoints(self, finished: bool = False) -> int:
        return self.starts.prune(self.executor.starts_in_flight, finished)

    def write_results(self):
        return write_results(self.out, self.ledger.rows())


def open_runners(executor: Executor, folders: dict[Hashable, tuple[Path, ExperimentSpec]], progress: Progress,
                 fuse: int = 1, experiment: str | None = None, closes: bool = False) -> dict[Hashable, Runner]:
    """The one place Runners are set up: one per folder of `folders` (key -> folder, spec) on `executor`, the
    caller's, saying on `progress` (tagged "r<key>" when several), fusing as --fuse says (`fusion.fuse_size`), its
    rows' experiment `experiment` (default the preset); `closes`: closed with the executor (a single command's)."""
    return {key: Runner(out, spec, experiment or spec.preset, executor,
                        progress if len(folders) == 1 else progress.tagged(f"r{key}"), fuse_size(spec, fuse), closes)
            for key, (out, spec) in folders.items()}
