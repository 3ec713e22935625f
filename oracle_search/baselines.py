"""The benchmark schedules (paper §5.1(3)): each one's peak LR grid-tuned on the dense network's validation
accuracy, then full runs of every cycle for each seed, with LR rewinding; and SILO with fitted parameters."""
from __future__ import annotations

from oracle_search.engine import Runner, Trial
from oracle_search.fitter import silo_spec, silo_tags
from oracle_search.oracle import best_row, chain_suffix, grid_key
from trainables.schedules import SiloParams

BASELINE_SCHEDULES = ("constant", "decay", "cyclical", "warmup", "cosine")


def tune_peaks(runner: Runner, schedules: tuple[str, ...], grid: list[float]) -> dict[str, float]:
    """Each schedule's best peak LR on cycle 0 (validation accuracy; ties to the smaller LR)."""
    spec, seed = runner.spec, runner.spec.seed
    trials = [Trial(key=f"{name}-tune-c00-s{seed}-lr{grid_key(lr)}", spec=spec.with_schedule(name=name), cycle=0,
                    max_lr=lr, seed=seed, start_checkpoint=None,
                    tags={"method": name, "stage": "tune", "schedule": name, "selected": False})
              for name in schedules for lr in grid]
    rows = runner.run(trials)
    peaks = {}
    for name in schedules:
        best = best_row([rows[t.key] for t in trials if t.tags["method"] == name])
        if best is None:
            runner.progress.say(f"  baselines: every peak LR diverged for {name}; it is left out")
            continue
        peaks[name] = best["max_lr"]
        runner.progress.say(f"  baselines: {name} tuned peak LR {best['max_lr']:.4g} (val {best['val_acc']:.1f})")
    return peaks


def full_runs(runner: Runner, runs: dict[str, tuple], seeds: list[int]) -> None:
    """Cycles 0..L for each method and seed, all methods advancing one cycle at a time in parallel.

    `runs` maps method -> (spec, max_lr, tags)."""
    starts: dict[tuple[str, int], dict | None] = {(m, s): None for m in runs for s in seeds}
    for cycle in range(runner.spec.cycles + 1):
        trials = [Trial(key=f"{m}-final-c{cycle:02d}-s{s}-{_peak_name(spec, lr)}{chain_suffix(starts[(m, s)])}",
                        spec=spec, cycle=cycle, max_lr=lr, seed=s,
                        start_checkpoint=starts[(m, s)]["checkpoint"] if starts[(m, s)] else None, tags=tags)
                  for m, (spec, lr, tags) in runs.items() for s in seeds if (m, s) in starts]
        if not trials:
            return
        rows = runner.run(trials)
        for t in trials:
            row = rows[t.key]
            if row["diverged"]:
                runner.progress.say(f"  {t.tags['method']} seed {t.seed} diverged at cycle {cycle}; it stops here")
                del starts[(t.tags["method"], t.seed)]
            else:
                starts[(t.tags["method"], t.seed)] = row
        runner.progress.say(f"baselines: cycle {cycle} done [{runner.progress.elapsed()}]")


def _peak_name(spec, lr: float | None) -> str:
    """The key part naming a run's peak LR: the tuned value, or SILO's parameters."""
    if lr is not None:
        return f"lr{grid_key(lr)}"
    p = spec.schedule.silo
    return f"silo{grid_key(p.epsilon)}_{grid_key(p.delta)}_{p.q}_{grid_key(p.beta)}"


def run_baselines(runner: Runner, seeds: list[int], grid: list[float], silo: SiloParams | None,
                  schedules: tuple[str, ...] = BASELINE_SCHEDULES) -> dict[str, float]:
    """Tune every baseline's peak, then run all of them (and SILO, if given) for every seed."""
    spec = runner.spec
    runner.progress.say(f"baselines: tuning the peak LR of {', '.join(schedules)} over {len(grid)} values")
    peaks = tune_peaks(runner, schedules, grid)
    runs = {name: (spec.with_schedule(name=name), lr, {"method": name, "stage": "final", "schedule": name,
                                                      "selected": True})
            for name, lr in peaks.items()}
    if silo is not None:
        runs["silo"] = (silo_spec(spec, silo), None, silo_tags(silo, "final", selected=True))
    runner.progress.say(f"baselines: full runs of {', '.join(runs)} for {len(seeds)} seed(s)")
    full_runs(runner, runs, seeds)
    return peaks
