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
trained neighbour more than ×`BRACKET` away, their geometric midpoint. It stops when both trained neighbours lie
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

from oracle_search.baselines import run_chains, silo_spec, silo_tags
from oracle_search.engine import Runner
from oracle_search.oracle import grid_key
from oracle_search.schema import Method, Stage
from trainables.atomic import atomic_write_json
from oracle_search.curve import Curve, lr_key
from oracle_search.selection import RESOLUTION
from trainables.schedules import SiloParams

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
                ratio: float = BRACKET) -> tuple[list[float], list[str]]:
    """The δ values to train next around `winner`, and the sides ("below", "above") with nothing left to try
    because the winner sits at that end of the range."""
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
            new.add(beyond[-1] if step < 0 else beyond[0])
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

    def record(self) -> dict:
        trained = sorted(self.scores)
        return {"method": Method.SILO_PAPER.value, "epsilon": self.epsilon, "q": PAPER_Q, "beta": PAPER_BETA,
                "target_cycle": self.target_cycle, "seeds": self.seeds, "bracket_ratio": BRACKET,
                "delta_range": [self.range[0], self.range[-1]], "delta_candidates": trained, "delta": self.delta,
                "delta_bracketed": self.is_bracketed, "delta_open": self.open, "rounds": self.rounds,
                "candidates": [{"delta": d, "top": lr_key(self.epsilon + d), "val_acc": self.scores[d],
                                "diverged": self.scores[d] is None} for d in trained]}


def _train(runner: Runner, epsilon: float, deltas: list[float], seeds: list[int], target: int) -> list[dict]:
    """Each δ's chains on every seed through the target cycle, as curve rows indexed by δ (`max_lr` holds δ):
    the validation accuracy at the target cycle, diverged when a chain diverged before or at it."""
    params = {d: SiloParams(epsilon=epsilon, delta=d, q=PAPER_Q, beta=PAPER_BETA) for d in deltas}
    runs = {f"d{grid_key(d)}": (silo_spec(runner.spec, p), None, silo_tags(Method.SILO_PAPER, p, Stage.TUNE))
            for d, p in params.items()}
    chains = run_chains(runner, runs, seeds, Stage.TUNE, last_cycle=target)
    return [{"max_lr": d, "seed": s, "val_acc": end["val_acc"],
             "diverged": bool(end["diverged"]) or end["cycle"] != target}
            for d in deltas for s in seeds for end in [chains[(f"d{grid_key(d)}", s)][-1]]]


def search_delta(runner: Runner, epsilon: float, grid: list[float], seeds: list[int],
                 target: int, rounds: int = ROUNDS) -> DeltaSearch:
    """Train the first δ candidates, then refine around the winner until it is bracketed (module docstring)."""
    coarse = delta_range(epsilon, grid)
    rows = _train(runner, epsilon, delta_grid(epsilon, grid), seeds, target)
    done = 0
    while True:
        curve = Curve.from_rows(rows)
        winner, trained = curve.best, curve.trained
        if winner is None:
            why = "every δ diverged"
            break
        if target <= PAPER_Q:
            why = f"the target cycle {target} is at most q = {PAPER_Q}: every δ trains alike there"
            break
        new, ends = next_deltas(winner, trained, coarse)
        if not new:
            ends = [{"below": "bottom", "above": "top"}[side] for side in ends]
            why = None if bracketed(winner, trained) else f"δ sits at the {' and '.join(ends)} of its range"
            break
        if done >= rounds:
            why = f"{rounds} refinement rounds spent"
            break
        done += 1
        runner.progress.say(f"silo_paper: δ = {winner:.4g} is best so far; refining with "
                            f"{', '.join(f'{d:.4g}' for d in new)}")
        rows += _train(runner, epsilon, new, seeds, target)
    dead = curve.diverged.any(axis=1)
    scores = {float(d): None if dead[d] else float(m) for d, m in curve.mean().items()}
    return DeltaSearch(epsilon=epsilon, target_cycle=target, seeds=list(seeds), range=coarse, scores=scores,
                       delta=winner, is_bracketed=why is None, open=why, rounds=done)


def tune_silo_paper(runner: Runner, epsilon: float, grid: list[float], seeds: list[int],
                    target: int, rounds: int = ROUNDS) -> SiloParams | None:
    """The paper's SILO with δ bracketed at cycle `target`; writes DIR/silo_paper.json. None when every δ
    diverged."""
    first = delta_grid(epsilon, grid)
    runner.progress.say(f"silo_paper: ε = {epsilon:.4g} (the Oracle's dense best), q = {PAPER_Q}, β = {PAPER_BETA:g}; "
                        f"δ from {', '.join(f'{d:.4g}' for d in first)} at cycle {target} on {len(seeds)} seed(s), "
                        f"refined until its neighbours lie within ×{BRACKET:g}")
    found = search_delta(runner, epsilon, grid, seeds, target, rounds)
    atomic_write_json(runner.out / RECORD, found.record())
    if found.delta is None:
        runner.progress.say("silo_paper: every δ diverged; silo_paper is left out")
        return None
    runner.progress.say(f"silo_paper: δ = {found.delta:.4g} (val {found.scores[found.delta]:.2f} at cycle {target}, "
                        f"{len(found.scores)} δ tried); "
                        + ("bracketed" if found.is_bracketed else f"NOT bracketed: {found.open}"))
    return SiloParams(epsilon=epsilon, delta=found.delta, q=PAPER_Q, beta=PAPER_BETA)
