"""Tuned methods and their final runs.

Tuning (paper §5.1(3)): each benchmark schedule's peak LR is chosen on cycle 0 by seed-mean validation accuracy
over the tuning seeds. Final runs: cycles 0..L of every tuned method on evaluation seeds that no tuning row used,
all methods advancing one cycle at a time; their test accuracy fills the accuracy table."""
from __future__ import annotations

import pandas as pd

from oracle_search.identity import Training
from oracle_search.runner import Runner, Started
from oracle_search.retention import Claim
from oracle_search.trainings import (Streaming, chain_suffix, cycle_training, peak_name, silo_spec, silo_tags,
                                     tuning_training)
from oracle_search.schema import BASELINES, Method, Stage
from oracle_search.racing import Pool, TuningPlan, pool_of, run_races
from oracle_search.selection import dense_curve
from trainables.schedules import SiloParams
from trainables.spec import ExperimentSpec


def tune_peaks(runner: Runner, schedules: tuple[str, ...], plan: TuningPlan) -> dict[str, float]:
    """Each schedule's best peak LR on cycle 0 (seed-mean validation accuracy over values every seed trained; ties
    to the smaller LR). A racing `plan`: one race per schedule, side by side (oracle_search.racing): a peak shown more than
    0.5 points worse than that schedule's leader gets no more seeds, and each race walks out from the Oracle's dense
    best (`racing.tuning_race`: a peak beyond one so dropped is not trained). Each race starts from the pool of the
    Oracle's cycle-0 curve on the same seeds where this folder holds one: the same network from the same
    initialisation, trained one cycle on the same seeds, differing only in the schedule's shape, so a paired
    difference's seed noise is taken to be the same (docs/design.md, "Racing"); the Oracle's own schedule gets none
    (`racing.tuning_race`)."""
    spec, seeds = runner.spec, list(plan.seeds)
    runner.progress.say(f"baselines: tuning the peak LR of {', '.join(schedules)} over {len(plan.grid)} values"
                        f"{', racing' * plan.racing}")
    dense = dense_curve(pd.DataFrame(runner.ledger.rows()), seeds) if plan.racing else None
    prior = pool_of(dense) if dense is not None else Pool()
    if prior.df:
        runner.progress.say(f"  baselines: racing from the Oracle's cycle-0 pool (sd {prior.sd:.2f} points, "
                            f"{prior.df} df)")
    races = {name: plan.race(dense, own=name == spec.schedule.name) for name in schedules}
    run_races(races, Streaming(runner, lambda name, pair: tuning_training(spec, name, *pair)), runner.slots())
    curves = {name: race.curve() for name, race in races.items()}
    peaks = {}
    for name in schedules:
        best = curves[name].best
        if best is None:
            runner.progress.say(f"  baselines: every peak LR diverged for {name}; it is left out")
            continue
        peaks[name] = best
        runner.progress.say(f"  baselines: {name} tuned peak LR {best:.4g} over {len(seeds)} seed(s)")
    return peaks


def claims(spec: ExperimentSpec, schedules: tuple[str, ...], grid: list[float], seeds: list[int],
           cycles: int) -> list[Claim]:
    """What the baselines' final runs will train in their first `cycles` cycles, for retention
    (`retention.Claim`): each schedule held at one peak from the grid (the tuned one, not known before the tuning),
    on the evaluation seeds. The LR-warmup baseline at ε trains what silo_paper's final chain trains at cycles
    0..q, so `cycles` is q + 1: a longer claim would only keep the baselines' own chains from moving on."""
    peaks = tuple((v,) * min(cycles, spec.cycles + 1) for v in grid)
    return [Claim(spec.with_schedule(name=name).training_fingerprint(), frozenset(seeds), peaks)
            for name in schedules]


def run_chains(runner: Runner, runs: dict[str, tuple[ExperimentSpec, float | None, dict]], seeds: list[int],
               stage: Stage, last_cycle: int, pairs: list[tuple[str, int]] | None = None,
               after: int = 0, ends: dict[str, int] | None = None) -> dict[tuple[str, int], list[dict]]:
    """Cycles 0..last_cycle for each named run and seed; a chain that diverges stops. `runs` maps a name -> (spec,
    max_lr (one value, or {cycle: max_lr}) or None for SILO, tags); `pairs`: only these (name, seed) chains
    (default: every run on every seed).
    Returns each chain's rows. `after`: the trainings the line has behind the chains (their priority adds it).
    `ends`: a run's own last cycle where it is not `last_cycle`; a run whose tags carry a stage keeps it.

    The chains stream: each takes its next cycle as soon as its own last one ends, not when the slowest chain of
    the cycle does (on many slots a cycle-by-cycle walk waits, at every cycle, for the slowest of its trainings).
    Cycle 0 is handed over as one batch, so its trainings can share a fused trial where the options fuse."""
    pairs = pairs if pairs is not None else [(name, s) for name in runs for s in seeds]
    chains: dict[tuple[str, int], list[dict]] = {pair: [] for pair in pairs}
    say = runner.progress.say
    last = {name: (ends or {}).get(name, last_cycle) for name in runs}

    def training(pair: tuple[str, int], cycle: int, start: dict | None) -> Training:
        (name, s), (spec, lr, tags) = pair, runs[pair[0]]
        lr = lr.get(cycle) if isinstance(lr, dict) else lr  # a schedule of max_lr per cycle (`held_out`)
        own = tags.get("stage", stage.value)
        return cycle_training(spec, f"{tags['method']}-{own}-{name}-c{cycle:02d}-s{s}-{peak_name(spec, lr)}"
                                    f"{chain_suffix(start)}", cycle, s, lr, start, tags | {"stage": own},
                              last[name] - cycle + after)

    def hand_over(steps: dict[tuple[str, int], Training]) -> None:
        for going_on in (True, False):  # a batch's trials share `need_checkpoints`
            batch = {pair: t for pair, t in steps.items() if (t.cycle < last[pair[0]]) == going_on}
            if batch:
                started = runner.start(list(batch.values()), need_checkpoints=going_on)
                running.update({pair: (t, started) for pair, t in batch.items()})

    running: dict[tuple[str, int], tuple[Training, Started]] = {}
    hand_over({pair: training(pair, 0, None) for pair in pairs})
    last_cycle = max(last.values(), default=last_cycle)
    left = {cycle: sum(1 for name, _ in pairs if last[name] >= cycle) for cycle in range(last_cycle + 1)}
    news = 0
    while running:
        batches = {id(batch): batch for _, batch in running.values()}  # a batch's rows read once a poll
        ready = {i: runner.ready(batch) for i, batch in batches.items()}
        landed = {pair: ready[id(batch)][t.key] for pair, (t, batch) in running.items() if t.key in ready[id(batch)]}
        if not landed:
            news = runner.wait_for_news(news)
            continue
        for pair, row in landed.items():
            del running[pair]
            chains[pair].append(row)
            cycle = row["cycle"]
            stopped = bool(row["diverged"]) or cycle == last[pair[0]]
            if row["diverged"]:
                say(f"  {pair[0]} seed {pair[1]} diverged at cycle {cycle}; it stops here")
            for c in range(cycle, last[pair[0]] + 1) if stopped else [cycle]:
                left[c] -= 1
                if left[c] == 0:
                    say(f"{stage.value} runs: cycle {c} done [{runner.progress.elapsed()}]")
            if not stopped:
                hand_over({pair: training(pair, cycle + 1, row)})
    runner.prune_checkpoints()
    return chains


def supersede(runner: Runner, chains: dict[tuple[str, int], list[dict]]) -> None:
    """Make these final chains the current ones: select their rows and deselect every other final row of the
    same methods (a rerun with other tuned parameters replaces the earlier chain; both stay in the table)."""
    keep = {row["key"] for rows in chains.values() for row in rows}
    methods = {row["method"] for rows in chains.values() for row in rows}
    for row in runner.ledger.rows():
        if row.get("method") in methods and row.get("stage") == Stage.FINAL.value:
            want = row["key"] in keep
            if bool(row.get("selected")) != want:
                runner.ledger.record(row | {"selected": want})


def run_finals(runner: Runner, peaks: dict[str, float], silo: dict[Method, SiloParams], seeds: list[int]) -> None:
    """Final runs of every tuned baseline and SILO variant on the evaluation seeds."""
    spec = runner.spec
    runs = {name: (spec.with_schedule(name=name), lr, {"method": name, "schedule": name, "selected": True})
            for name, lr in peaks.items()}
    for method, params in silo.items():
        runs[method.value] = (silo_spec(spec, params), None, silo_tags(method, params, Stage.FINAL, selected=True))
    runner.progress.say(f"final runs of {', '.join(runs)} on evaluation seeds {seeds}")
    supersede(runner, run_chains(runner, runs, seeds, Stage.FINAL, runner.spec.cycles))


def run_baselines(runner: Runner, plan: TuningPlan, eval_seeds: list[int], silo: dict[Method, SiloParams],
                  schedules: tuple[str, ...] = BASELINES) -> dict[str, float]:
    """Tune every baseline's peak as `plan` says (on the tuning seeds), then run them and the given SILO variants on
    the evaluation seeds."""
    peaks = tune_peaks(runner, schedules, plan)
    run_finals(runner, peaks, silo, eval_seeds)
    return peaks
