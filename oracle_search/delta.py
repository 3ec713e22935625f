"""silo_paper's δ search as a plan, pure (no training): its range and first candidates, the refinement around the
winner, and `DeltaPlan`, written once for the driver (`silo_paper.search_delta`, which the estimate's simulation
runs too) and the estimate's closed form.

δ's range. Its coarse values put SILO's top, ε + δ, on each Oracle grid value above ε ("ε and δ can be searched
from a range of n values", §5.3); below the first of them, d₁, they go on by halving d₁, down to a floor of
`selection.RESOLUTION`·ε. A smaller δ lifts SILO's top less than the Oracle's own 5 % resolution above ε: at the
precision max_lr is resolved at all, that is the constant-ε schedule, so the range ends there. When ε tops the
grid, d₁ = ε (a top of 2ε).

The search. It starts from the first `DELTA_VALUES` coarse values from d₁ up. The winner is the Oracle's rule on
δ instead of max_lr (`Curve.best`: best seed-mean validation accuracy at the target cycle, ties to the
smaller, a δ diverged on any seed out). Then, as the Oracle refines an edge (`selection.next_values`), each side
of the winner is refined: with no trained value on that side, the next coarse value outward is tried; with a
trained neighbour more than ×`BRACKET` away, their geometric midpoint. While the winner is the last tried value on
a side and the range goes on there, only that side's next coarse value is tried: the other side's midpoint would
be wasted once the winner walks on (replayed on the 16 δ tables in benchmarks/results: the same δ on all, 87 % of
the chains; `benchmarks/delta_search.py`). It stops when both trained neighbours lie
within ×`BRACKET` (δ is bracketed), when a side has nothing left (the winner sits at the end of the range: not
bracketed, and said so), or after `ROUNDS` rounds. Cycles 0..q train at ε whatever δ is, so they are trained once
and reused by every δ (the engine matches identical trainings); a target cycle ≤ q cannot tell δ values apart, so
then nothing is refined."""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Callable

from oracle_search.curve import Curve, lr_key
from oracle_search.racing import Race, Settings, run_race
from oracle_search.selection import RESOLUTION

PAPER_Q, PAPER_BETA = 1, 5.0
DELTA_VALUES = 3  # first candidates: ε + δ on the next 3 grid values above ε
BRACKET = 1.25  # δ is bracketed when its trained neighbours on both sides lie within this factor
ROUNDS = 8  # most refinement rounds after the first candidates
WIDTH = 4  # a wide plan's values per side and step (`DeltaPlan.for_slots`): 4 resolve a paper grid's ×2.68 gap within
# ×BRACKET in one look (3 leave ×1.28, and a whole extra look, a chain of cycles: 55 T against 43 T on 256 slots)
_EPS = 1e-9



def delta_range(epsilon: float, grid: list[float]) -> list[float]:
    """δ's coarse values, ascending: ε + δ on every grid value above ε (or δ = ε when ε tops the grid), and
    below the first, d₁, its halvings down to the floor RESOLUTION·ε (the floor itself ends the range)."""
    above = [lr_key(g - epsilon) for g in sorted(grid) if g > epsilon * (1 + _EPS)] or [lr_key(epsilon)]
    floor, below, d = lr_key(RESOLUTION * epsilon), [], above[0] / 2
    while d > floor * (1 + _EPS):
        below.append(lr_key(d))
        d /= 2
    if above[0] > floor * (1 + _EPS):
        below.append(floor)
    return sorted({*below, *above})


def delta_grid(epsilon: float, grid: list[float], n: int = DELTA_VALUES) -> list[float]:
    """The first candidates: δ whose ε + δ lands on the next n grid values above ε (2ε when ε tops the grid)."""
    above = [g for g in sorted(grid) if g > epsilon * (1 + _EPS)][:n]
    return [lr_key(g - epsilon) for g in above] or [lr_key(epsilon)]


def next_deltas(winner: float, trained: list[float], coarse: list[float],
                ratio: float = BRACKET, walk_first: bool = True, width: int = 1) -> tuple[list[float], list[str]]:
    """The δ values to train next around `winner`, and the sides ("below", "above") with nothing left to try
    because the winner sits at that end of the range. `walk_first`: while the winner is the last tried value on a
    side and the range goes on there, only that side's next coarse value is tried (the other side's midpoint would
    be wasted once the winner moves on); `False` is the earlier rule, both sides every round.

    `width` > 1 (a wide plan, `DeltaPlan.wide`): a walk takes the next `width` coarse values outward at once, and a
    side whose trained neighbour lies more than ×`ratio` away gets up to `width` values spaced evenly in ln δ
    between them, as many as bring the spacing within ×`ratio` in one round (one round for what the narrow plan
    resolves in several looks, each a chain of cycles)."""
    trained = sorted(trained)
    i, new, ends = trained.index(winner), set(), []
    for side, step in (("below", -1), ("above", 1)):
        j = i + step
        if 0 <= j < len(trained):
            neighbour = trained[j]
            gap = max(neighbour, winner) / min(neighbour, winner)
            if gap > ratio * (1 + _EPS):
                parts = min(width, math.ceil(math.log(gap) / math.log(ratio) - _EPS) - 1) + 1 if width > 1 else 2
                new |= {lr_key(winner * (neighbour / winner) ** (k / parts)) for k in range(1, parts)}
            continue
        beyond = [d for d in coarse if (d < winner * (1 - _EPS) if step < 0 else d > winner * (1 + _EPS))]
        if beyond:
            outward = beyond[::-1][:width] if step < 0 else beyond[:width]
            if walk_first:  # the winner ends what was tried on this side: walk on, alone
                return sorted(outward), ends
            new |= set(outward)
        else:
            ends.append(side)
    return sorted(d for d in new if all(abs(d / t - 1) > _EPS for t in trained)), ends


def bracketed(winner: float, trained: list[float], ratio: float = BRACKET) -> bool:
    """Whether `winner` has a trained neighbour on both sides, each within ×`ratio`."""
    trained = sorted(trained)
    i = trained.index(winner)
    return (0 < i < len(trained) - 1 and trained[i + 1] / winner <= ratio * (1 + _EPS)
            and winner / trained[i - 1] <= ratio * (1 + _EPS))


def why_stopped(curve: Curve, coarse: list[float], target: int, rounds: int) -> str | None:
    """Why δ is not bracketed (None when it is)."""
    if curve.best is None:
        return "every δ diverged"
    if target <= PAPER_Q:
        return f"the target cycle {target} is at most q = {PAPER_Q}: every δ trains alike there"
    new, ends = next_deltas(curve.best, curve.tried, coarse)
    if not new:
        ends = [{"below": "bottom", "above": "top"}[side] for side in ends]
        return None if bracketed(curve.best, curve.tried) else f"δ sits at the {' and '.join(ends)} of its range"
    return f"{rounds} refinement rounds spent"


@dataclass(frozen=True)
class DeltaPlan:
    """The δ search (module docstring), written once for its driver (`search_delta`, also what the estimate's
    simulation runs) and the estimate's closed form: the first candidates, the race (`mode` racing: a δ shown more than 0.5 points
    worse than the leader at the target cycle gets no more seeds, and still counts as a tried neighbour;
    exhaustive: a race that keeps every δ) and the refinement around the winner, for at most `rounds` rounds.
    Built before ε is known (`for_epsilon` sets it: the Oracle's dense best)."""

    epsilon: float
    grid: tuple[float, ...]
    seeds: tuple[int, ...]
    target: int
    rounds: int = ROUNDS
    mode: str = "exhaustive"
    walk_first: bool = True  # `next_deltas`; False: the earlier rule (benchmarks/delta_search.py compares them)
    width: int = 1  # values per side and step (`next_deltas`); > 1: the wide plan (`wide`)
    final_seeds: tuple[int, ...] = ()  # the evaluation seeds: a wide plan starts the leader's finals early

    @property
    def racing(self) -> bool:
        return self.mode == "racing"

    def for_epsilon(self, epsilon: float) -> "DeltaPlan":
        return dataclasses.replace(self, epsilon=epsilon)

    @property
    def wide(self) -> bool:
        return self.width > 1

    def for_slots(self, slots: int) -> "DeltaPlan":
        """The plan for a cluster of `slots`: where a wide look (`WIDTH` values on each side of the first
        candidate, every seed) fits in the slots at once, the wide plan: every seed of a δ at once (nothing
        dropped: with slots to spare, a look's width costs no wall time and each look is a chain of cycles), the
        walk and the refinement `WIDTH` values at a time. Else the plan as it is (racing as the options say)."""
        if slots < 2 * WIDTH * len(self.seeds):
            return self
        return dataclasses.replace(self, width=WIDTH, mode="exhaustive")

    @property
    def coarse(self) -> list[float]:
        return delta_range(self.epsilon, list(self.grid))

    @property
    def first(self) -> list[float]:
        """The first candidates; a wide plan also takes the `width` coarse values below d₁ (the walk's first steps
        down, which the default's δ took in most committed runs)."""
        first = delta_grid(self.epsilon, list(self.grid))
        if not self.wide:
            return first
        below = [d for d in self.coarse if d < first[0] * (1 - _EPS)]
        return sorted({*first, *below[::-1][:self.width]})

    @property
    def shared_cycles(self) -> int:
        """Cycles 0..q train at ε whatever δ is, once per seed; 0 and 1 are the Oracle's own trainings (reused)."""
        return max(0, min(PAPER_Q, self.target) + 1 - 2)

    @property
    def cycles_per_delta(self) -> int:
        """The trainings of one (δ, seed) chain of its own: cycles q+1..target."""
        return max(0, self.target - PAPER_Q)

    def race(self) -> Race:
        race = Race(Settings(self.seeds, most_candidates=len(self.first) + 2 * self.rounds), keep_all=not self.racing)
        race.add(self.first)
        return race

    def run(self, race: Race, train, slots: int = 1, say: Callable[[str], None] = lambda _: None) -> int:
        """Run the search (`racing.run_race`); `say` hears each refinement. Returns the refinement rounds."""
        coarse = self.coarse

        def refine(curve: Curve) -> list[float]:
            """The δ values the next round adds; none when the target cycle cannot tell δ apart or every δ
            diverged. Values the racing rule dropped count as tried neighbours."""
            if self.target <= PAPER_Q or curve.best is None:
                return []
            new = next_deltas(curve.best, curve.tried, coarse, walk_first=self.walk_first, width=self.width)[0]
            if new:
                say(f"silo_paper: δ = {curve.best:.4g} is best so far; refining with "
                    f"{', '.join(f'{d:.4g}' for d in new)}")
            return new

        return run_race(race, train, slots, refine, self.rounds)
