"""`oracle-search replay RUN --out DIR`: what the racing Oracle would have decided, and at what cost, on a finished
run. Trains nothing: every training the rule asks for is answered from RUN's results table.

At every cycle, along RUN's own chain (each seed's start is RUN's chosen checkpoint, so later cycles start from
RUN's b, and a cycle's first values are the bracket around RUN's previous b, as RUN's driver chose them), the racing
rule (`oracle_search.racing`) runs on the cycle's first values, walking from RUN's previous b as the racing driver
walks from its own, and its refinement rounds. A training the table cannot answer is counted (`unanswered`) and
skipped. Then the values next to every compared schedule's max_lr are completed from the table
(`oracle_search.compared.completion_targets`), as a racing `compare` does before its analysis.

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
a slot as soon as it frees (`simulate.Clock`); the racing plan's speculative trainings are counted.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from analysis.intervals import oracle_intervals
from analysis.regret import analyse
from analysis.report import Section, write_report
from analysis.tables import Table
from oracle_search.compared import chain_seeds, complete_for_verdict, oracle_trials
from oracle_search.curve import lr_key
from oracle_search.options import OracleOptions, recorded_oracle
from oracle_search.racing import OracleSearch, Pool, carry, pool_of, run_race, tuning_race, write_racing
from oracle_search.simulate import Clock
from oracle_search.schema import BASELINES, Method, Stage, read_results, results_frame
from oracle_search.selection import Curve, choose, in_set
from trainables.atomic import atomic_write_bytes
from trainables.spec import SpecError

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
    differences: pd.DataFrame  # replay_differences.csv: every "inside" flag that differs from RUN's
    undefined: int  # comparisons undefined after racing that RUN's verdict defines
    flips: int  # comparisons labelled better by one plan and worse by the other
    raced: dict  # per cycle, what racing changed (`Race.summary`): the replay's racing.json
    members: tuple[int, int, int]  # set memberships of the values racing completed equal to RUN's, of those compared
    planned: int  # cycles where the exhaustive plan with RUN's options asks for exactly RUN's Oracle trainings

    def tuning_line(self) -> str:
        used, of = int(self.tuning["trainings_racing"].sum()), int(self.tuning["trainings_exhaustive"].sum())
        same = int((self.tuning["racing_peak"] == self.tuning["exhaustive_peak"]).sum())
        return (f"replay: the baselines' tuning raced on {used} of {of} rows ({100 * used / max(of, 1):.0f} %), the "
                f"same peak LR for {same} of {len(self.tuning)} schedules")

    def unimodal_line(self) -> str:
        return (f"replay: the run's curves are unimodal (the walk's assumption) at {self.unimodal} of "
                f"{len(self.cycles)} Oracle cycles and {int(self.tuning['unimodal'].sum())} of {len(self.tuning)} "
                f"tuning curves")

    def plan_line(self) -> str:
        return (f"replay: the exhaustive plan with the run's options asks for exactly the run's Oracle trainings at "
                f"{self.planned} of {len(self.cycles)} cycles")

    def sets_line(self) -> str:
        edges = int(self.cycles["edges_equal"].sum())
        return (f"replay: set edges equal on {edges} of {6 * len(self.cycles)} (paper, lenient, strict; lo and hi per "
                f"cycle; racing trains fewer values), the memberships of the values racing completed equal on "
                f"{self.members[0]} of {self.members[1]}, {self.members[2]} value(s) left with fewer seeds in the "
                f"run's lenient set; {len(self.differences)} differing \"inside\" flag(s) listed in report.md; "
                f"{self.undefined} comparison(s) undefined where the run's were defined, {self.flips} flipped "
                f"between better and worse; {int(self.cycles['unanswered'].sum())} training(s) asked for that the "
                f"run's table cannot answer (not counted above)")

    def last_line(self) -> str:
        used, of = int(self.cycles["trainings_racing"].sum()), int(self.cycles["trainings_exhaustive"].sum())
        return (f"replay: racing used {used} of {of} Oracle trainings ({100 * used / max(of, 1):.0f} %), racing b "
                f"inside the run's paper interval at {self.inside} of {len(self.cycles)} cycles, inside flags "
                f"equal on {int(self.cycles['flags_equal'].sum())} of {int(self.cycles['flags'].sum())}, verdict "
                f"labels equal on {self.labels_equal} of {self.labels}")


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


def run_options(run: Path, refine: int | None = None, use_bracket: bool | None = None) -> tuple[int, bool]:
    """(refinement rounds, bracket) RUN's Oracle was made with: from its options.json where it recorded them (a
    flag that says otherwise is refused), else the flags, else the defaults of `oracle` and `compare`."""
    recorded = recorded_oracle(run)
    if recorded is None:
        default = OracleOptions()
        return (default.refine if refine is None else refine,
                default.bracket if use_bracket is None else use_bracket)
    for name, given, had in (("refine", refine, recorded.refine), ("no-bracket", use_bracket, recorded.bracket)):
        if given is not None and given != had:
            raise SpecError(name, f"{run} was made with refine={recorded.refine}, bracket={recorded.bracket} "
                            f"(its options.json); replay plans what it did, so leave the option out")
    return recorded.refine, recorded.bracket


SETS = {"paper": ("lo", "hi", "inside"), "lenient": ("noise_lo", "noise_hi", "noise_inside"),
        "strict": ("strict_lo", "strict_hi", "within")}  # the report's three sets: edges and "inside" flag columns
DIFFERENCE_COLUMNS = ["cycle", "schedule", "set", "max_lr", "exhaustive", "racing", "exhaustive_set", "racing_set"]


def compare_sets(theirs: pd.DataFrame, mine: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per cycle, the three sets' edges from RUN's rows (`theirs`, `analysis.intervals.oracle_intervals`) and from
    the replay's (`mine`), how many of the 6 edges are equal, and each compared schedule's three "inside" flags:
    how many are equal of those either plan defines. Also every differing flag, one row each."""
    theirs, mine = theirs.set_index("cycle"), mine.set_index("cycle")
    methods = sorted(c.removesuffix("_max_lr") for c in theirs if c.startswith("silo_") and c.endswith("_max_lr"))
    records, differ = [], []
    for m in theirs.index:
        record = {"cycle": int(m), "edges_equal": 0, "flags_equal": 0, "flags": 0}
        for name, (lo, hi, flag) in SETS.items():
            for edge, column in (("lo", lo), ("hi", hi)):
                a, b = theirs.at[m, column], mine.at[m, column] if m in mine.index else math.nan
                record[f"{name}_{edge}_exhaustive"], record[f"{name}_{edge}_racing"] = a, b
                record["edges_equal"] += bool(not pd.isna(b) and lr_key(a) == lr_key(b))
            for method in methods:
                column = f"{method}_{flag}"
                a = theirs.at[m, column]
                b = mine.at[m, column] if m in mine.index and column in mine else pd.NA
                if pd.isna(a) and pd.isna(b):
                    continue
                record["flags"] += 1
                if not pd.isna(a) and not pd.isna(b) and bool(a) == bool(b):
                    record["flags_equal"] += 1
                    continue
                differ.append({"cycle": int(m), "schedule": method, "set": name,
                               "max_lr": theirs.at[m, f"{method}_max_lr"], "exhaustive": a, "racing": b,
                               "exhaustive_set": f"[{theirs.at[m, lo]:.4g}, {theirs.at[m, hi]:.4g}]",
                               "racing_set": (f"[{mine.at[m, lo]:.4g}, {mine.at[m, hi]:.4g}]" if m in mine.index
                                              else "none")})
        records.append(record)
    return pd.DataFrame(records), pd.DataFrame(differ, columns=DIFFERENCE_COLUMNS)


def memberships(theirs: pd.DataFrame, mine: pd.DataFrame) -> tuple[int, int, int]:
    """(equal, compared, lost): over every value the replay's Oracle rows (`mine`) complete at a cycle, and each of
    the three sets, whether the value is a member after racing as it is in RUN's exhaustive choice (`theirs`): the
    sets are exact on the values racing trained when the two agree. `lost`: values racing left with fewer seeds
    that RUN's "not shown worse" set holds."""
    equal = compared = lost = 0
    run = oracle_trials(theirs)
    for m, at in oracle_trials(mine).groupby("cycle"):
        curve = Curve.from_rows(at)
        ours, full = choose(curve), choose(Curve.from_rows(run[run["cycle"] == m]))
        if ours is None or full is None:
            continue
        member = {field: dict(zip(full.values, getattr(full, field))) for field in ("inside", "noise_inside", "within")}
        complete = set(curve.complete)
        lost += sum(bool(member["noise_inside"].get(v)) for v in ours.values if v not in complete)
        for field in member:
            for v, flag in zip(ours.values, getattr(ours, field)):
                if v in complete:
                    compared += 1
                    equal += flag == member[field].get(v)
    return equal, compared, lost


def replay(run: Path, out: Path, slots: int | None = None, refine: int | None = None,
           use_bracket: bool | None = None, racing_refine: int | None = None) -> Replay:
    """Replay the racing rule on RUN's table; write DIR's files (module docstring). RUN's Oracle options (its
    refinement rounds and bracket) come from RUN (`run_options`); `refine` and `use_bracket` are for runs that did
    not record them. Both plans are the drivers' own (`racing.OracleSearch`): the exhaustive one rebuilds RUN's
    batches, the racing one is what a racing run with the same options would have done (`racing_refine`: other
    refinement rounds for it than RUN's)."""
    run, out = Path(run), Path(out)
    refine, use_bracket = run_options(run, refine, use_bracket)
    spec = json.loads((run / "spec.json").read_text())
    df = results_frame(read_results(run).to_dict("records"))
    grid = sorted(lr_key(g) for g in spec["grid"])
    oracle = oracle_trials(df)
    last = int(oracle["cycle"].max())
    seeds = chain_seeds(oracle, last)
    oracle = oracle[oracle["seed"].isin(seeds)]
    width = slots or 1
    racing_rounds = refine if racing_refine is None else racing_refine
    plans = {"exhaustive": OracleSearch(tuple(grid), tuple(seeds), refine, use_bracket, "exhaustive"),
             "racing": OracleSearch(tuple(grid), tuple(seeds), racing_rounds, use_bracket, "racing")}

    records, used, completions, raced = [], [], [], {}
    clocks = {mode: Clock(width) for mode in plans}
    pool, inside, unimodal, exact, previous, dense, dense_racing = Pool(), 0, 0, 0, None, None, None
    for m in range(last + 1):
        at = oracle[oracle["cycle"] == m]
        table = {(lr_key(r["max_lr"]), int(r["seed"])): r for r in at.to_dict("records")}
        exhaustive = choose(Curve.from_rows(at))
        values = plans["racing"].first_values(previous, dense)
        races = {mode: plan.race(values, pool, previous, dense) for mode, plan in plans.items()}
        for mode, plan in plans.items():
            clocks[mode].answer = lambda item, table=table: table.get(item[1])
            plan.run(races[mode], clocks[mode], width)
        race = races["racing"]
        planned = races["exhaustive"]  # the exhaustive plan asks for exactly RUN's trainings: it made them so
        exact += set(planned.rows) == set(table) and not planned.missing
        pool = carry(pool, race)
        raced[m] = race.summary()
        racing = choose(race.curve())
        dense_racing = dense_racing if m else race.curve()
        chained = at[at["selected"].astype(bool)]  # RUN's chain: each seed's start at the next cycle
        rows = {r["key"]: r for r in [*race.rows.values(), *chained.to_dict("records")]}
        used += list(rows.values())
        inside += bool(racing is not None and in_set(racing.best, exhaustive.values, exhaustive.inside))
        unimodal += exhaustive.unimodal
        records.append({"cycle": m, "exhaustive_b": exhaustive.best,
                        "racing_b": math.nan if racing is None else racing.best,
                        "trainings_exhaustive": len(at), "trainings_racing": len(rows), "unanswered": len(race.missing)})
        # RUN's own choice starts the next cycle: its chain's value, which a racing run chose before completing
        # values for the verdict (those rows can move the choice over the whole table, `exhaustive`)
        previous = lr_key(chained["max_lr"].iloc[0]) if len(chained) else exhaustive.best
        dense = dense if m else previous

    cycles = pd.DataFrame(records, columns=REPLAY_COLUMNS)
    others = df[df["method"] != Method.ORACLE.value]
    kept = pd.DataFrame(used)
    by_key = {(int(r["cycle"]), lr_key(r["max_lr"]), int(r["seed"])): r for r in oracle.to_dict("records")}

    def complete(targets: dict[int, list[float]]) -> int:
        """The completion pass answered from the table, as one batch (as compare runs it)."""
        nonlocal kept
        wanted = [(m, v, s) for m, vs in targets.items() for v in vs for s in seeds]
        have = {(int(r["cycle"]), lr_key(r["max_lr"]), int(r["seed"])) for r in kept.to_dict("records")}
        new = [by_key[k] for k in wanted if k in by_key and k not in have]
        for m, _v, _s in (k for k in wanted if k not in by_key):
            cycles.loc[cycles["cycle"] == m, "unanswered"] += 1
        for row in new:
            cycles.loc[cycles["cycle"] == int(row["cycle"]), "trainings_racing"] += 1
        if new:
            completions.append([float(row["seconds"]) for row in new])
            kept = pd.concat([kept, pd.DataFrame(new)], ignore_index=True)
        return len(new)

    complete_for_verdict(lambda: results_frame([*kept.to_dict("records"), *others.to_dict("records")]), complete,
                         grid, use_bracket)
    rows = results_frame([*kept.to_dict("records"), *others.to_dict("records")])
    sets, differences = compare_sets(oracle_intervals(df), oracle_intervals(rows))
    members = memberships(df, rows)
    cycles = cycles.merge(sets, on="cycle", how="left")
    mine, theirs = analyse(rows).verdict, analyse(df).verdict
    labels = theirs.set_index(["schedule", "versus"])["verdict"]
    ours = mine.set_index(["schedule", "versus"])["verdict"].reindex(labels.index)
    wall = None
    if slots:
        exhaustive_clock, racing_clock = clocks["exhaustive"], clocks["racing"]
        racing_wall = racing_clock.now + makespan(completions, slots)[0]  # the completions run after the races
        busy = racing_clock.busy + sum(map(sum, completions))
        wall = {"exhaustive": (exhaustive_clock.now, exhaustive_clock.busy / (slots * exhaustive_clock.now)
                               if exhaustive_clock.now else math.nan),
                "racing": (racing_wall, busy / (slots * racing_wall) if racing_wall else math.nan)}
    result = Replay(cycles, rows, inside, int((ours == labels).sum()), len(labels), wall,
                    replay_tuning(df, spec, seeds, dense_racing), unimodal, differences,
                    int(((ours == "undefined") & (labels != "undefined")).sum()),
                    int(((ours == "better") & (labels == "worse") | (ours == "worse") & (labels == "better")).sum()),
                    raced, members, exact)
    _write(result, out, run)
    return result


def _write(result: Replay, out: Path, run: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(out / "replay.csv", result.cycles.to_csv(index=False))
    atomic_write_bytes(out / "replay_tuning.csv", result.tuning.to_csv(index=False))
    atomic_write_bytes(out / "replay_rows.parquet", _parquet(result.rows))
    atomic_write_bytes(out / "replay_differences.csv", result.differences.to_csv(index=False))
    atomic_write_bytes(out / "spec.json", (run / "spec.json").read_bytes())
    write_racing(out, result.raced)
    write_report(out, rows=result.rows, extra=[differences_section(result)])


def differences_section(result: Replay):
    """The replay's report lists every "inside" flag racing changed, with both plans' sets."""
    frame = result.differences
    notes = [result.sets_line().removeprefix("replay: ").capitalize() + ".",
             result.last_line().removeprefix("replay: ").capitalize() + "."]
    if frame.empty:
        return Section("Replay: racing against the exhaustive run", notes=notes + [
            "Every \"inside\" flag of every compared schedule equals the exhaustive run's."])
    cells = frame.assign(max_lr=frame["max_lr"].map(lambda x: f"{x:.4g}"),
                         exhaustive=frame["exhaustive"].map(_flag), racing=frame["racing"].map(_flag))
    table = Table("replay_differences", "Every \"inside\" flag that racing changed", cells, frame,
                  f"{len(frame)} of {int(result.cycles['flags'].sum())} flags differ.")
    return Section("Replay: racing against the exhaustive run", tables=[table], notes=notes)


def _flag(x) -> str:
    return "undefined" if pd.isna(x) else ("inside" if x else "outside")


def _parquet(frame: pd.DataFrame) -> bytes:
    import io

    buffer = io.BytesIO()
    frame.to_parquet(buffer, index=False)
    return buffer.getvalue()
