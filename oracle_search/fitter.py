"""The SILO fitter (method `silo_fit`): an Optuna study over (epsilon, delta, q, beta), driven by ask/tell so each
cycle's validation accuracy is an intermediate value and clearly bad parameter sets stop early (Ray's OptunaSearch
would ignore Optuna's pruner). Each Optuna trial's cycles run as Tune trials; several Optuna trials run at once.

Study identity: the study is named from the experiment's fingerprint (every spec field that changes results, plus
the seeds and the objective's cycle; never resources), so runs that differ by an override never share a study.

Several drivers may share one study on PostgreSQL (`--study-storage`), **each with its own --out**: every driver
holds its --out's lock while it runs (oracle_search.lock), and a second driver on the same --out stops at once
(exit 2). `fit_silo` here runs under the pipeline's lock and takes none of its own. Each --out's
ledger and results then hold the trials its own driver trained; the study holds them all. A driver records a
heartbeat for each trial it runs; a RUNNING trial whose heartbeat is stale belonged to a dead driver, and is failed
and queued again with its parameters (any driver may take it; finished cycles in the taker's ledger are reused).
Live trials of other drivers are never touched. The default journal file under --out has no heartbeats: the
--out lock makes its driver the only one, so every RUNNING trial found there at start belonged to a dead driver.

Contract for callers: `fit_silo` returns the study even when no trial completed (all diverged or stopped early);
`best_params` then raises `FitFailed` (a `RunFailed`: one line, exit 1; also a ValueError).
"""
from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import threading
import warnings
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import optuna
from optuna.exceptions import ExperimentalWarning, UpdateFinishedTrialError
from optuna.trial import TrialState

from oracle_search.executor import RunFailed
from oracle_search.options import FitOptions, SearchSpace
from oracle_search.runner import Runner
from oracle_search.schema import Method, Stage
from oracle_search.trainings import chain_suffix, cycle_training, peak_name, silo_spec, silo_tags
from oracle_search.seeds import tuning_seeds
from trainables.atomic import atomic_write_json
from trainables.schedules import SiloParams
from trainables.spec import NUMERICS, ExperimentSpec

ACTIVE = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING)  # what counts toward --trials


class FitFailed(RunFailed, ValueError):
    """The study holds no completed trial (every one diverged or was stopped early). A RunFailed for the CLI (one
    line, exit 1); a ValueError like Optuna's own `best_trial`, for callers that treat it as "nothing fitted"."""


@dataclass(frozen=True)
class Heartbeat:
    """How a driver proves its trials alive on a storage with heartbeats (PostgreSQL and other RDBs)."""

    interval: int = 10  # seconds between heartbeats
    grace: int = 60  # a RUNNING trial silent this long belongs to a dead driver


def fingerprint(spec: ExperimentSpec, seeds: list[int], target: int) -> str:
    """Everything that changes a fitter trial's value: the spec's science (ExperimentSpec.science), the seeds
    averaged, the objective's cycle and the arithmetic version (a study on a shared storage outlives any one --out
    and its ledger)."""
    science = spec.with_schedule(name="silo").science()
    blob = json.dumps({"spec": science, "seeds": list(seeds), "target": target, "numerics": NUMERICS},
                      sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:10]


def study_name(spec: ExperimentSpec, seeds: list[int], target: int) -> str:
    return f"silo-{spec.preset}-{fingerprint(spec, seeds, target)}"


JOURNAL = "optuna-journal.log"


def default_storage(out: Path) -> optuna.storages.BaseStorage:
    """A file-backed journal under --out: safe for parallel workers on one host (SQLite is not)."""
    from optuna.storages.journal import JournalFileBackend

    return optuna.storages.JournalStorage(JournalFileBackend(str(out / JOURNAL)))


def _requeue(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
    """Queue a dead driver's trial again with its parameters, remembering the trial whose ledger rows it reuses."""
    # By hand, not RetryFailedTrialCallback: that one keeps the retried trial's number in system attrs, which the
    # live optuna.Trial that ask() returns no longer exposes (Optuna 5), and ask/tell needs it at once.
    study.enqueue_trial(trial.params, user_attrs={"resumes": trial.user_attrs.get("resumes", trial.number)})


def rdb_storage(url: str, heartbeat: Heartbeat) -> optuna.storages.RDBStorage:
    # Optuna 4.9 renamed the stale-trial callback argument; older releases know only the old name.
    arg = ("heartbeat_stale_trial_callback" if "heartbeat_stale_trial_callback"
           in inspect.signature(optuna.storages.RDBStorage).parameters else "failed_trial_callback")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalWarning)
        return optuna.storages.RDBStorage(url, heartbeat_interval=heartbeat.interval, grace_period=heartbeat.grace,
                                          **{arg: _requeue})


def make_storage(out: Path, storage_url: str | None,
                 heartbeat: Heartbeat = Heartbeat()) -> optuna.storages.BaseStorage:
    return rdb_storage(storage_url, heartbeat) if storage_url else default_storage(out)


def open_study(out: Path, spec: ExperimentSpec, storage_url: str | None, seeds: list[int],
               target: int | None = None, storage: optuna.storages.BaseStorage | None = None) -> optuna.Study:
    """The study of this experiment; its pruner judges trials only from the middle of the cycles on."""
    target = spec.cycles if target is None else target
    # Drivers sharing a study must not draw the same parameters: a shared storage seeds each by its --out.
    seed = spec.seed if storage_url is None else int(hashlib.sha256(
        f"{spec.seed}:{out.resolve()}".encode()).hexdigest()[:8], 16)
    return optuna.create_study(
        study_name=study_name(spec, seeds, target), storage=storage or make_storage(out, storage_url),
        direction="maximize", load_if_exists=True,
        # TPE's default 10 random start-up trials would be the whole of a small study. Several trials are asked
        # before the first is told: constant_liar (the default only from Optuna 5) keeps them apart.
        sampler=optuna.samplers.TPESampler(seed=seed, n_startup_trials=4, constant_liar=True),
        # Cycles up to q measure epsilon alone, and delta acts as the network thins: judge a trial only from the
        # middle cycle on, and stop only the bottom quartile, since one seed's accuracy is noisy by a point.
        pruner=optuna.pruners.PercentilePruner(75.0, n_startup_trials=2,  # keeps the top 75 %
                                               n_warmup_steps=max(1, target // 2)))


def existing_study(out: Path, spec: ExperimentSpec, storage_url: str | None, seeds: list[int],
                   target: int) -> optuna.Study | None:
    """The study of this experiment if one was made (by fit-silo or compare), without creating one."""
    if storage_url is None and not (out / JOURNAL).exists():
        return None
    try:
        return optuna.load_study(study_name=study_name(spec, seeds, target), storage=make_storage(out, storage_url))
    except KeyError:  # Optuna's answer for a study name the storage does not hold
        return None


def suggest(trial: optuna.Trial, space: SearchSpace) -> SiloParams:
    return SiloParams(
        epsilon=trial.suggest_float("epsilon", *space.epsilon, log=True),
        delta=trial.suggest_float("delta", *space.delta),
        q=trial.suggest_int("q", *space.q),
        beta=trial.suggest_float("beta", *space.beta))


def recommended_start(spec: ExperimentSpec, oracle_dense_lr: float | None) -> dict[str, float]:
    """The paper's advice as the first trial: q=1, beta=5, epsilon = the Oracle's best dense max_lr."""
    return {"epsilon": oracle_dense_lr or spec.schedule.silo.epsilon, "delta": spec.schedule.silo.delta,
            "q": 1, "beta": 5.0}


class Heartbeats:
    """Records a heartbeat for every trial this driver runs, from a thread, while the trials train."""

    def __init__(self, study: optuna.Study, heartbeat: Heartbeat):
        self.study, self.heartbeat = study, heartbeat
        self.storage: optuna.storages.BaseStorage | None = None  # None: the storage has no heartbeats
        self.study_id: int | None = None
        self.ids: dict[int, int] = {}  # trial number -> storage trial id
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None

    def bind(self, storage: optuna.storages.BaseStorage) -> "Heartbeats":
        if isinstance(storage, optuna.storages.RDBStorage):
            self.storage = storage
            self.study_id = storage.get_study_id_from_name(self.study.study_name)
            self.thread = threading.Thread(target=self._beat, name="optuna-heartbeat", daemon=True)
            self.thread.start()
        return self

    def add(self, number: int) -> None:
        if self.storage is None:
            return
        trial_id = self.storage.get_trial_id_from_study_id_trial_number(self.study_id, number)
        with self.lock:
            self.ids[number] = trial_id
        self.storage.record_heartbeat(trial_id)

    def discard(self, number: int) -> None:
        with self.lock:
            self.ids.pop(number, None)

    def close(self) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join()

    def _beat(self) -> None:
        while not self.stop.wait(self.heartbeat.interval):
            with self.lock:
                ids = list(self.ids.values())
            for trial_id in ids:
                try:
                    self.storage.record_heartbeat(trial_id)
                except Exception:  # a database blip: the next beat tries again; the grace period covers a few
                    pass


@dataclass
class Running:
    """An Optuna trial in flight: its parameters and each seed's latest checkpoint."""

    trial: optuna.Trial
    params: SiloParams
    starts: dict[int, dict | None]  # each seed's latest row (its checkpoint is the next cycle's start)
    keys: list[str]
    ledger_number: int  # the trial whose ledger rows this one continues (itself unless it resumes a dead one)
    cycle: int = 0  # the next cycle to train


def _adopt_dead_trials(study: optuna.Study, heartbeats: Heartbeats, first: bool) -> int:
    """Fail the RUNNING trials of dead drivers and queue their parameters again; returns how many."""
    before = len(study.get_trials(deepcopy=False, states=(TrialState.WAITING,)))
    if heartbeats.storage is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ExperimentalWarning)
            optuna.storages.fail_stale_trials(study)  # their callback, _requeue, queues them again
    elif first:  # a journal under --out: the --out lock says no other driver is alive
        for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            study.tell(t.number, state=TrialState.FAIL)
            _requeue(study, t)
    return max(0, len(study.get_trials(deepcopy=False, states=(TrialState.WAITING,))) - before)  # about: others pop too


def _active(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    return study.get_trials(deepcopy=False, states=ACTIVE)


def _ask(study: optuna.Study, space: SearchSpace, seeds: list[int], n_trials: int,
         heartbeats: Heartbeats) -> Running | None:
    """A new (or queued) trial, unless another driver's ask in the same moment already reached the target."""
    with warnings.catch_warnings():  # we drive the heartbeat ourselves under ask/tell
        warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used")
        trial = study.ask()
    heartbeats.add(trial.number)
    params = suggest(trial, space)
    # Two drivers may both see one free place and ask: the later start gives its place back.
    order = sorted(_active(study), key=lambda t: (t.datetime_start or datetime.max, t.number))
    if [t.number for t in order].index(trial.number) >= n_trials:
        frozen = study.tell(trial, state=TrialState.FAIL)
        heartbeats.discard(trial.number)
        if "resumes" in frozen.user_attrs:
            _requeue(study, frozen)
        return None
    return Running(trial, params, {s: None for s in seeds}, [], trial.user_attrs.get("resumes", trial.number))


def fit_silo(runner: Runner, seeds: list[int], n_trials: int, space: SearchSpace, storage_url: str | None,
             parallel: int, target: int, oracle_dense_lr: float | None = None,
             heartbeat: Heartbeat = Heartbeat()) -> optuna.Study:
    """Run the study until it holds `n_trials` finished (complete or stopped) trials; returns the study.

    Up to `parallel` Optuna trials are in flight, each at its own cycle; a trial that stops early frees its slot
    for a new one at once, instead of idling until its batch-mates finish. Trials other drivers run on the same
    study count toward `n_trials`."""
    spec, say = runner.spec, runner.progress.say
    storage = make_storage(runner.out, storage_url, heartbeat)
    study = open_study(runner.out, spec, storage_url, seeds, target, storage)
    heartbeats = Heartbeats(study, heartbeat)
    try:
        heartbeats.bind(storage)
        _fit(runner, study, seeds, n_trials, space, parallel, target, oracle_dense_lr, heartbeats)
    finally:
        heartbeats.close()
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if complete:
        best = max(complete, key=lambda t: t.value)
        say(f"fit-silo: best trial {best.number}: val {best.value:.2f} at cycle {target} with "
            + ", ".join(f"{k}={v:.4g}" for k, v in best.params.items()))
    else:
        say(f"fit-silo: {_no_complete_trial(study)}")
    return study


def _fit(runner: Runner, study: optuna.Study, seeds: list[int], n_trials: int, space: SearchSpace, parallel: int,
         target: int, oracle_dense_lr: float | None, heartbeats: Heartbeats) -> None:
    spec, say = runner.spec, runner.progress.say
    start = recommended_start(spec, oracle_dense_lr)
    if not study.trials:
        if space.contains(start):
            study.enqueue_trial(start, skip_if_exists=True)
        else:
            say("fit-silo: the paper's first trial (" + ", ".join(f"{k}={v:.4g}" for k, v in start.items())
                + ") lies outside the asked ranges: skipped")
    adopted = _adopt_dead_trials(study, heartbeats, first=True)
    finished = len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)))
    say(f"fit-silo: study {study.study_name}: {finished} of {n_trials} trials finished"
        + (f", {adopted} of a dead driver queued again" if adopted else ""))
    pool: list[Running] = []
    while True:
        if (adopted := _adopt_dead_trials(study, heartbeats, first=False)):
            say(f"fit-silo: {adopted} trial(s) of a dead driver queued again")
        while len(pool) < parallel and len(_active(study)) < n_trials:
            if (r := _ask(study, space, seeds, n_trials, heartbeats)) is None:
                break
            pool.append(r)
        if not pool:
            break
        pool = _advance(runner, study, pool, seeds, target, heartbeats)


def trial_key(study: optuna.Study, number: int, spec: ExperimentSpec, cycle: int, seed: int,
              start: dict | None) -> str:
    """The ledger key of one cycle of a study trial (`spec`: its SILO spec). The study's fingerprint keeps other
    studies' trials apart; SILO's parameters and the start checkpoint keep a trial number that a new journal gave
    other parameters, or a chain that started elsewhere, from hitting another trial's rows."""
    return (f"silo-fit-{study.study_name.rsplit('-', 1)[-1]}-t{number:04d}-c{cycle:02d}-s{seed}-"
            f"{peak_name(spec, None)}{chain_suffix(start)}")


def _advance(runner: Runner, study: optuna.Study, pool: list[Running], seeds: list[int],
             target: int, heartbeats: Heartbeats) -> list[Running]:
    """Train the next cycle of every trial in flight; tell Optuna about the finished and the stopped ones."""
    # Tagged with their training's identity: a cycle the Oracle or another trial already trained is reused.
    trials = {}
    for r in pool:
        spec = silo_spec(runner.spec, r.params)
        tags = silo_tags(Method.SILO_FIT, r.params, Stage.FIT, study_trial=r.trial.number, selected=True)
        for seed in seeds:
            trials[(r.trial.number, seed)] = cycle_training(
                spec, trial_key(study, r.ledger_number, spec, r.cycle, seed, r.starts[seed]), r.cycle, seed, None,
                r.starts[seed], tags, target - r.cycle + runner.spec.cycles + 1)  # behind it: the finals
    rows = runner.run(list(trials.values()))
    still = []
    for r in pool:
        mine = [rows[trials[(r.trial.number, seed)].key] for seed in seeds]
        r.keys += [row["key"] for row in mine]
        r.starts = {row["seed"]: row for row in mine}
        value = sum(row["val_acc"] for row in mine) / len(mine)
        try:
            if any(row["diverged"] for row in mine):
                _stop(runner, study, r, "diverged", f"diverged at cycle {r.cycle}")
            else:
                r.trial.report(value, step=r.cycle)
                if r.cycle == target:
                    study.tell(r.trial, value)
                elif r.trial.should_prune():
                    _stop(runner, study, r, "pruned", f"stopped early after cycle {r.cycle} (val {value:.1f})")
                else:
                    r.cycle += 1
                    still.append(r)
                    continue
        except UpdateFinishedTrialError:  # its heartbeat went stale and another driver took it over
            runner.progress.say(f"  fit-silo trial {r.trial.number} was taken over by another driver")
        heartbeats.discard(r.trial.number)
    return still


def _stop(runner: Runner, study: optuna.Study, r: Running, reason: str, why: str) -> None:
    r.trial.set_user_attr("stopped", reason)
    study.tell(r.trial, state=TrialState.PRUNED)
    _mark_stopped_early(runner, r)
    runner.progress.say(f"  fit-silo trial {r.trial.number} {why}")


def _mark_stopped_early(runner: Runner, r: Running) -> None:
    for key in r.keys:
        row = runner.ledger.get(key)
        runner.ledger.record(row | {"stopped_early": True})


def _no_complete_trial(study: optuna.Study) -> str:
    stopped = study.get_trials(deepcopy=False, states=(TrialState.PRUNED,))
    diverged = sum(t.user_attrs.get("stopped") == "diverged" for t in stopped)
    return (f"study {study.study_name} holds no completed trial ({diverged} diverged, {len(stopped) - diverged} "
            "stopped early); rerun with a larger --trials or other ranges")


def best_params(study: optuna.Study) -> SiloParams:
    """The best completed trial's parameters; FitFailed when no trial completed."""
    try:
        p = study.best_trial.params
    except ValueError:  # Optuna's answer when no trial completed
        raise FitFailed(_no_complete_trial(study)) from None
    return SiloParams(epsilon=p["epsilon"], delta=p["delta"], q=int(p["q"]), beta=p["beta"])


@dataclass(frozen=True)
class FitPlan:
    """silo_fit's study, built once from the options (`of`): `trials` Optuna trials, each training cycles
    0..`target` on `seeds`, over `space` (None: the default, ε around the Oracle's dense best where one ran), stored
    at `storage` (None: a journal file under OUT)."""

    trials: int
    seeds: tuple[int, ...]
    target: int
    space: SearchSpace | None = None
    storage: str | None = None

    @classmethod
    def of(cls, spec: ExperimentSpec, options: FitOptions) -> "FitPlan":
        return cls(options.trials, tuple(tuning_seeds(spec, options.seeds)), options.target(spec), options.space,
                   options.storage)


def fit_study(runner: Runner, plan: FitPlan, dense: float | None) -> optuna.Study:
    """silo_fit as a command runs it: the study of `plan` (`fit_silo`), with ε searched around the Oracle's dense
    best `dense` where this folder holds one and no range was given; writes DIR/silo_fit.json, the search the
    report prints."""
    space = plan.space or SearchSpace.default(runner.spec)
    if dense is not None and plan.space is None:
        # The paper tunes epsilon on the unpruned network; the Oracle's cycle 0 has done exactly that.
        space = dataclasses.replace(space, epsilon=(dense / 2, dense * 2))
        runner.progress.say(f"silo_fit: ε searched in [{dense / 2:.4g}, {dense * 2:.4g}] around the Oracle's "
                            f"dense max_lr {dense:.4g}")
    seeds = list(plan.seeds)
    atomic_write_json(runner.out / "silo_fit.json", {
        "space": dataclasses.asdict(space), "trials": plan.trials, "seeds": seeds, "target_cycle": plan.target,
        "objective": f"seed-mean validation accuracy at cycle {plan.target}"})
    return fit_silo(runner, seeds, plan.trials, space, plan.storage, runner.slots(len(seeds)), plan.target, dense)


def fitted_params(study: optuna.Study) -> SiloParams | None:
    """The study's best parameters, or None when no trial finished (every one diverged or was stopped)."""
    try:
        return best_params(study)
    except ValueError:
        return None


def fit_failed(study: optuna.Study | None, variants: dict) -> None:
    """FitFailed when every silo_fit trial diverged or stopped (after the report is written)."""
    if study is not None and Method.SILO_FIT not in variants:
        best_params(study)
