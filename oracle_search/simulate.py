"""The virtual clock and the dry run's one accuracy model.

`Clock`: a `racing.Trainer` on a virtual clock, each training answered by a row and lasting its seconds: `replay`
(`analysis.replay`) runs the drivers' own searches on it, answered from a finished run's table.

`AccuracyModel`: what a simulated training answers where there is no data (`simulate_job`, which runs the
commands' own drivers on a simulated engine for the dry run and the estimate), a **stated model**, not data:
- the seed-mean validation accuracy at a training's peak max_lr v is `PEAK − curvature · ln(v / v*)²` points, a
  parabola in ln v around the optimum v*, which rises over the pruning from the grid's geometric centre at cycle 0
  to `DRIFT` times it at the last cycle (`optimum`);
- a training adds independent noise of sd `noise · (1 + |ln(v / v*)|)` (values far from v* are noisier, as
  measured on the default);
- a training diverges above `diverge` · v*;
- a training lasts its stated seconds times a lognormal factor of mean 1 and coefficient of variation `spread`
  (`SPREAD`), drawn independently: on many slots a round lasts as long as its slowest training.
Its constants are the medians measured on the embedded default's exhaustive Oracle runs (module constants below;
docs/measured.md "The plan simulated"). Another network may drop more or fewer values: the estimate's "at most"
stays the exhaustive plan's closed form.
"""
from __future__ import annotations

import heapq
import itertools
import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from oracle_search.curve import lr_key

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
PEAK = 80.0
# The optimum's rise over the pruning: the Oracle's b at the last cycle over its b at cycle 0, median over the 11
# committed runs of the default with every value on every seed (benchmarks/results: 1.0 to 2.83, median 2.0;
# `tests/test_wide_plans.py` holds it to them). The whole job's model (`simulate_job`) moves its optimum from the
# grid's centre to DRIFT times it, geometrically in the cycle, so SILO's rising peak meets a rising optimum as it
# does on the real runs (a fixed optimum made every first δ diverge by cycle 4-5 on the paper's ResNet-20 plan).
DRIFT = 2.0


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
    """The dry run's one stated accuracy model (module docstring)."""

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


def centre(grid: list[float]) -> float:
    """The grid's geometric centre: the model's optimum at cycle 0."""
    return lr_key(math.exp(np.mean(np.log(sorted(grid)))))
