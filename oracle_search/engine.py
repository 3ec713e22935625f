"""Run batches of pruning-cycle trials on Ray Tune, recording each finished trial in a ledger at once.

The ledger (one small JSON file per finished trial under DIR/ledger/) is what makes every driver resumable:
a rerun skips every trial already in it, so a killed driver never retrains a finished trial.
"""
from __future__ import annotations

import json
import os
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import ray
from ray import tune
from ray.tune.search import Searcher

from oracle_search.progress import Progress
from oracle_search.schema import atomic_write_json, write_results
from trainables.spec import ExperimentSpec
from trainables.tune_adapter import cycle_trainable

ROW_METRICS = ("cycle", "seed", "max_lr", "density", "val_acc", "test_acc", "best_epoch", "epochs", "seconds",
               "device", "diverged", "grad_std", "act_std", "grad_hist", "act_hist", "checkpoint_hash",
               "start_hash", "gpu_ids", "node_id")


class RunFailed(RuntimeError):
    """Trials failed even after retries; finished ones are kept, a rerun resumes."""


@dataclass(frozen=True)
class Trial:
    key: str  # unique within a run directory; names the trial in the ledger
    spec: ExperimentSpec
    cycle: int
    max_lr: float | None
    seed: int
    start_checkpoint: str | None
    tags: dict[str, Any] = field(default_factory=dict)  # extra results-table fields: method, stage, ...

    def config(self) -> dict[str, Any]:
        return {"spec": self.spec, "cycle": self.cycle, "max_lr": self.max_lr, "seed": self.seed,
                "start_checkpoint": self.start_checkpoint, "key": self.key}


class Ledger:
    def __init__(self, out: Path):
        self.dir = out / "ledger"
        self.dir.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str) -> Path:
        return self.dir / f"{key}.json"

    def get(self, key: str) -> dict | None:
        path = self._path(key)
        return json.loads(path.read_text()) if path.exists() else None

    def record(self, row: dict) -> None:
        atomic_write_json(self._path(row["key"]), row)

    def rows(self) -> list[dict]:
        return [json.loads(p.read_text()) for p in sorted(self.dir.glob("*.json"))]


def connect(address: str | None) -> None:
    """Join the cluster at `address`, or start a local Ray sized to this machine with its dashboard off."""
    # Read by Tune in this process at fit time, so set them even when the caller already started Ray.
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")  # with verbose=0: no status tables
    # Tune lets a searcher keep only one trial pending by default, which serialises trial starts.
    os.environ.setdefault("TUNE_MAX_PENDING_TRIALS_PG", str(max(2, os.cpu_count() or 1)))
    if ray.is_initialized():
        return
    if address:
        ray.init(address=address, logging_level="WARNING", log_to_driver=False)
        return
    import torch

    # address="local": never join a stale cluster that a leftover ray_current_cluster file names.
    ray.init(address="local", num_cpus=os.cpu_count(), num_gpus=torch.cuda.device_count(),
             include_dashboard=False, logging_level="WARNING", log_to_driver=False)


def last_error_line(trial) -> str:
    """The exception line of a failed Tune trial's latest error (Tune appends each error to its error file)."""
    path = trial.error_file
    lines = Path(path).read_text().strip().splitlines() if path and os.path.exists(path) else []
    return lines[-1].strip() if lines else "no error recorded"


def checkpoint_uri(checkpoint: tune.Checkpoint, storage: str) -> str:
    if "://" in storage:
        return f"{storage.split('://', 1)[0]}://{checkpoint.path}"
    return checkpoint.path


def keep_idle_actors_warm() -> None:
    """Keep Tune's idle trial actors while the experiment lives, instead of evicting them at every step where
    no trial is pending.

    Between two cycles no trial is pending for a moment (the next cycle waits for the selection), and Tune would
    evict every warm actor (torch imported, data cached) only to start cold ones seconds later: on a 2-core
    machine that gap cost more than the trials. All idle actors are still removed when the experiment ends.
    Tune also caches only one idle actor when no trial is staged, so every other one was dropped at each cycle's
    end; in the next cycle the cached actor then took each trial before a new actor had started, and Tune killed
    the starting one: trials ran one at a time. So every finished actor is cached until the search ends.
    This touches private Tune methods; if a Ray release renames them, runs stay correct, only slower.
    """
    from ray.tune.execution.tune_controller import TuneController

    original = getattr(TuneController, "_cleanup_cached_actors", None)
    original_cache = getattr(TuneController, "_maybe_cache_trial_actor", None)
    if original is None or original_cache is None or getattr(original, "_keeps_warm", False):
        return

    def cleanup(self, force_all: bool = False):
        if force_all or self._search_alg.is_finished():
            original(self, force_all=force_all)

    def cache(self, trial) -> bool:
        if self._search_alg.is_finished():
            return original_cache(self, trial)
        room = self._actor_cache.num_cached_objects + 1  # let the cache take this actor too
        self._actor_cache.increase_max(trial.placement_group_factory, room)
        try:
            return original_cache(self, trial)
        finally:
            self._actor_cache.decrease_max(trial.placement_group_factory, room)

    def update_trial_queue(self, blocking: bool = False, timeout: int = 600) -> bool:
        # Tune's own version polls an idle searcher once a second; between two driver batches that second is
        # pure waiting, once per cycle. Poll every 20 ms instead.
        trial = self._search_alg.next_trial()
        deadline = time.monotonic() + timeout
        while blocking and not trial and not self.is_finished() and time.monotonic() < deadline:
            time.sleep(0.02)
            trial = self._search_alg.next_trial()
        if trial:
            self.add_trial(trial)
        return bool(trial)

    cleanup._keeps_warm = True
    TuneController._cleanup_cached_actors = cleanup
    TuneController._maybe_cache_trial_actor = cache
    if hasattr(TuneController, "_update_trial_queue"):
        TuneController._update_trial_queue = update_trial_queue


class TrialQueue(Searcher):
    """Feeds Tune the trials the driver asks for, as it asks: one Tune experiment serves a whole driver run,
    so actors (and the data cached in them) live across cycles instead of restarting with every batch."""

    def __init__(self) -> None:
        super().__init__()
        self.pending: deque[Trial] = deque()
        self.closed = False
        self.lock = threading.Lock()

    def put(self, trials: list[Trial]) -> None:
        with self.lock:
            self.pending.extend(trials)

    def close(self) -> None:
        with self.lock:
            self.closed = True

    def suggest(self, trial_id: str) -> dict | str | None:
        with self.lock:
            if self.pending:
                return {"trial": self.pending.popleft().config()}
            return Searcher.FINISHED if self.closed else None

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        pass

    def save(self, checkpoint_path: str) -> None:  # the ledger, not Tune's experiment state, resumes runs
        pass

    def restore(self, checkpoint_path: str) -> None:
        pass

    # Tune pickles its searcher and callbacks for `Tuner.restore`, which we never use (the ledger resumes).
    def __getstate__(self) -> dict:
        return {}

    def __setstate__(self, state: dict) -> None:
        self.__init__()
        self.closed = True


class _Record(tune.Callback):
    """Hands finished and failed trials to the runner, in the driver process."""

    def __init__(self, runner: "Runner"):
        self.runner = runner

    def on_trial_complete(self, iteration, trials, trial, **info):
        self.runner._record(trial)

    def on_trial_error(self, iteration, trials, trial, **info):
        self.runner._fail(trial)

    def __getstate__(self) -> dict:
        return {}


@dataclass
class Runner:
    """Runs trials for one results directory on one long-lived Tune experiment; each finished trial lands in
    the ledger immediately. Use as a context manager, or call `close()`."""

    out: Path
    spec: ExperimentSpec
    experiment: str
    address: str | None = None
    trainable: Callable[[dict], None] = cycle_trainable
    max_failures: int = 2
    progress: Progress = field(default_factory=Progress)
    callbacks: tuple[tune.Callback, ...] = ()  # more Tune callbacks, e.g. oracle_search.callbacks.logger_callbacks

    def __post_init__(self) -> None:
        self.out = self.out.resolve()
        self.ledger = Ledger(self.out)
        self.storage = self.spec.resources.storage_path or str(self.out / "tune")
        self._queue: TrialQueue | None = None
        self._thread: threading.Thread | None = None
        self._done = threading.Condition()
        self._finished: dict[str, dict] = {}
        self._failed: dict[str, str] = {}  # key -> the last line of its error
        self._by_key: dict[str, Trial] = {}
        self._tune_error: BaseException | None = None
        self._trainings: dict[str, dict] | None = None

    def __enter__(self) -> "Runner":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def run(self, trials: list[Trial]) -> dict[str, dict]:
        """Rows of all `trials`, training only those not already in the ledger; blocks until they finish.

        A trial whose training an earlier row already did (the same `training` tag, e.g. the LR-warmup baseline's
        cycle-0 tuning and the Oracle's cycle-0 grid) is not trained again: that row is copied under the trial's
        key and tags, marked `reused`."""
        rows = {t.key: row for t in trials if (row := self.ledger.get(t.key)) is not None}
        rows |= self._reuse([t for t in trials if t.key not in rows])
        todo, twins = [], []  # twins: a later trial of a training this batch already runs
        first: dict[str, Trial] = {}
        for t in (t for t in trials if t.key not in rows):
            training = t.tags.get("training")
            (twins if training in first else todo).append(t)
            if training:
                first.setdefault(training, t)
        if todo:
            self._start()
            self._by_key.update({t.key: t for t in todo})
            self._queue.put(todo)
            keys = {t.key for t in todo}
            with self._done:
                while not keys <= (self._finished.keys() | self._failed):
                    if not self._thread.is_alive():
                        break
                    self._done.wait(timeout=1.0)
            rows.update({k: self._finished[k] for k in keys if k in self._finished})
        if twins:
            rows |= self._reuse(twins)
        missing = [t.key for t in trials if t.key not in rows]
        if missing:
            cause = f" ({self._tune_error})" if self._tune_error else ""
            first = missing[0] + (f": {self._failed[missing[0]]}" if missing[0] in self._failed else "")
            raise RunFailed(f"{len(missing)} trial(s) failed after {self.max_failures} retries{cause} "
                            f"(first: {first}); finished trials are kept, rerun the command to resume")
        return rows

    def _reuse(self, trials: list[Trial]) -> dict[str, dict]:
        if not any(t.tags.get("training") for t in trials):
            return {}
        if self._trainings is None:  # training -> the row that trained it, read from the ledger once
            self._trainings = {}
            for row in self.ledger.rows():
                if row.get("training") and not row.get("reused"):
                    self._trainings.setdefault(row["training"], row)
        reused = {}
        for t in trials:
            row = self._trainings.get(t.tags.get("training"))
            if row is None:
                continue
            measured = {k: row[k] for k in (*ROW_METRICS, "experiment", "trial_id", "checkpoint") if k in row}
            reused[t.key] = measured | t.tags | {"key": t.key, "reused": True}
            self.ledger.record(reused[t.key])
        return reused

    def slots(self, per: int = 1) -> int:
        """How many groups of `per` trials the cluster runs at once (at least 1)."""
        connect(self.address)
        res, total = self.spec.resources, ray.cluster_resources()
        n = int(total.get("CPU", 1) // res.cpus_per_trial)
        if res.gpus_per_trial > 0:
            n = min(n, int(total.get("GPU", 0) // res.gpus_per_trial))
        if res.max_concurrent:
            n = min(n, res.max_concurrent)
        return max(1, n // per)

    def close(self) -> None:
        if self._queue is not None:
            self._queue.close()
            self._thread.join()
            self._queue = None
            self.progress.unwatch()  # also when Tune stopped before its experiment-end callback

    def write_results(self):
        return write_results(self.out, self.ledger.rows())

    def _record(self, trial) -> None:
        result, key = trial.last_result, trial.config["trial"]["key"]
        if "val_acc" not in result or trial.checkpoint is None:
            return
        row = {k: result[k] for k in ROW_METRICS} | self._by_key[key].tags | {
            "experiment": self.experiment, "key": key, "trial_id": trial.trial_id,
            "checkpoint": checkpoint_uri(trial.checkpoint, self.storage)}
        self.ledger.record(row)
        if self._trainings is not None and row.get("training"):
            self._trainings.setdefault(row["training"], row)
        self.progress.trial(row)
        with self._done:
            self._finished[key] = row
            self._done.notify_all()

    def _fail(self, trial) -> None:
        with self._done:
            self._failed[trial.config["trial"]["key"]] = last_error_line(trial)
            self._done.notify_all()

    def _start(self) -> None:
        if self._queue is not None:
            return
        connect(self.address)
        keep_idle_actors_warm()
        inner = self.trainable
        res = self.spec.resources
        trainable = tune.with_resources(lambda config: inner(config["trial"]),
                                        {"cpu": res.cpus_per_trial, "gpu": res.gpus_per_trial})
        queue = TrialQueue()
        tuner = tune.Tuner(
            trainable,
            tune_config=tune.TuneConfig(
                search_alg=queue, num_samples=-1, max_concurrent_trials=res.max_concurrent or None,
                reuse_actors=True, trial_dirname_creator=lambda trial: trial.config["trial"]["key"]),
            run_config=tune.RunConfig(
                name=f"{self.experiment}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}",
                storage_path=self.storage, failure_config=tune.FailureConfig(max_failures=self.max_failures),
                verbose=0, callbacks=[_Record(self), self.progress.callback(
                    lambda key: self._by_key[key].tags, lambda: len(queue.pending)), *self.callbacks]),
        )

        def fit() -> None:
            try:
                tuner.fit()
            except BaseException as err:  # surfaced by run() as RunFailed
                self._tune_error = err
            finally:
                with self._done:
                    self._done.notify_all()

        self._queue = queue
        self._thread = threading.Thread(target=fit, name="tune", daemon=True)
        self._thread.start()
