"""What Ray Tune costs the Oracle: the same trials through the Runner on a local Ray (all CPUs, 1 CPU per trial,
Ray start-up included) against one process running them one after another with `run_cycle` on one thread,
chaining the same selections. Prints both wall times and the ratio Ray / in-process (target <= 1.0).

Usage: python benchmarks/oracle_overhead.py [--preset digits-mlp] [--cycles 3] [--seeds 2] [--epochs N] [--smoke]

`--smoke`: the smallest run (the tiny preset, cycles 0 and 1 of one epoch, one seed), to check that the script
runs (tests/test_benchmarks.py); its numbers mean nothing, Ray's start-up dominates them.
"""
from __future__ import annotations

import argparse
import dataclasses
import io
import os
import tempfile
import time
from pathlib import Path

import ray
import torch

from oracle_search.engine import Progress, own_runner
from oracle_search.racing import OracleSearch  # noqa: E402

from oracle_search.cluster import connect
from oracle_search.oracle import run_oracle
from trainables.cycle import run_cycle
from trainables.presets import PRESETS
from trainables.spec import ExperimentSpec, Resources

COMPARED = ("density", "val_acc", "test_acc", "best_epoch", "diverged", "checkpoint_hash")


def with_ray(spec: ExperimentSpec, seeds: list[int], out: Path) -> tuple[float, float, float, dict]:
    """Wall time of the whole Oracle on a fresh local Ray, and of its start-up alone; the seconds trained inside
    the trials, summed; the chosen rows per seed."""
    assert not ray.is_initialized()
    start = time.perf_counter()
    connect(None)  # what the Runner does first; timed apart to show it
    startup = time.perf_counter() - start
    with own_runner(out=out, spec=spec, experiment=spec.preset, progress=Progress(io.StringIO())) as runner:
        # The whole grid at every cycle, no refinement: the same trials as the in-process loop below.
        outcomes = run_oracle(runner, OracleSearch(spec.grid, tuple(seeds), 0, False, "exhaustive"))
    seconds = time.perf_counter() - start
    ray.shutdown()
    trained = sum(row["seconds"] for row in runner.ledger.rows())
    return seconds, startup, trained, {s: [o.selected[s] for o in outcomes] for s in seeds}


def in_process(spec: ExperimentSpec, seeds: list[int], chosen: dict, out: Path) -> tuple[float, int]:
    """Wall time of the same trials in this process, one thread; chains Ray's selections. Counts the trials
    whose results differ from Ray's (0 expected: both train on one thread from the same seeds)."""
    torch.set_num_threads(1)
    spec = dataclasses.replace(spec, device="cpu")
    mismatches = 0
    start = time.perf_counter()
    for seed in seeds:
        previous = None
        for cycle, selected in enumerate(chosen[seed]):
            for lr in spec.grid:
                result = run_cycle(spec, cycle=cycle, max_lr=lr, seed=seed, start_checkpoint=previous,
                                   checkpoint_dir=out / f"s{seed}-c{cycle}-lr{lr:g}")
                row = result.row()
                if lr == selected["max_lr"]:
                    mismatches += any(row[k] != selected[k] for k in COMPARED)
                    chosen_checkpoint = result.checkpoint
            previous = chosen_checkpoint
    return time.perf_counter() - start, mismatches


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", default="digits-mlp", choices=sorted(PRESETS))
    p.add_argument("--cycles", type=int, help="pruning cycles after the dense one (default: the preset's)")
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--epochs", type=int, help="epochs per cycle (default: the preset's)")
    p.add_argument("--smoke", action="store_true", help="the smallest run (tiny preset, 2 cycles of 1 epoch, "
                   "1 seed): does it run?")
    args = p.parse_args()
    if args.smoke:
        args.preset, args.cycles, args.seeds, args.epochs = "tiny", 1, 1, 1
    spec = PRESETS[args.preset].spec
    spec = dataclasses.replace(spec, cycles=args.cycles if args.cycles is not None else spec.cycles,
                               epochs=args.epochs or spec.epochs, resources=Resources(cpus_per_trial=1.0))
    seeds = list(range(args.seeds))
    trials = (spec.cycles + 1) * len(spec.grid) * len(seeds)
    print(f"{spec.preset}: {spec.cycles + 1} cycles x {len(spec.grid)} max_lr x {len(seeds)} seeds = {trials} "
          f"trials of {spec.epochs} epochs; {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as tmp:
        ray_s, startup_s, trained_s, chosen = with_ray(spec, seeds, Path(tmp) / "ray")
        alone_s, mismatches = in_process(spec, seeds, chosen, Path(tmp) / "alone")
    print(f"Ray Tune ({os.cpu_count()} CPUs, 1 CPU per trial), Ray start-up included: {ray_s:7.1f} s "
          f"(start-up {startup_s:.1f} s; {trained_s:.1f} s of run_cycle inside the trials, summed)")
    idle = ray_s - startup_s - trained_s / os.cpu_count()
    print(f"  Ray time beyond start-up and training (wall - start-up - summed training / CPUs): {idle:.1f} s, "
          f"{idle * os.cpu_count() / trials:.2f} s of a CPU slot per trial")
    print(f"in one process, sequential, 1 thread:                 {alone_s:7.1f} s")
    print(f"ratio Ray / in-process: {ray_s / alone_s:.2f} (target <= 1.0)")
    print(f"selected trials that differ between the two: {mismatches} of {sum(map(len, chosen.values()))}")
    print(f"load average now {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
