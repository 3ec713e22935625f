"""The racing rule (oracle_search/racing.py): its error rate on simulated races with known truth, a mutation that
breaks it, and its mechanics (rounds, drops, divergence, what it asks to train)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from oracle_search import racing
from oracle_search.curve import Curve, lr_key
from oracle_search.racing import Pool, Race, Settings, run_race
from oracle_search.selection import bracket, choose

GRID = [0.01 * 2 ** i for i in range(8)]  # the default's grid
GRID_KEYS = [lr_key(g) for g in GRID]
SEEDS = (0, 1, 2)
TOL = racing.TOLERANCE


def truth(rng: np.random.Generator) -> tuple[list[float], np.ndarray, np.ndarray]:
    """A cycle's candidates, true curve and noise. Candidates: the default's grid plus four values a quarter and
    half a doubling either side of the grid value nearest the optimum (as refinement adds), so several candidates
    lie within the tolerance of the best. The curve: a parabola in ln max_lr, peak 82 % at a random optimum. The
    noise is the size measured on the default's exhaustive runs (benchmarks/results/oracle-exhaustive-2026-11-26):
    a paired difference's sd is 0.2–0.5 points near the optimum and 1–3 points far from it, so each value's sd grows
    with its distance from the optimum in ln max_lr."""
    peak = math.exp(rng.uniform(math.log(0.1), math.log(0.45)))
    near = min(GRID, key=lambda g: abs(math.log(g / peak)))
    values = sorted({*GRID, *(near * 2 ** f for f in (-0.5, -0.25, 0.25, 0.5))})
    distance = np.abs(np.log(np.array(values)) - math.log(peak))
    curvature = rng.uniform(1.0, 4.0)  # points lost per (ln x)²: 0.5 points at 0.5–1 of a doubling
    mean = 82.0 - curvature * distance ** 2
    sd = 0.25 + 0.6 * distance
    return values, mean, sd


def simulate(n_races: int, seed: int, mutate=None, walk: bool = False) -> dict[str, float]:
    """Races on fresh truths; each race's prior pool comes from a previous race on the same kind of curve (as the
    Oracle carries it from cycle to cycle). Returns the drop rate of values truly within the tolerance of the true
    best, and how often racing's and the exhaustive Oracle's b are truly more than the tolerance worse. `walk`: the
    race walks (`Race.start`) from a centre up to a doubling either side of the optimum (the previous cycle's b: on
    the default's runs b moved by at most a doubling between cycles); a value it never trains counts as dropped."""
    rng = np.random.default_rng(seed)
    within = dropped_within = racing_bad = exhaustive_bad = 0
    prior = Pool()
    for _ in range(n_races):
        values, mean, sd = truth(rng)
        seed_effect = rng.normal(0, 0.5, len(SEEDS))  # shared by every value of a seed: it cancels when paired
        acc = mean[:, None] + seed_effect[None, :] + rng.normal(0, 1, (len(values), len(SEEDS))) * sd[:, None]
        race = Race(Settings(SEEDS, most_candidates=len(values)), prior)
        if mutate:
            mutate(race)
        index = {lr_key(v): i for i, v in enumerate(values)}
        race.start(values, values[int(np.argmax(mean))] * 2 ** rng.uniform(-1, 1) if walk else None)

        def train(pairs):
            return {(v, s): {"val_acc": acc[index[v], s], "diverged": False} for v, s in pairs}

        run_race(race, train)
        prior = race.final_pool()  # the next race starts with this one's pool, as the next cycle does
        best = mean.max()
        for v, i in index.items():
            if mean[i] >= best - TOL:
                within += 1
                dropped_within += v in race.dropped or v not in race.candidates
        complete = [i for v, i in index.items() if v in race.alive]
        exhaustive_b = int(np.argmax(acc.mean(axis=1)))
        racing_b = max(complete, key=lambda i: (acc[i].mean(), -i))
        exhaustive_bad += mean[exhaustive_b] < best - TOL
        racing_bad += mean[racing_b] < best - TOL
    return {"drop_rate": dropped_within / within, "within": within, "racing_bad": racing_bad / n_races,
            "exhaustive_bad": exhaustive_bad / n_races}


@pytest.fixture(scope="module")
def simulated():
    return simulate(2000, seed=7)


@pytest.mark.slow  # thousands of simulated races: seconds, not the fast lane's milliseconds
def test_a_value_truly_within_the_tolerance_is_dropped_at_most_alpha_of_the_time(simulated):
    """2,000 races: the rate at which a value within 0.5 points of the true best is dropped stays ≤ α = 0.05."""
    assert simulated["within"] > 2 * 2000  # several candidates per race lie within the tolerance
    assert simulated["drop_rate"] <= racing.ALPHA, simulated


@pytest.mark.slow  # thousands of simulated races: seconds, not the fast lane's milliseconds
def test_racings_b_is_truly_worse_no_more_often_than_the_exhaustive_oracles_plus_alpha(simulated):
    assert simulated["racing_bad"] <= simulated["exhaustive_bad"] + racing.ALPHA, simulated


@pytest.fixture(scope="module")
def simulated_walk():
    return simulate(2000, seed=7, walk=True)


@pytest.mark.slow  # thousands of simulated races: seconds, not the fast lane's milliseconds
def test_the_walk_leaves_out_a_value_truly_within_the_tolerance_at_most_alpha_of_the_time(simulated_walk):
    """The same 2,000 truths (unimodal by construction), each race walking from a centre near the optimum: a value
    within 0.5 points of the true best is dropped or never trained at most α of the time, and racing's b is truly
    worse no more often than the exhaustive Oracle's plus α. The walk's failure when the curve is not unimodal is
    `test_the_walk_misses_a_better_value_beyond_a_valley_which_the_unimodal_check_flags`."""
    assert simulated_walk["within"] > 2 * 2000
    assert simulated_walk["drop_rate"] <= racing.ALPHA, simulated_walk
    assert simulated_walk["racing_bad"] <= simulated_walk["exhaustive_bad"] + racing.ALPHA, simulated_walk


@pytest.mark.slow  # thousands of simulated races: seconds, not the fast lane's milliseconds
def test_the_mutation_without_a_margin_fails_the_simulation(monkeypatch):
    """The control: drop whenever the observed gap exceeds the tolerance (no pooled sd, no correction). The same
    simulation then drops values truly within the tolerance far more often than α, so the test above can fail."""
    monkeypatch.setattr(racing, "half_width", lambda *args, **kwargs: 0.0)
    mutated = simulate(400, seed=7)
    assert mutated["drop_rate"] > racing.ALPHA, mutated


def test_a_gap_between_the_two_thresholds_is_dropped_under_alpha_and_kept_under_alpha_prime():
    """One look after one seed, prior pool sd 0.5 on 10 df (ν = 10): 0.2 is 1.8 points behind the leader 0.4.
    Shipped, α' = 0.05 / ((4 − 1)·3) = 0.005556: margin t(1 − α', 10)·0.5 = 1.554, and 1.8 − 1.554 = 0.246 ≤ 0.5:
    kept. Uncorrected, α' = α = 0.05: margin t(0.95, 10)·0.5 = 0.906, and 1.8 − 0.906 = 0.894 > 0.5: dropped. So the
    correction across looks and candidates decides this race (its gap lies between the two thresholds)."""
    table = rows({0.2: [80.2], 0.4: [82.0]})

    def race_with(settings: Settings) -> Race:
        race = Race(settings, Pool(0.25 * 10, 10))
        race.add([0.2, 0.4])
        race.record(table)
        return race

    shipped = Settings(SEEDS, most_candidates=4)
    assert shipped.per_test == pytest.approx(0.05 / 9)
    assert not race_with(shipped).dropped
    uncorrected = Settings(SEEDS, 2, alpha=racing.ALPHA * len(SEEDS))  # per_test = α·S / (1·S) = α
    assert uncorrected.per_test == pytest.approx(racing.ALPHA)
    assert 0.2 in race_with(uncorrected).dropped


def test_per_test_is_alpha_over_the_other_candidates_times_the_looks():
    """α' = α / ((K − 1)·S), K at least 2: 12 candidates on 3 seeds 0.05/33; on 2 seeds 0.05/22; one candidate
    counts as two (no fewer than one other); α given."""
    assert Settings((0, 1, 2), most_candidates=12).per_test == pytest.approx(0.05 / 33)
    assert Settings((0, 1), most_candidates=12).per_test == pytest.approx(0.05 / 22)
    assert Settings((0, 1, 2), most_candidates=1).per_test == Settings((0, 1, 2), most_candidates=2).per_test \
        == pytest.approx(0.05 / 3)
    assert Settings((0, 1, 2, 3, 4), most_candidates=9, alpha=0.1).per_test == pytest.approx(0.1 / 40)


@pytest.mark.slow  # thousands of simulated races: seconds, not the fast lane's milliseconds
def test_the_mutation_without_pooling_across_cycles_changes_nothing_it_should_not():
    """Without the prior pool the first round cannot drop anything (no degrees of freedom): the rule stays valid,
    it only trains more. The error rate stays ≤ α; this is the rule's fallback, not a failure mode."""
    def no_prior(race):
        race.prior = Pool()

    assert simulate(300, seed=11, mutate=no_prior)["drop_rate"] <= racing.ALPHA


# --- the extended simulation: the Oracle's chain, refinement, a carried prior, noise toward divergence ------------

def noise_sd(x: float, peak: float, kind: str) -> float:
    """A training's noise at max_lr x: 0.25 points at the optimum, growing with the distance in ln max_lr (as in
    `truth`); "divergence" and "heavy": above the optimum, up to 5× more toward divergence (measured on the
    default: values near divergence are 4–6× noisier than those near b), reached at 4× the optimum."""
    sd = 0.25 + 0.6 * abs(math.log(x / peak))
    if kind in ("divergence", "heavy"):
        sd *= 1 + 4 * min(max(math.log(x / peak) / math.log(4), 0.0), 1.0)
    return sd


def simulate_chains(n_chains: int, seed: int, kind: str, cycles: int = 5, mutate=None) -> dict[str, float]:
    """Racing Oracle chains as the driver runs them (`racing.oracle_race`, `racing.refinement`, `racing.carry`): a
    cycle walks from the previous cycle's racing b over its bracket, refines once, completes what the sets need, and
    hands its pool on. Each cycle has its own truth: the optimum drifts by up to half a doubling, the curvature is
    drawn anew, and the noise scale by a factor in [0.6, 1.8] (what the discount of the carried prior is for).
    `kind`: "divergence" (noise growing toward divergence, `noise_sd`) or "heavy" (the same, with Student-t noise
    on 3 df above the optimum: a heavy-tailed high-max_lr edge). Returns, over values truly within the tolerance of
    the best value the cycle could train: how often the rule dropped one (`rule_value`; per race, `rule_race`),
    and how often one ends without every seed after the completions (`lost_value`, `lost_race`)."""
    rng = np.random.default_rng(seed)
    within = by_rule = lost = races = races_rule = races_lost = 0
    for _ in range(n_chains):
        prior, previous = Pool(), None
        peak = math.exp(rng.uniform(math.log(0.1), math.log(0.45)))
        for cycle in range(cycles):
            peak = min(max(peak * 2 ** rng.uniform(-0.5, 0.5), 0.05), 0.6)
            scale, curvature = rng.uniform(0.6, 1.8), rng.uniform(1.0, 4.0)
            effect, drawn = rng.normal(0, 0.5, len(SEEDS)), {}

            def train(pairs, peak=peak, scale=scale, curvature=curvature, effect=effect, drawn=drawn):
                for v, s in pairs:
                    if (v, s) not in drawn:
                        z = rng.standard_t(3) / math.sqrt(3) if kind == "heavy" and v > peak else rng.normal()
                        drawn[(v, s)] = (82 - curvature * math.log(v / peak) ** 2 + effect[s]
                                         + scale * noise_sd(v, peak, kind) * z)
                return {(v, s): {"val_acc": drawn[(v, s)], "diverged": False} for v, s in pairs}

            values = bracket(GRID, previous) if cycle else GRID
            race = racing.oracle_race(list(SEEDS), values, racing.RACING_REFINE, prior, previous, None)
            if mutate:
                mutate(race)
            run_race(race, train, refine=racing.refinement(GRID), rounds=racing.RACING_REFINE)
            prior, previous = racing.carry(prior, race), race.curve().best
            means = {v: 82 - curvature * math.log(v / peak) ** 2 for v in {*race.candidates, *race.walk}}
            near = [v for v, m in means.items() if m >= max(means.values()) - TOL]
            missed = [v for v in near if v in race.dropped or v not in race.candidates]
            dropped = [v for v in near if v in missed or v in race.reopened]
            within, lost, by_rule = within + len(near), lost + len(missed), by_rule + len(dropped)
            races, races_lost, races_rule = races + 1, races_lost + bool(missed), races_rule + bool(dropped)
    return {"rule_value": by_rule / within, "rule_race": races_rule / races, "lost_value": lost / within,
            "lost_race": races_lost / races, "within": within, "races": races}


@pytest.fixture(scope="module", params=["divergence", "heavy"])
def chains(request):
    return request.param, simulate_chains(150, seed=3, kind=request.param)


@pytest.mark.slow  # 750 simulated races per kind: tens of seconds
def test_on_simulated_chains_a_value_truly_within_the_tolerance_is_dropped_at_most_alpha_of_the_time(chains):
    """150 chains of 5 cycles (750 races) with refinement, the prior carried and discounted, noise growing toward
    divergence (and heavy-tailed there): a value within 0.5 points of the best is dropped by the rule at most α of
    the time per value and per race (the walk leaving it untrained counts as a drop), and after the completions
    for the sets at most α of the time too."""
    kind, found = chains
    assert found["within"] > 2 * found["races"], found  # several values per race lie within the tolerance
    for rate in ("rule_value", "rule_race", "lost_value", "lost_race"):
        assert found[rate] <= racing.ALPHA, (kind, rate, found)


@pytest.mark.slow  # simulated races
def test_on_simulated_chains_the_mutation_without_a_margin_fails(monkeypatch):
    """The control for the test above: drop whenever the observed gap exceeds the tolerance. The same chains then
    drop values truly within the tolerance far more often than α, so that test can fail."""
    monkeypatch.setattr(racing, "half_width", lambda *args, **kwargs: 0.0)
    found = simulate_chains(40, seed=3, kind="divergence")
    assert found["rule_value"] > racing.ALPHA and found["rule_race"] > racing.ALPHA, found


def rows(accs: dict[float, list[float]], diverged=frozenset()):
    return {(v, s): {"val_acc": a, "diverged": (v, s) in diverged} for v, per_seed in accs.items()
            for s, a in enumerate(per_seed)}


def answered(table):
    asked = []

    def train(pairs):
        asked.append(list(pairs))
        return {p: table[p] for p in pairs if p in table}
    return train, asked


def test_rounds_of_seeds_drop_far_values_and_give_the_rest_every_seed():
    """Round 1 (seed 0): no pool, no drop. Round 2: pairs with 2 seeds pool ss 0.625 on 3 df (sd 0.456);
    α' = 0.05 / (3 looks · 3 other candidates); 0.1 (20 behind) and 0.8 (30.5 behind) are dropped, 0.2 (0.75
    behind) goes on. Round 3 trains the leader 0.4 and 0.2 only: 4 + 4 + 2 = 10 of 12 trainings."""
    table = rows({0.1: [60, 61, 62], 0.2: [79, 80.5, 81], 0.4: [80, 81, 82], 0.8: [50, 50, 50]})
    race = Race(Settings(SEEDS, most_candidates=4))
    race.add([0.1, 0.2, 0.4, 0.8])
    train, asked = answered(table)
    run_race(race, train)
    assert [len(b) for b in asked] == [4, 4, 2]
    assert set(race.dropped) == {0.1, 0.8} and race.leader() == 0.4
    assert race.seeds_of(0.2) == [0, 1, 2] and race.seeds_of(0.1) == [0, 1]
    # The pool at the end: 0.2's d = [1, 0.5, 1] (ss 1/6, 2 df), 0.1's [20, 20] (0, 1), 0.8's [30, 31] (0.5, 1).
    assert race.pool().df == 2 + 1 + 1 and race.pool().ss == pytest.approx(1 / 6 + 0 + 0.5)
    # The control: the same race with 0.1 and 0.8 close to the leader trains everything.
    close = rows({0.1: [79.5, 80.5, 81.5], 0.2: [79, 80.5, 81], 0.4: [80, 81, 82], 0.8: [79.8, 80.9, 81.7]})
    race = Race(Settings(SEEDS, most_candidates=4))
    race.add([0.1, 0.2, 0.4, 0.8])
    train, asked = answered(close)
    run_race(race, train)
    assert not race.dropped and sum(map(len, asked)) == 12


def test_an_exhaustive_race_asks_every_seed_at_once_and_drops_nothing():
    """The same far values as above (and a divergence), `keep_all`: one batch of all 12 trainings, nothing dropped,
    every value on every seed, even with a prior that would drop 0.1 after one seed."""
    table = rows({0.1: [60, 61, 62], 0.2: [79, 80.5, 81], 0.4: [80, 81, 82], 0.8: [50, 50, 50]},
                 diverged={(0.8, 0)})
    race = Race(Settings(SEEDS, most_candidates=4), Pool(1.0, 5), keep_all=True)
    race.add([0.1, 0.2, 0.4, 0.8])
    train, asked = answered(table)
    run_race(race, train)
    assert [len(b) for b in asked] == [12] and not race.dropped and len(race.rows) == 12


def test_the_oracle_search_is_one_plan_whose_mode_is_a_setting():
    """`OracleSearch`: exhaustive refines both intervals' edges for `refine` rounds on every seed at once; racing
    refines the paper interval's for at most one round, and drops. On the far table above, from the grid
    [0.1, 0.2, 0.4, 0.8]: the paper interval is {0.4}, so a round asks for √(0.2·0.4) and √(0.4·0.8); exhaustive
    also resolves "not shown worse", [0.2, 0.4], whose lower edge asks for √(0.1·0.2). A refined value's accuracy is
    its neighbours', interpolated in ln max_lr."""
    accs = {0.1: [60, 61, 62], 0.2: [79, 80.5, 81], 0.4: [80, 81, 82], 0.8: [50, 50, 50]}
    grid = tuple(accs)

    def acc(v: float) -> list[float]:  # refinement values: their neighbours' mean in ln max_lr, per seed
        if v in accs:
            return accs[v]
        lo, hi = max(g for g in grid if g < v), min(g for g in grid if g > v)
        w = math.log(v / lo) / math.log(hi / lo)
        return [a + w * (b - a) for a, b in zip(accs[lo], accs[hi])]

    def train(pairs):
        return {(v, s): {"val_acc": acc(v)[s], "diverged": False} for v, s in pairs}

    asked = {}
    for mode in ("exhaustive", "racing"):
        search = racing.OracleSearch(grid, SEEDS, refine=2, mode=mode)
        race = search.race(search.first_values(None, None), Pool(), None, None)
        rounds = search.run(race, lambda pairs: train(pairs))
        asked[mode] = (sorted({v for v, _ in race.rows}), rounds, len(race.rows), set(race.dropped))
    mid = lambda a, b: lr_key(math.sqrt(a * b))  # noqa: E731
    exhaustive, raced = asked["exhaustive"], asked["racing"]
    assert exhaustive[1] == 2 and exhaustive[2] == 3 * len(exhaustive[0]) and not exhaustive[3]
    assert {mid(0.1, 0.2), mid(0.2, 0.4), mid(0.4, 0.8)} <= set(exhaustive[0])
    assert raced[1] == 1 and {mid(0.2, 0.4), mid(0.4, 0.8)} <= set(raced[0]) and mid(0.1, 0.2) not in raced[0]
    assert raced[3] and raced[2] < exhaustive[2]
    # from cycle 1: the bracket around the previous b with the dense best, the same in both modes
    search = racing.OracleSearch(grid, SEEDS, mode="exhaustive")
    assert search.first_values(0.4, 0.2) == sorted(bracket(list(grid), 0.4))
    assert racing.OracleSearch(grid, SEEDS, bracket=False).first_values(0.4, 0.3) == [0.1, 0.2, 0.3, 0.4, 0.8]


def test_a_prior_pool_lets_the_first_seed_drop_and_a_divergence_drops_at_once():
    """With the prior (ss 1.0 on 5 df) a value 11 points behind is dropped after one seed; a diverged training
    drops its value even when it leads."""
    table = rows({0.1: [70, 70, 70], 0.2: [80, 81, 82], 0.4: [99, 82, 83]}, diverged={(0.4, 0)})
    race = Race(Settings(SEEDS, most_candidates=3), Pool(1.0, 5))
    race.add([0.1, 0.2, 0.4])
    train, asked = answered(table)
    run_race(race, train)
    assert race.dropped[0.4] == "diverged" and "behind 0.2 over 1 seed(s)" in race.dropped[0.1]
    assert [len(b) for b in asked] == [3, 1, 1] and race.seeds_of(0.2) == [0, 1, 2]


def test_free_slots_run_the_leaders_and_close_candidates_next_seeds():
    """After seed 0: leader 0.4 (81), 0.2 is 0.2 behind (close), 0.8 is 6 behind (not). With 5 slots and a round of
    3, the 2 free slots take the leader's next seed, then 0.2's; nothing for 0.8, which the look after this batch
    drops (pairs with 2 seeds: 0.2 d = [0.2, 1], 0.8 d = [6, 6]: ss 0.32 on 2 df, sd 0.4; α' = 0.05/(2·3):
    t(1 − α', 2)·0.4/√2 = 2.14, and 6 − 2.14 > 0.5). Then every seed is in: one batch, nothing more."""
    table = rows({0.2: [80.8, 81, 82], 0.4: [81, 82, 83], 0.8: [75, 76, 77]})
    race = Race(Settings(SEEDS, most_candidates=3))
    race.add([0.2, 0.4, 0.8])
    race.record({p: table[p] for p in [(0.2, 0), (0.4, 0), (0.8, 0)]})
    assert race.needed() == [(0.2, 1), (0.4, 1), (0.8, 1)]
    assert race.ahead(3) == [(0.4, 2), (0.2, 2)]
    train, asked = answered(table)
    run_race(race, train, slots=5)
    assert asked == [[(0.2, 1), (0.4, 1), (0.8, 1), (0.4, 2), (0.2, 2)]]
    assert list(race.dropped) == [0.8] and race.seeds_of(0.8) == [0, 1]


class Fused:
    """A trainer that runs every `k` started items of one call as one trial (as the Runner fuses a round's
    candidates of one seed). Items finish one call at a time, in order. It does not say what its items hold, so
    each counts as a slot (the control)."""

    def __init__(self, table: dict, k: int):
        self.table, self.k, self.calls, self.started = table, k, [], []

    def start(self, items) -> None:
        if items:
            self.calls.append(list(items))
            self.started.append(list(items))

    def wait(self) -> dict:
        items = self.started.pop(0)
        return {item: self.table[item[1]] for item in items}


class FusedTrials(Fused):
    """The same, saying how many trials its unfinished items hold (`racing.Trainer.held`)."""

    def held(self) -> int:
        return sum(-(-len(items) // self.k) for items in self.started)


def test_a_fused_trial_holds_one_slot_so_free_slots_still_run_ahead():
    """3 close values (nothing dropped), 3 seeds, 2 slots, 4 candidates per trial. Seed 0's round, 3 items, is one
    trial: one slot is free, and once a look has a leader it takes the leader's next seed ahead. The control counts
    each item as a slot (the old unit): 3 items fill 2 slots, and nothing ever runs ahead."""
    table = rows({0.1: [80, 81, 82], 0.2: [80.2, 81.1, 81.9], 0.4: [79.9, 81, 82]})
    for kind, ahead in ((FusedTrials, True), (Fused, False)):
        race = Race(Settings(SEEDS, most_candidates=3))
        race.add([0.1, 0.2, 0.4])
        trainer = kind(table, 4)
        run_race(race, trainer, slots=2)
        started_ahead = any(len(call) < 3 for call in trainer.calls)
        assert started_ahead == ahead and len(race.rows) == 9


def test_an_unanswered_training_is_counted_and_not_asked_again():
    """Also: a pool of one degree of freedom (0.4 − 0.2 = [1, 1] after two seeds) is no estimate, so 0.2 is not
    dropped on it."""
    table = rows({0.2: [80, 81, 82], 0.4: [81, 82]})  # 0.4 on seed 2 is missing
    race = Race(Settings(SEEDS, most_candidates=2))
    race.add([0.2, 0.4])
    train, asked = answered(table)
    run_race(race, train)
    assert race.missing == {(0.4, 2)} and sum(map(len, asked)) == 6


def test_a_noisy_value_is_judged_by_its_own_noise_shrunk_toward_the_pool(monkeypatch):
    """Prior pool sd 0.5 on 10 df. 0.2 is 0.5 behind the leader 0.4 on seed 0, 3.5 on seed 1 (mean 2, its own sd
    2.1): shrunk (ν₀ = 10: σ̃ = 0.99 on 11 df) the margin is 1.7, so it is kept; judged by the pooled sd alone (0.80
    on 11 df: margin 1.37) it would be dropped, which the control shows."""
    table = rows({0.2: [81.5, 78.5, 80], 0.4: [82, 82, 82]})

    def run():
        race = Race(Settings(SEEDS, most_candidates=2), Pool(0.25 * 10, 10))
        race.add([0.2, 0.4])
        race.record({p: table[p] for p in [(0.2, 0), (0.4, 0), (0.2, 1), (0.4, 1)]})
        return race

    assert not run().dropped
    monkeypatch.setattr(racing, "shrunk", lambda d, pool: (pool.sd, pool.df))
    assert 0.2 in run().dropped


def test_a_value_is_tested_only_when_it_gained_a_seed_and_the_prior_is_discounted():
    """Looks: after seed 0, 0.2 has been tested once (1 shared seed); the leader's second seed alone gives 0.2 no
    new shared seed, so no new test: at most S tests per value, the S in α'. The carried prior keeps half its
    weight (`racing.CARRY`) and adds the cycle's own residuals."""
    table = rows({0.2: [81, 81.2, 81.4], 0.4: [82, 82.3, 82.1]})
    race = Race(Settings(SEEDS, most_candidates=2), Pool(1.0, 8))
    race.add([0.2, 0.4])
    race.record({(0.2, 0): table[(0.2, 0)], (0.4, 0): table[(0.4, 0)]})
    assert race.tested == {0.2: 1}
    race.record({(0.4, 1): table[(0.4, 1)]})
    assert race.tested == {0.2: 1}
    race.record({(0.2, 1): table[(0.2, 1)]})
    assert race.tested == {0.2: 2}
    carried = racing.carry(race.prior, race)
    assert carried.df == pytest.approx(8 * racing.CARRY + 1) and carried.ss == pytest.approx(
        1.0 * racing.CARRY + race.final_pool().ss)


def test_an_exact_race_completes_a_dropped_value_that_could_enter_the_lenient_set():
    """0.8 is 2.4 behind on seed 0 and dropped (margin 1.55 with the prior); seeds 1 and 2 would put it 0.2 and 0.5
    behind. Next to the lenient set's edge, it could still enter it once completed (`Race.could_enter`), so the
    exact race trains its two missing seeds at once and it ends a member, as after an exhaustive Oracle. 0.1 (20
    behind) could not, and stays dropped with one seed. The control, the same race not exact, leaves 0.8 out."""
    table = rows({0.1: [62, 61, 63], 0.2: [81.6, 81.7, 81.2], 0.4: [82, 82, 82], 0.8: [79.6, 81.8, 81.5]})
    exhaustive = choose(Curve.from_rows([{**r, "max_lr": v, "seed": s} for (v, s), r in table.items()]))
    for exact in (True, False):
        race = Race(Settings(SEEDS, most_candidates=4), Pool(0.25 * 10, 10), exact=exact)
        race.add([0.1, 0.2, 0.4, 0.8])
        train, asked = answered(table)
        run_race(race, train)
        choice = choose(race.curve())
        if exact:
            assert asked[-1] == [(0.8, 1), (0.8, 2)] and race.kept == race.reopened == {0.8}
            assert (choice.noise_lo, choice.noise_hi) == (exhaustive.noise_lo, exhaustive.noise_hi) == (0.2, 0.8)
            assert race.summary() == {"dropped": [{"max_lr": 0.1, "seeds": 1, "gap": 20.0, "look": 1, "leader": 0.4,
                                                   "why": race.dropped[0.1]}],
                                      "not_trained": [], "completed_for_sets": [0.8]}
        else:
            assert 0.8 in race.dropped and choice.noise_hi == 0.4
        assert race.seeds_of(0.1) == [0]


# --- the unimodal walk ----------------------------------------------------------------------------------------------

OFFSETS = (0.0, 0.3, -0.2)  # each seed's shift, shared by every value: paired differences stay exact


def curve_rows(means: dict[float, float]):
    return rows({v: [m + o for o in OFFSETS] for v, m in means.items()})


def test_the_walk_steps_out_while_the_end_value_survives_and_never_past_a_dropped_one():
    """The default's grid, centre 0.16, a prior pool (ss 1.0 on 5 df, sd 0.45), α' = 0.05 / (7 · 3). Seed 0: the
    start 0.08, 0.16, 0.32; 0.08 (1 behind) and 0.32 (0.2 behind) are within the margin t(1 − α', 5)·0.45 = 2.16,
    so both ends step out: 0.04 and 0.64 join. Seed 1's round: 0.04 (7 behind) and 0.64 (12 behind) are dropped,
    so nothing beyond them (0.01, 0.02, 1.28) is ever trained. Seed 2: 0.08, 0.16, 0.32. 11 trainings of 24, and
    the same b as every value trained on every seed."""
    means = {0.01: 50, 0.02: 60, 0.04: 75, 0.08: 81, 0.16: 82, 0.32: 81.8, 0.64: 70, 1.28: 20}
    table = curve_rows({v: means[v] for v in GRID_KEYS})
    race = Race(Settings(SEEDS, most_candidates=len(GRID)), Pool(1.0, 5))
    race.start(GRID, centre=0.16)
    assert race.candidates == [0.08, 0.16, 0.32]
    train, asked = answered(table)
    run_race(race, train)
    assert asked == [[(0.08, 0), (0.16, 0), (0.32, 0)], [(0.04, 0), (0.08, 1), (0.16, 1), (0.32, 1), (0.64, 0)],
                     [(0.08, 2), (0.16, 2), (0.32, 2)]]
    assert set(race.dropped) == {0.04, 0.64} and race.walk == (0.01, 0.02, 1.28)
    assert race.curve().best == Curve.from_rows([{**r, "max_lr": v, "seed": s} for (v, s), r in table.items()]).best
    # The control: where 0.64 is as good as the leader, the walk goes on past it, to 1.28.
    table = curve_rows({**{v: means[v] for v in GRID_KEYS}, 0.64: 82.0})
    race = Race(Settings(SEEDS, most_candidates=len(GRID)), Pool(1.0, 5))
    race.start(GRID, centre=0.16)
    run_race(race, answered(table)[0])
    assert 1.28 in race.candidates and 1.28 in race.dropped


def test_the_walk_misses_a_better_value_beyond_a_valley_which_the_unimodal_check_flags():
    """The walk's assumption, shown failing: 0.01 is the best (90) beyond a valley at 0.04 (75). The walk from 0.16
    drops 0.04 and never trains 0.01; the full race finds it. The exhaustive curve is not unimodal, which is what
    replay's check (`selection.unimodal`, its "unimodal" line) reports on a finished run."""
    means = {0.01: 90, 0.02: 80, 0.04: 75, 0.08: 81, 0.16: 82, 0.32: 81.8, 0.64: 70, 1.28: 20}
    table = curve_rows({v: means[v] for v in GRID_KEYS})
    walked, full = (Race(Settings(SEEDS, most_candidates=len(GRID)), Pool(1.0, 5)) for _ in range(2))
    walked.start(GRID, centre=0.16)
    full.start(GRID)
    for race in (walked, full):
        run_race(race, answered(table)[0])
    assert walked.curve().best == 0.16 and 0.01 not in walked.candidates
    assert full.curve().best == 0.01
    exhaustive = choose(Curve.from_rows([{**r, "max_lr": v, "seed": s} for (v, s), r in table.items()]))
    assert exhaustive.best == 0.01 and not exhaustive.unimodal


# --- no idle slot, on a real local Ray with 4 slots -----------------------------------------------------------------

class IdleCheck:
    """A racing Trainer between `run_races` and the real one: at every wait it notes whether a slot was free
    (fewer than `slots` trainings started and unfinished) while a training could have started (a race's needed
    pair or `Race.ahead` pair nobody started)."""

    def __init__(self, inner, races: dict, slots: int):
        self.inner, self.races, self.slots = inner, races, slots
        self.started: set = set()
        self.running: set = set()
        self.waits = 0
        self.idle: list[tuple[int, list]] = []  # (trainings running, trainings that could have started)

    def start(self, items) -> None:
        self.started.update(items)
        self.running.update(items)
        self.inner.start(items)

    def startable(self) -> list:
        out = []
        for key, race in self.races.items():
            mine = {pair for k, pair in self.started if k == key}
            out += [(key, p) for p in race.needed() if (key, p) not in self.started]
            out += [(key, p) for p in race.ahead(1, started=mine)]
        return out

    def wait(self):
        self.waits += 1
        if len(self.running) < self.slots and (could := self.startable()):
            self.idle.append((len(self.running), could))
        got = self.inner.wait()
        self.running.difference_update(got)
        return got


class WaitForAll:
    """The control: the batch plan, whose wait returns only when every started training finished."""

    def __init__(self, inner):
        self.inner, self.running = inner, set()

    def start(self, items) -> None:
        self.running.update(items)
        self.inner.start(items)

    def wait(self):
        got = {}
        while self.running:
            new = self.inner.wait()
            self.running.difference_update(new)
            got |= new
        return got


@pytest.mark.slow
def test_on_a_local_ray_with_4_slots_no_slot_idles_while_a_training_could_start(make_cluster, tmp_path):
    """The Oracle's streaming trainer on a real Ray of 4 CPUs (the tiny preset, cycle 0, 5 values, 4 seeds): at
    every moment the driver waits, either 4 trainings are running or no race has a training to start. The
    control, the same race with the batch plan (a round's wait returns when all its trainings are done), leaves
    slots free while the leader's next seeds could run."""
    import dataclasses

    from oracle_search.engine import own_runner
    from oracle_search.trainings import Streaming, oracle_training
    from oracle_search.schema import Stage
    from trainables.presets import PRESETS

    cluster = make_cluster(4)
    spec = dataclasses.replace(PRESETS["tiny"].spec, cycles=0)
    values = [0.01, 0.03, 0.1, 0.3, 1.0]
    results = {}
    for plan in ("streaming", "batch"):
        with own_runner(out=tmp_path / plan, spec=spec, experiment=plan, address=cluster.address) as runner:
            assert runner.slots() == 4
            race = Race(Settings((0, 1, 2, 3), most_candidates=len(values)))
            race.add(values)
            trainer = Streaming(runner, lambda _, pair: oracle_training(runner, 0, pair[1], pair[0], None, Stage.GRID))
            check = IdleCheck(trainer, {None: race}, 4)
            run_race(race, check if plan == "streaming" else WaitForAll(check), 4)
            results[plan] = check
            assert all(len(race.seeds_of(v)) == 4 for v in race.alive)  # the race ran to its end
    assert results["streaming"].waits > 5 and results["streaming"].idle == []
    assert results["batch"].idle, "the control never left a slot free: the check cannot fail"


# --- the size of one look, and the family rate on a plateau just inside the tolerance (issue 52) -------------------

# One cycle's 12 candidates, ascending max_lr, and how far each lies truly below the best: the second is the tested
# value, exactly at the tolerance (a drop of it is an error at any size), the others spread behind.
LOOK_VALUES = [lr_key(0.01 * 1.5 ** i) for i in range(12)]
LOOK_GAPS = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 22.0])
LOOK_SIGMA = 0.3  # a training's noise: a paired difference's sd 0.42, as near b on the default (0.2–0.5)
LOOK_SETTINGS = Settings(SEEDS, most_candidates=12)  # α' = 0.05 / 33


def look_draws(draws: int, seed: int, k: int, prior: bool, noisy: float = 1.0, gap: float = TOL):
    """Accuracies (draws × 12 × k) of every candidate on its first k seeds, the tested value `gap` behind the best
    and `noisy` times as noisy per training as the others; and per draw a prior pool's ss on 10 df, drawn as the
    pool of an independent earlier cycle of even noise would be (None: cycle 0, no prior)."""
    rng = np.random.default_rng(seed)
    gaps = LOOK_GAPS.copy()
    gaps[1] = gap
    sds = np.full(12, LOOK_SIGMA)
    sds[1] *= noisy
    acc = 82.0 - gaps[None, :, None] + rng.normal(0, 1, (draws, 12, k)) * sds[None, :, None]
    prior_ss = 2 * LOOK_SIGMA ** 2 * rng.chisquare(10, draws) if prior else None
    return acc, prior_ss


def look_real(acc: np.ndarray, prior_ss, settings: Settings = LOOK_SETTINGS) -> np.ndarray:
    """Per draw, whether the racing rule (`Race`, as shipped) drops the tested value at the look on every
    candidate's first k seeds."""
    out = []
    for i in range(len(acc)):
        race = Race(settings, Pool(float(prior_ss[i]), 10) if prior_ss is not None else Pool())
        race.add(LOOK_VALUES)
        race.record({(v, s): {"val_acc": acc[i, j, s], "diverged": False} for j, v in enumerate(LOOK_VALUES)
                     for s in range(acc.shape[2])})
        out.append(LOOK_VALUES[1] in race.dropped)
    return np.array(out)


def look_fast(acc: np.ndarray, prior_ss, per_test: float = LOOK_SETTINGS.per_test) -> np.ndarray:
    """The same decision, vectorised over draws, written from racing.py's docstring (the leader the best mean; the
    pool the residuals of every other candidate's paired differences plus the prior; the tested value's variance
    shrunk toward the pool with ν₀ = min(pool df, 10)): for the benchmark's millions of draws. Checked against
    `look_real` draw by draw."""
    from scipy import stats

    draws, _, k = acc.shape
    lead = acc.mean(axis=2).argmax(axis=1)  # no ties in continuous draws; ties would go to the smaller value
    d = acc[np.arange(draws), lead][:, None, :] - acc
    resid = ((d - d.mean(axis=2, keepdims=True)) ** 2).sum(axis=2)  # the leader's own row is 0
    here_ss, here_df = (resid.sum(axis=1), 11.0 * (k - 1)) if k >= 2 else (np.zeros(draws), 0.0)
    pool_ss = here_ss + (prior_ss if prior_ss is not None else 0.0)
    pool_df = here_df + (10.0 if prior_ss is not None else 0.0)
    if pool_df < racing.MIN_POOL_DF:
        return np.zeros(draws, dtype=bool)
    nu0 = min(pool_df, racing.PRIOR_WEIGHT)
    df = nu0 + k - 1
    sd = np.sqrt((nu0 * pool_ss / pool_df + resid[:, 1]) / df)
    margin = stats.t.ppf(1 - per_test, df) * sd / math.sqrt(k)
    return (lead != 1) & (pool_ss > 0) & (d[:, 1, :].mean(axis=1) - margin > TOL)


LOOK_CASES = {  # (seeds at the look, prior, the tested value's noise × the others'), as the issue names them
    "even noise, prior, 1 seed": (1, True, 1.0), "even noise, prior, 2 seeds": (2, True, 1.0),
    "even noise, prior, 3 seeds": (3, True, 1.0), "cycle 0, 2 seeds": (2, False, 1.0),
    "cycle 0, 3 seeds": (3, False, 1.0), "2x noisier, prior, 1 seed": (1, True, 2.0),
    "2x noisier, prior, 2 seeds": (2, True, 2.0), "2x noisier, prior, 3 seeds": (3, True, 2.0),
    "3x noisier, prior, 1 seed": (1, True, 3.0), "3x noisier, prior, 2 seeds": (2, True, 3.0),
    "3x noisier, prior, 3 seeds": (3, True, 3.0), "3x noisier, cycle 0, 2 seeds": (2, False, 3.0)}


@pytest.mark.slow  # 2,400 real looks: about 15 s
@pytest.mark.parametrize("case", ["even noise, prior, 1 seed", "cycle 0, 2 seeds", "3x noisier, prior, 2 seeds",
                                  "3x noisier, cycle 0, 2 seeds"])
def test_the_vectorised_look_is_the_racing_rule_draw_by_draw(case):
    """The benchmark measures each look's size on millions of draws with `look_fast`; here it makes the same
    decision as the shipped `Race` on 600 draws of each case, with the tested value 1.5 points behind so that both
    decisions occur."""
    k, prior, noisy = LOOK_CASES[case]
    acc, prior_ss = look_draws(600, 11, k, prior, noisy, gap=1.5)
    real = look_real(acc, prior_ss)
    assert 0 < real.sum() < len(real), real.sum()
    assert np.array_equal(real, look_fast(acc, prior_ss))


# What racing.py's docstring states for one look of the shipped rule, measured (benchmarks/racing_error.py looks,
# 400,000 draws a case): its size over α' is at most 1.2 with even noise and a prior (0.77–0.97), 3.6 at cycle 0 on 2
# seeds (3.13).
STATED_SIZE = {"cycle 0, 2 seeds": 3.6, "even noise, prior, 2 seeds": 1.2}


@pytest.mark.slow  # 3,000 real looks per rule: about 20 s each
def test_a_look_is_no_larger_than_stated_and_a_rule_with_larger_looks_fails():
    """The real rule at cycle 0 on 2 seeds (no prior: the pool is the other 11 candidates' residuals, all sharing
    the leader's noise): over 3,000 looks the drops of the value exactly at the tolerance stay within the stated
    size (3.6 α'; measured 3.13, 95 % [3.00, 3.28] on 400,000) plus 3 binomial standard errors. The control: the
    same rule at 4 α' per look (α = 0.2: looks larger than stated) exceeds it on the same draws."""
    acc, prior_ss = look_draws(3000, 5, 2, False)
    bound = STATED_SIZE["cycle 0, 2 seeds"] * LOOK_SETTINGS.per_test
    slack = 3 * math.sqrt(bound * (1 - bound) / len(acc))
    shipped = look_real(acc, prior_ss).mean()
    assert shipped <= bound + slack, (shipped / LOOK_SETTINGS.per_test, bound + slack)
    larger = Settings(SEEDS, most_candidates=12, alpha=4 * racing.ALPHA)  # every look 4× α' in size, or more
    assert look_real(acc, prior_ss, larger).mean() > bound + slack


def simulate_plateau(n_races: int, seed: int, seeds: tuple[int, ...], noisy: float = 1.0,
                     below: float = 0.45) -> dict[str, float]:
    """The issue's synthetic tables: races of 12 candidates, the best, a plateau of four values truly `below` the
    best (inside the tolerance: dropping any is an error), seven far behind; even noise (a training's sd 0.3) or one
    plateau value `noisy` times noisier; each race in shuffled order, run by the shipped rule (`run_race`), its pool
    carried to the next race as a chain's cycles carry it (`racing.carry`). Returns the share of races in which a
    plateau value was dropped, per race and per value, and the races."""
    rng = np.random.default_rng(seed)
    gaps = np.array([0.0, below, below, below, below, 1.5, 2.5, 4.0, 6.0, 9.0, 13.0, 18.0])
    prior, races_hit, values_hit = Pool(), 0, 0
    for _ in range(n_races):
        order = rng.permutation(12)  # which max_lr holds which gap
        sds = np.where(order == 1, LOOK_SIGMA * noisy, LOOK_SIGMA)
        acc = 82.0 - gaps[order][:, None] + rng.normal(0, 1, (12, len(seeds))) * sds[:, None]
        race = Race(Settings(seeds, most_candidates=12), prior)
        race.add(LOOK_VALUES)
        at = {v: i for i, v in enumerate(LOOK_VALUES)}
        run_race(race, lambda pairs: {(v, s): {"val_acc": acc[at[v], seeds.index(s)], "diverged": False}
                                      for v, s in pairs})
        prior = racing.carry(prior, race)
        hit = [v for v in race.dropped if gaps[order][at[v]] == below]
        races_hit, values_hit = races_hit + bool(hit), values_hit + len(hit)
    return {"race": races_hit / n_races, "value": values_hit / (4 * n_races), "races": n_races}


@pytest.mark.slow  # 4 × 400 races: about 30 s
@pytest.mark.parametrize("seeds, noisy, stated", [((0, 1), 1.0, racing.ALPHA), ((0, 1, 2), 1.0, racing.ALPHA),
                                                  ((0, 1, 2), 3.0, racing.ALPHA), ((0, 1), 3.0, 0.10)])
def test_on_a_plateau_just_inside_the_tolerance_the_family_rate_is_what_racing_states(seeds, noisy, stated):
    """The done-when of issue 52: values truly 0.45 points below the best, even noise or one of them 3× noisier,
    on 2 and 3 seeds (cycle 0 with 2 and 3 seeds: the first race has no prior). The share of races in which one
    of them was dropped stays ≤ α plus 2 binomial standard errors (400 races) with even noise, and with the 3×
    noisier value on 3 seeds (the default). It holds although a single look is larger than α' here
    (`test_a_look_is_no_larger_than_stated_and_a_rule_with_larger_looks_fails`): the Bonferroni count's K − 1
    covers every candidate that could lead, and mostly one does. Where it does not hold, as racing.py states: the
    3× noisier value on 2 seeds, dropped in 5.9 % of 2,000 races (benchmarks/racing_error.py plateau; 8 % of these
    400), held here to the 10 % racing.py states for it."""
    found = simulate_plateau(400, 13, seeds, noisy)
    slack = 2 * math.sqrt(stated * (1 - stated) / found["races"])
    assert found["race"] <= stated + slack, found
