"""Run pruning-cycle trainings on Ray Tune: the `Engine`, one long-lived Tune experiment that trains what one or
more Runners (`oracle_search.runner`: one results folder each) hand it, and hands each finished training's row to
its Runner at once; an `executor.Executor`. `own_runner`: a single command's Runner on an Engine of its own. Beside
it: `cluster.py` (where trials run, how many at once), `fusion.py` (candidates per trial), `searcher.py` (the Tune
searcher the Runners feed) and `warm.py` (idle actors kept between batches).
"""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Callable

from ray import tune

from oracle_search.cluster import allow_pending, connect, trial_slots
# PLACEMENT, BOOKKEEPING, RERUN: also read here by their older name (oracle_search.engine.X)
from oracle_search.executor import BOOKKEEPING, PLACEMENT, RERUN, ROW_METRICS, RunFailed, Trials  # noqa: F401
from oracle_search.progress import Progress, latest_error
from oracle_search.runner import Runner, open_runners
from oracle_search.searcher import TrialQueue
from oracle_search.warm import warm_actors
from trainables.sources import runtime_env
from trainables.spec import ExperimentSpec
from trainables.timestamps import utc_now
from trainables.tune_adapter import any_cycle_trainable, fused_rows

ABORT_JOIN_S = 20.0  # how long an interrupted run waits for Tune to stop its trials


def last_error_line(trial) -> str:
    """The exception line of a failed Tune trial's latest error."""
    lines = latest_error(trial.error_file).strip().splitlines()
    return lines[-1].strip() if lines else "no error recorded"


def checkpoint_uri(checkpoint: tune.Checkpoint, storage: str) -> str:
    if "://" in storage:
        return f"{storage.split('://', 1)[0]}://{checkpoint.path}"
    return checkpoint.path




class _Abort(tune.Stopper):
    """Stops every running trial of the experiment once set (Tune checks it at every step)."""

    def __init__(self) -> None:
        self.event = threading.Event()

    def __call__(self, trial_id: str, result: dict) -> bool:
        return False

    def stop_all(self) -> bool:
        return self.event.is_set()

    def __getstate__(self) -> dict:
        return {}

    def __setstate__(self, state: dict) -> None:
        self.__init__()


class _Hooks(tune.Callback):
    """Tune's callback around a plain object with some of Tune's hooks (`Progress.callback`'s watcher: the progress
    module imports no Ray, so that the simulated job runs without it)."""

    def __init__(self, inner) -> None:
        self.inner = inner

    def setup(self, *args, **info):
        self.inner.setup(*args, **info)

    def on_step_end(self, *args, **info):
        self.inner.on_step_end(*args, **info)

    def on_trial_start(self, *args, **info):
        self.inner.on_trial_start(*args, **info)

    def on_trial_recover(self, *args, **info):
        self.inner.on_trial_recover(*args, **info)

    def on_trial_error(self, *args, **info):
        self.inner.on_trial_error(*args, **info)

    def on_experiment_end(self, *args, **info):
        self.inner.on_experiment_end(*args, **info)

    def __getstate__(self) -> dict:  # as `_Record`: Tune pickles callbacks for a restore runs never use
        return {}


class _Record(tune.Callback):
    """Hands started, finished and failed trials to the engine, in the driver process."""

    def __init__(self, engine: "Engine"):
        self.engine = engine

    def on_trial_start(self, iteration, trials, trial, **info):
        self.engine._queue_resources(trial)

    def on_trial_complete(self, iteration, trials, trial, **info):
        self.engine._record(trial)

    def on_trial_error(self, iteration, trials, trial, **info):
        self.engine._fail(trial)

    def __getstate__(self) -> dict:
        return {}


def incomplete(result: dict, checkpoint) -> str | None:
    """Why a finished trial's last result is not a row, or None when it is one (a plain row with `val_acc`, or a
    fused trial's `fused_rows`, with a checkpoint either way)."""
    if result.get("final") is False:
        return "ended on an intermediate result"
    if "val_acc" not in result and "fused_rows" not in result:
        return "ended without reporting val_acc"
    if checkpoint is None:
        return "ended without a checkpoint"
    return None


class Engine(Trials):
    """The executor on Ray Tune (`executor.Executor`): one long-lived Tune experiment that trains what one or more
    Runners hand it; it starts on the first hand-over, or where its maker calls `start`. A Runner owns a results
    folder (its spec, ledger and progress); the engine owns the Tune side: the queue of trial configs, Tune's
    thread, and which Runner each trial belongs to, so a finished trial lands in its own folder's ledger.

    Replicates of a study (`oracle_search.replicates`) are Runners on one engine: their trainings share one queue
    and so one cluster's slots, and a slot one replicate leaves idle takes another's next training. The first
    Runner's spec sets the trials' resources and runtime environment, the same for every replicate of a spec."""

    def __init__(self, spec: ExperimentSpec, experiment: str, address: str | None, storage: str,
                 progress: Progress, trainable: Callable[[dict], None] = any_cycle_trainable,
                 max_failures: int = 2, callbacks: tuple[tune.Callback, ...] = ()):
        super().__init__(threading.Condition(), storage, max_failures)
        self.spec, self.experiment, self.address = spec, experiment, address
        self.progress, self.trainable, self.max_failures, self.callbacks = progress, trainable, max_failures, callbacks
        self.queue: TrialQueue | None = None
        self._abort: _Abort | None = None
        self.thread: threading.Thread | None = None
        self._queued: dict[str, str] = {}  # Tune trial key -> when the driver handed it over (UTC)
        self._stopping = False
        self._starting = threading.Lock()  # drivers in several threads (replicates) start one experiment, not two

    def prioritise(self, key: str, priority: float) -> None:
        if self.queue is not None:
            self.queue.prioritise(key, priority)

    def _queue(self, configs: list[dict]) -> None:
        self.start()
        stamp = utc_now()
        self._queued.update({c["key"]: stamp for c in configs})
        self.queue.put(configs, [self._owner[c["key"]][1].priority for c in configs])

    def alive(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def slots(self, per: int = 1) -> int:
        """How many groups of `per` trials run at once (`trial_slots`)."""
        return trial_slots(self.spec, self.address, per)

    def close(self, abort: bool = False) -> None:
        """End the experiment: once the queued trials ran, or with `abort` at once, stopping running trials
        (finished ones are in their ledgers; a rerun resumes)."""
        if abort:  # before the early return too: a line that has not started the experiment yet must not start it
            self._stopping = True
        if self.queue is None:
            return
        if abort:
            self._abort.event.set()
        self.queue.close(drop=abort)
        self.thread.join(timeout=ABORT_JOIN_S if abort else None)
        self.queue = None
        self.progress.unwatch()  # also when Tune stopped before its experiment-end callback

    def _queue_resources(self, trial) -> None:
        queue = self.queue
        if queue is not None and queue.resources is None:
            queue.resources = trial.placement_group_factory

    def _record(self, trial) -> None:
        config = trial.config["trial"]
        key, result = config["key"], trial.last_result or {}
        if self._stopping:  # stopped by an interrupt: whatever it reported is not a finished trial
            return
        why = incomplete(result, trial.checkpoint)
        if why:
            self._retry(config, why)
            return
        uri = checkpoint_uri(trial.checkpoint, self.storage)
        owner = self._owner[key][0]
        # A fused trial (several candidates trained as one) reports one row per candidate, each with its own key
        # and checkpoint subfolder; gpu_ids and node_id are the trial's.
        candidates = fused_rows(result)
        for metrics in candidates or [result]:
            row_key, merged = metrics.get("key") or key, result | metrics
            row = {k: merged[k] for k in ROW_METRICS} | self._owner.get(row_key, self._owner[key])[1].tags
            row |= {"experiment": owner.experiment, "key": row_key, "trial_id": trial.trial_id,
                    "queued": self._queued.get(key, ""),
                    "checkpoint": f"{uri}/{metrics['checkpoint_subdir']}" if "checkpoint_subdir" in metrics else uri}
            if "fused" in metrics:
                row["fused"] = metrics["fused"]
            owner.landed(row)
            with self.cond:
                self.finished[row_key] = row
        with self.cond:
            if key not in self.finished:  # a fused trial's own key stands for its candidates' rows
                self.finished[key] = {"key": key, "fused_keys": [m["key"] for m in candidates]}
            self.news += 1
            self.cond.notify_all()

    def _retry(self, config: dict, why: str) -> None:
        """A trial that ended without a row is an error: run it again, up to `max_failures` times."""
        attempt = config.get("attempt", 0) + 1
        if attempt <= self.max_failures and self.queue is not None:
            self.progress.say(f"  trial {config['key']} {why}; retrying ({attempt} of {self.max_failures})")
            self.queue.put([config | {"attempt": attempt}])
            return
        self._failed(config, why)

    def _fail(self, trial) -> None:
        self._failed(trial.config["trial"], last_error_line(trial))

    def _failed(self, config: dict, why: str) -> None:
        """A trial failed for good; a fused trial's candidates too (another phase may wait for one of them)."""
        with self.cond:
            for key in (config["key"], *config.get("keys", ())):
                self.failed[key] = why
            self.news += 1
            self.cond.notify_all()

    def start(self) -> None:
        with self._starting:
            if self._stopping:  # closed by an interrupt: a line still running must not start Tune (and Ray) anew
                raise RunFailed("the run was interrupted; finished trials are kept, a rerun resumes")
            if self.queue is None:
                self._start()

    def _start(self) -> None:
        connect(self.address, runtime_env(self.spec))
        allow_pending(trial_slots(self.spec, self.address))
        inner = self.trainable
        res = self.spec.resources
        trainable = tune.with_resources(lambda config: inner(config["trial"]),
                                        {"cpu": res.cpus_per_trial, "gpu": res.gpus_per_trial})
        queue, abort = TrialQueue(), _Abort()

        def dirname(trial) -> str:
            config = trial.config["trial"]
            return config["key"] + (f"-retry{config['attempt']}" if config.get("attempt") else "")

        tuner = tune.Tuner(
            trainable,
            tune_config=tune.TuneConfig(
                search_alg=queue, num_samples=-1, max_concurrent_trials=res.max_concurrent or None,
                reuse_actors=True, trial_dirname_creator=dirname),
            run_config=tune.RunConfig(
                name=f"{self.experiment}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}",
                storage_path=self.storage, failure_config=tune.FailureConfig(max_failures=self.max_failures),
                stop=abort, verbose=0, callbacks=[_Record(self), _Hooks(self.progress.callback(
                    lambda key: self._owner[key][1].tags, lambda: len(queue.pending))), *self.callbacks]),
        )

        def fit() -> None:
            try:
                with warm_actors():
                    tuner.fit()
            except BaseException as err:  # surfaced by Runner.run as RunFailed (`failure`)
                self.stopped = err
            finally:
                with self.cond:
                    self.news += 1
                    self.cond.notify_all()

        self.queue, self._abort = queue, abort
        self.thread = threading.Thread(target=fit, name="tune", daemon=True)
        self.thread.start()


def own_runner(out: Path, spec: ExperimentSpec, experiment: str | None = None, address: str | None = None,
               progress: Progress | None = None, trainable: Callable[[dict], None] = any_cycle_trainable,
               max_failures: int = 2, callbacks: tuple[tune.Callback, ...] = (), fuse: int = 1) -> Runner:
    """A single command's Runner on an Engine of its own (`open_runners`), closed with it: its trials write under
    the spec's storage path, else OUT/tune. `experiment`: the Tune experiment's name (default the preset);
    `trainable`, `max_failures`, `callbacks`: the Engine's (what trains a trial, its retries, more Tune callbacks,
    e.g. oracle_search.callbacks.logger_callbacks)."""
    out, progress, experiment = Path(out).resolve(), progress or Progress(), experiment or spec.preset
    engine = Engine(spec, experiment, address, spec.resources.storage_path or str(out / "tune"), progress,
                    trainable, max_failures, callbacks)
    return open_runners(engine, {1: (out, spec)}, progress, fuse, experiment, closes=True)[1]
