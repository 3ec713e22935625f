"""The library behind the command line: `oracle`, `fit_silo`, `baselines` and `compare` over a validated spec and
an options dataclass, each resumable on its results folder. The CLI only parses, calls these and prints.

Seeds: the Oracle, silo_paper's δ, the baselines' peaks and silo_fit are tuned on the tuning seeds
(spec.seed .. spec.seed + seeds - 1); every tuned method's final runs use evaluation seeds
(spec.seed + EVAL_SEED_OFFSET ...) that no tuning row used, so no method is judged on the seeds it was tuned on."""
from __future__ import annotations

import dataclasses
import functools
import json
import os
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from oracle_search import options as recorded_options
from oracle_search.options import CompareOptions, FitOptions, OracleOptions, at_least
from oracle_search.schema import BASELINES, SILO_METHODS, Method, read_results
from oracle_search.statistics import MARGIN_PER_CYCLE
from trainables.atomic import atomic_write_json
from trainables.plugins import check_names, load_data
from trainables.sources import runtime_env
from trainables.spec import ExperimentSpec, SpecError

EVAL_SEED_OFFSET = 1000


@dataclass(frozen=True)
class CompareResult:
    results: pd.DataFrame
    report: Path


def tuning_seeds(spec: ExperimentSpec, n: int) -> list[int]:
    return list(range(spec.seed, spec.seed + n))


def evaluation_seeds(spec: ExperimentSpec, n: int) -> list[int]:
    return list(range(spec.seed + EVAL_SEED_OFFSET, spec.seed + EVAL_SEED_OFFSET + n))


def recorded_spec(out: Path) -> ExperimentSpec | None:
    """The spec a results folder was made with (spec.json), or None for a new folder."""
    saved = out / "spec.json"
    return ExperimentSpec.from_dict(json.loads(saved.read_text())) if saved.exists() else None


def resolve_run_precision(spec: ExperimentSpec, out: Path, address: str | None) -> ExperimentSpec:
    """The spec with `precision = "auto"` made concrete, once per experiment: a resumed run keeps the precision
    it recorded; a new one on a cluster asks a worker with one trial's resources (cluster.probe_precision), one
    whose trials run on this machine (cluster.trials_run_here) asks the device a local trial gets, in this process.
    An explicit precision is kept as given; rows record theirs, and trainings of another precision are never
    reused."""
    if spec.precision != "auto":
        return spec
    old = recorded_spec(out)
    if old is not None and old.precision != "auto":
        return dataclasses.replace(spec, precision=old.precision)
    import torch

    from oracle_search.cluster import local_trial_device, probe_precision, trials_run_here
    from trainables.precision import resolve_precision

    if not trials_run_here(spec, address):
        return dataclasses.replace(spec, precision=probe_precision(spec, address))
    return dataclasses.replace(spec, precision=resolve_precision("auto", torch.device(local_trial_device(spec))))


def _same_experiment(a: ExperimentSpec, b: ExperimentSpec) -> bool:
    """A resumed run may change where it runs (spec.NOT_SCIENCE) and its precision (rows record theirs, and
    trainings of another precision are never reused); any other field makes another experiment."""
    return dataclasses.replace(a, precision="auto").science() == dataclasses.replace(b, precision="auto").science()


def prepare_out(out: Path, spec: ExperimentSpec) -> None:
    """Create the results folder holding spec.json; a rerun must use the same experiment (it resumes)."""
    old = recorded_spec(out)
    if old is not None:
        if not _same_experiment(old, spec):
            raise SpecError("out", f"{out} holds a run of a different experiment; use a new --out")
        if old.precision == spec.precision:
            return
    from oracle_search.security import redact

    out.mkdir(parents=True, exist_ok=True)
    stored = spec.to_dict()
    if stored["resources"]["storage_path"]:
        stored["resources"]["storage_path"] = redact(stored["resources"]["storage_path"])
    atomic_write_json(out / "spec.json", stored)


def check_inputs(spec: ExperimentSpec, *, address: str | None = None, study_storage: str | None = None) -> None:
    """Everything that can be checked before a run starts: the data loads, a local machine can hold one trial,
    the study storage opens. A failure is invalid input (SpecError), with nothing written."""
    check_names(spec)
    load_data(spec)
    runtime_env(spec)  # the import paths' modules can be shipped to Ray workers
    res = spec.resources
    from oracle_search.cluster import cluster_address

    if not cluster_address(address):  # inside a Ray job, RAY_ADDRESS names its cluster
        import torch

        if res.cpus_per_trial > (os.cpu_count() or 1):
            raise SpecError("cpus-per-trial", f"{res.cpus_per_trial} exceeds this machine's {os.cpu_count()} CPUs "
                            "(pass --address to use a cluster)")
        if res.gpus_per_trial > torch.cuda.device_count():
            raise SpecError("gpus-per-trial", f"{res.gpus_per_trial} exceeds this machine's "
                            f"{torch.cuda.device_count()} GPUs (pass --address to use a cluster)")
    if study_storage:
        import optuna

        from oracle_search.security import redact

        try:
            optuna.storages.get_storage(study_storage)
        except Exception as err:  # the driver's message may quote the URL: name only the kind of failure
            raise SpecError("study-storage", f"cannot open {redact(study_storage)} ({type(err).__name__})") from None


def reject_silo_schedule(spec: ExperimentSpec) -> None:
    if spec.schedule.name == "silo":
        raise SpecError("schedule", "the Oracle trains every grid max_lr, which silo ignores (SILO derives its "
                        "own); use another schedule, e.g. warmup, SILO's shape")


def _runner(spec: ExperimentSpec, out: Path, address: str | None, callbacks: list[str] | None = None,
            fuse: int = 1, record: dict | None = None):
    """The run's Runner; `fuse`: --fuse as given (fusion.fuse_size makes it concrete for the resolved spec);
    `record`: the command's options by section, checked against a resumed run's and recorded (options.record)."""
    from oracle_search.callbacks import logger_callbacks
    from oracle_search.engine import Runner
    from oracle_search.fusion import fuse_size

    check_names(spec)  # the Python API's edge: a spec built in code has not resolved its model, data, pruner yet
    spec = resolve_run_precision(spec, out, address)
    prepare_out(out, spec)
    recorded_options.record(out, record or {})
    return Runner(out=out, spec=spec, experiment=spec.preset, address=address,
                  callbacks=logger_callbacks(callbacks, out, spec.preset), fuse=fuse_size(spec, fuse))


def one_driver(command: str):
    """Run the decorated driver (spec, out, ...) holding `out`'s lock (oracle_search.lock): a second driver on the
    folder raises FolderBusy (exit 2) before anything is trained or written; a dead driver's lock is taken over."""
    def wrap(driver):
        @functools.wraps(driver)
        def run(spec: ExperimentSpec, out: Path, *args, **kwargs):
            from oracle_search.lock import holding

            with holding(Path(out), f"oracle-search {command}"):
                return driver(spec, out, *args, **kwargs)
        return run
    return wrap


def _oracle(runner, options: OracleOptions, decided=None):
    from oracle_search.oracle import run_oracle

    return run_oracle(runner, tuning_seeds(runner.spec, options.seeds), list(runner.spec.grid),
                      refine=options.refine, use_bracket=options.bracket, mode=options.mode, decided=decided)


def _complete_for_verdict(runner, options: OracleOptions) -> None:
    """Racing leaves values far from b with fewer seeds. Before the analysis, train the missing seeds of the
    values next to every compared schedule's max_lr at every cycle (`analysis.regret.complete_for_verdict`), so
    the verdict interpolates between complete values as it does after an exhaustive Oracle."""
    from analysis.regret import complete_for_verdict
    from oracle_search.oracle import complete
    from oracle_search.schema import results_frame

    seeds = tuning_seeds(runner.spec, options.seeds)

    def train(targets: dict[int, list[float]]) -> int:
        trained = complete(runner, seeds, targets)
        runner.progress.say(f"verdict: completed {sum(map(len, targets.values()))} value(s) next to the compared "
                            f"schedules ({trained} trainings)")
        return trained

    complete_for_verdict(lambda: results_frame(runner.ledger.rows()), train, list(runner.spec.grid), options.bracket)


def _write_estimate(runner, command: str, options, seconds_per_epoch: float | None) -> None:
    """OUT/estimate.json: the cost expected before the run (oracle_search.estimate), for the report."""
    from oracle_search import estimate

    try:
        found = estimate.estimate(command, runner.spec, options, runner.address, seconds_per_epoch)
    except Exception as err:  # an estimate is a courtesy: the run goes on without one
        runner.progress.say(f"estimate: not available ({type(err).__name__}: {err})")
        return
    estimate.write(runner.out, found)
    runner.progress.say(f"estimate: {found.lines()[-1].removeprefix('estimate: ')}")


@one_driver("oracle")
def oracle(spec: ExperimentSpec, out: Path, options: OracleOptions = OracleOptions(),
           address: str | None = None, callbacks: list[str] | None = None,
           seconds_per_epoch: float | None = None) -> list:
    """Run (or resume) the Oracle; returns one `oracle.CycleOutcome` per cycle. `seconds_per_epoch`: the
    estimate's (default: timed on a worker)."""
    from oracle_search import estimate

    reject_silo_schedule(spec)
    with _runner(spec, Path(out), address, callbacks, options.fuse, {"oracle": options}) as runner:
        _write_estimate(runner, "oracle", options, seconds_per_epoch)
        outcomes = _oracle(runner, options)
        runner.prune_checkpoints(finished=True)
    estimate.finish(Path(out))
    return outcomes


def _dense_best(runner) -> float | None:
    """The Oracle's seed-mean dense best from this folder's ledger, or None when no Oracle ran here."""
    from oracle_search.selection import dense_best

    ledger = pd.DataFrame(runner.ledger.rows())
    return dense_best(ledger) if not ledger.empty else None


def _fit(runner, options: FitOptions):
    """silo_fit: the Optuna study, with ε searched around the Oracle's dense best when this folder holds one."""
    from oracle_search import fitter
    space = options.space or fitter.SearchSpace.default(runner.spec)
    dense = _dense_best(runner)
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


def _fitted(study):
    """The study's best parameters, or None when no trial finished (every one diverged or was stopped)."""
    from oracle_search import fitter

    try:
        return fitter.best_params(study)
    except ValueError:
        return None


@one_driver("fit-silo")
def fit_silo(spec: ExperimentSpec, out: Path, options: FitOptions = FitOptions(), address: str | None = None,
             callbacks: list[str] | None = None):
    """Run (or extend) the silo_fit study; returns the Optuna study."""
    at_least("trials", options.trials, 1)
    options.target(spec)
    with _runner(spec, Path(out), address, callbacks, record={"fit": options}) as runner:
        study = _fit(runner, options)
        runner.write_results()
        runner.prune_checkpoints(finished=True)
    return study


def _silo_paper(runner, options: CompareOptions):
    """silo_paper's parameters, its δ searched from this folder's Oracle dense best (ε); None without an Oracle here
    (said) or when every δ diverged."""
    from oracle_search.silo_paper import tune_silo_paper

    dense = _dense_best(runner)
    if dense is None:
        runner.progress.say("silo_paper: no Oracle dense best in this folder; silo_paper is left out")
        return None
    return tune_silo_paper(runner, dense, list(runner.spec.grid), tuning_seeds(runner.spec, options.oracle.seeds),
                           options.fit.target(runner.spec), racing=options.oracle.racing)


def _silo_variants(runner, options: CompareOptions, study) -> dict:
    """silo_paper's parameters (needs the Oracle's dense best) and silo_fit's, where each exists."""
    variants = {}
    if (p := _silo_paper(runner, options)) is not None:
        variants[Method.SILO_PAPER] = p
    if study is not None and (p := _fitted(study)) is not None:
        variants[Method.SILO_FIT] = p
    return variants


@one_driver("baselines")
def baselines(spec: ExperimentSpec, out: Path, options: CompareOptions = CompareOptions(),
              address: str | None = None, callbacks: list[str] | None = None) -> dict[str, float]:
    """Tune the benchmark schedules on the tuning seeds, then run them, silo_paper (if an Oracle ran here) and
    silo_fit (if a study finished here) on the evaluation seeds. Returns the tuned peaks."""
    from oracle_search import fitter
    from oracle_search.baselines import run_baselines

    target = options.fit.target(spec)
    with _runner(spec, Path(out), address, callbacks) as runner:  # its options are the Oracle's and the fit's
        # silo_fit runs when this experiment's study holds a finished trial, whatever `options.silo_fit` says
        study = fitter.existing_study(runner.out, runner.spec, options.fit.storage,
                                      tuning_seeds(spec, options.fit.seeds), target)
        peaks = run_baselines(runner, tuning_seeds(spec, options.oracle.seeds),
                              evaluation_seeds(spec, options.eval_seeds), list(spec.grid),
                              _silo_variants(runner, options, study), racing=options.oracle.racing)
        runner.write_results()
        runner.prune_checkpoints(finished=True)
    return peaks


def run_study(runner, options: CompareOptions):
    """One whole study on `runner`'s folder; writes the results table. Returns silo_fit's study and the SILO
    variants that got parameters. `compare` runs one; `--replicates R` runs R side by side.

    The Oracle walks its cycles. Once its cycle 0 is decided (the dense best: both SILO variants' ε, and the pool
    the baselines' tuning races from), three lines of work run beside it, each ending in its methods' final runs
    on the evaluation seeds: silo_fit's study, silo_paper's δ search, the baselines' tuning. None of them needs
    a later Oracle cycle, so on many slots they fill what the Oracle's chain leaves idle (a training two lines
    need is trained once: `engine.Runner.start`). Then the completions the verdict needs, which need every
    method's schedule."""
    from oracle_search import baselines as baseline_plan, silo_paper as silo_paper_plan
    from oracle_search.baselines import run_finals, tune_peaks
    from oracle_search.side_by_side import first_error, side_by_side

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
            releases["silo_paper"] = runner.hold(silo_paper_plan.claims(spec, outcome.choice.best, tune + evaluate))
            releases["baselines"] = runner.hold(baseline_plan.claims(spec, BASELINES, list(spec.grid), evaluate,
                                                                     cycles=silo_paper_plan.PAPER_Q + 1))
            say("== 2/4 beside the Oracle's later cycles: " + "silo_fit (Optuna), " * options.silo_fit
                + "silo_paper's δ, the baselines' tuning; each then its final runs ==")
            dense_decided.set()

    def oracle() -> None:
        try:
            _oracle(runner, options.oracle, cycle_decided)
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
        study = _fit(runner, options.fit)
        if (params := _fitted(study)) is not None:
            run_finals(runner, {}, {Method.SILO_FIT: params}, evaluate)
        return study, params

    def silo_paper():
        if (params := _silo_paper(runner, options)) is not None:
            run_finals(runner, {}, {Method.SILO_PAPER: params}, evaluate)
        return params

    def baselines():
        run_finals(runner, tune_peaks(runner, BASELINES, list(spec.grid), tune, racing), {}, evaluate)

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
        _complete_for_verdict(runner, options.oracle)
    runner.write_results()
    runner.prune_checkpoints(finished=True)
    if again := sum(1 for row in runner.ledger.rows() if row.get("retrained")):
        say(f"checkpoints: {again} start(s) were gone and trained again (rows marked retrained)")
    return study, variants


def _fit_failed(study, variants) -> None:
    """FitFailed when every silo_fit trial diverged or stopped (after the report is written)."""
    if study is not None and Method.SILO_FIT not in variants:
        from oracle_search.fitter import best_params

        best_params(study)


@one_driver("compare")
def compare(spec: ExperimentSpec, out: Path, options: CompareOptions = CompareOptions(),
            address: str | None = None, callbacks: list[str] | None = None,
            seconds_per_epoch: float | None = None) -> CompareResult:
    """The main job: Oracle, silo_paper, silo_fit, the baselines' tuning, every method's final runs on held-out
    seeds, and the report; resumable on its folder. With `options.replicates` R > 1, R whole studies in
    OUT/replicate-1..R sharing the slots, and a report over them (oracle_search.replicates); with R = 1, one study
    in OUT. `seconds_per_epoch`: the estimate's (default: timed on a worker)."""
    from oracle_search import estimate
    from oracle_search.replicates import check_folder, run_replicates

    reject_silo_schedule(spec)
    options.fit.target(spec)
    out = Path(out)
    if options.replicates > 1:
        return run_replicates(spec, out, options, address, callbacks, seconds_per_epoch)
    check_folder(out, 1)
    with _runner(spec, out, address, callbacks, options.oracle.fuse, options.sections()) as runner:
        _write_estimate(runner, "compare", options, seconds_per_epoch)
        study, variants = run_study(runner, options)
        table = runner.write_results()
    estimate.finish(out)  # before the report, which prints the estimate next to the time taken
    runner.progress.say("== 4/4 report ==")
    result = CompareResult(table, report(out, options.margin))
    _fit_failed(study, variants)
    return result


def report(out: Path, margin: float | None = None, replicates: list[int] | None = None,
           failed: dict[int, str] | None = None) -> Path:
    """Write the report of a results folder, or of a folder of replicates (its report over them, and each
    replicate's own); returns report.html's path (report.md lies beside it). `margin`: points per compared cycle
    (default: what the replicates' folder recorded, else 0.5); `replicates`: only these (default: all), and
    `failed`: the others', each with the line that ended it (said at the top of the report)."""
    from analysis.replicate_report import write_replicates_report
    from analysis.report import write_report
    from oracle_search.replicates import manifest, replicate_dir

    out = Path(out)
    found = manifest(out)
    if found is None:
        return write_report(out, margin_per_cycle=MARGIN_PER_CYCLE if margin is None else margin)["report.html"]
    margin = found["margin_per_cycle"] if margin is None else margin
    chosen = replicates if replicates is not None else range(1, found["replicates"] + 1)
    runs = [replicate_dir(out, r) for r in chosen]
    return write_replicates_report(out, runs, margin, own_reports=True, of=found["replicates"],
                                   failed={replicate_dir(out, r).name: line for r, line in (failed or {}).items()}
                                   )["report.html"]


def results(out: Path) -> pd.DataFrame:
    return read_results(Path(out))


__all__ = ["OracleOptions", "FitOptions", "CompareOptions", "CompareResult", "oracle", "fit_silo", "baselines",
           "compare", "report", "results", "SILO_METHODS"]
