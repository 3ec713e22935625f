"""`oracle-search replay RUN --out DIR`: what the racing Oracle would have decided, and at what cost, on a finished
run. Trains nothing: every training the rule asks for is answered from RUN's results table.

At every cycle, along RUN's own chain (each seed's start is RUN's chosen checkpoint, so later cycles start from
RUN's b, and a cycle's first values are the bracket around RUN's previous b, as RUN's driver chose them), the racing
rule (`oracle_search.racing`) runs on the cycle's first values, walking from RUN's previous b as the racing driver
walks from its own, and its refinement rounds. A training the table cannot answer is counted (`unanswered`) and
skipped. Then the values next to every compared schedule's max_lr are completed from the table
(`analysis.regret.completion_targets`), as a racing `compare` does before its analysis.

The baselines' peak-LR tuning is replayed too (`replay_tuning`), each race walking from the racing Oracle's dense
best, and on how many of RUN's Oracle cycles and tuning curves the walk's assumption (`selection.unimodal`) holds.

Written to DIR: `replay.csv` (per cycle: both b's, both training counts, unanswered), `replay_tuning.csv` (per
baseline schedule: both peaks, both row counts, unanswered, unimodal), `replay_rows.parquet` (the Oracle rows
racing used, RUN's chained rows that carry each seed to the next cycle, the completions, and every non-Oracle row
of RUN, all unchanged), and `report.md` with `tables/verdict.csv` computed from those rows alone.
RUN's chained rows complete RUN's b on every seed, so where racing's b differs (`replay.csv` says where), the
replay's report, which takes b among complete values, may still show RUN's.
With `slots`, the simulated wall time of both plans on that many slots, from each row's measured seconds: the
exhaustive driver's batches, each waiting for its slowest training, and the racing driver's stream, which tops up
a slot as soon as it frees (`Clock`); the racing plan's speculative trainings are counted.
"""
from __future__ import annotations

import heapq
import itertools
import json
import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from analysis.regret import analyse, completion_targets
from analysis.select import oracle_trials
from oracle_search.curve import lr_key
from oracle_search.racing import (RACING_REFINE, Pair, Pool, oracle_race, pool_of, refinement, run_race,
                                  tuning_race)
from oracle_search.schema import BASELINES, Method, Stage, read_results, results_frame
from oracle_search.selection import Curve, bracket, choose, in_set, next_values
from trainables.atomic import atomic_write_bytes

REPLAY_COLUMNS = ["cycle", "exhaustive_b", "racing_b", "trainings_exhaustive", "trainings_racing", "unanswered"]
TUNING_COLUMNS = ["schedule", "exhaustive_peak", "racing_peak", "trainings_exhaustive", "trainings_racing",
                  "unanswered", "unimodal"]


@dataclass(frozen=True)
class Replay:
    cycles: pd.DataFrame  # replay.csv
    rows: pd.DataFrame  # replay_rows.parquet
    inside: int  # cycles where racing's b lies in RUN's paper interval
    labels_equal: int
    labels: int  # comparisons in RUN's verdict
    wall: dict[str, tuple[float, float]] | None  # plan -> (seconds, utilisation) on `slots`
    tuning: pd.DataFrame  # replay_tuning.csv: the baselines' peak-LR races
    unimodal: int  # cycles whose exhaustive curve is unimodal (`selection.unimodal`): the walk's assumption

    def tuning_line(self) -> str:
        used, of = int(self.tuning["trainings_racing"].sum()), int(self.tuning["trainings_exhaustive"].sum())
        same = int((self.tuning["racing_peak"] == self.tuning["exhaustive_peak"]).sum())
        return (f"replay: the baselines' tuning raced on {used} of {of} rows ({100 * used / max(of, 1):.0f} %), the "
                f"same peak LR for {same} of {len(self.tuning)} schedules")

    def unimodal_line(self) -> str:
        return (f"replay: the run's curves are unimodal (the walk's assumption) at {self.unimodal} of "
                f"{len(self.cycles)} Oracle cycles and {int(self.tuning['unimodal'].sum())} of {len(self.tuning)} "
                f"tuning curves")

    def last_line(self) -> str:
        used, of = int(self.cycles["trainings_racing"].sum()), int(self.cycles["trainings_exhaustive"].sum())
        return (f"replay: racing used {used} of {of} Oracle trainings ({100 * used / max(of, 1):.0f} %), racing b "
                f"inside the run's paper interval at {self.inside} of {len(self.cycles)} cycles, verdict labels "
                f"equal on {self.labels_equal} of {self.labels}")


def makespan(batches: list[list[float]], slots: int) -> tuple[float, float]:
    """Wall time and utilisation of batches run one after another, each spread greedily over `slots` (a batch
    waits for its slowest training, as the drivers do)."""
    wall = busy = 0.0
    for batch in batches:
        free = [0.0] * slots
        for seconds in batch:
            i = free.index(min(free))
            free[i] += seconds
        wall += max(free) if batch else 0.0
        busy += sum(batch)
    return wall, busy / (slots * wall) if wall else math.nan


class Clock:
    """The racing driver's stream on a virtual clock: a racing `Trainer` that answers each training from RUN's table
    (`table`, set per cycle) and runs it, once a slot of `slots` is free, for its row's measured seconds."""

    def __init__(self, slots: int):
        self.slots, self.table = slots, {}
        self.now = self.busy = 0.0
        self.queue: list = []  # (item, row) waiting for a slot
        self.running: list = []  # heap of (end, tie, item, row)
        self.tie = itertools.count()

    def start(self, items: list) -> None:
        self.queue += [(item, self.table.get(item[1])) for item in items]
        self._fill()

    def _fill(self) -> None:
        while self.queue and len(self.running) < self.slots:
            item, row = self.queue.pop(0)
            seconds = float(row["seconds"]) if row is not None else 0.0  # unanswered: takes no slot time
            self.busy += seconds
            heapq.heappush(self.running, (self.now + seconds, next(self.tie), item, row))

    def wait(self) -> dict:
        self.now = self.running[0][0]
        got = {}
        while self.running and self.running[0][0] <= self.now:
            _, _, item, row = heapq.heappop(self.running)
            got[item] = row
        self._fill()
        return got


def _exhaustive_batches(table: dict[Pair, dict], values: list[float], seeds: list[int], grid: list[float],
                        refine: int) -> list[list[float]]:
    """The batches RUN's exhaustive driver ran at one cycle, rebuilt by replaying its loop on the table."""
    rows: dict[Pair, dict] = {}
    batches, rounds = [], 0
    while values:
        batch = {(v, s): table[(v, s)] for v in values for s in seeds if (v, s) in table}
        batches.append([float(r["seconds"]) for r in batch.values()])
        rows |= batch
        choice = choose(Curve.from_rows(list(rows.values())))
        if choice is None or rounds >= refine:
            break
        values = next_values(choice, grid)
        rounds += 1
    return batches


def replay_tuning(df: pd.DataFrame, spec: dict, seeds: list[int], dense: Curve) -> pd.DataFrame:
    """The baselines' peak-LR races (`racing.tuning_race`, as `baselines.tune_peaks` runs them), answered from
    RUN's tuning rows on `seeds`; `dense` is the racing Oracle's cycle-0 curve (its pool and best start each race).
    Rows are counted whether RUN trained or reused them (the Oracle's own schedule reuses the Oracle's cycle 0)."""
    grid = sorted(lr_key(g) for g in spec["grid"])
    tuning = df[(df["stage"] == Stage.TUNE.value) & df["method"].isin(BASELINES) & df["seed"].isin(seeds)]
    records, prior = [], pool_of(dense)
    for name, rows in tuning.groupby("method", sort=True):
        table = {(lr_key(r["max_lr"]), int(r["seed"])): r for r in rows.to_dict("records")}
        race = tuning_race(seeds, grid, prior, dense.best, own=name == spec.get("schedule", {}).get("name"))
        run_race(race, lambda pairs: {p: table[p] for p in pairs if p in table})
        exhaustive = choose(Curve.from_rows(rows, seeds))
        records.append({"schedule": name, "exhaustive_peak": exhaustive.best, "racing_peak": race.curve().best,
                        "trainings_exhaustive": len(rows), "trainings_racing": len(race.rows),
                        "unanswered": len(race.missing), "unimodal": exhaustive.unimodal})
    return pd.DataFrame(records, columns=TUNING_COLUMNS)


def replay(run: Path, out: Path, slots: int | None = None, refine: int = 3,
           racing_refine: int = RACING_REFINE) -> Replay:
    """Replay the racing rule on RUN's table; write DIR's files (module docstring). `refine`: the refinement rounds
    RUN's exhaustive driver had (its batches are rebuilt with them); `racing_refine`: the racing Oracle's."""
    run, out = Path(run), Path(out)
    spec = json.loads((run / "spec.json").read_text())
    df = results_frame(read_results(run).to_dict("records"))
    grid = sorted(lr_key(g) for g in spec["grid"])
    oracle = oracle_trials(df)
    last = int(oracle["cycle"].max())
    per_seed = oracle.groupby("seed")["cycle"].agg(lambda c: set(int(x) for x in c))
    seeds = sorted(int(s) for s, cs in per_seed.items() if cs >= set(range(last + 1)))
    oracle = oracle[oracle["seed"].isin(seeds)]
    width = slots or 1

    records, used, exhaustive_batches, completions = [], [], [], []
    clock = Clock(width)
    pool, inside, unimodal, previous, dense, dense_racing = Pool(), 0, 0, None, None, None
    for m in range(last + 1):
        at = oracle[oracle["cycle"] == m]
        table = {(lr_key(r["max_lr"]), int(r["seed"])): r for r in at.to_dict("records")}
        exhaustive = choose(Curve.from_rows(at))
        values = sorted({*bracket(grid, previous), dense}) if m else grid
        race = oracle_race(seeds, values, racing_refine, pool, previous, dense)

        clock.table = table
        run_race(race, clock, width, refinement(grid), racing_refine)
        pool = pool + race.final_pool()
        racing = choose(race.curve())
        dense_racing = dense_racing if m else race.curve()
        chained = at[at["selected"].astype(bool)]  # RUN's chain: each seed's start at the next cycle
        rows = {r["key"]: r for r in [*race.rows.values(), *chained.to_dict("records")]}
        used += list(rows.values())
        exhaustive_batches += _exhaustive_batches(table, values, seeds, grid, refine)
        inside += bool(racing is not None and in_set(racing.best, exhaustive.values, exhaustive.inside))
        unimodal += exhaustive.unimodal
        records.append({"cycle": m, "exhaustive_b": exhaustive.best,
                        "racing_b": math.nan if racing is None else racing.best,
                        "trainings_exhaustive": len(at), "trainings_racing": len(rows), "unanswered": len(race.missing)})
        previous = exhaustive.best
        dense = dense if m else exhaustive.best

    cycles = pd.DataFrame(records, columns=REPLAY_COLUMNS)
    others = df[df["method"] != Method.ORACLE.value]
    kept = pd.DataFrame(used)
    by_key = {(int(r["cycle"]), lr_key(r["max_lr"]), int(r["seed"])): r for r in oracle.to_dict("records")}
    for _ in range(3):  # the values next to every compared schedule, completed as a racing compare does
        frame = results_frame([*kept.to_dict("records"), *others.to_dict("records")])
        targets = completion_targets(frame)
        wanted = [(m, v, s) for m, vs in targets.items() for v in vs for s in seeds]
        have = {(int(r["cycle"]), lr_key(r["max_lr"]), int(r["seed"])) for r in kept.to_dict("records")}
        new = [by_key[k] for k in wanted if k in by_key and k not in have]
        missing = [k for k in wanted if k not in by_key]
        for m, _v, _s in missing:
            cycles.loc[cycles["cycle"] == m, "unanswered"] += 1
        if not new:
            break
        for row in new:
            cycles.loc[cycles["cycle"] == int(row["cycle"]), "trainings_racing"] += 1
        completions.append([float(row["seconds"]) for row in new])  # one batch per pass, as compare runs it
        kept = pd.concat([kept, pd.DataFrame(new)], ignore_index=True)

    rows = results_frame([*kept.to_dict("records"), *others.to_dict("records")])
    mine, theirs = analyse(rows).verdict, analyse(df).verdict
    labels = theirs.set_index(["schedule", "versus"])["verdict"]
    ours = mine.set_index(["schedule", "versus"])["verdict"].reindex(labels.index)
    wall = None
    if slots:
        racing_wall = clock.now + makespan(completions, slots)[0]  # the completions run after the races
        busy = clock.busy + sum(map(sum, completions))
        wall = {"exhaustive": makespan(exhaustive_batches, slots),
                "racing": (racing_wall, busy / (slots * racing_wall) if racing_wall else math.nan)}
    result = Replay(cycles, rows, inside, int((ours == labels).sum()), len(labels), wall,
                    replay_tuning(df, spec, seeds, dense_racing), unimodal)
    _write(result, out, run)
    return result


def _write(result: Replay, out: Path, run: Path) -> None:
    from analysis.report import write_report

    out.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(out / "replay.csv", result.cycles.to_csv(index=False))
    atomic_write_bytes(out / "replay_tuning.csv", result.tuning.to_csv(index=False))
    atomic_write_bytes(out / "replay_rows.parquet", _parquet(result.rows))
    atomic_write_bytes(out / "spec.json", (run / "spec.json").read_bytes())
    write_report(out, rows=result.rows)


def _parquet(frame: pd.DataFrame) -> bytes:
    import io

    buffer = io.BytesIO()
    frame.to_parquet(buffer, index=False)
    return buffer.getvalue()
