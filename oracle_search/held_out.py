"""The held-out references: the Oracle's choices and the two schedules that do not adapt, trained end to end on the
evaluation seeds, so that every comparison of the verdict is read on seeds that made no choice.

Each is chosen on the tuning seeds, from the Oracle's current chain, and fixed before any of its evaluation seeds is
trained (`schedules_of`, a pure function of the results table):
- `oracle_schedule`: b, the value the Oracle chained at each cycle 0..L;
- `constant_dense`: the Oracle's cycle-0 choice kept at every cycle (not adapting: what LR warmup tuned on cycle 0
  does);
- `constant_best`: the one max_lr with the best summed seed-mean validation accuracy over cycles 1..L on the
  Oracle's chain (`compared.constant_best`: chosen in hindsight on the tuning seeds, so on its own chain an
  optimistic control; held out, it is a fair one).

Each then runs as a final chain of cycles 0..L with the Oracle's own schedule shape (the spec's schedule) at its
max_lr of the cycle, like every tuned method's finals (`baselines.run_chains`). A training another chain already
ran (the LR-warmup baseline at the dense choice, silo_paper's cycles at ε, the cycles two of these share) is not
trained again (`dedup`)."""
from __future__ import annotations

import pandas as pd

from oracle_search.baselines import run_chains, supersede
from oracle_search.compared import oracle_curves, oracle_trials, schedules
from oracle_search.curve import lr_key
from oracle_search.runner import Runner
from oracle_search.schema import Method, Stage, results_frame


def oracle_b(df: pd.DataFrame) -> dict[int, float]:
    """b per cycle 0..L: the max_lr of the Oracle's selected (chained) rows on the seeds whose chain reaches L. Every
    seed chains the same b; seeds that disagree are an error, not a first pick."""
    curves = oracle_curves(df)
    rows = oracle_trials(df)
    rows = rows[rows["selected"].astype(bool) & rows["seed"].isin(curves.seeds)]
    out = {}
    for cycle, at in rows.groupby("cycle"):
        values = set(at["max_lr"].map(lr_key))
        if len(values) != 1:
            raise ValueError(f"the Oracle chained several max_lr at cycle {cycle}: {sorted(values)}")
        out[int(cycle)] = values.pop()
    return {m: out[m] for m in range(curves.last + 1) if m in out}


def schedules_of(df: pd.DataFrame) -> dict[str, dict[int, float]]:
    """Each held-out reference's max_lr per cycle 0..L, from the tuning seeds' rows alone (the Oracle's current
    chain); a reference the table cannot define yet (no Oracle chain, L = 0 for the best constant) is left out."""
    curves = oracle_curves(df)
    controls = schedules(df, curves)
    out = {Method.ORACLE_SCHEDULE.value: oracle_b(df),
           Method.CONSTANT_DENSE.value: controls.get("constant_dense", {}),
           Method.CONSTANT_BEST.value: controls.get("constant_best", {})}
    cycles = set(range(curves.last + 1))
    return {name: lrs for name, lrs in out.items() if lrs and set(lrs) == cycles}


def run_held_out(runner: Runner, seeds: list[int]) -> dict[str, dict[int, float]]:
    """Train each held-out reference's final chain on the evaluation `seeds`, its max_lr per cycle fixed first from
    the tuning seeds' rows. Returns the schedules trained."""
    spec = runner.spec
    fixed = schedules_of(results_frame(runner.ledger.rows()))
    if not fixed:
        runner.progress.say("held-out references: the Oracle's chain defines none; skipped")
        return {}
    for name, lrs in fixed.items():
        runner.progress.say(f"  {name}: max_lr {', '.join(f'{lrs[m]:.4g}' for m in sorted(lrs))} (cycles 0..L, "
                            "fixed on the tuning seeds)")
    runs = {name: (spec, lrs, {"method": name, "schedule": spec.schedule.name, "selected": True})
            for name, lrs in fixed.items()}
    last = {name: max(lrs) for name, lrs in fixed.items()}
    runner.progress.say(f"final runs of {', '.join(runs)} on evaluation seeds {seeds}")
    supersede(runner, run_chains(runner, runs, seeds, Stage.FINAL, max(last.values()), ends=last))
    return fixed
