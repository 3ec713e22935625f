"""The racing rule's error on simulated races (the simulations of tests/test_racing.py), for the shipped rule and
its mutations: the rate at which a value truly within 0.5 points of the best is dropped (per value, per race).

    python benchmarks/racing_error.py races                  # 2,000 single races (+ walk, α' = α, no margin)
    python benchmarks/racing_error.py divergence:shipped     # 150 chains × 5 cycles; kinds divergence, heavy;
                                                             # mutations shipped, no_margin, no_shrink,
                                                             # no_discount, uncorrected
Prints one JSON line. Pure CPU, one process; a minute or two each (`--smoke`: 20 races or 2 chains)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import test_racing as simulations  # noqa: E402
from oracle_search import racing  # noqa: E402


def uncorrected(race) -> None:
    """α' = α: one test per look, no Bonferroni over looks or candidates."""
    race.settings = racing.Settings(race.settings.seeds, 2, alpha=racing.ALPHA * len(race.settings.seeds))


def main(which: str, smoke: bool = False) -> dict:
    races, chains = (20, 2) if smoke else (2000, 150)
    if which == "races":
        out = {"shipped": simulations.simulate(races, seed=7),
               "walk": simulations.simulate(races, seed=7, walk=True),
               "uncorrected": simulations.simulate(races, seed=7, mutate=uncorrected)}
        racing.half_width = lambda *args, **kwargs: 0.0
        return out | {"no_margin": simulations.simulate(races, seed=7)}
    kind, mutation = which.split(":")
    if mutation == "no_margin":
        racing.half_width = lambda *args, **kwargs: 0.0
    elif mutation == "no_shrink":
        racing.shrunk = lambda d, pool: (pool.sd, pool.df)
    elif mutation == "no_discount":
        racing.CARRY = 1.0
    mutate = uncorrected if mutation == "uncorrected" else None
    return {which: simulations.simulate_chains(chains, seed=3, kind=kind, mutate=mutate)}


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--smoke"]
    print(json.dumps(main(args[0] if args else "divergence:shipped", smoke="--smoke" in sys.argv)))
