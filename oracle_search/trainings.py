"""The drivers' trainings (`identity.Training`): each one's identity (two trainings with the same id train the same
network the same way), its key in the ledger, its tags (`cycle_training`, `oracle_training`, `tuning_training`);
and `Streaming`, the racing `Trainer` that starts trainings on the Runner without waiting. Every driver (the
Oracle, the baselines, silo_fit, silo_paper) names its trainings here, so no driver imports another for them."""
from __future__ import annotations

from typing import Callable, Hashable

from oracle_search.identity import Training

from oracle_search.runner import Runner, Started
from oracle_search.identity import grid_key, training
from oracle_search.schema import Method, Stage
from trainables.schedules import SiloParams, cycle_peak
from trainables.spec import ExperimentSpec


def chain_suffix(start: dict | None) -> str:
    """Names the checkpoint a trial starts from, so a trial trained from another chain is never reused."""
    return f"-from{start['checkpoint_hash'][:10]}" if start else ""


def training_id(spec: ExperimentSpec, cycle: int, seed: int, max_lr: float | None, start: dict | None) -> str:
    """Identity of a training: two trials with the same id train the same network the same way."""
    return training(spec.training_fingerprint(), cycle, seed, cycle_peak(spec.schedule, cycle, spec.rate, max_lr),
                    start["checkpoint_hash"] if start else "")


# The wide Oracle's rounds per cycle on many slots (the grid or bracket, then its refinement): 35 T for 14 cycles
# of the paper's ResNet-20 plan, simulated (docs/measured.md). An Oracle training's priority counts the rounds left.
ORACLE_ROUNDS_PER_CYCLE = 2.5


def cycle_training(spec: ExperimentSpec, key: str, cycle: int, seed: int, max_lr: float | None,
                   start: dict | None, tags: dict, priority: float = 0.0) -> Training:
    """A training of one cycle, tagged with its training identity so an identical training is never run twice;
    `priority`: the trainings still behind it in its line's plan (`identity.Training.priority`)."""
    return Training(key=key, spec=spec, cycle=cycle, max_lr=max_lr, seed=seed,
                    start_checkpoint=start["checkpoint"] if start else None,
                    tags=tags | {"training": training_id(spec, cycle, seed, max_lr, start),
                                 "split_seed": spec.split_seed, "data_seed": spec.data_seed}, priority=priority)


def oracle_training(runner: Runner, cycle: int, seed: int, lr: float, start: dict | None, stage: Stage,
                    **tags) -> Training:
    """An Oracle training; `tags`: more ledger fields (e.g. `for_verdict`)."""
    return cycle_training(runner.spec, f"oracle-c{cycle:02d}-s{seed}-lr{grid_key(lr)}{chain_suffix(start)}", cycle,
                          seed, lr, start, {"method": Method.ORACLE.value, "stage": stage.value,
                                            "schedule": runner.spec.schedule.name, **tags},
                          ORACLE_ROUNDS_PER_CYCLE * (runner.spec.cycles - cycle))


def peak_name(spec: ExperimentSpec, lr: float | None) -> str:
    """The key part naming a run's peak LR: the tuned value, or SILO's parameters."""
    if lr is not None:
        return f"lr{grid_key(lr)}"
    p = spec.schedule.silo
    return f"silo{grid_key(p.epsilon)}_{grid_key(p.delta)}_{p.q}_{grid_key(p.beta)}"


def silo_spec(spec: ExperimentSpec, params: SiloParams) -> ExperimentSpec:
    return spec.with_schedule(name="silo", silo=params)


def silo_tags(method: Method, params: SiloParams, stage: Stage, **extra) -> dict:
    return {"method": method.value, "stage": stage.value, "schedule": "silo", "epsilon": params.epsilon,
            "delta": params.delta, "q": params.q, "beta": params.beta, **extra}


def tuning_training(spec: ExperimentSpec, name: str, lr: float, seed: int) -> Training:
    """A baseline's cycle-0 tuning training of its peak LR (`baselines`)."""
    return cycle_training(spec.with_schedule(name=name), f"{name}-tune-c00-s{seed}-lr{grid_key(lr)}", 0, seed, lr,
                          None, {"method": name, "stage": Stage.TUNE.value, "schedule": name, "selected": False},
                          spec.cycles + 1)  # behind it: the schedule's final chain


class Streaming:
    """A racing `Trainer` (oracle_search.racing) on the Runner's long-lived experiment: items start without
    waiting, and `wait` returns as soon as one finishes, so `run_races` tops up the freed slot at once.
    `training_of` names the training an item trains."""

    def __init__(self, runner: Runner, training_of: Callable[[Hashable, tuple[float, int]], Training]):
        self.runner, self.training_of = runner, training_of
        self.started: list[tuple[dict, Started]] = []  # (item -> trial, what Runner.start returned)
        self.news = 0

    def start(self, items: list) -> None:
        if items:
            trials = {item: self.training_of(*item) for item in items}
            self.started.append((trials, self.runner.start(list(trials.values()))))

    def held(self) -> int:
        """The Tune trials of the started items still running: a fused trial counts once (`Runner.running`)."""
        return sum(self.runner.running(started) for _, started in self.started)

    def wait(self) -> dict:
        while True:
            got, left = {}, []
            for trials, started in self.started:
                rows = self.runner.ready(started)
                got |= {item: rows[t.key] for item, t in trials.items() if t.key in rows}
                rest = {item: t for item, t in trials.items() if t.key not in rows}
                if rest:
                    left.append((rest, started))
            self.started = left
            if got or not left:
                return got
            self.news = self.runner.wait_for_news(self.news)
