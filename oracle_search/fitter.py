"""The SILO fitter: an Optuna study over (epsilon, delta, q, beta), driven by ask/tell so each cycle's
validation accuracy is an intermediate value and clearly bad parameter sets stop early (Ray's OptunaSearch
would ignore Optuna's pruner). Each Optuna trial's cycles run as Tune trials; several Optuna trials run at once.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import optuna

from oracle_search.engine import Runner, Trial
from trainables.schedules import SiloParams
from trainables.spec import ExperimentSpec, SpecError


@dataclass(frozen=True)
class SearchSpace:
    """Ranges of the fitter; the paper advises q in [0, 3] and beta in [3, 6]."""

    epsilon: tuple[float, float]
    delta: tuple[float, float]
    q: tuple[int, int] = (0, 3)
    beta: tuple[float, float] = (3.0, 6.0)

    @classmethod
    def default(cls, spec: ExperimentSpec) -> "SearchSpace":
        return cls(epsilon=(min(spec.grid), max(spec.grid)), delta=(0.0, max(spec.grid)))

    def validate(self) -> None:
        for name in ("epsilon", "delta", "q", "beta"):
            low, high = getattr(self, name)
            if not low <= high:
                raise SpecError(f"{name}-range", f"needs LO <= HI, got {low}:{high}")
        if self.epsilon[0] <= 0:
            raise SpecError("epsilon-range", "must be positive (it is searched on a log scale)")
        if self.delta[0] < 0 or self.q[0] < 0 or self.beta[0] <= 0:
            raise SpecError("delta-range", "delta and q must be >= 0 and beta > 0")


def default_storage(out: Path) -> optuna.storages.BaseStorage:
    """A file-backed journal under --out: safe for parallel workers on one host (SQLite is not)."""
    from optuna.storages.journal import JournalFileBackend

    return optuna.storages.JournalStorage(JournalFileBackend(str(out / "optuna-journal.log")))


def open_study(out: Path, spec: ExperimentSpec, storage_url: str | None, target: int | None = None) -> optuna.Study:
    """The study of this experiment; its pruner judges trials only from the middle of the cycles on."""
    storage = storage_url or default_storage(out)
    target = spec.cycles if target is None else target
    return optuna.create_study(
        study_name=f"silo-{spec.preset}", storage=storage, direction="maximize", load_if_exists=True,
        # TPE's default 10 random start-up trials would be the whole of a small study.
        sampler=optuna.samplers.TPESampler(seed=spec.seed, n_startup_trials=4),
        # Cycles up to q measure epsilon alone, and delta acts as the network thins: judge a trial only from the
        # middle cycle on, and stop only the bottom quartile, since one seed's accuracy is noisy by a point.
        pruner=optuna.pruners.PercentilePruner(75.0, n_startup_trials=2,  # keeps the top 75 %
                                               n_warmup_steps=max(1, target // 2)))


def suggest(trial: optuna.Trial, space: SearchSpace) -> SiloParams:
    return SiloParams(
        epsilon=trial.suggest_float("epsilon", *space.epsilon, log=True),
        delta=trial.suggest_float("delta", *space.delta),
        q=trial.suggest_int("q", *space.q),
        beta=trial.suggest_float("beta", *space.beta))


def oracle_dense_lr(rows: list[dict]) -> float | None:
    """The Oracle's best dense max_lr on seed-mean validation accuracy (ties to the smaller), if an Oracle ran."""
    by_lr: dict[float, list[float]] = {}
    for r in rows:
        if r.get("method") == "oracle" and r["cycle"] == 0 and not r["diverged"]:
            by_lr.setdefault(r["max_lr"], []).append(r["val_acc"])
    if not by_lr:
        return None
    return min(by_lr, key=lambda lr: (-sum(by_lr[lr]) / len(by_lr[lr]), lr))


def recommended_start(spec: ExperimentSpec, oracle_dense_lr: float | None) -> dict[str, float]:
    """The paper's advice as the first trial: q=1, beta=5, epsilon = the Oracle's best dense max_lr."""
    return {"epsilon": oracle_dense_lr or spec.schedule.silo.epsilon, "delta": spec.schedule.silo.delta,
            "q": 1, "beta": 5.0}


def silo_spec(spec: ExperimentSpec, params: SiloParams) -> ExperimentSpec:
    return spec.with_schedule(name="silo", silo=params)


def silo_tags(params: SiloParams, stage: str, **extra) -> dict:
    return {"method": "silo_fit", "stage": stage, "schedule": "silo", **dataclasses.asdict(params), **extra}


@dataclass
class Running:
    """An Optuna trial in flight: its parameters and each seed's latest checkpoint."""

    trial: optuna.Trial
    params: SiloParams
    starts: dict[int, str | None]
    keys: list[str]
    cycle: int = 0  # the next cycle to train


def fit_silo(runner: Runner, seeds: list[int], n_trials: int, space: SearchSpace, storage_url: str | None,
             parallel: int, target_cycle: int | None = None, oracle_dense_lr: float | None = None) -> optuna.Study:
    """Run the study until it holds `n_trials` finished (complete or pruned) trials; returns the study.

    Up to `parallel` Optuna trials are in flight, each at its own cycle; a trial that stops early frees its slot
    for a new one at once, instead of idling until its batch-mates finish."""
    spec, say = runner.spec, runner.progress.say
    target = spec.cycles if target_cycle is None else target_cycle
    study = open_study(runner.out, spec, storage_url, target)
    if not study.trials:
        study.enqueue_trial(recommended_start(spec, oracle_dense_lr))
    finished = lambda: sum(t.state.is_finished() for t in study.trials)  # noqa: E731
    # Trials left RUNNING by a killed driver continue with their stored parameters; their finished cycles are
    # in the ledger and are not retrained.
    resumed = [optuna.trial.Trial(study, t._trial_id) for t in study.get_trials(
        deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))]
    say(f"fit-silo: study {study.study_name}: {finished()} of {n_trials} trials finished"
        + (f", resuming {len(resumed)}" if resumed else ""))
    pool: list[Running] = []
    while True:
        while len(pool) < parallel and (resumed or finished() + len(pool) < n_trials):
            trial = resumed.pop(0) if resumed else study.ask()
            pool.append(Running(trial, suggest(trial, space), {s: None for s in seeds}, []))
        if not pool:
            break
        pool = _advance(runner, study, pool, seeds, target)
    best = study.best_trial
    say(f"fit-silo: best trial {best.number}: val {best.value:.2f} at cycle {target} with "
        + ", ".join(f"{k}={v:.4g}" for k, v in best.params.items()))
    return study


def _advance(runner: Runner, study: optuna.Study, pool: list[Running], seeds: list[int],
             target: int) -> list[Running]:
    """Train the next cycle of every trial in flight; tell Optuna about the finished and the stopped ones."""
    trials = {(r.trial.number, seed): Trial(
        key=f"silo-fit-t{r.trial.number:04d}-c{r.cycle:02d}-s{seed}", spec=silo_spec(runner.spec, r.params),
        cycle=r.cycle, max_lr=None, seed=seed, start_checkpoint=r.starts[seed],
        tags=silo_tags(r.params, "fit", study_trial=r.trial.number, selected=True))
        for r in pool for seed in seeds}
    rows = runner.run(list(trials.values()))
    still = []
    for r in pool:
        mine = [rows[trials[(r.trial.number, seed)].key] for seed in seeds]
        r.keys += [row["key"] for row in mine]
        r.starts = {row["seed"]: row["checkpoint"] for row in mine}
        value = sum(row["val_acc"] for row in mine) / len(mine)
        if any(row["diverged"] for row in mine):
            _stop(runner, study, r, f"diverged at cycle {r.cycle}")
            continue
        r.trial.report(value, step=r.cycle)
        if r.cycle == target:
            study.tell(r.trial, value)
        elif r.trial.should_prune():
            _stop(runner, study, r, f"pruned after cycle {r.cycle} (val {value:.1f})")
        else:
            r.cycle += 1
            still.append(r)
    return still


def _stop(runner: Runner, study: optuna.Study, r: Running, why: str) -> None:
    _mark_pruned(runner, r)
    study.tell(r.trial, state=optuna.trial.TrialState.PRUNED)
    runner.progress.say(f"  fit-silo trial {r.trial.number} {why}")


def _mark_pruned(runner: Runner, r: Running) -> None:
    for key in r.keys:
        row = runner.ledger.get(key)
        runner.ledger.record(row | {"pruned": True})


def best_params(study: optuna.Study) -> SiloParams:
    p = study.best_trial.params
    return SiloParams(epsilon=p["epsilon"], delta=p["delta"], q=int(p["q"]), beta=p["beta"])
