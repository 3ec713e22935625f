"""The racing rule: choose among finite candidates on paired seeds from fewer complete trainings.

Candidates (max_lr values at one cycle) are trained in rounds of seeds, in the order of the chain's seeds. Only
complete trainings count. After each round every candidate still in the race that gained a seed is compared with
the **leader** (the candidate with the best mean among those with the most seeds, ties to the smaller value) on the
seeds both have: with d_s = acc_s(leader) − acc_s(v) over those k seeds, v is **dropped** when

    mean(d) − t(1 − α', ν) · σ̃_v / √k  >  tolerance (0.5 points),

- σ̃_v is v's own noise shrunk toward the pool (`shrunk`): σ̃²_v = (ν₀σ̂² + (k − 1)s²_v) / (ν₀ + k − 1) on
  ν = ν₀ + k − 1 degrees of freedom, with s²_v the variance of v's own d, σ̂ the pooled standard deviation of a
  paired difference (`Pool`: the residuals d_s − mean(d) of every candidate sharing at least two seeds with the
  leader, plus the pool carried over from the chain's earlier cycles, halved at each cycle, `carry`) and
  ν₀ = min(pool df, `PRIOR_WEIGHT`). Pooling is what lets the rule act after one seed; the cap on ν₀ is what lets
  a value near divergence, several times noisier than those near b, be judged by its own noise once it has two
  seeds, and makes a first-seed drop need a gap several pooled sds wide. Diverged trainings never enter the pool.
- α' = α / ((K − 1) · S): the count of a Bonferroni correction over the S looks a value can get (it is tested only
  when it gained a shared seed since its last test, so at most once per seed) and over the K − 1 other candidates
  any of which may lead (K: the most candidates a cycle can have).
- **What holds, and why** (issue 52). The union bound would prove the family rate (a candidate truly within the
  tolerance of the best dropped with probability at most α, per value and race, whichever candidate leads) if
  each look were a test of size α'. It is not: every paired difference shares the leader's noise, so the pool's
  residuals are correlated and it holds fewer degrees of freedom than it counts (at cycle 0 on 2 seeds, no prior,
  about 3, not 11); a value's own residuals are counted twice (in the pool and again in `shrunk`); and a value
  noisier than the pool is judged mostly by the pool's variance for its first seeds (ν₀ up to 10 against its own
  k − 1). Measured (benchmarks/racing_error.py looks: 12 candidates on 3 seeds, the value exactly at the
  tolerance, 400,000 draws a case), one look's size over α' is 0.77–0.97 with even noise and an independent
  prior, 3.1 at cycle 0 on 2 seeds and 1.6 on 3, 7–11 for a value twice as noisy per training as the others,
  19–38 for three times. The family rate holds nonetheless where the simulations put it, because the K − 1 is
  mostly slack: at a look one candidate leads, usually the true best, so a value meets about S tests, not
  (K − 1)·S, and looks up to about K − 1 times α' keep its rate under α. So the rate ≤ α is a measured property
  of the rule under the noise the simulations assume (normal or Student-t paired differences, a value's noise
  within about 3× of the others' on 3 seeds, or even noise on 2), not a theorem: `tests/test_racing.py` shows it
  on 2,000 races, on 750 cycles of chains (noise growing 5× toward divergence, a heavy-tailed edge) and on a
  plateau 0.45 below the best (even noise: 0.45 % of races on 2 and on 3 seeds; one value 3× noisier: 4.0 % on 3
  seeds). **Where it does not hold:** that 3× noisier value on 2 seeds is dropped in 5.9 % of races (2,000;
  stated here as at most 10 %); a value noisier still, at the tolerance's edge, more often. A test of each look
  at α' (pooling two-way value × seed residuals, keeping a noisier value from the pool's variance alone) was
  not built: this rule keeps the racing default at 46 % of the exhaustive Oracle's trainings with every set and
  b as replayed (docs/measured.md); a rule with exact looks is left to be measured against that.
- A candidate with a diverged training is dropped at once: b is never a value some seed diverged on.

A dropped candidate gets no more seeds and is in none of the Oracle's sets (it is trained by fewer than every
seed, `selection.choose`). The leader and every candidate not dropped get every seed, so b keeps its definition:
the best seed mean among values every seed trained. With no pool yet (the first round of the first cycle), or one
of fewer than 2 degrees of freedom or no spread, nothing is dropped.

**Exact sets** (`Race.exact`, the Oracle's races): a drop is a decision about b, yet the Oracle's lenient set
("not shown worse") admits values by their own noise, which the race does not wait for. So once the race is
decided, every value it dropped that lies inside the lenient set's span or next to one of its edges is completed
(every seed, never dropped again) when it could still enter the set with probability above α once completed
(`Race.could_enter`), and the walk steps on past a completed end value; this repeats until nothing changes
(`Race.frontier`). The paper's interval and "shown within 0.5" lie inside the lenient set, so all three sets are
then the exhaustive Oracle's on the values trained, up to that α and assuming, as the walk does, that the lenient
set is contiguous. Their edges are refined less finely than the exhaustive Oracle refines them (docs/design.md
"Racing"); the completions before the verdict resolve the paper interval's next to each compared max_lr.

**The walk** (`Race.start` with a centre): a race may start on the centre and its two neighbours among its values
and step out one value at a time: after each look, while the lowest (highest) candidate has been trained and is not
dropped, the next value below (above) it joins the race. A value beyond a dropped one is never trained. This
assumes the true curve is unimodal in ln max_lr: then a value beyond a candidate shown worse than the leader (which
lies inward of it) is truly worse still, so it would be dropped too. The Bonferroni count K still counts every value
the walk may reach. docs/design.md "Racing" says where the walk is used and how the assumption was checked.

**Exhaustive search is a race too** (`Race.keep_all`): every value gets every seed at once and none is dropped, so
each driver has one search whose mode is a setting (`OracleSearch` for the Oracle), and `replay` runs the same plan
on a finished run's table.
"""
from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Hashable, Iterable, Protocol

import numpy as np
import pandas as pd

from oracle_search.curve import Curve, best_of, lr_key
from oracle_search.selection import TOLERANCE, bracket, choose, next_values
from oracle_search.statistics import ONE_SIDED, half_width
from trainables.atomic import atomic_write_json

ALPHA = 0.05
MOST_NEW_VALUES_PER_ROUND = 4  # selection.next_values: one per edge of the two intervals
# The racing Oracle refines the paper interval's edges once; where a compared schedule's max_lr falls between a
# member and a non-member, the step before the verdict resolves that gap to 5 % (compared.completion_targets).
RACING_REFINE = 1
MIN_POOL_DF = 2  # one residual, or residuals that happen to be equal, are no estimate of the noise
# ν₀, the most degrees of freedom the pool weighs in a value's own variance (`shrunk`): small enough that a value
# noisier than the pool is judged by its own noise from its second seed on (tests/test_racing.py shows one kept
# that the pooled sd alone would drop). The simulated chains hold α with it, and also without it: there the
# Bonferroni correction alone is conservative enough (docs/measured.md).
PRIOR_WEIGHT = 10
PREDICTIVE_DRAWS = 4000  # `Race.could_enter`: Monte Carlo draws of a dropped value's missing seeds
CARRY = 0.5  # the weight an earlier cycle's pool keeps at the next cycle: the noise drifts as the network is pruned

Pair = tuple[float, int]  # (value, seed)


@dataclass
class Pool:
    """The pooled variance of a paired difference: a sum of squared residuals and its degrees of freedom."""

    ss: float = 0.0
    df: float = 0.0

    def __add__(self, other: "Pool") -> "Pool":
        return Pool(self.ss + other.ss, self.df + other.df)

    def scaled(self, weight: float) -> "Pool":
        """The same variance with `weight` times the degrees of freedom (a discounted prior)."""
        return Pool(self.ss * weight, self.df * weight)

    @property
    def sd(self) -> float:
        return math.sqrt(self.ss / self.df) if self.df else math.nan


@dataclass(frozen=True)
class Settings:
    """What one race needs to know in advance: the seeds (the looks), α, the tolerance, and the most candidates
    a cycle may have (the Bonferroni count)."""

    seeds: tuple[int, ...]
    most_candidates: int
    alpha: float = ALPHA
    tolerance: float = TOLERANCE

    @property
    def per_test(self) -> float:
        """α' = α / ((K − 1) · S)."""
        return self.alpha / (max(self.most_candidates - 1, 1) * len(self.seeds))


def shrunk(d: np.ndarray, pool: Pool) -> tuple[float, float]:
    """(σ̃, ν): the standard deviation of one value's paired differences `d`, its own variance shrunk toward the
    pool's with ν₀ = min(pool df, `PRIOR_WEIGHT`) prior degrees of freedom, and the degrees of freedom ν₀ + k − 1
    of the result (module docstring)."""
    prior = min(pool.df, PRIOR_WEIGHT)
    own = float(np.sum((d - d.mean()) ** 2))  # (k − 1)·s²
    df = prior + len(d) - 1
    return math.sqrt((prior * pool.sd ** 2 + own) / df), df


@dataclass
class Race:
    """One cycle's race. Feed it rows (`record`), ask it what to train (`needed`, `ahead`)."""

    settings: Settings
    prior: Pool = field(default_factory=Pool)  # carried from earlier cycles of the chain
    candidates: list[float] = field(default_factory=list)
    rows: dict[Pair, dict] = field(default_factory=dict)
    dropped: dict[float, str] = field(default_factory=dict)  # value -> why
    missing: set[Pair] = field(default_factory=set)  # asked for, never answered (replay)
    walk: tuple[float, ...] = ()  # values not yet candidates that the walk may step out to, ascending
    exact: bool = False  # complete what the lenient set may hold once b is decided (module docstring)
    kept: set[float] = field(default_factory=set)  # values completed for the sets: never dropped
    tested: dict[float, int] = field(default_factory=dict)  # value -> seeds shared with the leader at its last test
    drops: dict[float, dict] = field(default_factory=dict)  # value -> its seeds, gap and look when dropped
    reopened: set[float] = field(default_factory=set)  # values dropped by the rule, then completed for the sets
    keep_all: bool = False  # exhaustive search: every value is kept (every seed at once, never dropped)
    wide: bool = False  # slots to spare: every candidate gets every seed at once, the rule still looks after each round

    def add(self, values: Iterable[float]) -> None:
        values = [lr_key(v) for v in values]
        if self.keep_all:
            self.kept |= set(values)
        self.candidates = sorted({*self.candidates, *values})
        self.walk = tuple(v for v in self.walk if v not in self.candidates)

    def start(self, values: Iterable[float], centre: float | None = None, also: Iterable[float] = ()) -> None:
        """The first candidates: every value, or, given a `centre`, the value nearest it (in ln) with its two
        neighbours, `also`, and every value between them; the others are left to the walk (module docstring)."""
        values = sorted({lr_key(v) for v in values})
        if centre is None:
            self.add(values)
            return
        i = min(range(len(values)), key=lambda j: abs(math.log(values[j] / centre)))
        first = [*values[max(i - 1, 0):i + 2], *(lr_key(v) for v in also)]
        self.add([*first, *(v for v in values if min(first) <= v <= max(first))])  # the walk only steps outward
        self.walk = tuple(v for v in values if v not in self.candidates)

    def step_out(self) -> None:
        """The walk's step: the next value beyond each end of the candidates whose end value is trained and alive."""
        if not self.walk:
            return
        low, high = self.candidates[0], self.candidates[-1]
        below = [v for v in self.walk if v < low]
        above = [v for v in self.walk if v > high]
        new = [*(below[-1:] if low in self.alive and self.seeds_of(low) else []),
               *(above[:1] if high in self.alive and self.seeds_of(high) else [])]
        self.add(new)

    @property
    def alive(self) -> list[float]:
        return [v for v in self.candidates if v not in self.dropped]

    def seeds_of(self, value: float) -> list[int]:
        return [s for s in self.settings.seeds if (value, s) in self.rows]

    def _next_seeds(self, value: float) -> list[int]:
        return [s for s in self.settings.seeds if (value, s) not in self.rows and (value, s) not in self.missing]

    def needed(self) -> list[Pair]:
        """The next round: each candidate still in the race gets its next seed; a value completed for the sets
        (`kept`) gets every seed it lacks at once, as nothing can drop it, and so does every candidate of a `wide`
        race (on slots to spare, a look per seed would cost a round of wall time each and save no slot)."""
        out = []
        for v in self.alive:
            seeds = self._next_seeds(v)
            out += [(v, s) for s in (seeds if v in self.kept or self.wide else seeds[:1])]
        return out

    def ahead(self, n: int, started: Iterable[Pair] = ()) -> list[Pair]:
        """Up to `n` trainings beyond the round that nobody started, most likely needed next: the leader's next
        seeds, then those of the candidates within the tolerance of it, closest first (the ones the race keeps),
        as the last look saw them. A candidate further behind, or not yet compared with the leader, gets none: it
        may well be dropped (and a look on a round's first rows alone would follow whichever training ended
        first). Free slots run these instead of idling; their rows count like any other."""
        lead = self.leader()
        if n <= 0 or lead is None:
            return []
        gap, started = self.gaps(), set(started) | set(self.needed())
        close = sorted((v for v in self.alive if v == lead or gap.get(v, math.inf) <= self.settings.tolerance),
                       key=lambda v: (v != lead, gap.get(v, 0.0), v))
        todo = {v: [s for s in self._next_seeds(v) if (v, s) not in started] for v in close}
        extra = [(v, todo[v][depth]) for depth in range(len(self.settings.seeds)) for v in close
                 if len(todo[v]) > depth]
        return extra[:n]

    def record(self, rows: dict[Pair, dict]) -> None:
        """Rows of finished trainings, by (value, seed); then drop what the rule says."""
        for (value, seed), row in rows.items():
            self.rows[(lr_key(value), seed)] = row
        self.look()
        self.step_out()

    def forget(self, pairs: Iterable[Pair]) -> None:
        """Trainings that were asked for and cannot be had (replay: not in the table)."""
        self.missing |= {(lr_key(v), s) for v, s in pairs}

    def _acc(self, value: float) -> dict[int, float]:
        return {s: float(self.rows[(value, s)]["val_acc"]) for s in self.seeds_of(value)}

    def _diverged(self, value: float) -> bool:
        return any(bool(self.rows[(value, s)].get("diverged")) for s in self.seeds_of(value))

    def leader(self) -> float | None:
        """The best mean among the alive candidates with the most seeds (ties to the smaller value)."""
        trained = [v for v in self.alive if self.seeds_of(v)]
        if not trained:
            return None
        most = max(len(self.seeds_of(v)) for v in trained)
        means = {v: float(np.mean(list(self._acc(v).values()))) for v in trained if len(self.seeds_of(v)) == most}
        return best_of(_series(means))

    def _differences(self, lead: float) -> dict[float, np.ndarray]:
        """d_s = acc_s(lead) − acc_s(v) on the seeds both have, for every other candidate with a shared seed and
        no divergence."""
        base = self._acc(lead)
        out = {}
        for v in self.candidates:
            if v == lead or self._diverged(v):
                continue
            acc = self._acc(v)
            shared = [s for s in acc if s in base]
            if shared:
                out[v] = np.array([base[s] - acc[s] for s in shared])
        return out

    def pool(self) -> Pool:
        """This cycle's residuals around each paired mean (candidates with ≥ 2 seeds shared with the leader) plus
        the prior."""
        lead = self.leader()
        here = Pool()
        if lead is not None and not self._diverged(lead):
            for d in self._differences(lead).values():
                if len(d) >= 2:
                    here = here + Pool(float(np.sum((d - d.mean()) ** 2)), len(d) - 1)
        return self.prior + here

    def gaps(self) -> dict[float, float]:
        """mean(d) of each alive candidate against the leader."""
        lead = self.leader()
        if lead is None:
            return {}
        return {v: float(d.mean()) for v, d in self._differences(lead).items() if v in self.alive}

    def look(self) -> None:
        """Drop diverged candidates, then, against the leader among those left, every candidate that gained a shared
        seed since its last test and is shown worse by more than the tolerance (a drop never removes the leader, so
        one pass suffices). An exhaustive race (`keep_all`) drops nothing."""
        if self.keep_all:
            return
        for v in self.alive:
            if self._diverged(v):
                self.dropped[v] = "diverged"
                self.drops[v] = {"seeds": len(self.seeds_of(v)), "gap": None, "look": len(self.seeds_of(v))}
        lead = self.leader()
        if lead is None:
            return
        pool = self.pool()
        if pool.df < MIN_POOL_DF or pool.sd == 0:  # no estimate of the noise yet: nothing can be shown
            return
        for v, d in self._differences(lead).items():
            if v not in self.alive or v in self.kept or self.tested.get(v, 0) >= len(d):
                continue
            self.tested[v] = len(d)
            sd, df = shrunk(d, pool)
            margin = half_width(sd, len(d), 1 - self.settings.per_test, "one", dof=df)
            if float(d.mean()) - margin > self.settings.tolerance:
                self.dropped[v] = (f"{d.mean():.2f} points behind {lead:g} over {len(d)} seed(s), "
                                   f"more than {self.settings.tolerance:g} + {margin:.2f}")
                self.drops[v] = {"seeds": len(self.seeds_of(v)), "gap": float(d.mean()), "look": len(d),
                                 "leader": lead}

    def frontier(self) -> list[float]:
        """`exact` races, once nothing is left to train: the values to complete so that the lenient set is the
        exhaustive Oracle's (module docstring): each value the rule dropped inside the set's span or next to one of
        its edges that could still enter it once completed (`could_enter`), each given once. A completed value at
        the end of the candidates is alive again, so the walk steps past it as past any surviving end value."""
        if not self.exact:
            return []
        choice = choose(self.curve())
        if choice is None:
            return []
        lo, hi = choice.noise_lo, choice.noise_hi
        near = [*[v for v in self.candidates if v < lo][-1:], *(v for v in self.candidates if lo < v < hi),
                *[v for v in self.candidates if v > hi][:1]]
        return [v for v in near if v not in self.kept and self.dropped.get(v, "diverged") != "diverged"
                and self.could_enter(v, choice.best)]

    def could_enter(self, value: float, best: float) -> bool:
        """Whether a dropped `value` would be "not shown worse" than `best`, once trained by every seed, with
        probability above α: its missing paired differences are drawn from its predictive distribution (a t on ν
        degrees of freedom around its observed mean gap, scale σ̃·√(1 + 1/k), `shrunk`) and the lenient test
        (`selection.noise_excluded`) applied to each completed draw. Deterministic (a fixed generator)."""
        base, acc = self._acc(best), self._acc(value)
        d = np.array([base[s] - acc[s] for s in acc if s in base])
        missing = len(self.settings.seeds) - len(d)
        pool = self.pool()
        if missing <= 0 or not len(d) or pool.df < MIN_POOL_DF:
            return True
        sd, df = shrunk(d, pool)
        sd = max(sd, self.noisiest(best))
        rng = np.random.default_rng(0)
        future = d.mean() + sd * math.sqrt(1 + 1 / len(d)) * rng.standard_t(df, (PREDICTIVE_DRAWS, missing))
        full = np.concatenate([np.broadcast_to(d, (PREDICTIVE_DRAWS, len(d))), future], axis=1)
        lower = full.mean(axis=1) - half_width(full.std(axis=1, ddof=1), full.shape[1], ONE_SIDED, "one")
        return float(np.mean(lower <= self.settings.tolerance)) > self.settings.alpha

    def noisiest(self, lead: float) -> float:
        """The largest sample sd of a paired difference to `lead` among this race's values with two or more
        shared seeds: `could_enter`'s scale for a value whose own noise it cannot see yet (values near divergence
        are several times noisier than those near b)."""
        sds = [float(np.std(d, ddof=1)) for d in self._differences(lead).values() if len(d) >= 2]
        return max(sds, default=0.0)

    def reopen(self, values: Iterable[float]) -> None:
        """Give `values` every seed and never drop them (a dropped value comes back; a walk value joins)."""
        values = [lr_key(v) for v in values]
        self.reopened |= {v for v in values if v in self.dropped}
        for v in values:
            self.dropped.pop(v, None)
            self.drops.pop(v, None)
        self.kept |= set(values)
        self.add(values)

    def summary(self) -> dict:
        """What the race changed, for racing.json and the report: each value still dropped (its seeds, its gap to the
        leader and the look it was dropped at, or that it diverged), the walk's values never trained, and the values
        completed for the sets."""
        dropped = [{"max_lr": v, **self.drops[v], "why": why} for v, why in sorted(self.dropped.items())]
        return {"dropped": dropped, "not_trained": list(self.walk), "completed_for_sets": sorted(self.kept)}

    def curve(self) -> Curve:
        return Curve.from_rows([{**row, "max_lr": v, "seed": s} for (v, s), row in self.rows.items()],
                               self.settings.seeds)

    def final_pool(self) -> Pool:
        """What this cycle adds to the pool carried forward: residuals against the cycle's b."""
        return self.pool() + Pool(-self.prior.ss, -self.prior.df)


def carry(prior: Pool, race: Race) -> Pool:
    """The pool the next cycle of a chain starts with: the earlier cycles' weighed by `CARRY`, plus this race's."""
    return prior.scaled(CARRY) + race.final_pool()


def pool_of(curve: Curve) -> Pool:
    """The pool a finished curve gives (`Race.pool` on its rows, no prior): residuals of each value's paired
    difference to the leader, over values sharing at least two seeds with it, diverged trainings left out."""
    race = Race(Settings(tuple(curve.seeds), most_candidates=max(len(curve.tried), 2)))
    race.add(curve.tried)
    race.rows = {(v, s): {"val_acc": curve.acc.loc[v, s], "diverged": curve.diverged.loc[v, s]}
                 for v in curve.tried for s in curve.seeds if not math.isnan(curve.acc.loc[v, s])}
    return race.pool()


RACING_FILE = "racing.json"  # in the results folder: per cycle, what racing changed (`Race.summary`)


def write_racing(out: Path, raced: dict[int, dict]) -> None:
    """OUT/racing.json: per cycle, the values racing dropped (seeds, gap, look), never trained, or completed."""
    atomic_write_json(Path(out) / RACING_FILE, {str(c): summary for c, summary in sorted(raced.items())})


def read_racing(out: Path) -> dict[int, dict] | None:
    """racing.json of a results folder, or None where the Oracle did not race."""
    path = Path(out) / RACING_FILE
    return {int(c): summary for c, summary in json.loads(path.read_text()).items()} if path.exists() else None


def _series(values: dict[float, float]) -> pd.Series:
    return pd.Series(values, dtype=float).sort_index()


def race_settings(seeds: list[int], values: list[float], refine: int) -> Settings:
    """A cycle's race: its looks are the seeds, its candidates at most the first values plus `refine` rounds of new
    ones."""
    return Settings(tuple(seeds), most_candidates=len(values) + MOST_NEW_VALUES_PER_ROUND * refine)


def oracle_race(seeds: list[int], values: list[float], refine: int, prior: Pool, previous: float | None,
                dense: float | None) -> Race:
    """A racing Oracle cycle's race (the driver's and replay's): the cycle's first `values` (the grid at cycle 0,
    later the bracket around the previous b and the dense best); from cycle 1 on it walks from the `previous` b, the
    `dense` best trained too (every cycle reports it)."""
    race = Race(race_settings(seeds, values, refine), prior, exact=True)
    race.start(values, previous, [dense] if dense is not None else [])
    return race


def tuning_race(seeds: list[int], grid: list[float], prior: Pool, centre: float | None, own: bool,
                keep_all: bool = False) -> Race:
    """A baseline schedule's peak-LR race over the grid (the driver's and replay's), walking from `centre` (the
    Oracle's dense best) when one is known, with `prior` (the Oracle's cycle-0 pool). The Oracle's `own` schedule
    gets no prior: its tuning trainings are the Oracle's cycle 0, reused, so the prior would count their residuals
    twice. `keep_all`: exhaustive tuning, every peak on every seed."""
    race = Race(Settings(tuple(seeds), most_candidates=len(grid)), Pool() if own else prior, keep_all=keep_all)
    race.start(grid, None if keep_all else centre)
    return race


@dataclass(frozen=True)
class TuningPlan:
    """How the baselines' peak LRs are tuned, written once for their driver (`baselines.tune_peaks`, also what the
    estimate's simulation runs) and the estimate's closed form: one race per schedule over `grid` on `seeds` (`tuning_race`), racing
    from the Oracle's dense curve (its pool, walking from its best) or, `mode` exhaustive, every peak on every
    seed."""

    grid: tuple[float, ...]
    seeds: tuple[int, ...]
    mode: str = "racing"

    @property
    def racing(self) -> bool:
        return self.mode == "racing"

    def race(self, dense: Curve | None, own: bool) -> Race:
        """One schedule's race; `dense`: the Oracle's cycle-0 curve on the same seeds, where known (a racing plan
        starts from its pool and walks from its best); `own`: the Oracle's own schedule (`tuning_race`)."""
        start = dense if self.racing else None
        return tuning_race(list(self.seeds), list(self.grid), pool_of(start) if start is not None else Pool(),
                           start.best if start is not None else None, own=own, keep_all=not self.racing)


def refinement(grid: list[float], paper_only: bool = True):
    """The values a refinement round adds, given a cycle's curve: `selection.next_values` on its choice. The racing
    Oracle resolves only the paper interval's edges (`paper_only`: b and that interval are what the decisions rest
    on); the exhaustive one the edges of both intervals."""
    def new_values(curve: Curve) -> list[float]:
        choice = choose(curve)
        return next_values(choice, grid, paper_only=paper_only) if choice is not None else []
    return new_values



@dataclass(frozen=True)
class OracleSearch:
    """How the Oracle searches one cycle, written once for its driver, `replay` and the estimate: the first values,
    the race (`mode`: racing, or exhaustive, a race that keeps every value), and the refinement. `refine` is the
    most refinement rounds the options allow (a racing Oracle uses at most `RACING_REFINE` of them); `bracket`:
    from cycle 1, start from the grid values around the previous b rather than the whole grid."""

    grid: tuple[float, ...]
    seeds: tuple[int, ...]
    refine: int = 3
    bracket: bool = True
    mode: str = "racing"
    wide: bool = False  # every seed of a candidate at once (`for_slots`)

    def for_slots(self, slots: int) -> "OracleSearch":
        """The search on a cluster of `slots`: where the grid on every seed fits in the slots at once, its racing
        rounds are wide (`Race.wide`: a look per round, not per seed; the rule and the walk as they are)."""
        return dataclasses.replace(self, wide=self.racing and slots >= len(self.grid) * len(self.seeds))

    @property
    def racing(self) -> bool:
        return self.mode == "racing"

    @property
    def rounds(self) -> int:
        return min(self.refine, RACING_REFINE) if self.racing else self.refine

    @property
    def completes(self) -> bool:
        """Whether the verdict needs completions after this search (`compared.complete_for_verdict`): a racing
        search leaves the values far from b with fewer seeds; an exhaustive one trained every seed."""
        return self.racing

    def first_values(self, previous: float | None, dense: float | None) -> list[float]:
        """Cycle 0 (`previous` None): the grid. Later: the bracket around the `previous` b (or the grid), with the
        `dense` best (every cycle reports it: §3.1's statistics at one fixed max_lr)."""
        grid = sorted(lr_key(g) for g in self.grid)
        if previous is None:
            return grid
        values = bracket(grid, previous) if self.bracket else grid
        return sorted({*values, lr_key(dense)})

    def race(self, values: list[float], prior: Pool, previous: float | None, dense: float | None) -> Race:
        """The cycle's race on its first `values`; a racing one walks from the `previous` b when bracketing."""
        if not self.racing:
            race = Race(race_settings(list(self.seeds), values, self.rounds), keep_all=True)
            race.add(values)
            return race
        walk = (previous, dense) if previous is not None and self.bracket else (None, None)
        race = oracle_race(list(self.seeds), values, self.rounds, prior, *walk)
        race.wide = self.wide
        return race

    def run(self, race: Race, train: "Trainer | Train", slots: int = 1) -> int:
        """Run the cycle's race with its refinement (`run_race`); returns the refinement rounds used."""
        return run_race(race, train, slots, refinement(list(self.grid), paper_only=self.racing), self.rounds)


Train = Callable[[list[Pair]], dict[Pair, dict]]
Item = tuple[Hashable, Pair]  # (race key, (value, seed))


class Trainer(Protocol):
    """Trainings started without waiting: `start` hands items over; `wait` blocks until at least one started item
    finished and returns every item finished since the last call, with its row (None: it cannot be had). A trainer
    that runs several items as one trial (the Runner, fusing candidates) also says how many slots its unfinished
    items hold (`held`); otherwise each holds one."""

    def start(self, items: list[Item]) -> None: ...

    def wait(self) -> dict[Item, dict | None]: ...


class Batches:
    """A `Trainer` from a function that trains a list of items and returns the rows it could get by item: `wait`
    trains everything started since the last call as one batch (replay, and the δ search's chains)."""

    def __init__(self, train: Callable[[list[Item]], dict[Item, dict]]):
        self.train, self.pending = train, []

    def start(self, items: list[Item]) -> None:
        self.pending += items

    def wait(self) -> dict[Item, dict | None]:
        batch, self.pending = self.pending, []
        got = self.train(batch)
        return {item: got.get(item) for item in batch}


def run_races(races: dict[Hashable, Race], train: Trainer | Callable[[list[Item]], dict], slots: int = 1,
              refine: Callable[[Curve], list[float]] | None = None, rounds: int = 0) -> dict[Hashable, int]:
    """Run several races side by side in rounds: every race's next round is started at once, and while the round
    waits on its slowest training, each free slot runs the training the races will most likely need next
    (`Race.ahead`: the leader's next seeds, then the close candidates'); those are kept and counted. The rule
    looks once per round, on every row finished by then. A race whose candidates all have every seed gets
    refinement values from `refine` (given its curve, the values to add, as `selection.next_values` chooses them)
    for at most `rounds` rounds. `train` is a `Trainer` (trainings stream: a slot is topped up as soon as one
    frees), or a function of a batch of items returning the rows it could get (`Batches`: one batch a round). An
    item that cannot be had is forgotten. Returns each race's refinement rounds."""
    trainer = train if hasattr(train, "wait") else Batches(train)
    used = {key: 0 for key in races}
    running: set[Item] = set()  # started, not yet finished
    finished: dict[Item, dict | None] = {}  # finished, not yet recorded

    def collect() -> None:
        got = trainer.wait()
        running.difference_update(got)
        finished.update(got)

    def top_up() -> None:
        # Slots are trials: a fused trial of K candidates holds one slot, not K (`Trainer.held`).
        free = slots - (trainer.held() if hasattr(trainer, "held") else len(running))
        if free <= 0:
            return
        taken = running | finished.keys()
        extra = [(key, pair) for key, race in races.items()
                 for pair in race.ahead(free, started={p for k, p in taken if k == key})][:free]
        trainer.start(extra)
        running.update(extra)

    def record() -> None:
        for key, race in races.items():
            race.forget(pair for (k, pair), row in finished.items() if k == key and row is None)
            race.record({pair: row for (k, pair), row in finished.items() if k == key and row is not None})
        finished.clear()

    while True:
        for key, race in races.items():
            busy = any(k == key for k, _ in running)
            while refine and not busy and not race.needed() and used[key] < rounds:
                new = [v for v in refine(race.curve()) if v not in race.candidates]
                if not new:
                    break
                race.add(new)
                used[key] += 1
            if not busy and not race.needed():
                race.reopen(race.frontier())
        need = [(key, pair) for key, race in races.items() for pair in race.needed()]
        if not need and not running:
            return used
        new = [item for item in need if item not in running]
        trainer.start(new)
        running.update(new)
        top_up()
        round_ = set(need)
        # Wait for the round (or, with none left, for trainings started ahead of a round that never came).
        while not (round_ and finished.keys() >= round_) and running:
            collect()
            if not finished.keys() >= round_:
                top_up()
        record()


def run_race(race: Race, train: Trainer | Train, slots: int = 1,
             refine: Callable[[Curve], list[float]] | None = None, rounds: int = 0) -> int:
    """One race (`run_races`) under the key None; a plain `train` takes and returns (value, seed) pairs. Returns
    the refinement rounds."""
    if not hasattr(train, "wait"):
        plain = train

        def train(batch):
            return {(None, pair): row for pair, row in plain([pair for _, pair in batch]).items()}
    return run_races({None: race}, train, slots, refine, rounds)[None]
