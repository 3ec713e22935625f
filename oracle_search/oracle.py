"""The Oracle (paper §5.3): at every cycle, train every max_lr of a grid from the same chained checkpoint
and chain the best (by validation accuracy) forward, per seed."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from oracle_search.engine import Runner, Trial

INTERVAL_TOLERANCE = 0.5  # percentage points of validation accuracy (paper §5.3)


def grid_key(value: float) -> str:
    return f"{value:.6g}"


def best_row(rows: list[dict]) -> dict | None:
    """Highest validation accuracy among non-diverged rows; ties go to the smaller max_lr."""
    alive = [r for r in rows if not r["diverged"]]
    return min(alive, key=lambda r: (-r["val_acc"], r["max_lr"])) if alive else None


def interval(rows: list[dict], tolerance: float = INTERVAL_TOLERANCE) -> tuple[float, float]:
    """[min, max] of the max_lr values within `tolerance` points of the best validation accuracy."""
    best = best_row(rows)
    near = [r["max_lr"] for r in rows if not r["diverged"] and r["val_acc"] >= best["val_acc"] - tolerance]
    return min(near), max(near)


def refine_values(grid: list[float], best: float, n: int) -> list[float]:
    """n linearly spaced values strictly between the coarse grid neighbours of `best`."""
    grid = sorted(grid)
    i = grid.index(best)
    low = grid[i - 1] if i > 0 else best / 2
    high = grid[i + 1] if i + 1 < len(grid) else best * 2
    values = np.linspace(low, high, n + 2)[1:-1]
    return [float(v) for v in values if not any(np.isclose(v, g, rtol=1e-9) for g in grid)]


@dataclass
class CycleChoice:
    seed: int
    cycle: int
    row: dict  # the selected trial's row
    low: float
    high: float


def chain_suffix(start: dict | None) -> str:
    """Names the checkpoint a trial starts from, so a trial trained from another chain is never reused."""
    return f"-from{start['checkpoint_hash'][:10]}" if start else ""


def oracle_trial(runner: Runner, cycle: int, seed: int, lr: float, start: dict | None, stage: str) -> Trial:
    return Trial(key=f"oracle-c{cycle:02d}-s{seed}-lr{grid_key(lr)}{chain_suffix(start)}", spec=runner.spec,
                 cycle=cycle, max_lr=lr, seed=seed, start_checkpoint=start["checkpoint"] if start else None,
                 tags={"method": "oracle", "stage": stage, "schedule": runner.spec.schedule.name})


def mark_selected(runner: Runner, best: dict, ledger_rows: list[dict]) -> dict:
    """Record `best` as the (seed, cycle)'s chained trial, and no other (a rerun with other options may have
    chosen another)."""
    for row in ledger_rows:
        if (row.get("method") == "oracle" and row.get("selected") and row["seed"] == best["seed"]
                and row["cycle"] == best["cycle"] and row["key"] != best["key"]):
            runner.ledger.record(row | {"selected": False})
    if not best.get("selected"):
        best = best | {"selected": True}
        runner.ledger.record(best)
    return best


def run_oracle(runner: Runner, seeds: list[int], grid: list[float], refine: int = 0) -> dict[int, list[CycleChoice]]:
    """Run cycles 0..L for every seed; returns the chosen trial per seed and cycle."""
    spec, say = runner.spec, runner.progress.say
    chosen: dict[int, list[CycleChoice]] = {s: [] for s in seeds}
    active = list(seeds)
    for cycle in range(spec.cycles + 1):
        starts = {s: (chosen[s][-1].row if cycle else None) for s in active}
        say(f"oracle cycle {cycle}: {len(grid)} max_lr x {len(active)} seed(s)")
        coarse = [oracle_trial(runner, cycle, s, lr, starts[s], "grid") for s in active for lr in grid]
        rows = runner.run(coarse)
        per_seed = {s: [rows[t.key] for t in coarse if t.seed == s] for s in active}
        if refine:
            fine = [oracle_trial(runner, cycle, s, lr, starts[s], "refine")
                    for s in active if (b := best_row(per_seed[s])) is not None
                    for lr in refine_values(grid, b["max_lr"], refine)]
            if fine:
                fine_rows = runner.run(fine)
                for t in fine:
                    per_seed[t.seed].append(fine_rows[t.key])
        ledger_rows = runner.ledger.rows()  # read once per cycle, not once per seed
        for s in list(active):
            best = best_row(per_seed[s])
            if best is None:
                say(f"  seed {s}: every max_lr diverged at cycle {cycle}; this seed stops here")
                active.remove(s)
                continue
            best = mark_selected(runner, best, ledger_rows)
            low, high = interval(per_seed[s])
            chosen[s].append(CycleChoice(s, cycle, best, low, high))
            say(f"  cycle {cycle} seed {s} density {best['density']:.1f}%: best max_lr {best['max_lr']:.4g}, "
                f"interval [{low:.4g}, {high:.4g}], val {best['val_acc']:.1f} test {best['test_acc']:.1f} "
                f"[{runner.progress.elapsed()}]")
        runner.write_results()
        if not active:
            break
    return chosen


def oracle_table(chosen: dict[int, list[CycleChoice]]) -> str:
    """λ | Oracle max_lr | Oracle interval | validation and test accuracy, one line per (seed, cycle)."""
    lines = [f"{'seed':>4} {'cycle':>5} {'λ %':>6} {'Oracle max_lr':>13} {'Oracle interval':>20} "
             f"{'val %':>6} {'test %':>6}"]
    for seed, choices in chosen.items():
        for c in choices:
            lines.append(f"{seed:>4} {c.cycle:>5} {c.row['density']:>6.1f} {c.row['max_lr']:>13.4g} "
                         f"{f'[{c.low:.4g}, {c.high:.4g}]':>20} {c.row['val_acc']:>6.1f} {c.row['test_acc']:>6.1f}")
    return "\n".join(lines)
