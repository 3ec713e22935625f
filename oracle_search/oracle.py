"""The Oracle (paper §5.3): at every cycle, train max_lr values from the same chained checkpoint on every seed,
choose b by seed-mean validation accuracy (`selection.choose`), and chain each seed's b checkpoint forward.

Cycle 0 trains the coarse grid; later cycles start from a bracket around the previous choice. Then rounds of
refinement add values until each edge of both intervals lies between a trained value inside and one outside,
resolved to 5 %, or the round budget is spent (`selection.next_values`).

Two modes. `racing` (the default, `oracle_search.racing`): values, refinement values included, are trained in
rounds of seeds, and one shown more than 0.5 points worse than the leader gets no more seeds; from cycle 1 the
values walk out from the previous choice and stop beyond a dropped one; b, the best seed mean among values every
seed trained, keeps its definition. `exhaustive`: every seed trains every value, so each value's seed mean and
paired differences are defined."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import pandas as pd

from oracle_search.compared import complete_for_verdict
from oracle_search.identity import Training
from oracle_search.runner import Runner
from oracle_search.racing import RACING_FILE, OracleSearch, Pool, Race, carry, write_racing
from oracle_search.schema import Method, Stage, results_frame
from oracle_search.selection import Choice, Curve, choose, dense_best, lr_key
from oracle_search.trainings import Streaming, oracle_training, training_id


@dataclass
class CycleOutcome:
    cycle: int
    choice: Choice
    selected: dict[int, dict]  # seed -> the row chained forward
    rounds: int  # refinement rounds after the coarse grid or bracket

    @property
    def density(self) -> float:
        return next(iter(self.selected.values()))["density"]


def mark_selected(runner: Runner, best: dict, ledger_rows: list[dict]) -> dict:
    """Record `best` as the (seed, cycle)'s chained trial, and no other (a rerun with other options may have
    chosen another)."""
    for row in ledger_rows:
        if (row.get("method") == Method.ORACLE.value and row.get("selected") and row["seed"] == best["seed"]
                and row["cycle"] == best["cycle"] and row["key"] != best["key"]):
            runner.ledger.record(row | {"selected": False})
    if not best.get("selected"):
        best = best | {"selected": True}
        runner.ledger.record(best)
    return best


def earlier_rows(runner: Runner, cycle: int, starts: dict[int, dict | None]) -> dict[str, dict]:
    """This cycle's Oracle rows already in the ledger that trained from each seed's current start: an earlier run
    may have tried more values (say, with more refinement rounds). The choice counts them, as the analysis
    does, so b is the same whichever options a rerun was given. Rows trained for the verdict (`complete`) are
    not counted: they come after the choice, and a resume must choose what the run chose."""
    mine = {}
    for row in runner.ledger.rows():
        seed = row.get("seed")
        if (row.get("method") == Method.ORACLE.value and row.get("cycle") == cycle and seed in starts
                and not row.get("for_verdict")
                and row.get("training") == training_id(runner.spec, cycle, seed, row["max_lr"], starts[seed])):
            mine[row["key"]] = row
    return mine


def _race(runner: Runner, search: OracleSearch, cycle: int, starts: dict[int, dict | None], values: list[float],
          prior: Pool, previous: float | None, dense: float | None) -> tuple[dict[str, dict], Race, int]:
    """One cycle searched (`racing.OracleSearch`: a race, or an exhaustive race that keeps every value): its rows by
    key, the race, and the refinement rounds used. The race sees only its own rows, so a rerun with the same
    options replays it from the ledger and trains nothing new."""
    race = search.race(values, prior, previous, dense)
    first = {lr_key(v) for v in values}

    def training(_, pair: tuple[float, int]) -> Training:
        v, s = pair
        return oracle_training(runner, cycle, s, v, starts[s], Stage.GRID if v in first else Stage.REFINE)

    rounds = search.run(race, Streaming(runner, training), runner.slots())
    return {row["key"]: row for row in race.rows.values()}, race, rounds


def run_oracle(runner: Runner, search: OracleSearch,
               decided: Callable[[CycleOutcome], None] | None = None) -> list[CycleOutcome]:
    """Run cycles 0..L on every seed of `search` (its grid, refinement rounds, bracket and mode: racing or
    exhaustive, module docstring). Each cycle's choice also counts the rows an earlier run on this folder trained
    from the same starts (`earlier_rows`). `decided` is called with each cycle's outcome once it is chosen."""
    spec, say, seeds = runner.spec, runner.progress.say, list(search.seeds)
    outcomes: list[CycleOutcome] = []
    pool = Pool()  # racing: the seed noise of a paired difference, carried from cycle to cycle
    raced: dict[int, dict] = {}  # racing: per cycle, what the race changed (racing.json)
    if not search.racing:  # an earlier racing run on this folder: its record no longer describes the Oracle's rows
        (runner.out / RACING_FILE).unlink(missing_ok=True)
    for cycle in range(spec.cycles + 1):
        starts = {s: outcomes[-1].selected[s] if outcomes else None for s in seeds}
        previous, dense = (outcomes[-1].choice.best, outcomes[0].choice.best) if outcomes else (None, None)
        values = search.first_values(previous, dense)
        say(f"oracle cycle {cycle}: {len(values)} max_lr x {len(seeds)} seed(s){', racing' * search.racing}")
        rows, race, rounds = _race(runner, search, cycle, starts, values, pool, previous, dense)
        if search.racing:
            pool = carry(pool, race)
            raced[cycle] = race.summary()
            write_racing(runner.out, raced)
            say(f"  racing: {len(race.rows)} of {len({*values, *race.candidates, *race.walk}) * len(seeds)} "
                f"trainings, {len(race.dropped)} value(s) dropped early, {len(race.walk)} beyond them never trained, "
                f"{len(race.kept)} completed for the sets")
        rows |= earlier_rows(runner, cycle, starts)
        choice = choose(Curve.from_rows(rows.values()))
        if choice is None:
            say(f"  cycle {cycle}: every max_lr diverged on some seed; the Oracle stops here")
            runner.write_results()
            break
        ledger_rows = runner.ledger.rows()  # read once per cycle, not once per seed
        at_best = {r["seed"]: r for r in rows.values() if lr_key(r["max_lr"]) == choice.best}
        selected = {s: mark_selected(runner, at_best[s], ledger_rows) for s in seeds}
        runner.prune_checkpoints()  # this cycle is decided: the values not chosen are never a start
        outcomes.append(CycleOutcome(cycle, choice, selected, rounds))
        runner.write_results()
        say(f"  cycle {cycle} density {outcomes[-1].density:.1f}%: best max_lr {choice.best:.4g} "
            f"(val {choice.best_acc:.1f} over {choice.n_seeds} seed(s)), interval [{choice.lo:.4g}, {choice.hi:.4g}], "
            f"not shown worse [{choice.noise_lo:.4g}, {choice.noise_hi:.4g}], {len(choice.values)} values"
            f"{'' if choice.unimodal else ', NOT unimodal'} [{runner.progress.elapsed()}]")
        if decided is not None:
            decided(outcomes[-1])
    return outcomes


def oracle_cycles(runner: Runner, search: OracleSearch,
                  decided: Callable[[CycleOutcome], None] | None = None) -> list[CycleOutcome]:
    """The Oracle as a command runs it: `run_oracle` with its search widened for the runner's slots
    (`OracleSearch.for_slots`)."""
    return run_oracle(runner, search.for_slots(runner.slots()), decided)


def dense_best_here(runner: Runner) -> float | None:
    """The Oracle's seed-mean dense best from this folder's ledger, or None when no Oracle ran here."""
    ledger = pd.DataFrame(runner.ledger.rows())
    return dense_best(ledger) if not ledger.empty else None


def verdict_completions(runner: Runner, search: OracleSearch) -> None:
    """Racing leaves values far from b with fewer seeds. Before the analysis, train the missing seeds of the
    values next to every compared schedule's max_lr at every cycle (`compared.complete_for_verdict`), so the
    verdict interpolates between complete values as it does after an exhaustive Oracle."""
    seeds = list(search.seeds)

    def train(targets: dict[int, list[float]]) -> int:
        trained = complete(runner, seeds, targets)
        runner.progress.say(f"verdict: completed {sum(map(len, targets.values()))} value(s) next to the compared "
                            f"schedules ({trained} trainings)")
        return trained

    complete_for_verdict(lambda: results_frame(runner.ledger.rows()), train, list(search.grid), search.bracket)


def complete(runner: Runner, seeds: list[int], targets: dict[int, list[float]]) -> int:
    """Train the missing seeds of `targets` ({cycle: values}) on the Oracle's current chain, so the verdict can
    interpolate between complete values (racing leaves far values with fewer seeds). Returns the trainings run."""
    chain = {}
    for row in runner.ledger.rows():
        if row.get("method") == Method.ORACLE.value and row.get("selected") and row.get("seed") in seeds:
            chain[(row["cycle"], row["seed"])] = row
    trials = []
    for cycle, values in sorted(targets.items()):
        starts = {s: chain.get((cycle - 1, s)) if cycle else None for s in seeds}
        if any(cycle and start is None for start in starts.values()):
            continue  # a seed's chain does not reach this cycle
        # Tagged in the ledger: the choice counts only the search's own rows (`earlier_rows`), so a resume after
        # the completions chooses what the run chose.
        trials += [oracle_training(runner, cycle, s, v, starts[s], Stage.REFINE, for_verdict=True)
                   for v in values for s in seeds]
    before = len(runner.ledger.rows())
    if trials:
        runner.run(trials)
        runner.write_results()
    return len(runner.ledger.rows()) - before


def oracle_table(outcomes: list[CycleOutcome]) -> str:
    """λ | Oracle max_lr | both intervals | seed-mean validation and test accuracy, one line per cycle."""
    lines = [f"{'cycle':>5} {'λ %':>6} {'max_lr':>8} {'interval':>18} {'not shown worse':>18} {'val %':>12} "
             f"{'test %':>6} {'values':>6}"]
    for o in outcomes:
        c = o.choice
        test = sum(r["test_acc"] for r in o.selected.values()) / len(o.selected)
        se = "" if c.n_seeds < 2 else f" ± {c.best_se:.1f}"
        lines.append(f"{o.cycle:>5} {o.density:>6.1f} {c.best:>8.4g} {f'[{c.lo:.4g}, {c.hi:.4g}]':>18} "
                     f"{f'[{c.noise_lo:.4g}, {c.noise_hi:.4g}]':>18} {f'{c.best_acc:.1f}{se}':>12} {test:>6.1f} "
                     f"{len(c.values):>6}")
    return "\n".join(lines)
