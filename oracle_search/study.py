"""One whole study on a Runner's folder (`run_study`): the Oracle, silo_paper's δ, silo_fit's study, the baselines'
tuning, every method's final runs on the evaluation seeds, and the completions the verdict needs; with the pieces
the single commands run alone (`pipeline.oracle`, `fit_silo`, `baselines`). `pipeline.compare` runs R of these side
by side on one engine; the dry run runs them on a virtual clock (`simulate_job`). Seeds: `oracle_search.seeds`."""
from __future__ import annotations

import dataclasses

import pandas as pd

from oracle_search import fitter
from oracle_search.baselines import claims as baseline_claims, run_finals, tune_peaks
from oracle_search.compared import complete_for_verdict
from oracle_search.delta import PAPER_Q, DeltaPlan
from oracle_search.options import CompareOptions, FitOptions, OracleOptions
from oracle_search.oracle import complete, run_oracle
from oracle_search.racing import OracleSearch, TuningPlan
from oracle_search.schema import BASELINES, Method, results_frame
from oracle_search.seeds import evaluation_seeds, tuning_seeds
from oracle_search.selection import dense_best
from oracle_search.side_by_side import first_error, side_by_side
from oracle_search.silo_paper import claims as silo_paper_claims, tune_silo_paper
from trainables.atomic import atomic_write_json


def oracle_cycles(runner, options: OracleOptions, decided=None):
    """The Oracle on the tuning seeds (`oracle.run_oracle`); `decided` hears each cycle's outcome."""
    return run_oracle(runner, OracleSearch.of(runner.spec, options).for_slots(runner.slots()), decided)


def verdict_completions(runner, options: OracleOptions) -> None:
    """Racing leaves values far from b with fewer seeds. Before the analysis, train the missing seeds of the
    values next to every compared schedule's max_lr at every cycle (`compared.complete_for_verdict`), so
    the verdict interpolates between complete values as it does after an exhaustive Oracle."""
    seeds = tuning_seeds(runner.spec, options.seeds)

    def train(targets: dict[int, list[float]]) -> int:
        trained = complete(runner, seeds, targets)
        runner.progress.say(f"verdict: completed {sum(map(len, targets.values()))} value(s) next to the compared "
                            f"schedules ({trained} trainings)")
        return trained

    complete_for_verdict(lambda: results_frame(runner.ledger.rows()), train, list(runner.spec.grid), options.bracket)


def folder_dense_best(runner) -> float | None:
    """The Oracle's seed-mean dense best from this folder's ledger, or None when no Oracle ran here."""
    ledger = pd.DataFrame(runner.ledger.rows())
    return dense_best(ledger) if not ledger.empty else None


def silo_fit_study(runner, options: FitOptions):
    """silo_fit: the Optuna study, with ε searched around the Oracle's dense best when this folder holds one."""
    space = options.space or fitter.SearchSpace.default(runner.spec)
    dense = folder_dense_best(runner)
    if dense is not None and options.space is None:
        # The paper tunes epsilon on the unpruned network; the Oracle's cycle 0 has done exactly that.
        space = dataclasses.replace(space, epsilon=(dense / 2, dense * 2))
        runner.progress.say(f"silo_fit: ε searched in [{dense / 2:.4g}, {dense * 2:.4g}] around the Oracle's "
                            f"dense max_lr {dense:.4g}")
    seeds = tuning_seeds(runner.spec, options.seeds)
    target = options.target(runner.spec)
    atomic_write_json(runner.out / "silo_fit.json", {  # what the report prints as silo_fit's search
        "space": dataclasses.asdict(space), "trials": options.trials, "seeds": seeds, "target_cycle": target,
        "objective": f"seed-mean validation accuracy at cycle {target}"})
    return fitter.fit_silo(runner, seeds, options.trials, space, options.storage, runner.slots(len(seeds)),
                           target, dense)


def fitted_params(study):
    """The study's best parameters, or None when no trial finished (every one diverged or was stopped)."""
    try:
        return fitter.best_params(study)
    except ValueError:
        return None


def silo_paper_params(runner, options: CompareOptions):
    """silo_paper's parameters, its δ searched from this folder's Oracle dense best (ε); None without an Oracle here
    (said) or when every δ diverged."""
    dense = folder_dense_best(runner)
    if dense is None:
        runner.progress.say("silo_paper: no Oracle dense best in this folder; silo_paper is left out")
        return None
    return tune_silo_paper(runner, DeltaPlan.of(runner.spec, options).for_epsilon(dense).for_slots(runner.slots()))


def silo_variants(runner, options: CompareOptions, study) -> dict:
    """silo_paper's parameters (needs the Oracle's dense best) and silo_fit's, where each exists."""
    variants = {}
    if (p := silo_paper_params(runner, options)) is not None:
        variants[Method.SILO_PAPER] = p
    if study is not None and (p := fitted_params(study)) is not None:
        variants[Method.SILO_FIT] = p
    return variants


def run_study(runner, options: CompareOptions):
    """One whole study on `runner`'s folder; writes the results table. Returns silo_fit's study and the SILO
    variants that got parameters. `compare` runs one; `--replicates R` runs R side by side.

    The Oracle walks its cycles. Once its cycle 0 is decided (the dense best: both SILO variants' ε, and the pool
    the baselines' tuning races from), three lines of work run beside it, each ending in its methods' final runs
    on the evaluation seeds: silo_fit's study, silo_paper's δ search, the baselines' tuning. None of them needs
    a later Oracle cycle, so on many slots they fill what the Oracle's chain leaves idle (a training two lines
    need is trained once: `runner.Runner.start`). Then the completions the verdict needs, which need every
    method's schedule."""
    spec, say = runner.spec, runner.progress.say
    tune, evaluate = tuning_seeds(spec, options.oracle.seeds), evaluation_seeds(spec, options.eval_seeds)
    racing = options.oracle.racing
    say(f"compare: {spec.preset}, {spec.cycles + 1} cycles, tuning seeds {tune}, evaluation seeds {evaluate} "
        f"-> {runner.out}")
    say("== 1/4 Oracle ==")
    dense_decided = runner.engine.event()
    # What the lines beside the Oracle will train, held for retention from before they start until each ends
    # (`retention.Claim`): silo_paper's cycles 0..q at ε may be rows the Oracle's later cycles would delete.
    releases = {}

    def cycle_decided(outcome) -> None:
        if outcome.cycle == 0:
            releases["silo_paper"] = runner.hold(silo_paper_claims(spec, outcome.choice.best, tune + evaluate))
            releases["baselines"] = runner.hold(baseline_claims(spec, BASELINES, list(spec.grid), evaluate,
                                                                     cycles=PAPER_Q + 1))
            say("== 2/4 beside the Oracle's later cycles: " + "silo_fit (Optuna), " * options.silo_fit
                + "silo_paper's δ, the baselines' tuning; each then its final runs ==")
            dense_decided.set()

    def oracle() -> None:
        try:
            oracle_cycles(runner, options.oracle, cycle_decided)
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
        study = silo_fit_study(runner, options.fit)
        if (params := fitted_params(study)) is not None:
            run_finals(runner, {}, {Method.SILO_FIT: params}, evaluate)
        return study, params

    def silo_paper():
        if (params := silo_paper_params(runner, options)) is not None:
            run_finals(runner, {}, {Method.SILO_PAPER: params}, evaluate)
        return params

    def baselines():
        run_finals(runner, tune_peaks(runner, BASELINES, TuningPlan.of(spec, options.oracle)), {}, evaluate)

    work = {"oracle": oracle, "silo_fit": beside_the_oracle(silo_fit), "silo_paper": beside_the_oracle(silo_paper),
            "baselines": beside_the_oracle(baselines)}
    if not options.silo_fit:
        del work["silo_fit"]
    # Ray's processes die with the thread that started them (PR_SET_PDEATHSIG), so the engine starts here: were
    # a line to start it, Ray would go when that line ends.
    runner.engine.start()
    lines = side_by_side(work, runner.engine)
    runner.write_results()
    first_error(lines)
    study, fitted = lines["silo_fit"].value if "silo_fit" in lines else (None, None)
    variants = {method: params for method, params in
                ((Method.SILO_PAPER, lines["silo_paper"].value), (Method.SILO_FIT, fitted)) if params is not None}
    say("== 3/4 the completions the verdict needs ==" if racing else "== 3/4 every method's final runs done ==")
    if racing:
        verdict_completions(runner, options.oracle)
    runner.write_results()
    runner.prune_checkpoints(finished=True)
    if again := sum(1 for row in runner.ledger.rows() if row.get("retrained")):
        say(f"checkpoints: {again} start(s) were gone and trained again (rows marked retrained)")
    return study, variants


def fit_failed(study, variants) -> None:
    """FitFailed when every silo_fit trial diverged or stopped (after the report is written)."""
    if study is not None and Method.SILO_FIT not in variants:
        fitter.best_params(study)
