"""One whole study on a Runner's folder (`run_study`): the Oracle, silo_paper's δ, silo_fit's study, the baselines'
tuning, every method's final runs on the evaluation seeds, the completions the verdict needs, and the held-out
references' final runs (the Oracle's schedule and both controls, `held_out`), each driver on
its own plan (`plan.StudyPlan`). `pipeline.compare` runs R of these side by side on one engine; the dry run runs
them on a virtual clock (`simulate_job`); `pipeline.baselines` runs the baselines with the SILO variants a folder
holds (`silo_variants`)."""
from __future__ import annotations

from oracle_search import fitter
from oracle_search.baselines import claims as baseline_claims, run_finals, tune_peaks
from oracle_search.delta import PAPER_Q, DeltaPlan
from oracle_search.held_out import run_held_out
from oracle_search.oracle import dense_best_here, oracle_cycles, verdict_completions
from oracle_search.plan import StudyPlan
from oracle_search.schema import BASELINES, Method
from oracle_search.side_by_side import first_error, side_by_side
from oracle_search.silo_paper import claims as silo_paper_claims, silo_paper_params


def silo_variants(runner, plan: DeltaPlan, study) -> dict:
    """silo_paper's parameters (needs the Oracle's dense best; `plan`: its δ search) and silo_fit's (`study`), where
    each exists."""
    variants = {}
    if (p := silo_paper_params(runner, plan, dense_best_here(runner))) is not None:
        variants[Method.SILO_PAPER] = p
    if study is not None and (p := fitter.fitted_params(study)) is not None:
        variants[Method.SILO_FIT] = p
    return variants


def run_study(runner, plan: StudyPlan):
    """One whole study on `runner`'s folder, its searches as `plan` says; writes the results table. Returns
    silo_fit's study and the SILO variants that got parameters. `compare` runs one; `--replicates R` runs R side by side.

    The Oracle walks its cycles. Once its cycle 0 is decided (the dense best: both SILO variants' ε, and the pool
    the baselines' tuning races from), three lines of work run beside it, each ending in its methods' final runs
    on the evaluation seeds: silo_fit's study, silo_paper's δ search, the baselines' tuning. None of them needs
    a later Oracle cycle, so on many slots they fill what the Oracle's chain leaves idle (a training two lines
    need is trained once: `runner.Runner.start`). Then the completions the verdict needs, which need every
    method's schedule."""
    spec, say = runner.spec, runner.progress.say
    tune, evaluate = list(plan.oracle.seeds), list(plan.evaluate)
    say(f"compare: {spec.preset}, {spec.cycles + 1} cycles, tuning seeds {tune}, evaluation seeds {evaluate} "
        f"-> {runner.out}")
    say("== 1/4 Oracle ==")
    dense_decided = runner.executor.event()
    # What the lines beside the Oracle will train, held for retention from before they start until each ends
    # (`retention.Claim`): silo_paper's cycles 0..q at ε may be rows the Oracle's later cycles would delete.
    releases = {}

    def cycle_decided(outcome) -> None:
        if outcome.cycle == 0:
            releases["silo_paper"] = runner.hold(silo_paper_claims(spec, outcome.choice.best, tune + evaluate))
            releases["baselines"] = runner.hold(baseline_claims(spec, BASELINES, list(spec.grid), evaluate,
                                                                     cycles=PAPER_Q + 1))
            say("== 2/4 beside the Oracle's later cycles: " + "silo_fit (Optuna), " * (plan.fit is not None)
                + "silo_paper's δ, the baselines' tuning; each then its final runs ==")
            dense_decided.set()

    def oracle() -> None:
        try:
            oracle_cycles(runner, plan.oracle, cycle_decided)
        finally:
            dense_decided.set()  # also when it stopped at cycle 0 (every value diverged) or failed
        runner.write_results()

    def beside_the_oracle(job):
        def run():
            dense_decided.wait()
            try:
                return job()
            finally:
                if job.__name__ in releases:
                    releases.pop(job.__name__)()
        return run

    def silo_fit():
        study = fitter.fit_study(runner, plan.fit, dense_best_here(runner))
        if (params := fitter.fitted_params(study)) is not None:
            run_finals(runner, {}, {Method.SILO_FIT: params}, evaluate)
        return study, params

    def silo_paper():
        if (params := silo_paper_params(runner, plan.delta, dense_best_here(runner))) is not None:
            run_finals(runner, {}, {Method.SILO_PAPER: params}, evaluate)
        return params

    def baselines():
        run_finals(runner, tune_peaks(runner, BASELINES, plan.tuning), {}, evaluate)

    work = {"oracle": oracle, "silo_fit": beside_the_oracle(silo_fit), "silo_paper": beside_the_oracle(silo_paper),
            "baselines": beside_the_oracle(baselines)}
    if plan.fit is None:
        del work["silo_fit"]
    lines = side_by_side(work, runner.executor)  # its maker started it (`pipeline.compare`)
    runner.write_results()
    first_error(lines)
    study, fitted = lines["silo_fit"].value if "silo_fit" in lines else (None, None)
    variants = {method: params for method, params in
                ((Method.SILO_PAPER, lines["silo_paper"].value), (Method.SILO_FIT, fitted)) if params is not None}
    if plan.oracle.completes:
        say("== 3/4 the completions the verdict needs ==")
        verdict_completions(runner, plan.oracle)
    else:
        say("== 3/4 every method's final runs done ==")
    runner.write_results()
    # Last, as their choices need every Oracle cycle (and the best constant the completions): every choice is
    # fixed on the tuning seeds before these evaluation seeds train.
    say("== 4/4 the held-out references: the Oracle's schedule, not adapting, the best constant ==")
    run_held_out(runner, evaluate)
    runner.write_results()
    runner.prune_checkpoints(finished=True)
    if again := sum(1 for row in runner.ledger.rows() if row.get("retrained")):
        say(f"checkpoints: {again} start(s) were gone and trained again (rows marked retrained)")
    return study, variants
