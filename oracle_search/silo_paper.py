"""SILO as the paper prescribes it (§4, "Parameter Selection for SILO"): q = 1 and β = 5; ε is the tuned LR of
the unpruned network (the Oracle's seed-mean dense best); δ is chosen by validation accuracy at the target
sparsity (the last cycle), on the tuning seeds, and refined until it is bracketed.

δ's range and its search: `oracle_search.delta`.

Written to DIR/silo_paper.json: `delta_candidates` (every δ trained, ascending), `delta` (the winner, null when
every δ diverged), `delta_bracketed`, and `delta_open` (why not bracketed, else null), with each candidate's
score."""
from __future__ import annotations

from dataclasses import dataclass

from oracle_search.baselines import run_chains
from oracle_search.curve import lr_key
from oracle_search.delta import BRACKET, PAPER_BETA, PAPER_Q, DeltaPlan, why_stopped
from oracle_search.racing import Pair
from oracle_search.retention import Claim
from oracle_search.runner import Runner
from oracle_search.schema import Method, Stage
from oracle_search.trainings import grid_key, silo_spec, silo_tags
from trainables.atomic import atomic_write_json
from trainables.schedules import SiloParams
from trainables.spec import ExperimentSpec

RECORD = "silo_paper.json"

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


def _train(runner: Runner, epsilon: float, pairs: list[Pair], target: int,
           finals: tuple[float, tuple[int, ...]] | None = None) -> dict[Pair, dict]:
    """Each (δ, seed) chain through the target cycle, as a curve row by pair (`max_lr` holds δ): the validation
    accuracy at the target cycle, diverged when the chain diverged before or at it. `finals` (δ, evaluation
    seeds): the final chains of that δ trained beside them, speculatively (`search_delta`)."""
    params = {d: SiloParams(epsilon=epsilon, delta=d, q=PAPER_Q, beta=PAPER_BETA)
              for d in dict.fromkeys(d for d, _ in pairs)}
    runs = {f"d{grid_key(d)}": (silo_spec(runner.spec, p), None, silo_tags(Method.SILO_PAPER, p, Stage.TUNE))
            for d, p in params.items()}
    chained = [(f"d{grid_key(d)}", s) for d, s in pairs]
    if finals is not None:  # the very trainings `run_finals` hands over for this δ: a ledger hit when it wins
        lead = SiloParams(epsilon=epsilon, delta=finals[0], q=PAPER_Q, beta=PAPER_BETA)
        runs[Method.SILO_PAPER.value] = (silo_spec(runner.spec, lead), None,
                                         silo_tags(Method.SILO_PAPER, lead, Stage.FINAL, selected=True))
        chained += [(Method.SILO_PAPER.value, s) for s in finals[1]]
    # Behind a δ chain: likely one more look, then the final chains.
    chains = run_chains(runner, runs, [], Stage.TUNE, last_cycle=target, pairs=chained,
                        after=target - PAPER_Q + runner.spec.cycles + 1,
                        ends={Method.SILO_PAPER.value: runner.spec.cycles})
    return {(d, s): {"max_lr": d, "seed": s, "val_acc": end["val_acc"],
                     "diverged": bool(end["diverged"]) or end["cycle"] != target}
            for d, s in pairs for end in [chains[(f"d{grid_key(d)}", s)][-1]]}


def claims(spec: ExperimentSpec, epsilon: float, seeds: list[int]) -> list[Claim]:
    """What silo_paper will train whatever δ is, for retention (`retention.Claim`): on its tuning and evaluation
    seeds, cycles 0..q at ε. The Oracle's cycle-1 row at ε is that training even when its cycle 1 chose another
    value, and a δ chain or a final chain reaching it later starts from it."""
    peaks = (epsilon,) * (min(PAPER_Q, spec.cycles) + 1)
    fingerprint = silo_spec(spec, SiloParams(epsilon=epsilon, q=PAPER_Q, beta=PAPER_BETA)).training_fingerprint()
    return [Claim(fingerprint, frozenset(seeds), (peaks,))]


def search_delta(runner: Runner, plan: DeltaPlan) -> DeltaSearch:
    """Train the first δ candidates, then refine around the winner until it is bracketed (`DeltaPlan`)."""
    epsilon, seeds, target, rounds = plan.epsilon, plan.seeds, plan.target, plan.rounds
    race = plan.race()
    sped: set[float] = set()  # δ values whose final chains were started

    def train(pairs: list[Pair]) -> dict[Pair, dict]:
        # A wide plan starts the leader's final chains with the next look: if it stays the winner, they are done
        # when δ is decided (a look is a chain of cycles, as the finals are); if not, they are kept, deselected by
        # the winner's finals (`supersede`), and never read by a decision.
        lead = race.curve().best if plan.wide and plan.final_seeds and race.rows else None
        finals = None
        if lead is not None and lead not in sped:
            sped.add(lead)
            finals = (lead, plan.final_seeds)
            runner.progress.say(f"silo_paper: δ = {lead:.4g} leads; its final runs start beside the next look")
        return _train(runner, epsilon, pairs, target, finals)

    done = plan.run(race, train, runner.slots(), runner.progress.say)
    curve, dropped, coarse = race.curve(), dict(race.dropped), plan.coarse
    why = why_stopped(curve, coarse, target, rounds)
    dead = curve.diverged.any(axis=1)
    scores = {float(d): None if dead[d] else float(m) for d, m in curve.mean().items()}
    return DeltaSearch(epsilon=epsilon, target_cycle=target, seeds=list(seeds), range=coarse, scores=scores,
                       delta=curve.best, is_bracketed=why is None, open=why, rounds=done,
                       trained_on={float(d): int(n) for d, n in curve.acc.count(axis=1).items()}, dropped=dropped)


def tune_silo_paper(runner: Runner, plan: DeltaPlan) -> SiloParams | None:
    """The paper's SILO with δ bracketed at the plan's target cycle (`search_delta`); writes DIR/silo_paper.json.
    None when every δ diverged."""
    epsilon, target = plan.epsilon, plan.target
    runner.progress.say(f"silo_paper: ε = {epsilon:.4g} (the Oracle's dense best), q = {PAPER_Q}, β = {PAPER_BETA:g}; "
                        f"δ from {', '.join(f'{d:.4g}' for d in plan.first)} at cycle {target} on {len(plan.seeds)} "
                        f"seed(s), refined until its neighbours lie within ×{BRACKET:g}{', racing' * plan.racing}")
    found = search_delta(runner, plan)
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


def silo_paper_params(runner: Runner, plan: DeltaPlan, dense: float | None) -> SiloParams | None:
    """silo_paper's parameters, its δ searched from the Oracle's dense best `dense` (ε) on the runner's slots
    (`DeltaPlan.for_slots`); None without an Oracle here (said) or when every δ diverged."""
    if dense is None:
        runner.progress.say("silo_paper: no Oracle dense best in this folder; silo_paper is left out")
        return None
    return tune_silo_paper(runner, plan.for_epsilon(dense).for_slots(runner.slots()))
