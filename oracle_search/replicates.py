"""Replicates of a whole study: `compare --replicates R` runs R independent studies of one spec, each in its own
complete run folder DIR/replicate-r/, on one engine (one Tune experiment), so they share the cluster's slots.

Why: a run's verdict interval counts the noise of the trainings on its own chosen chain, not that of the choices
made before them (the dense choice, δ, b at each cycle, silo_fit's study). A replicate repeats every choice on
seeds of its own, so the spread over replicates carries all of it (docs/design.md, "Replicates").

Seeds: replicate r (1-based) is the study with base seed `spec.seed + SEED_STRIDE·(r − 1)`: its tuning seeds are
that base + 0..seeds−1 and its evaluation seeds that base + EVAL_SEED_OFFSET + 0..eval_seeds−1 (as any run's).
So replicate 1 is exactly the run `--replicates 1` makes, and the replicates' seeds are disjoint as long as a
run's tuning and evaluation seeds fit below the stride (checked at the edge, `check_seed_room`)."""
from __future__ import annotations

import dataclasses
import json
from contextlib import ExitStack
from pathlib import Path

import pandas as pd

from oracle_search.side_by_side import first_error, side_by_side
from trainables.atomic import atomic_write_json
from trainables.spec import ExperimentSpec, SpecError

SEED_STRIDE = 10_000
MANIFEST = "replicates.json"  # DIR's record: R, the base seed, the stride and the margin


def replicate_spec(spec: ExperimentSpec, r: int) -> ExperimentSpec:
    """Replicate r's spec (r = 1, 2, ...): the base seed moved by SEED_STRIDE per replicate."""
    return dataclasses.replace(spec, seed=spec.seed + SEED_STRIDE * (r - 1))


def replicate_dir(out: Path, r: int) -> Path:
    return Path(out) / f"replicate-{r}"


def check_seed_room(seeds: int, eval_seeds: int, fit_seeds: int) -> None:
    """SpecError when a replicate's seeds would reach into the next replicate's (or its tuning seeds into its own
    evaluation seeds)."""
    from oracle_search.pipeline import EVAL_SEED_OFFSET

    for option, n in (("seeds", seeds), ("fit-seeds", fit_seeds)):
        if n > EVAL_SEED_OFFSET:
            raise SpecError(option, f"at most {EVAL_SEED_OFFSET} with replicates (the evaluation seeds start "
                            f"there), got {n}")
    if eval_seeds > SEED_STRIDE - EVAL_SEED_OFFSET:
        raise SpecError("eval-seeds", f"at most {SEED_STRIDE - EVAL_SEED_OFFSET} with replicates (the next "
                        f"replicate's seeds start {SEED_STRIDE} above), got {eval_seeds}")


def manifest(out: Path) -> dict | None:
    path = Path(out) / MANIFEST
    return json.loads(path.read_text()) if path.exists() else None


def check_folder(out: Path, replicates: int) -> None:
    """A folder holds either one run or replicates, never both: SpecError("replicates") otherwise."""
    from oracle_search.pipeline import recorded_spec

    found = manifest(out)
    if replicates == 1 and found is not None:
        raise SpecError("replicates", f"{out} holds {found['replicates']} replicates; pass --replicates "
                        f"{found['replicates']} (or more) to resume it, or use a new --out")
    if replicates > 1 and found is None and recorded_spec(Path(out)) is not None:
        raise SpecError("replicates", f"{out} holds a single run (--replicates 1); use a new --out for "
                        f"{replicates} replicates")


def run_replicates(spec: ExperimentSpec, out: Path, options, address: str | None, callbacks: list[str] | None,
                   seconds_per_epoch: float | None):
    """Run (or resume) options.replicates studies of `spec` in DIR/replicate-r/ on one engine, then write DIR's
    report over them. The caller holds DIR's lock; each replicate's own lock is taken here too, so a driver
    started on one replicate's folder meanwhile stops at once."""
    from oracle_search import estimate, pipeline
    from oracle_search import options as recorded_options
    from oracle_search.callbacks import logger_callbacks
    from oracle_search.engine import Engine, Runner
    from oracle_search.cluster import connect
    from oracle_search.fusion import fuse_size
    from oracle_search.lock import holding
    from oracle_search.progress import Progress
    from trainables.plugins import check_names
    from trainables.sources import runtime_env

    out = Path(out).resolve()
    R = options.replicates
    check_folder(out, R)
    for r in range(1, R + 1):  # every replicate's recorded options, before anything is written
        recorded_options.check_resume(replicate_dir(out, r), options.sections())
    check_names(spec)
    first = pipeline.resolve_run_precision(spec, replicate_dir(out, 1), address)  # one probe for all
    specs = {r: replicate_spec(first, r) for r in range(1, R + 1)}
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / MANIFEST, {"replicates": R, "base_seed": spec.seed, "seed_stride": SEED_STRIDE,
                                       "margin_per_cycle": options.margin,
                                       "folders": [replicate_dir(out, r).name for r in specs]})
    progress = Progress()
    say = progress.say
    connect(address, runtime_env(first))  # in the main thread: ray.init keeps this process's signal handlers
    with ExitStack() as stack:
        for r in specs:
            stack.enter_context(holding(replicate_dir(out, r), "oracle-search compare (replicate)", say))
        engine = Engine(first, first.preset, address, first.resources.storage_path or str(out / "tune"), progress,
                        callbacks=logger_callbacks(callbacks, out, first.preset))
        runners = {}
        for r, s in specs.items():
            pipeline.prepare_out(replicate_dir(out, r), s)
            recorded_options.record(replicate_dir(out, r), options.sections())
            runners[r] = Runner(out=replicate_dir(out, r), spec=s, experiment=s.preset, address=address,
                                progress=progress.tagged(f"r{r}"), fuse=fuse_size(s, options.oracle.fuse),
                                engine=engine)
        _write_estimate(out, first, options, address, seconds_per_epoch, say)
        engine.start()
        seeds = {r: (pipeline.tuning_seeds(s, options.oracle.seeds), pipeline.evaluation_seeds(s, options.eval_seeds))
                 for r, s in specs.items()}
        say(f"compare: {spec.preset}, {R} replicates of {spec.cycles + 1} cycles on one engine -> {out}; " +
            "; ".join(f"replicate {r}: tuning seeds {t[0]}..{t[-1]}, evaluation seeds {e[0]}..{e[-1]}"
                      for r, (t, e) in seeds.items()))
        studies = side_by_side({r: lambda runner=runner: pipeline.run_study(runner, options)
                                for r, runner in runners.items()}, engine)
        engine.close()
    estimate.finish(out)
    done = [r for r, study in studies.items() if study.error is None]
    for r in done:
        say(f"== replicate {r} done ==")
    if not done:
        first_error(studies)
    # A replicate that failed never loses the others: the report covers the finished ones and says which failed;
    # the command then fails naming it, and a rerun resumes it (its finished trainings are in its ledger).
    failed = {r: one_line(study.error) for r, study in studies.items() if study.error is not None}
    say(f"== report over the replicates{f' ({len(done)} of {R})' if failed else ''} ==")
    report = pipeline.report(out, replicates=done, failed=failed)
    if failed:
        from oracle_search.engine import RunFailed

        raise RunFailed("; ".join(f"replicate {r} failed: {line}" for r, line in failed.items())
                        + f"; the report at {report.parent / 'report.md'} covers replicate(s) "
                        + ", ".join(map(str, done)) + "; rerun the same command to resume")
    return pipeline.CompareResult(replicate_rows(out, done), report)


def one_line(err: BaseException) -> str:
    """An error as one line: its message's first line (its kind when it has none), without the advice to rerun
    (the command's own line gives it once)."""
    from oracle_search.engine import RERUN

    text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return text.removesuffix(f"; {RERUN}")


def _write_estimate(out: Path, spec: ExperimentSpec, options, address, seconds_per_epoch, say) -> None:
    """DIR/estimate.json: the cost of R interleaved replicates, timed once."""
    from oracle_search import estimate

    try:
        found = estimate.estimate("compare", spec, options, address, seconds_per_epoch)
    except Exception as err:  # an estimate is a courtesy: the run goes on without one
        say(f"estimate: not available ({type(err).__name__}: {err})")
        return
    estimate.write(out, found)
    say(f"estimate: {found.lines()[-1].removeprefix('estimate: ')}")


def replicate_rows(out: Path, replicates: list[int]) -> pd.DataFrame:
    """The replicates' results tables, one below the other, with a `replicate` column first."""
    from oracle_search.schema import read_results

    frames = [read_results(replicate_dir(out, r)).assign(replicate=r) for r in replicates]
    table = pd.concat(frames, ignore_index=True)
    return table[["replicate", *[c for c in table.columns if c != "replicate"]]]
