"""SILO as the paper prescribes it (§4, "Parameter Selection for SILO"): q = 1 and β = 5; ε is the tuned LR of
the unpruned network (the Oracle's seed-mean dense best); δ is chosen by validation accuracy at the target
sparsity (the last cycle), on the tuning seeds, and refined until it is bracketed.

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
then nothing is refined.

Written to DIR/silo_paper.json: `delta_candidates` (every δ trained, ascending), `delta` (the winner, null when
every δ diverged), `delta_bracketed`, and `delta_open` (why not bracketed, else null), with each candidate's
score."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from oracle_search.baselines import run_chains
from oracle_search.runner import Runner
from oracle_search.retention import Claim
from oracle_search.trials import grid_key, silo_spec, silo_tags
from oracle_search.schema import Method, Stage
from trainables.atomic import atomic_write_json
from oracle_search.curve import Curve, lr_key
from oracle_search.racing import Pair, Race, Settings, run_race
from oracle_search.selection import RESOLUTION
from trainables.schedules import SiloParams
from trainables.spec import ExperimentSpec

PAPER_Q, PAPER_BETA = 1, 5.0
DELTA_VALUES = 3  # first candidates: ε + δ on the next 3 grid values above ε
BRACKET = 1.25  # δ is bracketed when its trained neighbours on both sides lie within this factor
ROUNDS = 8  # most refinement rounds after the first candidates
RECORD = "silo_paper.json"
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
                ratio: float = BRACKET, walk_first: bool = True) -> tuple[list[float], list[str]]:
    """The δ values to train next around `winner`, and the sides ("below", "above") with nothing left to try
    because the winner sits at that end of the range. `walk_first`: while the winner is the last tried value on a
    side and the range goes on there, only that side's next coarse value is tried (the other side's midpoint would
    be wasted once the winner moves on); `False` is the earlier rule, both sides every round."""
    trained = sorted(trained)
    i, new, ends = trained.index(winner), set(), []
    for side, step in (("below", -1), ("above", 1)):
        j = i + step
        if 0 <= j < len(trained):
            neighbour = trained[j]
            if max(neighbour, winner) / min(neighbour, winner) > ratio * (1 + _EPS):
                new.add(lr_key(math.sqrt(neighbour * winner)))
            continue
        beyond = [d for d in coarse if (d < winner * (1 - _EPS) if step < 0 else d > winner * (1 + _EPS))]
        if beyond:
            outward = beyond[-1] if step < 0 else beyond[0]
            if walk_first:  # the winner ends what was tried on this side: walk on, alone
                return [outward], ends
            new.add(outward)
        else:
            ends.append(side)
    return sorted(d for d in new if all(abs(d / t - 1) > _EPS for t in trained)), ends


def bracketed(winner: float, trained: list[float], ratio: float = BRACKET) -> bool:
    """Whether `winner` has a trained neighbour on both sides, each within ×`ratio`."""
    trained = sorted(trained)
    i = trained.index(winner)
    return (0 < i < len(trained) - 1 and trained[i + 1] / winner <= ratio * (1 + _EPS)
            and winner / trained[i - 1] <= ratio * (1 + _EPS))


@dataclass(frozen=True)
class DeltaSearch:
    """What the δ search trained and chose (the content of silo_paper.json)."""

    epsilon: float
    target_cycle: int
    seeds: list[int]
    range: list[float]  # δ's coarse values
    scores: dict[float, float | None]  # δ -> seed-mean validation accuracy at the target cycle; None: diverged
    delta: float | None
    is_bracketed: bool
    open: str | None  # why δ is not bracketed
    rounds: int
    trained_on: dict[float, int]  # δ -> how many seeds trained it (fewer than all: dropped by the racing rule)
    dropped: dict[float, str]  # δ -> why the racing rule dropped it

    def record(self) -> dict:
        trained = sorted(self.scores)
        return {"method": Method.SILO_PAPER.value, "epsilon": self.epsilon, "q": PAPER_Q, "beta": PAPER_BETA,
                "target_cycle": self.target_cycle, "seeds": self.seeds, "bracket_ratio": BRACKET,
                "delta_range": [self.range[0], self.range[-1]], "delta_candidates": trained, "delta": self.delta,
                "delta_bracketed": self.is_bracketed, "delta_open": self.open, "rounds": self.rounds,
                "candidates": [{"delta": d, "top": lr_key(self.epsilon + d), "val_acc": self.scores[d],
                                "diverged": self.scores[d] is None, "seeds_trained": self.trained_on[d],
                                "dropped": self.dropped.get(d)} for d in trained]}


def _train(runner: Runner, epsilon: float, pairs: list[Pair], target: int) -> dict[Pair, dict]:
    """Each (δ, seed) chain through the target cycle, as a curve row by pair (`max_lr` holds δ): the validation
    accuracy at the target cycle, diverged when the chain diverged before or at it."""
    params = {d: SiloParams(epsilon=epsilon, delta=d, q=PAPER_Q, beta=PAPER_BETA)
              for d in dict.fromkeys(d for d, _ in pairs)}
    runs = {f"d{grid_key(d)}": (silo_spec(runner.spec, p), None, silo_tags(Method.SILO_PAPER, p, Stage.TUNE))
            for d, p in params.items()}
    chains = run_chains(runner, runs, [], Stage.TUNE, last_cycle=target,
                        pairs=[(f"d{grid_key(d)}", s) for d, s in pairs])
    return {(d, s): {"max_lr": d, "seed": s, "val_acc": end["val_acc"],
                     "diverged": bool(end["diverged"]) or end["cycle"] != target}
            for d, s in pairs for end in [chains[(f"d{grid_key(d)}", s)][-1]]}


def _why_stopped(curve: Curve, coarse: list[float], target: int, rounds: int) -> str | None:
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
    """The δ search (module docstring), written once for its driver (`search_delta`) and the estimate's simulation
    (`simulate.simulate_delta`): the first candidates, the race (`racing`: a δ shown more than 0.5 points worse
    than the leader at the target cycle gets no more seeds, and still counts as a tried neighbour; else a race
    that keeps every δ) and the refinement around the winner, for at most `rounds` rounds."""

    epsilon: float
    grid: tuple[float, ...]
    seeds: tuple[int, ...]
    target: int
    rounds: int = ROUNDS
    racing: bool = False
    walk_first: bool = True  # `next_deltas`; False: the earlier rule (benchmarks/delta_search.py compares them)

    @property
    def coarse(self) -> list[float]:
        return delta_range(self.epsilon, list(self.grid))

    @property
    def first(self) -> list[float]:
        return delta_grid(self.epsilon, list(self.grid))

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
            new = next_deltas(curve.best, curve.tried, coarse, walk_first=self.walk_first)[0]
            if new:
                say(f"silo_paper: δ = {curve.best:.4g} is best so far; refining with "
                    f"{', '.join(f'{d:.4g}' for d in new)}")
            return new

        return run_race(race, train, slots, refine, self.rounds)


def claims(spec: ExperimentSpec, epsilon: float, seeds: list[int]) -> list[Claim]:
    """What silo_paper will train whatever δ is, for retention (`retention.Claim`): on its tuning and evaluation
    seeds, cycles 0..q at ε. The Oracle's cycle-1 row at ε is that training even when its cycle 1 chose another
    value, and a δ chain or a final chain reaching it later starts from it."""
    peaks = (epsilon,) * (min(PAPER_Q, spec.cycles) + 1)
    fingerprint = silo_spec(spec, SiloParams(epsilon=epsilon, q=PAPER_Q, beta=PAPER_BETA)).training_fingerprint()
    return [Claim(fingerprint, frozenset(seeds), (peaks,))]


def search_delta(runner: Runner, epsilon: float, grid: list[float], seeds: list[int],
                 target: int, rounds: int = ROUNDS, racing: bool = False) -> DeltaSearch:
    """Train the first δ candidates, then refine around the winner until it is bracketed (`DeltaPlan`)."""
    plan = DeltaPlan(epsilon, tuple(grid), tuple(seeds), target, rounds, racing)
    race = plan.race()
    done = plan.run(race, lambda pairs: _train(runner, epsilon, pairs, target), runner.slots(), runner.progress.say)
    curve, dropped, coarse = race.curve(), dict(race.dropped), plan.coarse
    why = _why_stopped(curve, coarse, target, rounds)
    dead = curve.diverged.any(axis=1)
    scores = {float(d): None if dead[d] else float(m) for d, m in curve.mean().items()}
    return DeltaSearch(epsilon=epsilon, target_cycle=target, seeds=list(seeds), range=coarse, scores=scores,
                       delta=curve.best, is_bracketed=why is None, open=why, rounds=done,
                       trained_on={float(d): int(n) for d, n in curve.acc.count(axis=1).items()}, dropped=dropped)


def tune_silo_paper(runner: Runner, epsilon: float, grid: list[float], seeds: list[int],
                    target: int, rounds: int = ROUNDS, racing: bool = False) -> SiloParams | None:
    """The paper's SILO with δ bracketed at cycle `target`; writes DIR/silo_paper.json. None when every δ
    diverged. `racing`: δ values race on the seeds (`search_delta`)."""
    first = delta_grid(epsilon, grid)
    runner.progress.say(f"silo_paper: ε = {epsilon:.4g} (the Oracle's dense best), q = {PAPER_Q}, β = {PAPER_BETA:g}; "
                        f"δ from {', '.join(f'{d:.4g}' for d in first)} at cycle {target} on {len(seeds)} seed(s), "
                        f"refined until its neighbours lie within ×{BRACKET:g}{', racing' * racing}")
    found = search_delta(runner, epsilon, grid, seeds, target, rounds, racing)
    for d, why in found.dropped.items():
        runner.progress.say(f"silo_paper: δ = {d:.4g} dropped after {found.trained_on[d]} seed(s): {why}")
    atomic_write_json(runner.out / RECORD, found.record())
    if found.delta is None:
        runner.progress.say("silo_paper: every δ diverged; silo_paper is left out")
        return None
    runner.progress.say(f"silo_paper: δ = {found.delta:.4g} (val {found.scores[found.delta]:.2f} at cycle {target}, "
                        f"{len(found.scores)} δ tried); "
                        + ("bracketed" if found.is_bracketed else f"NOT bracketed: {found.open}"))
    return SiloParams(epsilon=epsilon, delta=found.delta, q=PAPER_Q, beta=PAPER_BETA)
