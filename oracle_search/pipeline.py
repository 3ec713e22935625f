"""The library behind the command line: `oracle`, `fit_silo`, `baselines` and `compare` over a validated spec and
an options dataclass, each resumable on its results folder, and `report`. The CLI only parses, calls these and
prints. This is the commands' floor: it runs studies (`study`) and writes their reports (`analysis`); nothing below
imports it. Seeds: `oracle_search.seeds`."""
from __future__ import annotations

import dataclasses
import functools
import json
import os
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from analysis.replicate_report import write_replicates_report
from analysis.report import write_report
from oracle_search import auto_price, estimate, fitter, options as recorded_options, replicates, sequential
from oracle_search.baselines import run_baselines
from oracle_search.callbacks import logger_callbacks
from oracle_search.cluster import (cluster_address, connect, local_trial_device, probe_precision, trial_slots,
                                   trials_run_here)
from oracle_search.engine import Engine, RunFailed, own_runner
from oracle_search.runner import Runner, open_runners
from oracle_search.lock import holding
from oracle_search.options import CompareOptions, FitOptions, OracleOptions, check_with_spec
from oracle_search.progress import Progress
from oracle_search.plan import StudyPlan, oracle_search
from oracle_search.schema import SILO_METHODS, read_results
from oracle_search.security import redact
from oracle_search.seeds import replicate_spec
from oracle_search.side_by_side import first_error, side_by_side
from oracle_search.statistics import MARGIN_PER_CYCLE
from oracle_search.oracle import dense_best_here, oracle_cycles
from oracle_search.study import run_study, silo_variants
from trainables.atomic import atomic_write_json
from trainables.plugins import check_names, load_data
from trainables.precision import resolve_precision
from trainables.sources import runtime_env
from trainables.spec import ExperimentSpec, SpecError


@dataclass(frozen=True)
class CompareResult:
    results: pd.DataFrame
    report: Path


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
    out.mkdir(parents=True, exist_ok=True)
    stored = spec.to_dict()
    if stored["resources"]["storage_path"]:
        stored["resources"]["storage_path"] = redact(stored["resources"]["storage_path"])
    atomic_write_json(out / "spec.json", stored)


def check_inputs(spec: ExperimentSpec, *, address: str | None = None, study_storage: str | None = None,
                 load: bool = True) -> None:
    """Everything that can be checked before a run starts: the data loads, a local machine can hold one trial,
    the study storage opens. A failure is invalid input (SpecError), with nothing written. `load`: False for a
    dry run that times stand-in inputs where the data is absent (`trainables.standin`)."""
    check_names(spec)
    if load:
        load_data(spec)
    runtime_env(spec)  # the import paths' modules can be shipped to Ray workers
    res = spec.resources
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

        try:
            optuna.storages.get_storage(study_storage)
        except Exception as err:  # the driver's message may quote the URL: name only the kind of failure
            raise SpecError("study-storage", f"cannot open {redact(study_storage)} ({type(err).__name__})") from None


def reject_silo_schedule(spec: ExperimentSpec) -> None:
    if spec.schedule.name == "silo":
        raise SpecError("schedule", "the Oracle trains every grid max_lr, which silo ignores (SILO derives its "
                        "own); use another schedule, e.g. warmup, SILO's shape")


def _runner(spec: ExperimentSpec, out: Path, address: str | None, callbacks: list[str] | None = None,
            fuse: int = 1, record: dict | None = None) -> Runner:
    """A single command's Runner on an engine of its own; `fuse`: --fuse as given (fusion.fuse_size makes it
    concrete for the resolved spec); `record`: the command's options by section, checked against a resumed run's
    and recorded (options.record)."""
    check_names(spec)  # the Python API's edge: a spec built in code has not resolved its model, data, pruner yet
    spec = resolve_run_precision(spec, out, address)
    prepare_out(out, spec)
    recorded_options.record(out, record or {})
    return own_runner(out, spec, address=address, callbacks=logger_callbacks(callbacks, out, spec.preset), fuse=fuse)


def one_driver(command: str):
    """Run the decorated driver (spec, out, ...) holding `out`'s lock (oracle_search.lock): a second driver on the
    folder raises FolderBusy (exit 2) before anything is trained or written; a dead driver's lock is taken over."""
    def wrap(driver):
        @functools.wraps(driver)
        def run(spec: ExperimentSpec, out: Path, *args, **kwargs):
            with holding(Path(out), f"oracle-search {command}"):
                return driver(spec, out, *args, **kwargs)
        return run
    return wrap


@one_driver("oracle")
def oracle(spec: ExperimentSpec, out: Path, options: OracleOptions = OracleOptions(),
           address: str | None = None, callbacks: list[str] | None = None,
           seconds_per_epoch: float | None = None) -> list:
    """Run (or resume) the Oracle; returns one `oracle.CycleOutcome` per cycle. `seconds_per_epoch`: the
    estimate's (default: timed on a worker)."""
    reject_silo_schedule(spec)
    with _runner(spec, Path(out), address, callbacks, options.fuse, {"oracle": options}) as runner:
        estimate.write_expected(runner.out, "oracle", runner.spec, options, address, seconds_per_epoch,
                                runner.progress.say)
        outcomes = oracle_cycles(runner, oracle_search(runner.spec, options))
        runner.prune_checkpoints(finished=True)
    estimate.finish(Path(out))
    return outcomes


@one_driver("fit-silo")
def fit_silo(spec: ExperimentSpec, out: Path, options: FitOptions = FitOptions(), address: str | None = None,
             callbacks: list[str] | None = None):
    """Run (or extend) the silo_fit study; returns the Optuna study."""
    check_with_spec("fit-silo", spec, options)  # the Python API's edge (the command line checked it too)
    with _runner(spec, Path(out), address, callbacks, record={"fit": options}) as runner:
        study = fitter.fit_study(runner, fitter.FitPlan.of(runner.spec, options), dense_best_here(runner))
        runner.write_results()
        runner.prune_checkpoints(finished=True)
    return study


@one_driver("baselines")
def baselines(spec: ExperimentSpec, out: Path, options: CompareOptions = CompareOptions(),
              address: str | None = None, callbacks: list[str] | None = None) -> dict[str, float]:
    """Tune the benchmark schedules on the tuning seeds, then run them, silo_paper (if an Oracle ran here) and
    silo_fit (if a study finished here) on the evaluation seeds. Returns the tuned peaks."""
    check_with_spec("baselines", spec, options)  # the Python API's edge (the command line checked it too)
    with _runner(spec, Path(out), address, callbacks) as runner:  # its options are the Oracle's and the fit's
        plan = StudyPlan.of(runner.spec, options)
        # silo_fit runs when this experiment's study holds a finished trial, whatever `options.silo_fit` says
        fit = fitter.FitPlan.of(runner.spec, options.fit)
        study = fitter.existing_study(runner.out, runner.spec, fit.storage, list(fit.seeds), fit.target)
        peaks = run_baselines(runner, plan.tuning, list(plan.evaluate), silo_variants(runner, plan.delta, study))
        runner.write_results()
        runner.prune_checkpoints(finished=True)
    return peaks


@one_driver("compare")
def compare(spec: ExperimentSpec, out: Path, options: CompareOptions = CompareOptions(),
            address: str | None = None, callbacks: list[str] | None = None,
            seconds_per_epoch: float | None = None) -> CompareResult:
    """The main job: Oracle, silo_paper, silo_fit, the baselines' tuning, every method's final runs on held-out
    seeds, and the report; resumable on its folder. `options.replicates` R whole studies (`study.run_study`) side by
    side on one engine, so they share the slots: with R = 1, OUT itself is the study's folder; with R > 1,
    OUT/replicate-1..R, and a report over them (`oracle_search.replicates`). A replicate that fails never loses the
    others: the report covers the finished ones and says which failed, then RunFailed names it; a rerun resumes
    it. `seconds_per_epoch`: the estimate's (default: timed on a worker). `--replicates auto`: waves, each a
    compare at a larger R, with a look after each (`_compare_waves`)."""
    reject_silo_schedule(spec)
    if options.auto:
        return _compare_waves(spec, out, options, address, callbacks, seconds_per_epoch)
    sections = options.sections()  # what options.json records
    check_with_spec("compare", spec, options)  # the Python API's edge (the command line checked it too)
    out, R = Path(out).resolve(), options.replicates
    replicates.check_folder(out, R)
    folders = replicates.folders(out, R)
    for folder in folders.values():  # every replicate's recorded options, before anything is written
        recorded_options.check_resume(folder, sections)
    check_names(spec)  # the Python API's edge: a spec built in code has not resolved its model, data, pruner yet
    first = resolve_run_precision(spec, folders[1], address)  # one probe for all
    specs = {r: replicate_spec(first, r) for r in folders}
    plans = {r: StudyPlan.of(s, options) for r, s in specs.items()}  # each replicate's searches, on its seeds
    if R > 1:
        replicates.write_manifest(out, R, spec.seed, options.margin)
    progress = Progress()
    say = progress.say
    connect(address, runtime_env(first))  # in the main thread: ray.init keeps this process's signal handlers
    with ExitStack() as stack:
        for folder in folders.values():
            if folder != out:  # OUT's own lock is held (`one_driver`)
                stack.enter_context(holding(folder, "oracle-search compare (replicate)", say))
        engine = Engine(first, first.preset, address, first.resources.storage_path or str(out / "tune"), progress,
                        callbacks=logger_callbacks(callbacks, out, first.preset))
        for r, s in specs.items():
            prepare_out(folders[r], s)
            recorded_options.record(folders[r], sections)
        runners = open_runners(engine, {r: (folders[r], s) for r, s in specs.items()}, progress, options.oracle.fuse)
        estimate.write_expected(out, "compare", first, options, address, seconds_per_epoch, say)
        # Ray's processes die with the thread that started them (PR_SET_PDEATHSIG): the engine starts here.
        engine.start()
        if R > 1:
            say(f"compare: {spec.preset}, {R} replicates of {spec.cycles + 1} cycles on one engine -> {out}; " +
                "; ".join(f"replicate {r}: tuning seeds {t[0]}..{t[-1]}, evaluation seeds {e[0]}..{e[-1]}"
                          for r, plan in plans.items() for t, e in [(plan.oracle.seeds, plan.evaluate)]))
        studies = side_by_side({r: lambda runner=runner, plan=plans[r]: run_study(runner, plan)
                                for r, runner in runners.items()}, engine)
        engine.close()
    estimate.finish(out)  # before the report, which prints the estimate next to the time taken
    done = [r for r, study in studies.items() if study.error is None]
    if R == 1 or not done:
        first_error(studies)
    failed = {r: replicates.one_line(study.error) for r, study in studies.items() if study.error is not None}
    if R > 1:
        for r in done:
            say(f"== replicate {r} done ==")
    say("== 4/4 report ==" if R == 1 else f"== report over the replicates{f' ({len(done)} of {R})' * bool(failed)} ==")
    table = runners[1].write_results() if R == 1 else replicates.replicate_rows(out, done)
    result = CompareResult(table, report(out, options.margin, finished=done, failed=failed))
    if failed:
        raise RunFailed("; ".join(f"replicate {r} failed: {line}" for r, line in failed.items())
                        + f"; the report at {result.report.parent / 'report.md'} covers replicate(s) "
                        + ", ".join(map(str, done)) + "; rerun the same command to resume")
    for r in done:
        fitter.fit_failed(*studies[r].value)
    return result


def _compare_waves(spec: ExperimentSpec, out: Path, options: CompareOptions, address: str | None,
                   callbacks: list[str] | None, seconds_per_epoch: float | None) -> CompareResult:
    """`compare --replicates auto` (issue 61), holding OUT's lock throughout: a compare at R = --wave, a look
    (`sequential.Waves.record`: the report's tables/replicates.csv read under the sequential rule, OUT/looks.json),
    and again at R + wave while a comparison is open and R < --max-replicates; then the report again, with the
    last look in it. A compare at a larger R resumes the replicates it has (nothing trains again)."""
    out = Path(out).resolve()
    found = replicates.manifest(out)
    say = Progress().say
    wave = options.wave
    if wave is None and sequential.read_looks(out) is None:  # a new auto run: as wide as the slots allow
        slots = trial_slots(spec, address)
        wave, alone = auto_price.choose_wave(spec, options, slots)
        say(f"waves of {wave}: one replicate alone on {slots} slots (simulated) keeps {alone.busy / alone.wall:.1f} "
            f"busy on average (at least {sequential.MIN_WAVE}, at most --max-replicates)")
    waves = sequential.Waves(out, options.margin, wave, options.max_replicates,
                             held=found["replicates"] if found else 0, say=say)
    result = None
    while (R := waves.next_replicates()) is not None:
        wave = dataclasses.replace(options, replicates=R, max_replicates=None)
        result = compare.__wrapped__(spec, out, wave, address, callbacks, seconds_per_epoch)
        waves.record(R)
    return CompareResult(result.results, report(out, options.margin))


def report(out: Path, margin: float | None = None, finished: list[int] | None = None,
           failed: dict[int, str] | None = None) -> Path:
    """Write the report of a results folder, or of a folder of replicates (its report over them, and each
    replicate's own); returns report.html's path (report.md lies beside it). `margin`: points per compared cycle
    (default: what the replicates' folder recorded, else 0.5); `finished`: only these replicates (default: all),
    and
    `failed`: the others', each with the line that ended it (said at the top of the report)."""
    out = Path(out)
    found = replicates.manifest(out)
    if found is None:
        return write_report(out, margin_per_cycle=MARGIN_PER_CYCLE if margin is None else margin)["report.html"]
    margin = found["margin_per_cycle"] if margin is None else margin
    chosen = finished if finished is not None else range(1, found["replicates"] + 1)
    runs = [replicates.replicate_dir(out, r) for r in chosen]
    return write_replicates_report(out, runs, margin, own_reports=True, of=found["replicates"],
                                   failed={replicates.replicate_dir(out, r).name: line
                                           for r, line in (failed or {}).items()})["report.html"]


def results(out: Path) -> pd.DataFrame:
    return read_results(Path(out))


__all__ = ["OracleOptions", "FitOptions", "CompareOptions", "CompareResult", "oracle", "fit_silo", "baselines",
           "compare", "report", "results", "SILO_METHODS"]
