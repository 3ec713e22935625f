"""Run batches of pruning-cycle trials on Ray Tune, recording each finished trial in a ledger at once.

The ledger (one small JSON file per finished trial under DIR/ledger/) is what makes every driver resumable:
a rerun skips every trial already in it, so a killed or interrupted driver never retrains a finished trial.
"""
from __future__ import annotations

import dataclasses
import json
import os
import signal
import threading
import time
import warnings
from collections import Counter, deque
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import ray
from ray import tune
from ray.tune.search import Searcher

from oracle_search.progress import Progress, latest_error
from oracle_search.schema import COLUMNS, write_results
from trainables.atomic import atomic_write_json
from trainables.checkpoints import CheckpointError, verify_checkpoint
from trainables.cycle import CycleResult
from trainables.sources import record_sources, runtime_env
from trainables.timestamps import utc_now
from trainables.spec import NUMERICS, ExperimentSpec, SpecError
from trainables.tune_adapter import any_cycle_trainable

# What a trial reports that becomes its row: the cycle's own fields (trainables.cycle.CycleResult) that are
# results-table columns, but its checkpoint's local path (the row holds the storage URI), plus where it ran.
PLACEMENT = ("gpu_ids", "node_id")
ROW_METRICS = tuple(f.name for f in dataclasses.fields(CycleResult) if f.name in COLUMNS and f.name != "checkpoint") \
    + PLACEMENT
# `ray up` hands the autoscaler this file on the head (cluster.yaml: --autoscaling-config), resources filled in.
AUTOSCALER_CONFIG = Path.home() / "ray_bootstrap_config.yaml"
IDLE_WAIT_S = 2.0  # how long the searcher holds Tune's idle poll open for the driver's next batch
KEEP_IDLE_S = 60.0  # idle trial actors are kept while the driver wanted that many within this window
ABORT_JOIN_S = 20.0  # how long an interrupted run waits for Tune to stop its trials


class RunFailed(RuntimeError):
    """Trials failed even after retries; finished ones are kept, a rerun resumes."""


@dataclass(frozen=True)
class Training:
    """The engine's unit of work: one cycle to train (a Tune trial runs one, or several fused). Named apart from
    Tune's and Optuna's trials, which are other things."""
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


class Ledger:
    def __init__(self, out: Path):
        self.dir = out / "ledger"
        self.dir.mkdir(parents=True, exist_ok=True)
        self._check_numerics()

    def _check_numerics(self) -> None:
        """Rows are reused by key, so a ledger written under older arithmetic (`trainables.spec.NUMERICS`) is
        refused rather than mixed with new trainings; a new ledger records the version it is written under."""
        stamp = self.dir / "numerics"
        if stamp.exists():
            version = int(stamp.read_text())
        elif any(self.dir.glob("*.json")):
            version = 1  # written before the version was recorded
        else:
            stamp.write_text(str(NUMERICS))
            return
        if version != NUMERICS:
            raise SpecError("out", f"{self.dir.parent} holds trainings made with an older version's arithmetic "
                            f"(numerics {version}, now {NUMERICS}); use a new --out")

    def _path(self, key: str) -> Path:
        return self.dir / f"{key}.json"

    def get(self, key: str) -> dict | None:
        path = self._path(key)
        return json.loads(path.read_text()) if path.exists() else None

    def refuse(self, key: str) -> Path:
        """Move the row under `key` out of the ledger, into ledger/refused/ (kept for inspection, never read
        back as a row); returns where it went."""
        target = self.dir / "refused" / f"{key}.json"
        target.parent.mkdir(exist_ok=True)
        n = 1
        while target.exists():
            n += 1
            target = target.with_name(f"{key}.{n}.json")
        os.replace(self._path(key), target)
        return target

    def record(self, row: dict) -> None:
        atomic_write_json(self._path(row["key"]), row)

    def rows(self) -> list[dict]:
        return [json.loads(p.read_text()) for p in sorted(self.dir.glob("*.json"))]


def cluster_address(address: str | None) -> str | None:
    """`--address`, else the cluster this process runs in: Ray sets RAY_ADDRESS for every job's driver."""
    return address or os.environ.get("RAY_ADDRESS") or None


def connect(address: str | None, runtime_env: dict | None = None) -> None:
    """Join the cluster at `address` (or RAY_ADDRESS), or start a local Ray sized to this machine with its
    dashboard off; `runtime_env` ships the user's own modules (trainables.sources.runtime_env) to every worker."""
    # Read by Tune in this process at fit time, so set them even when the caller already started Ray.
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")  # with verbose=0: no status tables
    if ray.is_initialized():
        return
    address = cluster_address(address)
    in_main = threading.current_thread() is threading.main_thread()
    sigterm = signal.getsignal(signal.SIGTERM) if in_main else None
    try:
        if address:
            ray.init(address=address, runtime_env=runtime_env, logging_level="WARNING", log_to_driver=False)
            return
        here = local_resources()
        # address="local": never join a stale cluster that a leftover ray_current_cluster file names.
        ray.init(address="local", num_cpus=here["CPU"], num_gpus=here["GPU"],
                 include_dashboard=False, runtime_env=runtime_env, logging_level="WARNING", log_to_driver=False)
    finally:
        if callable(sigterm):  # ray.init swaps in its own SIGTERM handler (sys.exit); keep the caller's
            signal.signal(signal.SIGTERM, sigterm)


# Tune lets a searcher keep only one trial pending by default, which serialises trial starts; the user's value wins.
PENDING = "TUNE_MAX_PENDING_TRIALS_PG"
USER_PENDING = os.environ.get(PENDING)


def allow_pending(slots: int) -> None:
    """Let Tune keep a trial pending per slot (read by Tune when an experiment starts). Fewer, and a trial shorter
    than an actor's start never gets an actor of its own: Tune hands it to the first actor that frees up, so a run
    stayed at as many actors as it had pending trials (measured: 2 of 4 slots with half a CPU per trial)."""
    os.environ[PENDING] = USER_PENDING or str(max(2, slots))


def local_resources() -> dict[str, int]:
    """What the local Ray `connect` starts holds: this machine's CPUs and GPUs."""
    import torch

    return {"CPU": os.cpu_count() or 1, "GPU": torch.cuda.device_count()}


def trial_slots(spec: ExperimentSpec, address: str | None, per: int = 1) -> int:
    """How many groups of `per` trials run at once (at least 1), for the Runner and the estimate alike:
    --max-concurrent when given (the user's word, even beyond the present cluster: an autoscaler adds nodes), else
    as many as fit the Ray's CPUs and GPUs: a cluster's at its largest (its present size, or what its autoscaler
    may grow it to), the Ray this process is connected to, or, before a local Ray starts, the one `connect` would
    start (`local_resources`, so the estimate of a local run starts no Ray)."""
    res = spec.resources
    if res.max_concurrent:
        return max(1, res.max_concurrent // per)
    if cluster_address(address) or ray.is_initialized():
        connect(address, runtime_env(spec))
        total = dict(ray.cluster_resources())
        for resource, amount in ((autoscaler_ceiling() if cluster_address(address) else None) or {}).items():
            total[resource] = max(total.get(resource, 0), amount)
    else:
        total = local_resources()
    n = int(total.get("CPU", 0) // res.cpus_per_trial)
    if res.gpus_per_trial > 0:
        n = min(n, int(total.get("GPU", 0) // res.gpus_per_trial))
    return max(1, n // per)


ALL = 64  # "every candidate of a (seed, cycle)": more values than any cycle trains


def fuse_size(spec: ExperimentSpec, fuse: int) -> int:
    """Candidates per fused trial: as asked, else all of a (seed, cycle) on GPUs and 1 on CPUs (a CPU step is
    compute-bound: 8 batched MLPs ran only 1.0-1.1x faster than 8 separate runs here)."""
    return fuse or (ALL if spec.resources.gpus_per_trial > 0 else 1)


def fusable(spec: ExperimentSpec, max_lr: float | None) -> bool:
    """Whether a training may share a fused trial with others of its (spec, cycle, seed, start): it has a max_lr
    of its own (SILO derives its own) and is not fp16 (the fused step has no gradient scaler)."""
    return max_lr is not None and spec.schedule.name != "silo" and spec.precision != "fp16"


def trials_run_here(spec: ExperimentSpec, address: str | None) -> bool:
    """Whether every trial runs on this machine: no cluster named (a local Ray), or the named cluster is one node,
    this machine's, with no autoscaler to add others (`ray start --head` on one box, or inside a Ray job there).
    Then the probes of precision and time run here, not in Ray tasks whose new worker processes cost more than
    they do."""
    if not cluster_address(address):
        return True
    if (address or "").startswith("ray://") or autoscaler_ceiling() is not None:
        return False
    connect(address, runtime_env(spec))
    here = ray.get_runtime_context().get_node_id()
    return [node["NodeID"] for node in ray.nodes() if node["Alive"]] == [here]


def local_trial_device(spec: ExperimentSpec) -> str:
    """The device a trial on this machine's local Ray gets: a GPU when it asks for one and there is one (Ray
    hides the GPUs from a trial that asked for none), else the CPU."""
    import torch

    return "cuda" if spec.resources.gpus_per_trial > 0 and spec.device != "cpu" and torch.cuda.is_available() else "cpu"


def probe_precision(spec: ExperimentSpec, address: str | None, env: dict[str, str] | None = None) -> str:
    """What `precision = "auto"` means for this experiment: asked of a worker that holds one trial's resources,
    since the driver may run on a head node without the trials' GPU or CPU kind. `env`: extra environment
    variables for that worker (tests name other CPU flags with it)."""
    connect(address, runtime_env(spec))

    @ray.remote
    def native(device: str) -> str:
        from trainables.cycle import resolve_device
        from trainables.precision import resolve_precision

        return resolve_precision("auto", resolve_device(device))

    res = spec.resources
    task = native.options(num_cpus=res.cpus_per_trial, num_gpus=res.gpus_per_trial,
                          runtime_env={"env_vars": env} if env else None)
    return ray.get(task.remote(spec.device))


def autoscaler_ceiling(path: Path | None = None) -> dict[str, float] | None:
    """The most resources the autoscaler may grow the cluster to (head plus every worker type at its
    max_workers), from the config `ray up` leaves on the head; None without one."""
    path = path or AUTOSCALER_CONFIG
    if not path.is_file():
        return None
    import yaml

    config = yaml.safe_load(path.read_text()) or {}
    cap, head = config.get("max_workers"), config.get("head_node_type")
    total: Counter[str] = Counter()
    for name, node in (config.get("available_node_types") or {}).items():
        count = 1 if name == head else min(node.get("max_workers", cap or 0), cap if cap is not None else 1 << 30)
        for resource, amount in (node.get("resources") or {}).items():
            total[resource] += count * amount
    return dict(total) or None


def last_error_line(trial) -> str:
    """The exception line of a failed Tune trial's latest error."""
    lines = latest_error(trial.error_file).strip().splitlines()
    return lines[-1].strip() if lines else "no error recorded"


def checkpoint_uri(checkpoint: tune.Checkpoint, storage: str) -> str:
    if "://" in storage:
        return f"{storage.split('://', 1)[0]}://{checkpoint.path}"
    return checkpoint.path




class TrialQueue(Searcher):
    """Feeds Tune the trials the driver asks for, as it asks: one Tune experiment serves a whole driver run,
    so actors (and the data cached in them) live across cycles instead of restarting with every batch."""

    def __init__(self) -> None:
        super().__init__()
        self.pending: deque[dict] = deque()  # trial configs not yet handed to Tune
        self.live: set[str] = set()  # Tune trial ids handed out and not yet complete
        # (time, trials wanted) with decreasing counts: the most trials in flight or queued at once within the
        # last KEEP_IDLE_S seconds is peaks[0] (a sliding-window maximum)
        self.peaks: deque[tuple[float, int]] = deque()
        self.resources = None  # the trials' placement group factory, once one started
        self.extra = 0  # idle actors kept beyond Tune's own count (see `warm_actors`)
        self.closed = False
        self.ready = threading.Condition()

    def put(self, configs: list[dict]) -> None:
        with self.ready:
            self.pending.extend(configs)
            self._note_demand()
            self.ready.notify_all()

    def close(self, drop: bool = False) -> None:
        """Hand out no more trials once the queue is empty, or at once with `drop`."""
        with self.ready:
            self.closed = True
            if drop:
                self.pending.clear()
            self.ready.notify_all()

    def suggest(self, trial_id: str) -> dict | str | None:
        with self.ready:
            if not self.pending and not self.closed and not self.live:
                # Tune has nothing to run and polls an idle searcher once a second; between two driver batches
                # that second is pure waiting. Wait here for the next batch instead.
                self.ready.wait(IDLE_WAIT_S)
            if self.pending:
                self.live.add(trial_id)
                return {"trial": self.pending.popleft()}
            return Searcher.FINISHED if self.closed else None

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        with self.ready:
            self.live.discard(trial_id)

    def _note_demand(self) -> int:
        """Record the trials wanted now (in flight or queued); return the most wanted within KEEP_IDLE_S."""
        now, wanted = time.monotonic(), len(self.live) + len(self.pending)
        while self.peaks and self.peaks[-1][1] <= wanted:
            self.peaks.pop()
        self.peaks.append((now, wanted))
        while now - self.peaks[0][0] > KEEP_IDLE_S:
            self.peaks.popleft()
        return self.peaks[0][1]

    def actors_wanted(self) -> int:
        """How many actors the driver has wanted at once within the last KEEP_IDLE_S seconds (0 once closed)."""
        with self.ready:
            return 0 if self.closed else self._note_demand()

    def idle_wanted(self) -> int:
        """Idle actors worth keeping beyond Tune's own count of staged trials: those the driver wanted within
        the last KEEP_IDLE_S seconds, less its trials in flight; more are released.

        Released too early, an actor is hard to get back: Tune hands a pending trial to a cached actor the
        moment one frees up and cancels the new actor it had asked for, so while a trial is shorter than an
        actor's start (seconds: a worker process importing torch) no new actor ever starts, and a run that
        shrank to one actor between two batches stayed at one (measured: the main job's later phases ran one
        trial at a time on 2 CPUs). Kept for a while, they bridge the driver's short gaps; released after it,
        a cluster can still scale down while a long narrow phase runs."""
        with self.ready:
            return 0 if self.closed else max(0, self._note_demand() - len(self.live))

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


# The Tune internals `warm_actors` wraps and calls, with the parameters it passes: checked before wrapping, so
# a Ray whose internals changed runs with plain actor reuse instead of breaking (tests/test_engine.py fails then).
WARM_HOOK = {("tune.execution.tune_controller", "TuneController", "_cleanup_cached_actors"): ("self", "force_all"),
             ("tune.utils.object_cache", "_ObjectCache", "increase_max"): ("self", "key", "by")}
_warm_lock = threading.Lock()
_warm = {"users": 0, "original": None}
_warned = False


def _queue_of(controller) -> TrialQueue | None:
    searcher = getattr(controller, "_search_alg", None)
    while searcher is not None and not isinstance(searcher, TrialQueue):
        searcher = getattr(searcher, "searcher", None)  # SearchGenerator / ConcurrencyLimiter wrap it
    return searcher


def warm_hook_missing() -> str | None:
    """Why `warm_actors` cannot wrap this Ray's Tune (a method of `WARM_HOOK` gone or with other parameters), or
    None when it can."""
    import importlib
    import inspect

    for (module, cls, name), params in WARM_HOOK.items():
        try:
            method = getattr(getattr(importlib.import_module(f"ray.{module}"), cls), name)
            found = tuple(inspect.signature(method).parameters)
        except (ImportError, AttributeError, TypeError, ValueError) as err:
            return f"ray.{module}.{cls}.{name} is not there ({err})"
        if found != params:
            return f"{cls}.{name}({', '.join(found)}) is not ({', '.join(params)})"
    return None


def _keep_idle(controller, queue: TrialQueue, count: int) -> None:
    cache = controller._actor_cache
    cache.increase_max(queue.resources, count - queue.extra)
    queue.extra = count


@contextmanager
def warm_actors() -> Iterator[bool]:
    """While it lasts, the Tune experiments fed by a `TrialQueue` keep idle trial actors (torch imported, data
    cached) between the driver's batches; yields whether it could.

    Tune sizes its cache of idle actors by the trials staged at that moment and evicts the rest at every step.
    Between two cycles nothing is staged for a moment (the next cycle waits for the selection), so Tune kept one
    actor and the next cycle started cold ones: on a 2-core machine that cost more than the trials. No public
    option changes this, so one private method, `TuneController._cleanup_cached_actors`, is wrapped: it still
    runs, with the cache allowed `TrialQueue.idle_wanted()` extra idle actors (the most trials the driver wanted
    at once within the last KEEP_IDLE_S seconds, less its trials in flight), so idle actors beyond what the
    driver recently asked for are released and a cluster can scale down while a run drains. Other experiments
    in the process see the original; the wrapper is removed when the last experiment using it ends. On a Ray
    whose internals differ (`warm_hook_missing`) it is not applied: plain `reuse_actors`, slower.
    """
    global _warned
    from ray.tune.execution.tune_controller import TuneController

    if (why := warm_hook_missing()) is not None:
        if not _warned:
            _warned = True
            warnings.warn(f"oracle-search: the warm-actor hook does not fit Ray {ray.__version__}: {why}; using "
                          "plain reuse_actors, so trial actors restart between cycles", RuntimeWarning, stacklevel=3)
        yield False
        return
    with _warm_lock:
        if _warm["users"] == 0:
            original = _warm["original"] = TuneController._cleanup_cached_actors

            def cleanup(self, force_all: bool = False):  # the original's parameters (see WARM_HOOK)
                queue = _queue_of(self)
                if queue is None or queue.resources is None or not hasattr(self, "_actor_cache"):
                    return original(self, force_all=force_all)
                _keep_idle(self, queue, 0 if force_all else queue.idle_wanted())
                try:
                    return original(self, force_all=force_all)
                finally:
                    # Until the next step, let the cache take every actor that finishes; the step trims it.
                    _keep_idle(self, queue, 0 if force_all else queue.actors_wanted())

            TuneController._cleanup_cached_actors = cleanup
        _warm["users"] += 1
    try:
        yield True
    finally:
        with _warm_lock:
            _warm["users"] -= 1
            if _warm["users"] == 0:
                TuneController._cleanup_cached_actors = _warm["original"]


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


class Engine:
    """One long-lived Tune experiment that trains what one or more Runners hand it. A Runner owns a results
    folder (its spec, ledger and progress); the engine owns the Tune side: the queue of trial configs, Tune's
    thread, and which Runner each trial belongs to, so a finished trial lands in its own folder's ledger.

    Replicates of a study (`oracle_search.replicates`) are Runners on one engine: their trainings share one queue
    and so one cluster's slots, and a slot one replicate leaves idle takes another's next training. The first
    Runner's spec sets the trials' resources and runtime environment, the same for every replicate of a spec."""

    def __init__(self, spec: ExperimentSpec, experiment: str, address: str | None, storage: str,
                 progress: Progress, trainable: Callable[[dict], None] = any_cycle_trainable,
                 max_failures: int = 2, callbacks: tuple[tune.Callback, ...] = ()):
        self.spec, self.experiment, self.address, self.storage = spec, experiment, address, storage
        self.progress, self.trainable, self.max_failures, self.callbacks = progress, trainable, max_failures, callbacks
        self.queue: TrialQueue | None = None
        self._abort: _Abort | None = None
        self.thread: threading.Thread | None = None
        self.done = threading.Condition()
        self.finished: dict[str, dict] = {}
        self.failed: dict[str, str] = {}  # key -> the last line of its error
        self.news = 0  # trials finished or failed so far (`wait_for_news`)
        self.tune_error: BaseException | None = None
        self._owner: dict[str, tuple["Runner", Training]] = {}  # Tune trial key -> (its Runner, its training)
        self._queued: dict[str, str] = {}  # Tune trial key -> when the driver handed it over (UTC)
        self._stopping = False
        self._starting = threading.Lock()  # drivers in several threads (replicates) start one experiment, not two

    def training(self, key: str) -> Training:
        return self._owner[key][1]

    def owns(self, runner: "Runner", key: str, training: Training) -> None:
        """Record that the Tune trial `key` trains `training` for `runner`."""
        self._owner[key] = (runner, training)

    def submit(self, configs: list[dict]) -> None:
        self.start()
        stamp = utc_now()
        self._queued.update({c["key"]: stamp for c in configs})
        self.queue.put(configs)

    def alive(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def close(self, abort: bool = False) -> None:
        """End the experiment: once the queued trials ran, or with `abort` at once, stopping running trials
        (finished ones are in their ledgers; a rerun resumes)."""
        if self.queue is None:
            return
        if abort:
            self._stopping = True
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
        for metrics in result.get("fused_rows") or [result]:
            row_key, merged = metrics.get("key") or key, result | metrics
            row = {k: merged[k] for k in ROW_METRICS} | self._owner.get(row_key, self._owner[key])[1].tags
            row |= {"experiment": owner.experiment, "key": row_key, "trial_id": trial.trial_id,
                    "queued": self._queued.get(key, ""),
                    "checkpoint": f"{uri}/{metrics['checkpoint_subdir']}" if "checkpoint_subdir" in metrics else uri}
            if "fused" in metrics:
                row["fused"] = metrics["fused"]
            owner.landed(row)
            with self.done:
                self.finished[row_key] = row
        with self.done:
            if key not in self.finished:  # a fused trial's own key stands for its candidates' rows
                self.finished[key] = {"key": key, "fused_keys": [m["key"] for m in result["fused_rows"]]}
            self.news += 1
            self.done.notify_all()

    def _retry(self, config: dict, why: str) -> None:
        """A trial that ended without a row is an error: run it again, up to `max_failures` times."""
        attempt = config.get("attempt", 0) + 1
        if attempt <= self.max_failures and self.queue is not None:
            self.progress.say(f"  trial {config['key']} {why}; retrying ({attempt} of {self.max_failures})")
            self.queue.put([config | {"attempt": attempt}])
            return
        with self.done:
            self.failed[config["key"]] = why
            self.news += 1
            self.done.notify_all()

    def _fail(self, trial) -> None:
        with self.done:
            self.failed[trial.config["trial"]["key"]] = last_error_line(trial)
            self.news += 1
            self.done.notify_all()

    def start(self) -> None:
        with self._starting:
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
                stop=abort, verbose=0, callbacks=[_Record(self), self.progress.callback(
                    lambda key: self._owner[key][1].tags, lambda: len(queue.pending)), *self.callbacks]),
        )

        def fit() -> None:
            try:
                with warm_actors():
                    tuner.fit()
            except BaseException as err:  # surfaced by Runner.run as RunFailed
                self.tune_error = err
            finally:
                with self.done:
                    self.news += 1
                    self.done.notify_all()

        self.queue, self._abort = queue, abort
        self.thread = threading.Thread(target=fit, name="tune", daemon=True)
        self.thread.start()


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
    engine: Engine | None = None  # shared with other Runners; None: one of its own

    def __post_init__(self) -> None:
        self.out = self.out.resolve()
        self.ledger = Ledger(self.out)
        record_sources(self.out, self.spec)  # a rerun with edited import-path code is refused (SpecError)
        self.storage = self.spec.resources.storage_path or str(self.out / "tune")
        self._own_engine = self.engine is None
        if self.engine is None:
            self.engine = Engine(self.spec, self.experiment, self.address, self.storage, self.progress,
                                 self.trainable, self.max_failures, self.callbacks)
        self._trainings: dict[str, dict] | None = None
        self._checked: set[str] = set()  # start checkpoints verified by _check_starts

    def __enter__(self) -> "Runner":
        return self

    def __exit__(self, exc_type, *exc) -> None:
        self.close(abort=exc_type is not None)

    def run(self, trials: list[Training]) -> dict[str, dict]:
        """Rows of all `trials`, training only those not already in the ledger; blocks until they finish.

        A trial whose training an earlier row already did (the same `training` tag, e.g. the LR-warmup baseline's
        cycle-0 tuning and the Oracle's cycle-0 grid) is not trained again: that row is copied under the trial's
        key and tags, marked `reused`."""
        started = self.start(trials)
        engine = self.engine
        with engine.done:
            while not started.waiting <= (engine.finished.keys() | engine.failed):
                if not engine.alive():
                    break
                engine.done.wait(timeout=1.0)
        rows = self.ready(started, partial=False)
        missing = [t.key for t in trials if t.key not in rows]
        if missing:
            raise self._failure(missing)
        return rows

    def start(self, trials: list[Training]) -> "Started":
        """Hand `trials` to the experiment and return at once (`run` without the wait); `ready` gives their rows
        as they finish."""
        rows = {t.key: row for t in trials if (row := self._hit(t)) is not None}
        rows |= self._reuse([t for t in trials if t.key not in rows])
        todo, twins = [], []  # twins: a later trial of a training this batch already runs
        leaders: set[str] = set()
        for t in (t for t in trials if t.key not in rows):
            training = t.tags.get("training")
            (twins if training and training in leaders else todo).append(t)
            if training:
                leaders.add(training)
        waiting: set[str] = set()
        if todo:
            self._check_starts(todo)
            for t in todo:
                self.engine.owns(self, t.key, t)
            configs = self._configs(todo)
            self.engine.submit(configs)
            waiting = {c["key"] for c in configs}  # a fused trial's key stands for its candidates
        return Started(trials, rows, todo, twins, waiting)

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
            rows |= self._reuse([t for t in started.twins if t.key not in rows])
        if partial and (failed or (ended and len(rows) < len(started.trials))):
            raise self._failure(failed or [t.key for t in started.trials if t.key not in rows])
        return rows

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
                         f"(first: {first}); finished trials are kept, rerun the command to resume")

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
        if self._trainings is not None and self._trainings.get(row.get("training"), {}).get("key") == t.key:
            del self._trainings[row["training"]]
        self.progress.say(f"  ledger: {t.key} holds another training ({row.get('training')}, this trial is "
                          f"{t.tags.get('training')}); refused, not reused: moved to {kept.relative_to(self.out)}, "
                          "training it again")
        return None

    def _configs(self, trials: list[Training]) -> list[dict]:
        """Tune trial configs: trials of one (spec, cycle, seed, start) that differ only in max_lr go together, up
        to `fuse` per Tune trial, as one fused network (`trainables.fused`); the rest one per Tune trial."""
        if self.fuse <= 1:
            return [t.config() for t in trials]
        groups: dict[tuple, list[Training]] = {}
        configs = []
        for t in trials:
            if not fusable(t.spec, t.max_lr):
                configs.append(t.config())
            else:
                groups.setdefault((t.spec, t.cycle, t.seed, t.start_checkpoint), []).append(t)
        for group in groups.values():
            for i in range(0, len(group), self.fuse):
                chunk = group[i:i + self.fuse]
                if len(chunk) == 1:
                    configs.append(chunk[0].config())
                    continue
                key = f"{chunk[0].key}-fused{len(chunk)}"
                self.engine.owns(self, key, chunk[0])
                configs.append(chunk[0].config() | {"key": key, "max_lr": None, "max_lrs": [t.max_lr for t in chunk],
                                                    "keys": [t.key for t in chunk]})
        return configs

    def _reuse(self, trials: list[Training]) -> dict[str, dict]:
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
        """How many groups of `per` trials to run at once (`trial_slots`)."""
        return trial_slots(self.spec, self.address, per)

    def close(self, abort: bool = False) -> None:
        """End this Runner's own experiment (`Engine.close`); a shared engine is closed by its maker."""
        if self._own_engine:
            self.engine.close(abort)

    def write_results(self):
        return write_results(self.out, self.ledger.rows())

    def landed(self, row: dict) -> None:
        """A finished training's row, from the engine: into the ledger at once, then on screen."""
        self.ledger.record(row)
        if self._trainings is not None and row.get("training"):
            self._trainings.setdefault(row["training"], row)
        self.progress.trial(row)
