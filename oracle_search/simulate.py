"""The clock executor: the drivers' own searches (`racing.OracleSearch`, `racing.tuning_race`) run on a virtual
clock, each training answered by a row and lasting its seconds, so a run can be planned (`--dry-run`, the estimate)
or replayed (`oracle-search replay`, answered from a finished run's table) without training anything.

A dry run has no accuracies, so it answers from a **stated accuracy model** (`AccuracyModel`), not from data:
- the seed-mean validation accuracy of max_lr v is `PEAK − curvature · ln(v / v*)²` points, a parabola in ln v
  whose optimum v* sits at the grid's geometric centre at cycle 0 and at the b the simulation chose at later cycles
  (the network changes little from one cycle to the next);
- a training at v on seed s adds independent noise of sd `noise · (1 + |ln(v / v*)|)` (values far from b are
  noisier, as measured on the default);
- a training diverges above `diverge` · v*;
- a training lasts the given seconds times a lognormal factor of mean 1 and coefficient of variation `spread`
  (`SPREAD`), drawn independently: on many slots a round lasts as long as its slowest training.
Its constants are the medians measured on the embedded default's exhaustive Oracle runs (module constants below;
docs/measured.md "The plan simulated"). silo_paper's δ search (`simulate_delta`) runs on the same model in ln δ,
with ε the grid value nearest the model's dense optimum, the optimum δ* at the geometric centre of δ's range and
the curvature `DELTA_CURVATURE`. Another model, grid or preset may drop more or fewer values, or refine δ more or
less: "at most" stays the exhaustive plan's closed form.
"""
from __future__ import annotations

import heapq
import itertools
import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from oracle_search.curve import lr_key
from oracle_search.delta import DeltaPlan
from oracle_search.racing import OracleSearch, Pool, TuningPlan, carry, run_races
from oracle_search.selection import choose

Answer = Callable[[tuple], "dict | None"]  # (race key, (value, seed)) -> a row with val_acc, diverged, seconds

# The accuracy model's constants, medians over the 7 cycles of the default's exhaustive runs (2026-11-26 and
# 2026-11-27, benchmarks/results/): the seed-mean drop away from b fitted as c · ln(v / b)² within ×4 of b
# (c 3–23, median 7), the sd of a paired difference to b (0.26–0.76, median 0.4: a training's noise 0.4 / √2),
# and the first diverged value (×4 of b at cycle 0).
CURVATURE = 7.0
NOISE = 0.4 / math.sqrt(2)
DIVERGE = 4.0
# A training's seconds vary: the coefficient of variation of the finished (not diverged) Oracle trainings within a
# cycle, median over the cycles of the default's two exhaustive `oracle` runs of 2026-11-26 (0.135 and 0.125). It is
# the machine's, not the method's: 0.03-0.04 on the 2026-11-27 compare runs, 0.77 on a contended one.
SPREAD = 0.13
DELTA_CURVATURE = 3.0  # the default's δ curve at the target cycle (exhaustive seed 0, 2026-11-27): 3 points per ln²
PEAK = 80.0
# The optimum's rise over the pruning: the Oracle's b at the last cycle over its b at cycle 0, median over the 11
# committed runs of the default with every value on every seed (benchmarks/results: 1.0 to 2.83, median 2.0;
# `tests/test_wide_plans.py` holds it to them). The whole job's model (`simulate_job`) moves its optimum from the
# grid's centre to DRIFT times it, geometrically in the cycle, so SILO's rising peak meets a rising optimum as it
# does on the real runs (a fixed optimum made every first δ diverge by cycle 4-5 on the paper's ResNet-20 plan).
DRIFT = 2.0
RUNS = 8  # simulated runs averaged per estimate (their noise differs; the counts are their mean)


class Clock:
    """A `racing.Trainer` on a virtual clock: each started item runs, once one of `slots` is free, for its row's
    `seconds`; `answer` gives an item's row (None: it cannot be had, and takes no slot time)."""

    def __init__(self, slots: int, answer: Answer | None = None):
        self.slots, self.answer = slots, answer
        self.now = self.busy = 0.0
        self.queue: list = []  # (item, row) waiting for a slot
        self.running: list = []  # heap of (end, tie, item, row)
        self.tie = itertools.count()

    def start(self, items: list) -> None:
        self.queue += [(item, self.answer(item)) for item in items]
        self._fill()

    def _fill(self) -> None:
        while self.queue and len(self.running) < self.slots:
            item, row = self.queue.pop(0)
            seconds = float(row["seconds"]) if row is not None else 0.0
            self.busy += seconds
            heapq.heappush(self.running, (self.now + seconds, next(self.tie), item, row))

    def wait(self) -> dict:
        self.now = self.running[0][0]
        got = {}
        while self.running and self.running[0][0] <= self.now:
            _, _, item, row = heapq.heappop(self.running)
            got[item] = row
        self._fill()
        return got


@dataclass(frozen=True)
class AccuracyModel:
    """The dry run's stated accuracy model (module docstring)."""

    curvature: float = CURVATURE
    noise: float = NOISE
    diverge: float = DIVERGE
    spread: float = SPREAD
    drift: float = DRIFT

    def accuracy(self, x: float, rng: np.random.Generator) -> float:
        """A training's validation accuracy at ln(peak / optimum) = x."""
        return PEAK - self.curvature * x * x + rng.normal(0.0, self.noise * (1 + abs(x)))

    def diverges(self, peak: float, optimum: float) -> bool:
        return peak > self.diverge * optimum

    def factor(self, rng: np.random.Generator) -> float:
        """A training's seconds over the stated ones: lognormal of mean 1, coefficient of variation `spread`."""
        sigma = math.sqrt(math.log1p(self.spread ** 2))
        return math.exp(rng.normal(-sigma * sigma / 2, sigma))

    def optimum(self, centre: float, cycle: int, last: int) -> float:
        """The whole job's optimum at `cycle` of 0..`last`: `centre` at cycle 0, rising to `drift` times it."""
        return centre * self.drift ** (cycle / last) if last else centre

    def answer(self, optimum: float, seconds: float, rng: np.random.Generator,
               durations: np.random.Generator | None = None) -> Answer:
        """Rows for trainings around `optimum`, each lasting `seconds` (times the spread's factor, drawn from
        `durations`, where given: the accuracies stay those of `rng` alone); an item (race, (value, seed)) is
        drawn once."""
        drawn: dict[tuple, dict] = {}

        def row(item: tuple) -> dict:
            if item not in drawn:
                acc = self.accuracy(math.log(item[1][0] / optimum), rng)
                factor = 1.0 if durations is None else self.factor(durations)
                drawn[item] = {"val_acc": acc, "diverged": self.diverges(item[1][0], optimum),
                               "seconds": seconds * factor}
            return drawn[item]
        return row


def nearest(grid: list[float], x: float) -> float:
    return min(grid, key=lambda g: abs(math.log(g / x)))


@dataclass(frozen=True)
class Simulated:
    """Mean counts over the simulated runs: trainings per phase, and the wall time on the slots."""

    trainings: float
    seconds: float


def centre(grid: list[float]) -> float:
    return lr_key(math.exp(np.mean(np.log(sorted(grid)))))


def simulate_oracle(search: OracleSearch, cycles: int, slots: int, seconds: float, compared: int = 0,
                    model: AccuracyModel = AccuracyModel(), runs: int = RUNS) -> Simulated:
    """The Oracle's cycles 0..`cycles` on the model, `runs` times: its trainings and wall time. `compared`: how many
    values a racing `compare` completes per cycle from 1 before its verdict (`compared.complete_for_verdict`: the
    values next to each compared schedule; the model has no schedules, so the `compared` dropped values nearest b
    get their missing seeds)."""
    counts, walls = [], []
    for r in range(runs):
        rng, durations = np.random.default_rng(r), np.random.default_rng(30_000 + r)
        clock, pool, previous, dense, total, late = Clock(slots), Pool(), None, None, 0, []
        optimum = centre(search.grid)
        for m in range(cycles + 1):
            clock.answer = model.answer(optimum, seconds, rng, durations)
            race = search.race(search.first_values(previous, dense), pool, previous, dense)
            search.run(race, clock, slots)
            total += len(race.rows)
            choice = choose(race.curve())
            if choice is None:
                break
            if search.racing and m and compared:
                near = sorted(race.dropped, key=lambda v: abs(math.log(v / choice.best)))[:compared]
                late += [seconds] * sum(len(search.seeds) - len(race.seeds_of(v)) for v in near)
            pool = carry(pool, race) if search.racing else pool
            previous, dense = choice.best, dense if m else choice.best
            optimum = choice.best
        counts.append(total + len(late))
        walls.append(clock.now + sum(late) / slots)
    return Simulated(float(np.mean(counts)), float(np.mean(walls)))


def simulate_tuning(plan: TuningPlan, schedules: int, slots: int, seconds: float,
                    model: AccuracyModel = AccuracyModel(), runs: int = RUNS) -> Simulated:
    """The baselines' peak-LR tuning (`plan`) of `schedules` schedules side by side on the model, `runs` times, a
    racing plan's races walking from the Oracle's simulated dense best with the pool of its cycle 0
    (`baselines.tune_peaks`)."""
    counts, walls = [], []
    grid = list(plan.grid)
    dense_search = OracleSearch(plan.grid, plan.seeds, 0, True, "exhaustive")
    for r in range(runs):
        rng = np.random.default_rng(10_000 + r)
        answer = model.answer(centre(grid), seconds, rng)
        dense = dense_search.race(dense_search.first_values(None, None), Pool(), None, None)
        dense_search.run(dense, Clock(slots, answer), slots)
        curve = dense.curve()
        races = {k: plan.race(curve, own=False) for k in range(schedules)}
        clock = Clock(slots, answer)
        run_races(races, clock, slots)
        counts.append(sum(len(race.rows) for race in races.values()))
        walls.append(clock.now)
    return Simulated(float(np.mean(counts)), float(np.mean(walls)))


def simulate_delta(plan: DeltaPlan, slots: int, seconds: float,
                   model: AccuracyModel = AccuracyModel(curvature=DELTA_CURVATURE), runs: int = RUNS) -> Simulated:
    """silo_paper's δ search (`plan`, its driver's own) on the model in ln δ, `runs` times, ε the grid value nearest
    the model's optimum (the simulated dense best): its trainings (each (δ, seed) chain trains cycles q+1..target;
    cycles 0..q once per seed) and wall time."""
    grid, seeds = list(plan.grid), plan.seeds
    plan = plan.for_epsilon(nearest(sorted(grid), centre(grid)))
    per_pair = plan.cycles_per_delta * seconds
    counts, walls = [], []
    for r in range(runs):
        answer = model.answer(centre(plan.coarse), per_pair, np.random.default_rng(20_000 + r))
        race, clock = plan.race(), Clock(slots, answer)
        plan.run(race, clock, slots)
        counts.append(len(race.rows) * plan.cycles_per_delta + len(seeds) * plan.shared_cycles)
        walls.append(clock.now + plan.shared_cycles * seconds)
    return Simulated(float(np.mean(counts)), float(np.mean(walls)))
