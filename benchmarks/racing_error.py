"""The racing rule's error on simulated races (the simulations of tests/test_racing.py), for the shipped rule and
its mutations: the rate at which a value truly within 0.5 points of the best is dropped (per value, per race).

    python benchmarks/racing_error.py races                  # 2,000 single races (+ walk, α' = α, no margin)
    python benchmarks/racing_error.py divergence:shipped     # 150 chains × 5 cycles; kinds divergence, heavy;
                                                             # mutations shipped, no_margin, no_shrink,
                                                             # no_discount, uncorrected
    python benchmarks/racing_error.py looks                  # one look's size over α', per case (issue 52)
    python benchmarks/racing_error.py plateau                # races with a plateau 0.45 below the best
Prints one JSON line. Pure CPU, one process; a minute or two each (`--smoke`: 20 races or 2 chains; 20,000 draws a
look case, 20 plateau races).

`looks`: 12 candidates on 3 seeds (α' = 0.05/33), the tested value exactly 0.5 points behind the best, a look on
every candidate's first k seeds (test_racing.LOOK_CASES: even noise with an independent prior; cycle 0, no prior,
on 2 and 3 seeds; a value 2× and 3× noisier per training than the others), 400,000 draws each through
`test_racing.look_fast` (the rule vectorised, checked draw by draw against `Race` in the tests). Per case: the
share dropped, α', their ratio and the ratio's 95 % binomial interval. `plateau`: `test_racing.simulate_plateau`,
2,000 races per case."""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import test_racing as simulations  # noqa: E402
from oracle_search import racing  # noqa: E402


def uncorrected(race) -> None:
    """α' = α: one test per look, no Bonferroni over looks or candidates."""
    race.settings = racing.Settings(race.settings.seeds, 2, alpha=racing.ALPHA * len(race.settings.seeds))


def looks(draws: int) -> dict:
    """Each look case's size over α', with its 95 % binomial interval (Wilson)."""
    from scipy import stats

    out, per_test = {}, simulations.LOOK_SETTINGS.per_test
    z = stats.norm.ppf(0.975)
    for i, (case, (k, prior, noisy)) in enumerate(simulations.LOOK_CASES.items()):
        dropped = 0
        for chunk in range(0, draws, 50_000):
            acc, prior_ss = simulations.look_draws(min(50_000, draws - chunk), 1000 * i + chunk, k, prior, noisy)
            dropped += int(simulations.look_fast(acc, prior_ss).sum())
        p = dropped / draws
        centre = (p + z * z / (2 * draws)) / (1 + z * z / draws)
        half = z * math.sqrt(p * (1 - p) / draws + z * z / (4 * draws * draws)) / (1 + z * z / draws)
        out[case] = {"size": p, "alpha_prime": per_test, "ratio": round(p / per_test, 2),
                     "ratio_95": [round((centre - half) / per_test, 2), round((centre + half) / per_test, 2)],
                     "draws": draws}
    return out


def plateau(races: int) -> dict:
    """The share of races dropping a value truly 0.45 below the best: even noise or one such value 3× noisier, on
    2 and 3 seeds."""
    return {f"{len(seeds)} seeds, {'even noise' if noisy == 1 else f'one value {noisy:g}x noisier'}":
            simulations.simulate_plateau(races, 13, seeds, noisy)
            for seeds in ((0, 1), (0, 1, 2)) for noisy in (1.0, 3.0)}


def main(which: str, smoke: bool = False) -> dict:
    races, chains = (20, 2) if smoke else (2000, 150)
    if which == "looks":
        return {"looks": looks(20_000 if smoke else 400_000)}
    if which == "plateau":
        return {"plateau": plateau(races)}
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
