"""The whole `compare` on many slots, simulated (`oracle_search.simulate_job`): its wall time against the longest
chain of dependent trainings in it, with the study's lines side by side (`study.run_study`, what the product
runs) and, as the control, its phases one after another (the order before: the Oracle, silo_fit, silo_paper's δ,
the baselines' tuning, every final run, the completions). Both on the same stated accuracy model and seconds per
epoch; pure Python, trains nothing.

Usage (repo root): python benchmarks/job_walls.py [--preset mnist1d-mlp] [--replicates 3] [--slots 2,8,64]
    [--seconds-per-epoch 0.144]
`--smoke`: the tiny preset on 4 slots, one replicate (tests/test_benchmarks.py); its numbers mean nothing.
The last line: the largest slot count's ratios, side by side and one after another."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a bare checkout, nothing installed

from oracle_search.options import CompareOptions, FitOptions, OracleOptions  # noqa: E402
from oracle_search.simulate_job import simulate_compare  # noqa: E402
from trainables.presets import PRESETS  # noqa: E402


def one_after_another(runner, plan):
    """The control: run_study's phases in sequence, each waiting for the one before (the order before they ran
    side by side); `plan`: the replicate's `plan.StudyPlan`."""
    from oracle_search import fitter
    from oracle_search.baselines import run_baselines
    from oracle_search.oracle import dense_best_here, oracle_cycles, verdict_completions
    from oracle_search.study import silo_variants

    oracle_cycles(runner, plan.oracle)
    study = fitter.fit_study(runner, plan.fit, dense_best_here(runner)) if plan.fit is not None else None
    variants = silo_variants(runner, plan.delta, study)
    run_baselines(runner, plan.tuning, list(plan.evaluate), variants)
    if plan.oracle.completes:
        verdict_completions(runner, plan.oracle)
    return study, variants


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="mnist1d-mlp")
    parser.add_argument("--replicates", type=int, default=3)
    parser.add_argument("--slots", default="2,8,64", help="comma-separated slot counts")
    # The 2026-11-28 main job: 2.88 s a training of 20 epochs on this project's 2-core Xeon.
    parser.add_argument("--seconds-per-epoch", type=float, default=0.144)
    parser.add_argument("--smoke", action="store_true", help="the tiny preset on 4 slots, one replicate")
    args = parser.parse_args(argv)
    options = CompareOptions(replicates=args.replicates)
    if args.smoke:
        args.preset, args.slots = "tiny", "4"
        options = CompareOptions(oracle=OracleOptions(seeds=2, refine=1), fit=FitOptions(trials=3), eval_seeds=2,
                                 replicates=1)
    spec = PRESETS[args.preset].spec
    print(f"{args.preset}, {options.replicates} replicate(s), {args.seconds_per_epoch:g} s per epoch. The longest "
          "chain is the side-by-side run's: there each line depends only on what it needs (the Oracle's cycle 0 and "
          "its own trainings); one after another, every phase waits for all before it.")
    print("| slots | order | wall | longest chain | wall / chain | trainings |")
    print("| --: | :-- | --: | --: | --: | --: |")
    ratios = {}
    for slots in (int(s) for s in args.slots.split(",")):
        chain = None
        for name, study in (("side by side", None), ("one after another", one_after_another)):
            started = time.perf_counter()
            walls = simulate_compare(spec, options, slots, args.seconds_per_epoch, study=study)
            chain = chain or walls.longest_chain
            ratios[name] = walls.wall / chain
            print(f"| {slots} | {name} | {walls.wall:,.0f} s | {chain:,.0f} s | {ratios[name]:.2f} | "
                  f"{walls.trainings} |  ({time.perf_counter() - started:.1f} s to simulate)", flush=True)
    print(f"job_walls: side by side {ratios['side by side']:.2f}, one after another "
          f"{ratios['one after another']:.2f}")


if __name__ == "__main__":
    main()
