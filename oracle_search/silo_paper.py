"""SILO as the paper prescribes it (§4, "Parameter Selection for SILO"): q = 1 and β = 5; ε is the tuned LR of
the unpruned network (the Oracle's seed-mean dense best); δ is chosen by validation accuracy at the target
sparsity (the last cycle) over a δ grid, on the tuning seeds.

The δ grid puts SILO's top, ε + δ, on each of the next `DELTA_VALUES` Oracle grid values above ε ("ε and δ can be
searched from a range of n values", §5.3). Cycles 0..q train at ε whatever δ is, so they are trained once and
reused by every δ (the engine matches identical trainings)."""
from __future__ import annotations

from oracle_search.baselines import run_chains, silo_spec, silo_tags
from oracle_search.engine import Runner
from oracle_search.oracle import grid_key
from oracle_search.schema import Method, Stage
from oracle_search.selection import lr_key
from trainables.schedules import SiloParams

PAPER_Q, PAPER_BETA = 1, 5.0
DELTA_VALUES = 3


def delta_grid(epsilon: float, grid: list[float], n: int = DELTA_VALUES) -> list[float]:
    """δ values whose ε + δ lands on the next n grid values above ε (at least one: 2ε when ε tops the grid)."""
    above = [g for g in sorted(grid) if g > epsilon * (1 + 1e-9)][:n]
    return [lr_key(g - epsilon) for g in above] or [lr_key(epsilon)]


def tune_silo_paper(runner: Runner, epsilon: float, grid: list[float], seeds: list[int],
                    target_cycle: int | None = None) -> SiloParams | None:
    """The paper's SILO: δ with the best seed-mean validation accuracy at the target cycle (ties to the smaller
    δ; a δ that diverged on any seed is out). None when every δ diverged."""
    target = runner.spec.cycles if target_cycle is None else target_cycle
    deltas = delta_grid(epsilon, grid)
    params = {d: SiloParams(epsilon=epsilon, delta=d, q=PAPER_Q, beta=PAPER_BETA) for d in deltas}
    runner.progress.say(f"silo_paper: ε = {epsilon:.4g} (the Oracle's dense best), q = {PAPER_Q}, β = {PAPER_BETA:g}; "
                        f"δ over {', '.join(f'{d:.4g}' for d in deltas)} at cycle {target} on {len(seeds)} seed(s)")
    runs = {f"d{grid_key(d)}": (silo_spec(runner.spec, p), None, silo_tags(Method.SILO_PAPER, p, Stage.TUNE))
            for d, p in params.items()}
    chains = run_chains(runner, runs, seeds, Stage.TUNE, last_cycle=target)
    scores = {}
    for d in deltas:
        ends = [chains[(f"d{grid_key(d)}", s)][-1] for s in seeds]
        if all(r["cycle"] == target and not r["diverged"] for r in ends):
            scores[d] = sum(r["val_acc"] for r in ends) / len(ends)
    if not scores:
        runner.progress.say("silo_paper: every δ diverged; silo_paper is left out")
        return None
    best = min(scores, key=lambda d: (-scores[d], d))
    runner.progress.say(f"silo_paper: δ = {best:.4g} (val {scores[best]:.2f} at cycle {target})")
    return params[best]
