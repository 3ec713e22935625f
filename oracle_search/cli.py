"""The `oracle-search` command line. Input is validated here, once, before anything starts or is written."""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, Sequence

from oracle_search.callbacks import CALLBACKS, callback_name
from oracle_search.config import SPEC_KEY, base_spec, dump, options, parse_args
from oracle_search.config import add_options as add_config_options
from oracle_search.devices import Priced, known, price
from oracle_search.flags import add_flags as add_field_flags, flagged, renamed_note, say_renamed
from oracle_search.options import (SearchSpace, add_flags, at_least, check_margin, check_with_spec, from_args,
                                   positive_seconds)
from oracle_search.sessions import ESTIMATE_FILE, SESSIONS_FILE
from oracle_search.status import MANIFEST
from trainables.errors import CheckpointError, DataError
from trainables.presets import DEFAULT_PRESET, PRESETS
from trainables.schedules import SiloParams, silo_max_lr
from trainables.shapes import SHAPES
from trainables.spec import ExperimentSpec, SpecError, validate_silo

EXIT_INVALID, EXIT_FAILED = 2, 1


class InvalidInput(Exception):
    """Bad command-line input: exit 2 with one line naming the option."""


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2 (argparse would print the usage too)
        raise InvalidInput(message)


# --- option groups -----------------------------------------------------------------------------------------------

# The spec's flags, made from its fields (trainables.spec; the optimizer's and the schedule's names too), by the
# name their value has on the parsed arguments; unset (None), a field keeps the preset's or the experiment file's.
SPEC_FLAGS = flagged(ExperimentSpec)
OVERRIDES = ("model", "dataset", "data_dir", "pruner", "loss", "rate", "cycles", "epochs", "batch_size", "optimizer",
             "weights", "rewind_epoch", "seed", "device", "num_samples", "schedule", "prune_output", "precision")
RESOURCES = ("cpus_per_trial", "gpus_per_trial", "max_concurrent", "storage_path", "cudnn_benchmark", "cuda_graphs",
             "keep_checkpoints")


def add_spec_flags(group: Any, only: Sequence[str], **kwargs: Any) -> None:
    """The flags of the spec's fields named in `only`, in that order (`--help`'s)."""
    add_field_flags(group, SPEC_FLAGS, only=only, dest=lambda f: f.name, default=lambda f: None, **kwargs)


def add_spec_options(p: argparse.ArgumentParser, *, cluster: bool) -> None:
    # By hand: --preset names the base the spec's fields override, not a field.
    p.add_argument("--preset", default=DEFAULT_PRESET, help=f"named setup (default {DEFAULT_PRESET}; see `presets`)")
    g = p.add_argument_group("overrides of the preset")
    add_spec_flags(g, OVERRIDES)
    # By hand: a second flag for the precision field, its earlier switch.
    g.add_argument("--no-amp", dest="precision", action="store_const", const="fp32",
                   help="the same as --precision fp32")
    if cluster:
        r = p.add_argument_group("resources")
        add_spec_flags(r, RESOURCES)
        # cluster.yaml exports the cluster's shared storage to every node; an explicit option still wins.
        p.set_defaults(storage_path=os.environ.get("ORACLE_SEARCH_STORAGE") or None)
        # By hand: where the trials run and what else logs them are not the spec's fields.
        r.add_argument("--address", help="Ray cluster address (e.g. auto); default: start a local Ray")
        r.add_argument("--callback", type=callback_name, action="append", metavar="|".join(CALLBACKS),
                       help="also log every trial's per-epoch curves to this tracker with Tune's logger "
                       "callback (repeatable; its package must be installed)")
    add_config_options(p)


def spec_from_args(args: argparse.Namespace) -> ExperimentSpec:
    """The preset with every given override applied, validated on construction (SpecError naming the field).
    Nothing is imported or loaded: the model, data, pruner and loss names are resolved by `check_inputs`."""
    spec = base_spec(args.preset, getattr(args, SPEC_KEY, None))  # the preset under an experiment file's fields
    changes: dict[str, Any] = {}
    for name, f in SPEC_FLAGS.items():
        value = getattr(args, name, None)
        if value is not None:  # nested dicts: a field of the resources', the optimizer's or the schedule's
            inner = changes
            for step in f.path[:-1]:
                inner = inner.setdefault(step, {})
            inner[f.path[-1]] = value
    # Trials run in their own working folders: a path the user gave means the caller's folder, so make it absolute.
    for path in (("data_dir",), ("resources", "storage_path")):
        inner, value = changes, _at(spec, path)
        for step in path[:-1]:
            inner = inner.setdefault(step, {})
        inner[path[-1]] = absolute(inner.get(path[-1], value))
    return _replaced(spec, changes)  # at once, so that fields that depend on each other are checked together


def _at(obj: Any, path: Sequence[str]) -> Any:
    for step in path:
        obj = getattr(obj, step)
    return obj


def _replaced(obj: Any, changes: dict[str, Any]) -> Any:
    """`obj` with `changes` (nested dicts for nested dataclasses), made by one replace of `obj` itself."""
    return dataclasses.replace(obj, **{k: _replaced(getattr(obj, k), v) if isinstance(v, dict) else v
                                       for k, v in changes.items()})


def absolute(path: str | None) -> str | None:
    """A local path made absolute against this process's folder; None and URIs (s3://...) as they are."""
    if path is None or "://" in path:
        return path
    return str(Path(path).expanduser().absolute())


def check_out(out: str) -> None:
    """--out, where a command will write: an existing folder, or one it can make (its nearest existing parent a
    folder this process can write in). Tried, not inferred from permissions (root may not write in /proc): a
    probe folder made and removed at once, so nothing is left. One line naming --out, before anything loads."""
    path, fix = Path(out).expanduser().absolute(), "give --out a folder this process can make or write in"
    try:
        if path.exists() and not path.is_dir():
            raise SpecError("out", f"{out} is a file, not a folder; {fix}")
        parent = path
        while not parent.exists():  # the root always exists
            parent = parent.parent
        if not parent.is_dir():
            raise SpecError("out", f"{out} cannot be made: {parent} is a file, not a folder; {fix}")
        os.rmdir(tempfile.mkdtemp(prefix=".oracle-search-probe-", dir=parent))
    except OSError as err:
        raise SpecError("out", f"{out} cannot be made or written in ({err.strerror or err}); {fix}") from None


def _check_out(args: argparse.Namespace) -> None:
    """A driver's --out: required but with --dry-run (which writes nothing, so needs none), and writable."""
    if getattr(args, "dry_run", False):
        return
    if args.out is None:
        raise InvalidInput("the following arguments are required: --out")  # argparse's own line
    check_out(args.out)


def _check_grid(args: argparse.Namespace) -> None:
    """--grid: the Oracle chooses among its values, so a list needs two (log: and lin: grids check their own)."""
    grid = getattr(args, "grid", None)
    if grid is not None and len(grid) < 2:
        raise InvalidInput(f"argument --grid: the Oracle chooses among at least 2 max_lr values, got {len(grid)} "
                           f"({', '.join(f'{v:g}' for v in grid)}); e.g. 0.05,0.1 or log:LO:HI:N")


def check_data_dir(spec: ExperimentSpec, advice: str = "") -> None:
    """--data-dir of a dataset read from files of a known layout (CIFAR, ImageNet: `trainables.shapes`) is an
    existing folder: checked here, before torch loads (13.5 s to say so after it, issue 62); the loader checks what
    the folder holds. Other datasets' folders are left to them (MNIST-1D makes its cache folder there)."""
    where = spec.data_dir
    if spec.dataset in SHAPES and where is not None and "://" not in where and not Path(where).is_dir():
        said = "does not exist" if not Path(where).exists() else "is a file"
        raise DataError("data-dir", f"{where} {said}: give the folder {spec.dataset} is read from (nothing is "
                        f"downloaded){advice}")


def check_inputs(args: argparse.Namespace, spec: ExperimentSpec, load: bool = True) -> None:
    # Here, not at the top: --help imports this module, and the pipeline imports torch and Ray.
    from oracle_search.pipeline import check_inputs as check

    check(spec, address=getattr(args, "address", None), study_storage=getattr(args, "fit.storage", None), load=load)


# --- commands ----------------------------------------------------------------------------------------------------

def cmd_presets(args: argparse.Namespace) -> int:
    for name, preset in PRESETS.items():
        s = preset.spec
        print(f"{name:24} {s.model}/{s.dataset}, {s.pruner}, p={s.rate}, L={s.cycles}, {s.epochs} epochs, "
              f"{s.optimizer.name}, weights {s.weights}")
        print(f"{'':24} {preset.source}")
    return 0


def cmd_silo_curve(args: argparse.Namespace) -> int:
    validate_silo(SiloParams(args.epsilon, args.delta, args.q, args.beta))
    ExperimentSpec(rate=args.rate, cycles=args.cycles)  # the spec's own checks of the two, naming the flag
    rows = [{"cycle": m, "density": 100.0 * (1 - args.rate) ** m,
             "max_lr": silo_max_lr(m, epsilon=args.epsilon, delta=args.delta, q=args.q, beta=args.beta,
                                   rate=args.rate)} for m in range(args.cycles + 1)]
    if args.json:
        print(json.dumps(rows))
    else:
        print(f"{'cycle':>5} {'density %':>10} {'max_lr':>10}")
        for r in rows:
            print(f"{r['cycle']:>5} {r['density']:>10.2f} {r['max_lr']:>10.5f}")
    return 0


def cmd_cycle(args: argparse.Namespace) -> int:
    check_out(args.out)
    spec = spec_from_args(args)
    if not (math.isfinite(args.max_lr) and args.max_lr > 0):
        raise SpecError("max-lr", f"must be a positive number, got {args.max_lr!r}")
    if args.cycle < 0 or args.cycle > spec.cycles:
        raise SpecError("cycle", f"must lie in [0, cycles={spec.cycles}], got {args.cycle}")
    check_data_dir(spec)
    args.start = absolute(args.start)
    if args.cycle > 0 and not args.start:
        raise SpecError("start", f"cycle {args.cycle} needs --start, the checkpoint of cycle {args.cycle - 1}")
    if args.start:
        from trainables.checkpoints import load_checkpoint  # imports torch: not at the top, --help imports this module

        load_checkpoint(args.start)  # a corrupt start fails here, before anything is written
    check_inputs(args, spec)
    say_renamed(args)
    from trainables.cycle import run_cycle, torch_threads  # imports torch: after every check that needs none

    out = Path(args.out)
    ckpt = out / f"cycle{args.cycle:02d}-seed{spec.seed}-lr{args.max_lr:.6g}"
    with torch_threads(spec.resources.threads):  # as a trial of the same spec runs (tune_adapter._trial_spec)
        result = run_cycle(spec, cycle=args.cycle, max_lr=args.max_lr, seed=spec.seed, start_checkpoint=args.start,
                           checkpoint_dir=ckpt)
    row = result.row() | {"experiment": out.name, "method": spec.schedule.name, "stage": "single",
                          "schedule": spec.schedule.name, "selected": True, "trial_id": "",
                          "stopped_early": False}
    row |= _silo_fields(spec)
    if args.json:
        # NaN is not JSON: a field that does not apply (e.g. epsilon off SILO) prints as null.
        print(json.dumps({k: None if isinstance(v, float) and math.isnan(v) else v for k, v in row.items()}))
    else:
        print(f"cycle {row['cycle']} density {row['density']:.2f}% max_lr {row['max_lr']:.4g}: "
              f"val {row['val_acc']:.2f}% test {row['test_acc']:.2f}% (best epoch {row['best_epoch']}/"
              f"{row['epochs']}, {row['seconds']:.1f}s{', DIVERGED' if row['diverged'] else ''})\n"
              f"checkpoint: {row['checkpoint']}")
    return 0


def _silo_fields(spec: ExperimentSpec) -> dict[str, float]:
    if spec.schedule.name != "silo":
        return {k: float("nan") for k in ("epsilon", "delta", "q", "beta")}
    return dataclasses.asdict(spec.schedule.silo)


def _oracle_options(args: argparse.Namespace):
    return from_args(args, "oracle")


def _fit_options(args: argparse.Namespace, spec: ExperimentSpec, **given: Any):
    ranges = [getattr(args, f"{name}_range", None) for name in ("epsilon", "delta", "q", "beta")]
    return from_args(args, "fit", **({"space": _search_space(args, spec)} if any(r is not None for r in ranges)
                                     else {}), **given)


def _compare_options(args: argparse.Namespace, spec: ExperimentSpec):
    fit = _fit_options(args, spec)
    return from_args(args, "compare", oracle=_oracle_options(args), fit=fit, silo_fit=fit.trials > 0)


def _checked(command: str, args: argparse.Namespace) -> tuple[ExperimentSpec, Any, float | None]:
    """A driver command's spec, options and --seconds-per-epoch, each checked, alone and against the others
    (`options.check_with_spec`), before anything loads: nothing here imports torch or Ray, reads the data or
    leaves a file (--out is tried with a probe folder, removed at once), so bad input is refused at once (exit 2,
    one line)."""
    _check_out(args)
    _check_grid(args)
    spec = spec_from_args(args)
    if command == "oracle":
        options = _oracle_options(args)
    elif command == "fit-silo":
        options = _fit_options(args, spec)
    elif command == "baselines":  # no fitting: silo_fit's final runs come from this folder's study, if one finished
        options = from_args(args, "compare", oracle=_oracle_options(args), fit=_fit_options(args, spec, trials=0),
                            silo_fit=False)
    else:
        options = _compare_options(args, spec)
    check_with_spec(command, spec, options)
    per_epoch = _cost_inputs(args, spec, options) if hasattr(args, "dry_run") else None
    if not getattr(args, "dry_run", False):  # a dry run reads the data only to time it (`_dry_run`)
        check_data_dir(spec)
    say_renamed(args)
    return spec, options, per_epoch


def cmd_oracle(args: argparse.Namespace) -> int:
    spec, options, per_epoch = _checked("oracle", args)
    if args.dry_run:
        return _dry_run("oracle", args, spec, options, per_epoch)
    check_inputs(args, spec)
    from oracle_search import pipeline  # imports torch and Ray: after every check that needs neither
    from oracle_search.oracle import oracle_table

    outcomes = pipeline.oracle(spec, Path(args.out), options, args.address, args.callback,
                               seconds_per_epoch=per_epoch)
    print("\nOracle table\n" + oracle_table(outcomes))
    print(f"\nresults: {Path(args.out) / 'results.parquet'} (and results.csv)")
    return 0


def _range(text: str | None, name: str, cast=float) -> tuple | None:
    if text is None:
        return None
    try:
        low, high = (cast(v) for v in text.split(":"))
    except ValueError:
        raise SpecError(f"{name}-range", f"expected LO:HI, got {text!r}")
    return low, high


def _search_space(args: argparse.Namespace, spec: ExperimentSpec) -> SearchSpace:
    space = SearchSpace.default(spec)
    changes = {name: r for name, cast in (("epsilon", float), ("delta", float), ("q", int), ("beta", float))
               if (r := _range(getattr(args, f"{name}_range"), name, cast)) is not None}
    return dataclasses.replace(space, **changes)  # FitOptions validates it


def cmd_fit_silo(args: argparse.Namespace) -> int:
    spec, options, _ = _checked("fit-silo", args)
    check_inputs(args, spec)
    from oracle_search import pipeline  # imports torch and Ray: after every check that needs neither
    from oracle_search.fitter import best_params

    study = pipeline.fit_silo(spec, Path(args.out), options, args.address, args.callback)
    best_params(study)  # FitFailed (exit 1) when every trial diverged or stopped early
    return 0


def cmd_baselines(args: argparse.Namespace) -> int:
    spec, options, _ = _checked("baselines", args)
    check_inputs(args, spec)
    from oracle_search import pipeline  # imports torch and Ray: after every check that needs neither

    peaks = pipeline.baselines(spec, Path(args.out), options, args.address, args.callback)
    print("tuned peaks: " + ", ".join(f"{k} {v:.4g}" for k, v in peaks.items()))
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    """Oracle, SILO (paper and fit), the baselines, then the report: one resumable run on one --out."""
    spec, options, per_epoch = _checked("compare", args)
    if args.dry_run:
        if options.auto:  # issue 61: one replicate's plan, then the waves, expected and at most (`auto_price`)
            print("compare --dry-run --replicates auto: the plan below is one replicate's; the waves follow it")
            return _dry_run("compare", args, spec, dataclasses.replace(options, replicates=1, max_replicates=None),
                            per_epoch, then=lambda resolved, found: _auto_price(resolved, options, found))
        return _dry_run("compare", args, spec, options, per_epoch)
    check_inputs(args, spec)
    from oracle_search import pipeline  # imports torch and Ray: after every check that needs neither

    result = pipeline.compare(spec, Path(args.out), options, args.address, args.callback,
                              seconds_per_epoch=per_epoch)
    out = Path(args.out)
    print(f"\nreport: {out / 'report.md'} and {result.report}")
    R = options.replicates
    if options.auto:  # the waves ran to the R the manifest records
        R = json.loads((out / "replicates.json").read_text())["replicates"]
        print(f"looks: {out / 'looks.json'} (each comparison's decision at each look)")
    if R > 1:
        print(f"results: {out}/replicate-1..{R}/results.parquet (and results.csv), "
              f"{len(result.results)} rows in all; tables/verdict.csv and tables/replicates.csv over them")
    else:
        print(f"results: {out / 'results.parquet'} (and results.csv), {len(result.results)} rows")
    return 0


def _auto_price(spec: ExperimentSpec, options, found) -> None:
    """The auto run's waves priced on the dry run's slots and seconds (`found`, one replicate's estimate; its
    simulated job, with --slots, is that replicate alone on them)."""
    from oracle_search import auto_price  # the simulator imports Ray and torch: only for a dry run

    alone = found.job if found.job is not None and found.replicates == 1 else None
    print("\n".join(auto_price.price(spec, options, found.slots, found.seconds_per_epoch, alone).lines()))


def _slots(value: int | None) -> None:
    """--slots N (a dry run's and replay's): a whole number of slots, at least one."""
    if value is not None:
        at_least("slots", value, 1)


def _cost_inputs(args: argparse.Namespace, spec: ExperimentSpec, options) -> float | None:
    """The estimate's inputs checked at the edge: --slots (only a dry run takes it) and --seconds-per-epoch or
    --price-on (a named GPU's measured figure, `devices`), whose seconds per epoch it returns."""
    if args.slots is not None and not args.dry_run:
        raise SpecError("slots", "only with --dry-run (a run has the cluster's slots)")
    _slots(args.slots)
    if args.price_on is not None:
        if not args.dry_run:
            raise SpecError("price-on", "only with --dry-run (a run times its own GPUs)")
        if args.seconds_per_epoch is not None:
            raise SpecError("price-on", "give --price-on NAME or --seconds-per-epoch S, not both")
        return _priced(args, spec, options).seconds_per_epoch
    return positive_seconds(args.seconds_per_epoch)


def _priced(args: argparse.Namespace, spec: ExperimentSpec, options) -> Priced:
    """--price-on's figure for this plan: fused or alone as the Oracle's trials are (`devices.price`)."""
    return price(spec, args.price_on, (options if hasattr(options, "fuse") else options.oracle).fuse)


def _dry_run(command: str, args: argparse.Namespace, spec: ExperimentSpec, options, per_epoch: float | None,
             then=None) -> int:
    """The plan, the precision and the wall-time estimate; nothing trains and nothing is written to --out. The plan
    needs the spec, not the data (price a study first): with --seconds-per-epoch nothing is timed or loaded; else
    the probe times a few steps on the data, or where it is absent (no --data-dir for a dataset of a known shape,
    `trainables.shapes`) on stand-in inputs of its shape."""
    other = ("leave out --data-dir (stand-in inputs of its shape) or give --seconds-per-epoch S"
             if spec.dataset in SHAPES else "--dry-run --seconds-per-epoch S")
    if per_epoch is None:  # the probe would read --data-dir: a folder that is not there is refused before torch
        check_data_dir(spec, f"; or price it without data: {other}")
    from trainables.standin import stand_in  # imports torch: after the checks that need none

    standin = stand_in(spec) if per_epoch is None else None
    if per_epoch is None:
        try:
            check_inputs(args, spec, load=standin is None)
        except DataError as err:  # the data is not where --data-dir says, or there is no shape to stand in for it
            said = str(err).removeprefix(f"{err.field}: ")
            raise DataError(err.field, f"{said}; or price it without data: {other}") from err
    else:  # nothing timed or read, but the plan names the model, data, pruner and loss by their files: import them
        from trainables.plugins import KINDS, resolve  # imports torch, as the estimate does

        for kind in KINDS:  # (one that does not import: exit 2; the console script finds it from the working folder)
            resolve(kind, getattr(spec, kind))
    # Here, not at the top: --help imports this module; the estimate imports pandas, the pipeline torch and Ray.
    from oracle_search.estimate import estimate
    from oracle_search.pipeline import resolve_run_precision

    # Without --out, a new run's precision: os.devnull is a folder that never holds a recorded spec.json.
    spec = resolve_run_precision(spec, Path(args.out or os.devnull), args.address)
    priced = _priced(args, spec, options) if args.price_on is not None else None
    found = estimate(command, spec, options, args.address, per_epoch, args.slots, standin, priced)
    print(f"{command} --dry-run: {spec.preset}, {spec.cycles + 1} cycles of {spec.epochs} epochs")
    print("\n".join(found.lines()))
    if then is not None:  # what a command adds to its estimate (compare --replicates auto: its waves)
        then(spec, found)
    return 0


def replicate_runs(run: Path) -> tuple[dict, list[Path]] | None:
    """A replicates folder's manifest and its replicates' run folders; None for any other folder. The manifest is
    read as JSON here: oracle_search.replicates, which writes it, imports the engine (torch and Ray, 5 of
    paper-table's 10 s, issue 62), which neither report nor paper-table needs to read it."""
    path = Path(run) / MANIFEST
    if not path.is_file():
        return None
    found = json.loads(path.read_text())
    return found, [Path(run) / name for name in found.get("folders")
                   or (f"replicate-{r}" for r in range(1, found["replicates"] + 1))]


def cmd_report(args: argparse.Namespace) -> int:
    """One run's report (DIR), a replicates folder's (DIR holding replicates.json), or, with --out, a report over
    the given runs as replicates of one study (a replicates folder's over its replicates, that folder left as it
    is)."""
    margin = getattr(args, "compare.margin")
    if margin is not None:
        check_margin(margin)
    if args.out is not None:
        check_out(args.out)
    # The report's modules import pandas and scipy: after the check that needs neither.
    from analysis.files import BadResults, check_results
    from oracle_search.schema import results_path
    from oracle_search.statistics import MARGIN_PER_CYCLE
    from analysis.replicate_report import check_replicates, write_replicates_report
    from analysis.report import write_report
    from oracle_search.sequential import LOOKS

    runs = [Path(d) for d in args.dirs]
    if args.out is None and len(runs) > 1:
        raise SpecError("out", "several runs are reported as replicates into a folder of their own: pass --out DIR")
    found = replicate_runs(runs[0]) if len(runs) == 1 else None
    if found is not None and (args.out is None or Path(args.out).resolve() == runs[0].resolve()):
        from oracle_search.pipeline import report  # imports torch and Ray: only for a replicates folder

        path = report(runs[0], margin)
        print(f"report.html: {path}\nreport.md: {path.with_suffix('.md')}")
        return 0
    records = []
    if found is not None:  # with --out: the report over its replicates goes there (issue 62: docs/example's)
        # and reads the run's own records beside it: its looks (an auto run's labels), its estimate and sessions.
        records = [runs[0] / name for name in (LOOKS, ESTIMATE_FILE, SESSIONS_FILE) if (runs[0] / name).is_file()]
        recorded, runs = found
        margin = recorded["margin_per_cycle"] if margin is None else margin
    for run in runs:
        path = results_path(run)
        if not path.exists():
            raise SpecError("RUN", f"no results table in {run}")
        try:
            check_results(path)
        except BadResults as err:
            raise SpecError("RUN", str(err)) from None
    margin = MARGIN_PER_CYCLE if margin is None else margin
    if args.out is None:
        paths = write_report(runs[0], margin_per_cycle=margin)
    else:
        check_replicates(runs, Path(args.out))  # one spec, disjoint seeds: else exit 2, nothing written
        for record in records:
            Path(args.out).mkdir(parents=True, exist_ok=True)
            shutil.copyfile(record, Path(args.out) / record.name)
        paths = write_replicates_report(Path(args.out), runs, margin, of=recorded["replicates"] if found else None)
    for name, path in paths.items():
        print(f"{name}: {path}")
    return 0


def _densities(text: str | None) -> list[float] | None:
    """--densities 100,41,16.8: percentages, each > 0 and ≤ 100."""
    if text is None:
        return None
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SpecError("densities", f"a comma-separated list of percentages, e.g. 100,41,16.8; got {text!r}") from None
    if not values or not all(0 < v <= 100 for v in values):
        raise SpecError("densities", f"each density must be a percentage in (0, 100]; got {text!r}")
    return values


def cmd_paper_table(args: argparse.Namespace) -> int:
    """Test accuracy in the paper's format (methods × the chosen λ, mean ± std): over a replicates folder's
    replicates or several RUNs as replicates, else over one run's seeds; Markdown, or LaTeX with --latex."""
    # Here, not at the top: --help imports this module, and these import pandas and scipy.
    from analysis import render
    from analysis.files import BadResults, check_results
    from analysis.paper_table import paper_table, summary, units
    from oracle_search.schema import read_results, results_frame, results_path

    wanted = _densities(args.densities)
    runs = [Path(d) for d in args.dirs]
    by_hand = len(runs) > 1  # a replicates folder's runs are replicates of one study by construction (compare's)
    if len(runs) == 1 and (found := replicate_runs(runs[0])) is not None:
        runs = found[1]
    for run in runs:
        if not results_path(run).exists():
            raise SpecError("RUN", f"no results table in {run}")
        try:
            check_results(results_path(run))
        except BadResults as err:
            raise SpecError("RUN", str(err)) from None
    if by_hand:
        # Here: the check's module imports the report's figures (matplotlib, Optuna), 2 of paper-table's 5 s.
        from analysis.replicate_report import check_replicates

        check_replicates(runs, None)  # one spec, disjoint seeds: else exit 2
    frames = {run.name if len(set(r.name for r in runs)) == len(runs) else str(run):
              results_frame(read_results(run).to_dict("records")) for run in runs}
    data = summary(units(frames, "replicate" if len(runs) > 1 else "seed"))
    if data.empty:
        raise SpecError("RUN", "no final or selected rows: no test accuracy to tabulate")
    try:
        table = paper_table(data, wanted, over="replicates" if len(runs) > 1 else "seeds")
    except ValueError as err:
        raise SpecError("densities", str(err)) from None
    if args.latex:
        print(f"\n% {table.verdict}\n" + render.latex(table.cells, table.bold), end="")
    else:
        print(f"{table.verdict}\n\n" + render.markdown(table.cells, table.bold), end="")
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    _slots(args.slots)
    refine, bracket = getattr(args, "oracle.refine"), getattr(args, "oracle.bracket")
    if refine is not None:
        at_least("refine", refine, 0)
    check_out(args.out)
    # The replay's modules import pandas and Ray: after the checks that need neither.
    from analysis.files import BadResults, check_results
    from analysis.replay import REPLAY_COLUMNS, replay
    from oracle_search.schema import results_path

    run = Path(args.run_dir)
    path = results_path(run)
    if not path.exists() or not (run / "spec.json").exists():
        raise SpecError("RUN", f"{run} holds no results table and spec.json")
    try:
        check_results(path)
    except BadResults as err:
        raise SpecError("RUN", str(err)) from None
    result = replay(run, Path(args.out), args.slots, refine, bracket)
    print(result.cycles[[*REPLAY_COLUMNS, "edges_equal", "flags_equal", "flags"]].to_string(index=False))
    if result.wall:
        for plan, (seconds, used) in result.wall.items():
            print(f"{plan} on {args.slots} slot(s): {seconds:.0f} s of wall time, slots busy {100 * used:.0f} %")
    if len(result.tuning):
        print(result.tuning.to_string(index=False))
    print(f"written: {Path(args.out) / 'replay.csv'}, replay_tuning.csv, replay_rows.parquet, report.md, tables/")
    if len(result.tuning):
        print(result.tuning_line())
    print(result.unimodal_line())
    print(result.plan_line())
    print(result.sets_line())
    print(result.last_line())
    return 0


# --- parser ------------------------------------------------------------------------------------------------------

def build_parser() -> Parser:
    p = Parser(prog="oracle-search", description="Which peak learning rate would an exhaustive Oracle choose at "
               "every pruning cycle, does SILO land inside its interval, and what does each cost?")
    sub = p.add_subparsers(dest="command", required=True, parser_class=Parser)

    def oracle_options(c: argparse.ArgumentParser) -> None:
        o = c.add_argument_group("Oracle")
        add_spec_flags(o, ("grid",))
        add_flags(o, "oracle")

    def fit_options(c: argparse.ArgumentParser, trials: int) -> None:
        f = c.add_argument_group("SILO fitter")
        add_flags(f, "fit", defaults={"trials": trials})
        # By hand: the four make one field, FitOptions.space (a SearchSpace, its defaults from the spec).
        f.add_argument("--epsilon-range", help="LO:HI (log scale; default: half to twice the Oracle's dense "
                       "max_lr when this --out holds an Oracle run, else the grid's range)")
        f.add_argument("--delta-range", help="LO:HI (default 0:max of the grid)")
        f.add_argument("--q-range", help="LO:HI integers (default 0:3)")
        f.add_argument("--beta-range", help="LO:HI (default 3:6)")

    def cost_options(c: argparse.ArgumentParser) -> None:
        # By hand: the estimate's inputs, not the run's: no spec or options field holds them.
        c.add_argument("--dry-run", action="store_true", help="print the plan (trainings and epochs per phase, "
                       "at most and typically), the precision auto resolves to and the estimated wall time; "
                       "train nothing, write nothing")
        c.add_argument("--seconds-per-epoch", type=float, help="the estimate's seconds per training epoch "
                       "(default: time a few steps on a worker with one trial's resources)")
        c.add_argument("--price-on", metavar="GPU", help="with --dry-run: price a GPU this machine does not have, "
                       f"from the seconds per epoch measured on it (known: {known()}; docs/measured.md)")
        c.add_argument("--slots", type=int, help="with --dry-run: plan on N slots instead of the cluster's, and "
                       "simulate the Oracle's search on them with racing and with exhaustive search (a training's "
                       "time as the probe's, with the spread measured on the default)")

    sub.add_parser("presets", help="list the named setups").set_defaults(run=cmd_presets)

    c = sub.add_parser("silo-curve", help="SILO's max_lr per cycle (Algorithm 1)")
    add_field_flags(c, flagged(SiloParams), dest=lambda f: f.name, default=lambda f: None, required=True)
    add_spec_flags(c, ("rate", "cycles"), required=True)
    c.add_argument("--json", action="store_true", help="print a JSON list of {cycle, density, max_lr}")
    c.set_defaults(run=cmd_silo_curve)

    c = sub.add_parser("cycle", help="run one pruning cycle in this process")
    add_spec_options(c, cluster=False)
    # By hand: the one training's own inputs and output, not fields of its spec.
    c.add_argument("--max-lr", type=float, required=True, help="peak learning rate of the cycle")
    c.add_argument("--cycle", type=int, required=True, help="cycle index m (0 = dense)")
    c.add_argument("--start", help="checkpoint directory of cycle m-1 (required for m >= 1)")
    c.add_argument("--out", required=True, help="folder for the checkpoint")
    c.add_argument("--json", action="store_true", help="print the results-table row as JSON")
    add_spec_flags(c, ("cpus_per_trial",), helps={"cpus_per_trial": "torch threads: this many whole CPUs, as a "
                                                  "trial of the same spec runs (default 1, the trials' default)"})
    c.set_defaults(run=cmd_cycle)

    c = sub.add_parser("oracle", help="grid-search max_lr at every cycle on Ray Tune, chaining the best")
    add_spec_options(c, cluster=True)
    oracle_options(c)
    cost_options(c)
    c.add_argument("--out", help="results folder; rerunning on it resumes (required but with --dry-run)")
    c.set_defaults(run=cmd_oracle)

    c = sub.add_parser("fit-silo", help="fit SILO's (epsilon, delta, q, beta) with Optuna")
    add_spec_options(c, cluster=True)
    fit_options(c, 12)
    c.add_argument("--out", required=True, help="results folder; rerunning on it resumes")
    c.set_defaults(run=cmd_fit_silo)

    c = sub.add_parser("baselines", help="tune the benchmark schedules, then run them, silo_paper and silo_fit "
                       "on held-out evaluation seeds")
    add_spec_options(c, cluster=True)
    add_flags(c, "oracle", only=("seeds", "mode"))  # how many tuning seeds, and whether the tuning races
    add_flags(c, "compare", only=("eval_seeds",))
    add_flags(c.add_argument_group("the SILO fit whose final runs it adds, if one finished here"), "fit",
              only=("seeds", "storage", "target_cycle"))
    c.add_argument("--out", required=True, help="results folder; rerunning on it resumes")
    c.set_defaults(run=cmd_baselines)

    c = sub.add_parser("compare", help="the main job: Oracle, SILO fitter, baselines, then the report")
    add_spec_options(c, cluster=True)
    oracle_options(c)
    add_flags(c, "compare")  # --eval-seeds, --replicates, --margin
    fit_options(c, 8)
    cost_options(c)
    c.add_argument("--out", help="results folder; rerunning on it resumes (required but with --dry-run)")
    c.set_defaults(run=cmd_compare)

    c = sub.add_parser("report", help="write DIR/report.md and DIR/report.html from DIR's results; with --out, "
                       "a report over several runs as replicates of one study")
    c.add_argument("dirs", metavar="RUN", nargs="+", help="a results folder (or a compare --replicates folder); "
                   "with --out, each RUN is one replicate: the runs must be of one spec but for the base seed, "
                   "with disjoint seeds")
    c.add_argument("--out", help="folder for the report over the RUNs, or over a replicates folder's replicates "
                   "(tables/verdict.csv, tables/replicates.csv, report.md, report.html); each RUN, and the replicates "
                   "folder, is left as it is")
    add_flags(c, "compare", only=("margin",), defaults={"margin": None}, helps={"margin": "equivalence margin in "
              "accuracy points per compared cycle, summed over the cycles like the advantage: a comparison whose "
              "95 %% interval lies inside ±margin is `equivalent` (default: the margin a replicates folder "
              "recorded, else 0.5, the paper's interval tolerance)"})
    c.set_defaults(run=cmd_report)
    c = sub.add_parser("paper-table", help="test accuracy as the paper prints it: methods × the densities you "
                       "choose, mean ± std over replicates (or over one run's seeds), as Markdown or LaTeX")
    c.add_argument("dirs", metavar="RUN", nargs="+", help="a compare --replicates folder (± std over its replicates), "
                   "several runs of one spec as replicates, or one run (± std over its seeds)")
    c.add_argument("--densities", help="the λ columns, in %%, comma-separated, as the report prints them (e.g. "
                   "100,41,16.8; default: every cycle's)")
    c.add_argument("--latex", action="store_true", help="a booktabs tabular instead of Markdown")
    c.set_defaults(run=cmd_paper_table)
    c = sub.add_parser("replay", help="what the racing Oracle would have decided and cost on a finished run; "
                       "trains nothing (answers every training from RUN's table)")
    c.add_argument("run_dir", metavar="RUN", help="a finished results folder (results table and spec.json)")
    c.add_argument("--out", required=True, help="folder for replay.csv, replay_rows.parquet, report.md, tables/")
    c.add_argument("--slots", type=int, help="also simulate both plans' wall time on N slots, from each row's "
                   "measured seconds")
    add_flags(c, "oracle", only=("refine", "bracket"), defaults={"refine": None, "bracket": None}, helps={
        "refine": "for a run that did not record its options (no options.json): the refinement rounds its Oracle "
                  "had (default 3, the default of `oracle` and `compare`)",
        "bracket": "for a run that did not record its options: its Oracle ran with --no-bracket (every cycle from "
                   "the whole grid)"})
    c.set_defaults(run=cmd_replay)

    c = sub.add_parser("premise", help="the paper's Fig. 1 (§3.1) on this spec: prune at one fixed max_lr to "
                       "--density-target and measure the weight gradients' σ over all weights and over the "
                       "surviving ones, at each cycle's start and end; writes premise.csv, premise.png, premise.svg, "
                       "premise.md")
    # By hand: --preset names the base the spec's fields override, not a field (as for the other commands).
    c.add_argument("--preset", default=DEFAULT_PRESET, help=f"named setup (default {DEFAULT_PRESET}; see `presets`)")
    add_spec_flags(c, ("model", "dataset", "data_dir", "pruner", "loss", "rate", "epochs", "batch_size", "optimizer",
                       "weights", "rewind_epoch", "seed", "device", "num_samples", "schedule", "precision",
                       "cpus_per_trial"), helps={
        "rate": "fraction of the remaining weights pruned per cycle (default 0.2, the paper's Fig. 1, not the "
                "preset's)",
        "seed": "the seed of the chain's trainings (--seed works too)",
        "cpus_per_trial": "torch threads: this many whole CPUs, as a trial of the same spec runs (default 1)"})
    # By hand: the premise's own inputs (oracle_search.premise_settings.PremiseSettings checks them), no spec field.
    c.add_argument("--density-target", type=float, default=13.4, help="prune until λ is nearest this percentage "
                   "(default 13.4, the paper's: 9 cycles at rate 0.2)")
    c.add_argument("--max-lr", type=float, default=0.16, help="the one peak LR of every cycle (default 0.16, the "
                   "Oracle's dense choice on the embedded default)")
    c.add_argument("--batches", type=int, default=10, help="training batches each σ pools (default 10)")
    c.add_argument("--out", required=True, help="folder for premise.csv, premise.png, premise.svg and premise.md")
    c.set_defaults(run=cmd_premise)
    from oracle_search.status import add_parser as add_status  # `status` DIR: its parser and command, all light

    add_status(sub)
    return p


def cmd_premise(args: argparse.Namespace) -> int:
    """The paper's §3.1 premise on this spec (oracle_search.premise): every check first, then the chain, then its
    files (analysis.premise_figure)."""
    # The premise's settings are torch-free: checked, with the spec and --out, before anything loads.
    from oracle_search.premise_settings import PAPER_RATE, PremiseSettings, premise_spec

    check_out(args.out)
    settings = PremiseSettings(density_target=args.density_target, max_lr=args.max_lr, batches=args.batches)
    spec = spec_from_args(args)
    if args.rate is None:  # the paper's Fig. 1 rate, whatever the preset prunes at
        spec = dataclasses.replace(spec, rate=PAPER_RATE)
    spec = premise_spec(spec, settings)
    check_data_dir(spec)
    # Imports torch: after every check that needs none; the names resolve and the data loads (DataError: exit 2).
    from trainables.plugins import check_names, load_data

    load_data(check_names(spec))
    say_renamed(args)
    # Torch and matplotlib: only once the input is checked.
    from analysis.premise_figure import shape_sentence, write_premise
    from oracle_search.premise import premise

    print(f"premise: {spec.model} on {spec.dataset}, {spec.cycles} cycles at rate {spec.rate:g} to "
          f"λ = {100 * (1 - spec.rate) ** spec.cycles:.3g} %, max_lr {settings.max_lr:g}, {spec.epochs} epochs each")
    result = premise(spec, settings, on_cycle=lambda c: print(
        f"cycle {c['cycle']} λ = {c['lambda']:.3g} %: val {c['val_acc']:.1f} %, σ grad at the end: all "
        f"{c['rows'][0]['sigma_grad']:.3e}, surviving {c['rows'][1]['sigma_grad']:.3e} ({c['seconds']:.0f} s)",
        flush=True))
    paths = write_premise(result, Path(args.out))
    print(f"\n{shape_sentence(result.rows)}\n\nwritten: {paths['csv']}, {paths['png'].name}, {paths['svg'].name}, "
          f"{paths['md'].name} ({result.seconds:.0f} s)")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    import signal
    import threading

    def on_signal(signum, frame):
        # The first signal unwinds the run (the Runner stops its trials; finished ones are in the ledger);
        # a second one, while that is under way, exits at once.
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: os._exit(128 + signum))
        raise KeyboardInterrupt(signum)

    previous = {}
    if threading.current_thread() is threading.main_thread():  # SIGTERM too ends a run cleanly: exit 143
        previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    args = None
    try:
        args = parse_args(build_parser(), argv)  # with --config FILE, the file's values under the flags
        if getattr(args, "print_config", False):
            spec = spec_from_args(args)
            from trainables.plugins import check_names  # imports torch: only after the spec's own checks

            print(dump(check_names(spec), options(args)), end="")
            say_renamed(args)
            return 0
        return args.run(args)
    except (InvalidInput, SpecError, DataError, CheckpointError) as err:
        message = f"{err.field}: {err}" if isinstance(err, CheckpointError) else err  # it names only the file
        print(f"oracle-search: error: {message}{renamed_note(args)}", file=sys.stderr)  # still one line
        return EXIT_INVALID
    except KeyboardInterrupt as err:
        signum = err.args[0] if err.args and isinstance(err.args[0], int) else signal.SIGINT
        print(f"oracle-search: interrupted by {signal.Signals(signum).name}; finished trials are kept, "
              "rerun the same command to resume", file=sys.stderr)
        return 128 + signum
    except BrokenPipeError:  # `oracle-search replay RUN ... | head`: the reader left; say nothing more
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # Python's flush at exit would fail again
        return 128 + signal.SIGPIPE
    except Exception as err:  # a run that failed: one line, then the traceback for the curious
        from oracle_search.engine import RunFailed  # imports torch and Ray: not at the top, --help imports this module

        print(f"oracle-search: failed: {err}", file=sys.stderr)
        if not isinstance(err, RunFailed):
            raise
        return EXIT_FAILED
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


if __name__ == "__main__":
    sys.exit(main())
