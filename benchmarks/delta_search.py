"""silo_paper's δ search replayed on finished runs' δ tables, with the shipped rule (`walk_first`: while the winner
is the last tried δ on a side, only that side's next coarse value is tried) and the earlier one (both sides every
round): the δ each chooses, whether it lies within the run's own bracket of its δ (its trained neighbours), and the
(δ, seed) chains each trains (a chain trains cycles q+1..target). Trains nothing.

    python benchmarks/delta_search.py [RUN ...]      # default: every committed run under benchmarks/results
    python benchmarks/delta_search.py --smoke        # one committed exhaustive run

A run's table must hold every (δ, seed) the rules ask for (an exhaustive δ search answers most); a request it
cannot answer is counted. Prints one JSON line per run, then a summary line."""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from oracle_search.curve import lr_key  # noqa: E402
from oracle_search.schema import read_results  # noqa: E402
from oracle_search.delta import DeltaPlan  # noqa: E402
from oracle_search.silo_paper import RECORD  # noqa: E402


def replay(run: Path) -> dict:
    record = json.loads((run / RECORD).read_text())
    spec = json.loads((run / "spec.json").read_text())
    target, seeds = record["target_cycle"], tuple(record["seeds"])
    df = read_results(run)
    rows = df[(df["method"] == "silo_paper") & (df["stage"] == "tune") & df["seed"].isin(seeds)]
    table = {}
    for (delta, seed), chain in rows.groupby(["delta", "seed"]):
        end = chain.sort_values("cycle").iloc[-1]
        table[(lr_key(delta), int(seed))] = {"val_acc": float(end["val_acc"]),
                                             "diverged": bool(end["diverged"]) or int(end["cycle"]) != target}
    theirs = sorted(lr_key(d) for d in record["delta_candidates"])
    i = theirs.index(lr_key(record["delta"]))
    low, high = theirs[max(i - 1, 0)], theirs[min(i + 1, len(theirs) - 1)]
    out = {"run": run.name, "their_delta": record["delta"], "their_chains": len(table), "bracket": [low, high]}
    for rule in (True, False):
        plan = DeltaPlan(record["epsilon"], tuple(spec["grid"]), seeds, target, mode="exhaustive", walk_first=rule)
        race, asked = plan.race(), []

        def train(pairs):
            asked.extend(pairs)
            return {p: table[p] for p in pairs if p in table}

        plan.run(race, train)
        best = race.curve().best
        name = "walk_first" if rule else "both_sides"
        out[name] = {"delta": best, "chains": len(race.rows), "unanswered": len(race.missing),
                     "trainings": len(race.rows) * plan.cycles_per_delta,
                     "within_their_bracket": best is not None and low <= best <= high}
    return out


RESULTS = Path(__file__).resolve().parent / "results"
SMOKE = RESULTS / "racing-told-2026-11-27" / "exhaustive-seed0"


def main(argv: list[str]) -> None:
    runs = ([SMOKE] if "--smoke" in argv else [Path(a) for a in argv]
            or sorted(p.parent for p in RESULTS.rglob(RECORD) if (p.parent / "results.parquet").exists()))
    same = inside = mine = theirs = 0
    for run in runs:
        out = replay(run)
        print(json.dumps(out))
        same += out["walk_first"]["delta"] == out["both_sides"]["delta"]
        inside += out["walk_first"]["within_their_bracket"]
        mine, theirs = mine + out["walk_first"]["chains"], theirs + out["both_sides"]["chains"]
    print(f"delta_search: the same δ as the earlier rule on {same} of {len(runs)} runs, within the run's bracket on "
          f"{inside} of {len(runs)}; chains {mine} against {theirs} ({100 * mine / max(theirs, 1):.0f} %)")


if __name__ == "__main__":
    main(sys.argv[1:])
