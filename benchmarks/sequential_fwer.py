"""The sequential rule's family-wise error and power (issue 61), simulated: `compare --replicates auto`'s rule
(`oracle_search.sequential`: Lan–DeMets O'Brien–Fleming spending over the looks, Bonferroni over the family)
against uncorrected looks (a 95 % t interval at every look, stopping at the first decided label).

    python benchmarks/sequential_fwer.py              # 4,000 families per cell (a quarter of a minute)
    python benchmarks/sequential_fwer.py --sims 400   # quicker, wider Monte Carlo error
    python benchmarks/sequential_fwer.py --smoke      # 200 a cell: that it runs (tests/test_benchmarks.py)

Families of 18 comparisons (each SILO variant against 9 references, as the verdict's family), each comparison's
per-replicate advantages = effect + sd·noise, sd 1–4 points (the spreads the committed runs measured), margin 3
points (0.5 per cycle over 6 cycles), looks at R = 3, 6, …, N. Cells: true effect 0, at the margin, twice the
margin (every comparison alike) × noise normal or Student t with 3 df (heavy tails, variance 1) × N = 6 or 12.
The family-wise error: the share of families with any wrong decided label ("better" with effect ≤ 0, "worse" with
effect ≥ 0, "equivalent" with |effect| ≥ margin); power: a comparison's chance of a correct decided label. Each
± its Monte Carlo standard error. `holds`: error ≤ 0.05 + 3 standard errors.

Prints a Markdown table, then one JSON line with every cell. Pure numpy, one process; timing is not its point."""
from __future__ import annotations

import argparse
import json
import time

import numpy as np

from oracle_search.sequential import Design, simulate

ALPHA = 0.05
MARGIN = 3.0
FAMILY = 18
SDS = np.tile([1.0, 2.0, 3.0, 4.0], 5)[:FAMILY]
EFFECTS = {"0": 0.0, "the margin": MARGIN, "twice the margin": 2 * MARGIN}
SHAPES = ("normal", "t3")
NS = (6, 12)


def cells(sims: int, seed: int = 61) -> list[dict]:
    out = []
    for N in NS:
        design = Design(first=3, wave=3, max_replicates=N, family_size=FAMILY)
        for shape in SHAPES:
            for name, effect in EFFECTS.items():
                for rule in ("sequential", "naive"):
                    found = simulate(np.full(FAMILY, effect), SDS, MARGIN, design, shape=shape, sims=sims,
                                     seed=seed, rule=rule)
                    out.append({"N": N, "noise": shape, "effect": name, "rule": rule, "fwer": found.fwer,
                                "fwer_se": found.fwer_se, "power": found.power, "power_se": found.power_se,
                                "replicates": found.replicates, "holds": found.fwer <= ALPHA + 3 * found.fwer_se,
                                "sims": sims})
    return out


def _error(r: dict) -> str:
    """The error ± its Monte Carlo standard error; none seen: below 3/sims at 95 % (the rule of three)."""
    if r["fwer"] == 0:
        return f"0 (95 % upper bound {3 / r['sims']:.4f})"
    return f"{r['fwer']:.3f} ± {r['fwer_se']:.3f}"


def table(rows: list[dict]) -> str:
    head = ("| N | noise | true effect | rule | family-wise error ± MC | power ± MC | replicates run | ≤ 5 % |\n"
            "|---|---|---|---|---|---|---|---|")
    body = [f"| {r['N']} | {'t, 3 df' if r['noise'] == 't3' else 'normal'} | {r['effect']} | "
            f"{'O-F + Bonferroni' if r['rule'] == 'sequential' else 'uncorrected'} | "
            f"{_error(r)} | {r['power']:.3f} ± {r['power_se']:.3f} | "
            f"{r['replicates']:.1f} | {'yes' if r['holds'] else 'NO'} |" for r in rows]
    return "\n".join([head, *body])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sims", type=int, default=4000, help="families per cell (default 4000)")
    parser.add_argument("--seed", type=int, default=61)
    parser.add_argument("--smoke", action="store_true", help="200 families per cell: checks that it runs "
                        "(tests/test_benchmarks.py); its Monte Carlo error is too wide to read")
    args = parser.parse_args()
    start = time.perf_counter()
    rows = cells(200 if args.smoke else args.sims, args.seed)
    print(table(rows))
    print(json.dumps({"benchmark": "sequential_fwer", "sims": rows[0]["sims"], "seed": args.seed, "cells": rows,
                      "seconds": round(time.perf_counter() - start, 1)}))


if __name__ == "__main__":
    main()
