"""Replicates in waves until each comparison is decided (issue 61): a sequential rule over looks whose family-wise
error rate holds across the looks and across the comparisons of the verdict's family.

Why: at a fixed R the verdict's labels (`statistics.label` on the 95 % t interval, `analysis.replicates`) hold
their stated rate only if R was fixed before any result was read. Running more replicates because a label was
undecided, and reading the labels again, is optional stopping: with uncorrected 95 % intervals at 4 looks over a
family of 18 comparisons, the chance of some wrong decided label is far above 5 % (`simulate`, tests).

**The rule** (`Design`, `look`). Looks at R = first, first + wave, ..., max_replicates = N (a look may fall
elsewhere, e.g. where a resumed folder already holds more replicates: the spending below takes any look times
fixed without reading the labels). Look k at R_k replicates gets the increment

    α_k = α(R_k/N) − α(R_{k−1}/N),   α(t) = 2 − 2Φ(z_{1−α/2}/√t)

of the Lan–DeMets O'Brien–Fleming-type spending function (`obf_spent`; α(0.5) = 0.0056 at α = 0.05, the published
value, checked in the tests; α(1) = α). At look k every open comparison gets the two-sided t interval
mean ∓ t(1 − α_k/(2m), n − 1)·sd/√n over its n defined replicates (sd with ddof 1), m = the family's size fixed at
the first look (Bonferroni over the family), and is labelled by the one rule, `statistics.label` (equivalent inside
±margin, better/worse when it excludes 0, else inconclusive). A comparison stops at the first look where

- its label is decided (equivalent, better or worse): "decided", the label frozen;
- or it is futile: "futile", label inconclusive, frozen. Futile means that it cannot be decided by N at the
  observed spread even in the best case: with all the α left (α − α(R_k/N)) spent at one look at N, over
  n + (N − R_k) replicates at the observed sd s, the final half-width is h = t(1 − (α − α(R_k/N))/(2m),
  n + N − R_k − 1)·s/√(n + N − R_k); equivalence is out of reach when max(|mean| − se, 0) + h > margin and a
  difference when |mean| + se ≤ h, with se = s/√n: the mean may still move one standard error either way.
  Futility only ever withholds a label, so it cannot raise the error rate; it saves replicates;
- or R_k = N: "budget", label inconclusive (not decided within N).
Otherwise it goes on ("continue"). The job stops when every comparison has stopped, or at N.

**Why the rate holds**, under any dependence between looks and comparisons: a wrong decided label ("better" when
the true advantage δ ≤ 0, "worse" when δ ≥ 0, "equivalent" when |δ| ≥ margin) needs the interval of that look to
miss δ, and each interval misses with probability at most α_k/m (the t interval's coverage, exact for normal
replicates). Union bound over the m comparisons and the looks: P(any wrong decided label) ≤ Σ_k m·α_k/m ≤ α. The
price is conservatism: the union bound ignores that the looks share replicates, and the first looks spend almost
nothing (O'Brien–Fleming keeps nearly all of α for N), so at R = 3 a label is decided only by a very large effect.

**Another N** (a rerun with another --max-replicates, of a run that stopped before its N): the α spent by the
looks that happened stays spent; the looks after R_L (the last one) spend what is left, α − α_spent, along the
spending function rescaled to the new N' (`Design.extended`): cumulative(R) = spent + (α − spent)·(α(R/N') −
α(R_L/N'))/(α − α(R_L/N')). The total stays ≤ α. Decided labels stay; futile ones reopen. A run that looked at its
N has spent all of α there: a larger N is refused while a comparison is undecided (it would look again with no rate
left), and is nothing to do when all are decided. The rate is guaranteed when N' is chosen without reading the
labels (a budget that changed); chosen because of them, it is a reading.

A maintained library was looked for: `confseq` (the confidence-sequence papers' authors) ships only as a source
package that compiles C++ against Boost (no wheel for this platform), and its confidence sequences are for bounded
observations or known sub-Gaussian scale, not unbounded advantages with an unknown sd; so numpy and scipy.

- `look`: one look's decisions; `simulate`: the rule (or a naive one) on synthetic families, vectorised, with
  where each family's job stopped (`Simulated.ends`); `benchmarks/sequential_fwer.py` reports its error and power;
- `wave_from_slots`: how many replicates a wave runs side by side, from one replicate simulated alone on the slots;
  `scenarios`, `expected`: the replicates an auto run is expected to run under stated effects and spreads (the
  committed example's, `COMMITTED`); `auto_price` puts them together with the simulated walls for the dry run;
- `Waves`: `compare --replicates auto`'s state between waves, OUT/looks.json (`pipeline.compare` runs the waves);
- `sequential_section`: the report's lines on the rule and where each comparison stopped, or, for a run without
  looks.json, that its labels are fixed-R labels (one look).
"""
from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Hashable, Mapping

import numpy as np
import pandas as pd
from scipy import stats

from oracle_search.statistics import ALPHA, MARGIN_TOLERANCE, label
from trainables.atomic import atomic_write_json
from trainables.spec import SpecError

AUTO = "auto"  # `compare --replicates auto`
LOOKS = "looks.json"  # OUT's record of the looks of an auto run
DEFAULT_WAVE = 3  # a Design's default first look and wave (`--wave` itself defaults to the slots' choice)
MIN_WAVE = 3  # a wave chosen from the slots runs at least 3 replicates: a first look's spread over 2 has 1 df
DECIDED = ("equivalent", "better", "worse")
STOPS = ("decided", "futile", "budget", "continue")
# The vectorised core's label codes, `statistics.label`'s words in this order.
LABELS = ("inconclusive", "equivalent", "better", "worse", "undefined")


def obf_spent(t, alpha: float = ALPHA):
    """The Lan–DeMets O'Brien–Fleming-type spending function: the cumulative α spent by information fraction t,
    α(t) = 2 − 2Φ(z_{1−α/2}/√t) (two-sided), α(0) = 0, α(1) = α. Scalars or arrays."""
    t = np.clip(np.asarray(t, dtype=float), 0.0, 1.0)
    z = stats.norm.isf(alpha / 2)
    safe = np.where(t > 0, t, 1.0)
    out = np.where(t > 0, 2 * stats.norm.sf(z / np.sqrt(safe)), 0.0)
    out = np.where(t >= 1, alpha, out)  # exactly α at the end, not α up to rounding
    return float(out) if out.ndim == 0 else out


@dataclass(frozen=True)
class Design:
    """The sequential plan: α over the whole family and every look; looks at `first`, `first + wave`, ...,
    `max_replicates` (N); `family_size` m, the comparisons the Bonferroni split counts. `spent` and `since`: an
    extended run's α already spent by its looks up to R = `since` (0 and 0 for a run that was never extended)."""

    alpha: float = ALPHA
    first: int = DEFAULT_WAVE
    wave: int = DEFAULT_WAVE
    max_replicates: int = 12
    family_size: int = 1
    spent: float = 0.0
    since: int = 0

    def __post_init__(self) -> None:
        if not 0 < self.alpha < 1:
            raise ValueError(f"alpha must lie in (0, 1), got {self.alpha}")
        if self.first < 2 or self.wave < 1 or self.family_size < 1:
            raise ValueError(f"needs first >= 2, wave >= 1 and family_size >= 1: {self}")
        if self.max_replicates < max(self.first, self.since + 1):
            raise ValueError(f"max_replicates {self.max_replicates} is below the first look or the last one: {self}")
        if not 0 <= self.spent < self.alpha or (self.since == 0) != (self.spent == 0):
            raise ValueError(f"spent must lie in [0, alpha), and be 0 exactly when since is: {self}")

    def cumulative(self, replicates: int) -> float:
        """The α spent by a look at R = `replicates` (and every look before it): `obf_spent(R/N)`, or, extended,
        the rest after `since` along the spending function rescaled to this N."""
        N = self.max_replicates
        if replicates >= N:
            return self.alpha
        if replicates <= self.since:
            return self.spent
        at = obf_spent(self.since / N, self.alpha)
        return self.spent + (self.alpha - self.spent) * (obf_spent(replicates / N, self.alpha) - at) / (self.alpha - at)

    def increment(self, replicates: int, previous: int) -> float:
        """α_k of a look at R = `replicates` whose previous look was at `previous` (0: none; `since` for an extended
        run's first look)."""
        return max(0.0, self.cumulative(replicates) - self.cumulative(max(previous, self.since)))

    def schedule(self) -> list[int]:
        """The planned looks: first (after `since`, since + wave), then every `wave` more, then N."""
        R = self.first if self.since == 0 else min(self.since + self.wave, self.max_replicates)
        out = [R]
        while R < self.max_replicates:
            R = min(R + self.wave, self.max_replicates)
            out.append(R)
        return out

    def extended(self, max_replicates: int, at: int) -> "Design":
        """This design after its looks up to R = `at` (below its N), continued to another N (`max_replicates`,
        above `at`): the α spent so far stays spent, the rest goes to the looks after `at`."""
        if max_replicates == self.max_replicates or not at < min(max_replicates, self.max_replicates):
            raise ValueError(f"a new N above the last look, which is below the old N: {max_replicates}, at {at}")
        return dataclasses.replace(self, max_replicates=max_replicates, spent=self.cumulative(at), since=at)


@dataclass(frozen=True)
class Decision:
    """One comparison at one look: `label` (statistics.label's words), `stopped` (decided / futile / budget /
    continue), the interval [lo, hi] at two-sided confidence `level` (1 − α_k/m), over `n` defined replicates of
    `replicates` run, with their `mean` and `sd`, against `margin`. A frozen decision keeps the look it was made at."""

    label: str
    stopped: str
    lo: float
    hi: float
    level: float
    mean: float
    sd: float
    n: int
    replicates: int
    margin: float

    def record(self) -> dict:
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def of(cls, record: dict) -> "Decision":
        return cls(**{k: (math.nan if v is None and k in ("lo", "hi", "mean", "sd", "margin") else v)
                      for k, v in record.items() if k in {f.name for f in dataclasses.fields(cls)}})


# --- the vectorised core: one look over many comparisons (and many simulated families) -----------------------------

def _labels(lo, hi, margin):
    """`statistics.label` over arrays, as codes into `LABELS` (the tests check they agree)."""
    lo, hi, margin = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (lo, hi, margin)))
    code = np.zeros(lo.shape, dtype=np.int8)
    with np.errstate(invalid="ignore"):
        equivalent = (-margin - MARGIN_TOLERANCE <= lo) & (hi <= margin + MARGIN_TOLERANCE)
        code[(lo > 0) & ~equivalent] = 2
        code[(hi < 0) & ~equivalent] = 3
    code[equivalent] = 1
    code[np.isnan(lo) | np.isnan(hi)] = 4
    return code


def _quantile(error, dof):
    """t(1 − error/2, dof), the two-sided quantile, from the upper tail (so that error 1e-17 is not 1 − 1e-17 = 1);
    NaN where dof < 1, inf where error is 0."""
    dof = np.asarray(dof, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = stats.t.isf(np.asarray(error, dtype=float) / 2, np.maximum(dof, 1))
    return np.where(dof >= 1, q, np.nan)


def _half(q, sd, n):
    """q·sd/√n, 0 with zero spread (even at q = inf: an increment of 0 leaves a point interval a point)."""
    with np.errstate(invalid="ignore"):
        return np.where(sd == 0, 0.0, q * sd / np.sqrt(np.maximum(n, 1)))


def _decide(mean, sd, n, margin, *, error: float, remaining: float, replicates: int, max_replicates: int):
    """One look's (lo, hi, label code, stop code) over arrays of comparisons: the interval at two-sided `error`
    (α_k/m), futility with `remaining` (the α left after this look, over m) spent at one look at N. Stop codes index
    `STOPS`."""
    mean, sd, n, margin = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (mean, sd, n, margin)))
    half = _half(_quantile(error, n - 1), sd, n)
    lo, hi = mean - half, mean + half
    code = _labels(lo, hi, margin)
    stop = np.full(code.shape, 3, dtype=np.int8)  # continue
    if replicates >= max_replicates:
        stop[...] = 2  # budget
    else:
        final = n + (max_replicates - replicates)
        h = _half(_quantile(remaining, final - 1), sd, final)
        se = _half(1.0, sd, n)
        with np.errstate(invalid="ignore"):
            reach_equivalent = np.maximum(np.abs(mean) - se, 0) + h <= margin + MARGIN_TOLERANCE
            reach_difference = np.abs(mean) + se > h
        stop[~(reach_equivalent | reach_difference) & (n >= 2)] = 1  # futile
    stop[(code == 1) | (code == 2) | (code == 3)] = 0  # decided
    return lo, hi, code, stop


def decide(values_by_comparison: Mapping[Hashable, np.ndarray], margin: float | Mapping[Hashable, float], *,
           error: float, remaining: float, replicates: int, max_replicates: int,
           earlier: Mapping[Hashable, Decision] | None = None) -> dict[Hashable, Decision]:
    """A look at explicit levels (`look` computes them from a design; a report replays recorded ones): each
    comparison's interval at two-sided `error`, its label and where it stands; one stopped as decided or futile in
    `earlier` keeps its decision."""
    earlier = earlier or {}
    out: dict[Hashable, Decision] = {}
    for key, values in values_by_comparison.items():
        before = earlier.get(key)
        if before is not None and before.stopped in ("decided", "futile"):
            out[key] = before
            continue
        d = np.asarray(values, dtype=float)
        d = d[~np.isnan(d)]
        m = float(margin[key] if isinstance(margin, Mapping) else margin)
        mean = float(np.mean(d)) if len(d) else math.nan
        sd = float(np.std(d, ddof=1)) if len(d) >= 2 else math.nan
        lo, hi, code, stop = _decide(mean, sd, len(d), m, error=error, remaining=remaining, replicates=replicates,
                                     max_replicates=max_replicates)
        out[key] = Decision(LABELS[int(code)], STOPS[int(stop)], float(lo), float(hi), 1 - error, mean, sd, len(d),
                            replicates, m)
    return out


def look(values_by_comparison: Mapping[Hashable, np.ndarray], margin: float | Mapping[Hashable, float],
         design: Design, replicates: int, previous: int = 0,
         earlier: Mapping[Hashable, Decision] | None = None) -> dict[Hashable, Decision]:
    """The look at R = `replicates` (the previous one at `previous`, 0 for none): every comparison's `Decision`
    under `design` (module docstring), a comparison stopped earlier as decided or futile keeping its decision
    (`earlier`, the previous look's). `values_by_comparison`: each comparison's per-replicate advantages (NaN:
    undefined in that replicate, left out); `margin`: one for all, or by comparison. ValueError when the family
    holds more comparisons than the design's m."""
    if len(values_by_comparison) > design.family_size:
        raise ValueError(f"{len(values_by_comparison)} comparisons, but the design splits α over "
                         f"{design.family_size}: the family may not grow between looks")
    m = design.family_size
    return decide(values_by_comparison, margin, error=design.increment(replicates, previous) / m,
                  remaining=(design.alpha - design.cumulative(replicates)) / m, replicates=replicates,
                  max_replicates=design.max_replicates, earlier=earlier)


def sentence(design: Design) -> str:
    """The rule in one sentence, for the report."""
    looks = design.schedule()
    at = ", ".join(map(str, looks)) if len(looks) <= 6 else f"{looks[0]}, {looks[1]}, …, {looks[-1]}"
    extended = (f" (extended at R = {design.since}: the α {design.spent:.2g} its looks spent stays spent, the rest "
                "goes to the looks after it)") if design.since else ""
    return (f"Replicates ran in waves of {design.wave}, with a look after each (R = {at}; N = "
            f"{design.max_replicates}){extended}: at each look every open comparison's t interval has two-sided "
            f"level 1 − α_k/{design.family_size}, where α_k is the look's share of α = {design.alpha:g} under the "
            f"Lan–DeMets O'Brien–Fleming spending function α(t) = 2 − 2Φ(z/√t) with t = R/N (Bonferroni over the "
            f"{design.family_size} comparisons, a union bound over the looks), and a comparison stops once its "
            f"label is decided or cannot be decided by N at its observed spread, so the chance of any wrong "
            f"decided label, over every look and comparison, is at most {100 * design.alpha:g} % (for normal "
            "replicates; simulated also with heavy tails).")


# --- the simulation: does the rate hold? -----------------------------------------------------------------------

@dataclass(frozen=True)
class Simulated:
    """`simulate`'s answer: the family-wise error (any wrong decided label in a family) and the power (a
    comparison's chance of a correct decided label), each with its Monte Carlo standard error, and the replicates
    a family ran (the last look any of its comparisons needed), on average."""

    fwer: float
    fwer_se: float
    power: float
    power_se: float
    replicates: float
    sims: int
    replicates_se: float = 0.0  # the mean's Monte Carlo standard error
    ends: tuple[tuple[int, float], ...] = ()  # (R, the share of families whose last look was at R), by R

    def reach(self, replicates: int) -> float:
        """The share of families that ran a look at R = `replicates` or later: the chance a wave to it runs."""
        return sum(share for R, share in self.ends if R >= replicates)

    @property
    def fwer_upper(self) -> float:
        """The error's estimate plus three Monte Carlo standard errors."""
        return self.fwer + 3 * self.fwer_se


def noise(rng: np.random.Generator, shape: tuple[int, ...], shape_name: str) -> np.ndarray:
    """Unit-variance noise: "normal", or "t3" (Student t with 3 df, scaled by 1/√3 to variance 1: heavy tails)."""
    if shape_name == "normal":
        return rng.standard_normal(shape)
    if shape_name == "t3":
        return rng.standard_t(3, shape) / math.sqrt(3)
    raise ValueError(f"unknown noise {shape_name!r}")


def simulate(effects, sds, margin: float, design: Design, *, shape: str = "normal", sims: int = 4000,
             seed: int = 0, rule: str = "sequential") -> Simulated:
    """Families of len(`effects`) comparisons, each with per-replicate advantages effect + sd·noise (`noise`),
    run through the looks of `design.schedule()` (`design.family_size` must be the family's size) under `rule`:
    "sequential" (`look`'s rule, vectorised over the families) or "naive" (the 95 % t interval at every look, no
    correction, stopping at the first decided label). A label is wrong when it says "better" with effect ≤ 0,
    "worse" with effect ≥ 0, or "equivalent" with |effect| ≥ margin; correct when decided and not wrong."""
    effects = np.asarray(effects, dtype=float)
    sds = np.broadcast_to(np.asarray(sds, dtype=float), effects.shape)
    if rule not in ("sequential", "naive"):
        raise ValueError(f"unknown rule {rule!r}")
    if rule == "sequential" and design.family_size != len(effects):
        raise ValueError("the design's family_size must be the family's size")
    rng = np.random.default_rng(seed)
    N, m = design.max_replicates, len(effects)
    x = effects[None, :, None] + sds[None, :, None] * noise(rng, (sims, m, N), shape)
    final = np.full((sims, m), -1, dtype=np.int8)  # the frozen label code; -1 open
    stopped_at = np.zeros((sims, m), dtype=int)
    previous = 0
    for R in design.schedule():
        head = x[:, :, :R]
        mean, sd = head.mean(axis=2), head.std(axis=2, ddof=1)
        if rule == "sequential":
            lo, hi, code, stop = _decide(mean, sd, R, margin, error=design.increment(R, previous) / m,
                                         remaining=(design.alpha - design.cumulative(R)) / m, replicates=R,
                                         max_replicates=N)
        else:
            half = _half(_quantile(1 - 0.95, R - 1), sd, R)
            code = _labels(mean - half, mean + half, margin)
            stop = np.where(np.isin(code, (1, 2, 3)), 0, 2 if R >= N else 3)
        ends = (final == -1) & (stop != 3)
        final[ends] = np.where(np.isin(code[ends], (1, 2, 3)), code[ends], 0)
        stopped_at[ends] = R
        previous = R
        if (final != -1).all():
            break
    final[final == -1] = 0
    stopped_at[stopped_at == 0] = N
    job = stopped_at.max(axis=1)  # the job stops when its last comparison does
    ends = tuple((int(R), float(np.mean(job == R))) for R in np.unique(job))
    e = effects[None, :]
    wrong = (((final == 2) & (e <= 0)) | ((final == 3) & (e >= 0)) | ((final == 1) & (np.abs(e) >= margin)))
    correct = np.isin(final, (1, 2, 3)) & ~wrong
    fwer, power = float(wrong.any(axis=1).mean()), float(correct.mean())
    return Simulated(fwer, math.sqrt(fwer * (1 - fwer) / sims), power, math.sqrt(power * (1 - power) / (sims * m)),
                     float(job.mean()), sims, float(job.std() / math.sqrt(sims)), ends)


# --- priced before it runs: the wave's width from the slots, the replicates expected under stated assumptions ----

def wave_from_slots(slots: int, busy: float, wall: float, max_replicates: int) -> int:
    """How many replicates a wave runs side by side (`--wave` not given): one replicate simulated alone on the
    slots keeps busy/wall of them busy on average (`simulate_job.JobWalls`: its trainings' seconds over its wall),
    so ⌊slots·wall/busy⌋ replicates' work fits in one replicate's wall; at least `MIN_WAVE` (a first look over
    fewer reads a spread with 1 df), at most N. Where one replicate already fills the slots that is MIN_WAVE: the
    waves then cost wall time in proportion to the replicates they run, and stopping early saves it."""
    fit = math.floor(slots * wall / busy + 1e-9) if busy > 0 and wall > 0 else max_replicates
    return max(min(MIN_WAVE, max_replicates), min(fit, max_replicates))


# The effects and spreads the committed example measured (docs/example at d6dbc1d: mnist1d-mlp, 6 cycles, 3
# replicates, margin 3 points): each comparison's mean and sd over its replicates, as multiples of its margin. The
# dry run of `--replicates auto` simulates the rule with them scaled to its own margin (a stated assumption: the
# spread as a share of the margin carries over from that study to the one priced, which it need not).
COMMITTED = {
    ("silo_paper", "oracle_schedule"): (-0.09, 0.31), ("silo_paper", "constant_dense"): (0.61, 0.60),
    ("silo_paper", "constant_best"): (1.32, 0.13), ("silo_paper", "constant"): (4.87, 0.85),
    ("silo_paper", "decay"): (-0.43, 0.14), ("silo_paper", "cyclical"): (0.60, 0.24),
    ("silo_paper", "warmup"): (0.99, 0.40), ("silo_paper", "cosine"): (0.17, 0.71),
    ("silo_paper", "best_benchmark"): (0.03, 0.69),
    ("silo_fit", "oracle_schedule"): (-1.11, 1.65), ("silo_fit", "constant_dense"): (-0.41, 1.47),
    ("silo_fit", "constant_best"): (0.30, 1.46), ("silo_fit", "constant"): (3.85, 2.02),
    ("silo_fit", "decay"): (-1.45, 1.35), ("silo_fit", "cyclical"): (-0.42, 1.42),
    ("silo_fit", "warmup"): (-0.03, 1.74), ("silo_fit", "cosine"): (-0.85, 1.52),
    ("silo_fit", "best_benchmark"): (-0.99, 1.89),
}
COMMITTED_WHERE = "the committed example's (docs/example, mnist1d-mlp, 3 replicates)"


def scenarios(family: list[tuple[str, str]]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The assumptions the dry run prices `family` under, each (effects, sds) in multiples of the margin: every
    comparison's sd as the committed example measured it (`COMMITTED`; the median of those where it has no such
    comparison), and its effect as measured there, or every effect 0, at the margin, or twice it."""
    median = float(np.median([sd for _, sd in COMMITTED.values()]))
    sds = np.array([COMMITTED.get(k, (0.0, median))[1] for k in family])
    measured = np.array([COMMITTED.get(k, (0.0, median))[0] for k in family])
    return {"the committed example's effects": (measured, sds), "every effect 0": (np.zeros(len(family)), sds),
            "every effect at the margin": (np.ones(len(family)), sds),
            "every effect twice the margin": (np.full(len(family), 2.0), sds)}


def expected(family: list[tuple[str, str]], design: Design, sims: int = 2000,
             seed: int = 61) -> dict[str, Simulated]:
    """The rule simulated on `family` under each of `scenarios` (normal replicates, margin 1: the rule is
    scale-free): how many replicates the job runs, with the chance of each look (`Simulated.reach`)."""
    return {name: simulate(effects, sds, 1.0, design, sims=sims, seed=seed)
            for name, (effects, sds) in scenarios(family).items()}


# --- compare --replicates auto: the waves and OUT/looks.json ------------------------------------------------------

def read_looks(out: Path) -> dict | None:
    path = Path(out) / LOOKS
    return json.loads(path.read_text()) if path.exists() else None


def _index(name) -> int | None:
    """A replicate's number from its name in tables/replicates.csv ("replicate-3") or a number."""
    text = str(name)
    text = text.removeprefix("replicate-")
    return int(text) if text.isdigit() else None


def advantages(per: pd.DataFrame, replicates: int) -> dict[tuple[str, str], np.ndarray]:
    """Each comparison's per-replicate advantages over replicates 1..`replicates`, from the replicates frame
    (tables/replicates.csv: replicate, schedule, versus, advantage, ...), in order of replicate."""
    rows = per.assign(_r=per["replicate"].map(_index))
    rows = rows[rows["_r"].notna() & (rows["_r"] <= replicates)].sort_values("_r", kind="stable")
    return {(str(s), str(v)): g["advantage"].to_numpy(dtype=float)
            for (s, v), g in rows.groupby(["schedule", "versus"], sort=False)}


def _margins(out: Path) -> dict[tuple[str, str], float]:
    verdict = pd.read_csv(Path(out) / "tables" / "verdict.csv")
    return {(str(r.schedule), str(r.versus)): float(r.margin) for r in verdict.itertuples()}


def _key(key: tuple[str, str]) -> str:
    return f"{key[0]} vs {key[1]}"


def _unkey(text: str) -> tuple[str, str]:
    schedule, versus = text.split(" vs ", 1)
    return schedule, versus


class Waves:
    """`compare --replicates auto`'s state between waves, kept in OUT/looks.json: the design, and per look its R,
    its α_k and each comparison's decision and level. `next_replicates()`: the R the next wave runs to (None:
    done); `record(R)`: the look after that wave, from OUT/tables/replicates.csv and tables/verdict.csv (the report
    over the replicates `compare` just wrote). A resumed folder continues its waves (from the replicates it holds,
    `held`, when a wave was cut short).

    **Another N** (`max_replicates`). A run that stopped before its N re-plans the looks left (`Design.extended`
    at its last look, every undecided comparison reopened). A run that looked at its N spent all of α there on the
    comparisons still open at that look ("budget": they stay as they are), but a comparison that stopped earlier as
    futile left its share of the later looks unspent: with a larger N it reopens under a design of its own
    (`own`: the design it stopped under, extended at the look it stopped at), and the Bonferroni split over the
    family and the union bound over its own looks still hold. Refused (SpecError naming the option): a
    `max_replicates` below the replicates held or looked at, a larger one for a run that looked at its N with only
    "budget" comparisons undecided (no α left to look again), and another margin."""

    def __init__(self, out: Path, margin_per_cycle: float, wave: int | None, max_replicates: int, held: int = 0,
                 say: Callable[[str], None] = print):
        self.out, self.margin_per_cycle, self.say = Path(out), margin_per_cycle, say
        found = read_looks(self.out)
        if wave is None:  # --wave not given: the recorded run's (a new run's is chosen from the slots: pipeline)
            if found is None:
                raise ValueError("a new auto run needs its wave")
            wave = found["design"]["wave"]
        self.wave, self.max_replicates = wave, max_replicates
        self.looks: list[dict] = [] if found is None else found["looks"]
        self.designs: list[dict] = [] if found is None else found.get("designs", [])
        self.design: Design | None = None if found is None else Design(**found["design"])
        self.own: dict[str, Design] = {} if found is None else {k: Design(**d) for k, d in found.get("own", {}).items()}
        self.reopened: set[str] = set()
        self.replayed = False
        if held > max_replicates:
            raise SpecError("max-replicates", f"{self.out} holds {held} replicates, more than --max-replicates "
                            f"{max_replicates}")
        last = self.looks[-1]["replicates"] if self.looks else 0
        if found is not None:
            if not math.isclose(found["margin_per_cycle"], margin_per_cycle):
                raise SpecError("margin", f"{self.out}'s looks were made with margin {found['margin_per_cycle']:g} "
                                f"per cycle, this command gives {margin_per_cycle:g}: a resumed auto run keeps its "
                                "margin (use a new --out for another)")
            if max_replicates < last:
                raise SpecError("max-replicates", f"must be at least the {last} replicates {self.out} already "
                                f"looked at, got {max_replicates}")
        if self.design is not None:
            self.design = dataclasses.replace(self.design, wave=wave)
            self.own = {k: dataclasses.replace(d, wave=wave) for k, d in self.own.items()}
            final = self.looks[-1]["decisions"] if self.looks else {}
            undecided = [k for k, d in final.items() if d["stopped"] != "decided"]
            if undecided and max_replicates != self.N and 0 < last < self.N:
                # Stopped before its N: every undecided comparison goes on along the family's design, re-planned.
                self.designs.append(dataclasses.asdict(self.design))
                self.design = self.design.extended(max_replicates, last)
                self.own = {}
                self.reopened = set(undecided)
            elif undecided and max_replicates > self.N and last >= self.N:
                futile = {k: final[k]["replicates"] for k in undecided if final[k]["stopped"] == "futile"}
                if not futile:
                    raise SpecError("max-replicates", f"{self.out} looked at its N = {self.N} and spent all its α "
                                    f"= {self.design.alpha:g} there on its {len(undecided)} undecided comparison"
                                    f"{'s' * (len(undecided) != 1)}: a larger N would look at them again with no "
                                    "error rate left (only one that stopped as futile before N can be reopened)")
                for key, at in futile.items():  # each on the rest of its own share, after the look it stopped at
                    self.own[key] = self.own.get(key, self.design).extended(max_replicates, at)
                self.reopened = set(futile)
        self.done = bool(self.looks) and not self.reopened and (last >= self.N or all(
            d["stopped"] in ("decided", "futile", "budget") for d in self.looks[-1]["decisions"].values()))
        self.next = (max(last, held) if self.done else
                     min(max(last + wave if last else wave, held), self.N if self.design else max_replicates))

    @property
    def N(self) -> int:
        """The most replicates any open comparison's design runs to: where the waves end."""
        return max(d.max_replicates for d in [self.design, *self.own.values()])

    def next_replicates(self) -> int | None:
        """The R the next wave runs to; a finished run gives its last R once (compare resumes, nothing trains, the
        report is written again), then None."""
        if self.done:
            if self.replayed:
                return None
            self.replayed = True
        return self.next

    def earlier(self) -> dict[tuple[str, str], Decision]:
        """The last look's decisions, but those reopened by another N."""
        if not self.looks:
            return {}
        return {_unkey(k): Decision.of(v) for k, v in self.looks[-1]["decisions"].items() if k not in self.reopened}

    def record(self, replicates: int) -> dict[tuple[str, str], Decision] | None:
        """The look at R = `replicates` (nothing for a finished run's replay): each comparison's decision, at the
        level its own design gives it (the family's, or its own after a reopening), written to looks.json with
        that level and said; sets what the next wave runs to."""
        if self.done:
            return None
        per = pd.read_csv(self.out / "tables" / "replicates.csv")
        values = advantages(per, replicates)
        margins = _margins(self.out)
        margins = {k: margins.get(k, math.nan) for k in values}
        if self.design is None:
            self.design = Design(first=replicates, wave=self.wave, max_replicates=self.max_replicates,
                                 family_size=max(1, len(values)))
        if len(values) > self.design.family_size:
            raise ValueError(f"{len(values)} comparisons, but the design splits α over "
                             f"{self.design.family_size}: the family may not grow between looks")
        previous = self.looks[-1]["replicates"] if self.looks else 0
        before = {_unkey(k): Decision.of(v) for k, v in self.looks[-1]["decisions"].items()} if self.looks else {}
        earlier = self.earlier()
        decisions: dict[tuple[str, str], Decision] = {}
        levels: dict[str, list[float]] = {}
        m = self.design.family_size
        for key, v in values.items():
            if key in earlier and earlier[key].stopped in ("decided", "futile", "budget"):
                decisions[key] = earlier[key]  # stopped, and not reopened: as it was
                continue
            design = self.own.get(_key(key), self.design)
            # Its last look: the run's, or, for one reopened, the look it stopped at (its own α ran out there).
            last = before[key].replicates if key in before else 0
            error = design.increment(replicates, last) / m
            remaining = (design.alpha - design.cumulative(replicates)) / m
            decisions.update(decide({key: v}, margins, error=error, remaining=remaining, replicates=replicates,
                                    max_replicates=design.max_replicates))
            levels[_key(key)] = [error, remaining, design.max_replicates]
        alpha = self.design.increment(replicates, previous)
        self.looks.append({"replicates": replicates, "previous": previous, "alpha": alpha,
                           "cumulative": self.design.cumulative(replicates),
                           "error": alpha / m, "max_replicates": self.N, "levels": levels,
                           "decisions": {_key(k): d.record() for k, d in decisions.items()}})
        reopened, self.reopened = self.reopened, set()
        atomic_write_json(self.out / LOOKS, {
            "rule": sentence(self.design), "design": dataclasses.asdict(self.design), "designs": self.designs,
            "own": {k: dataclasses.asdict(d) for k, d in self.own.items()},
            "margin_per_cycle": self.margin_per_cycle, "looks": self.looks})
        counts = {s: sum(d.stopped == s for d in decisions.values()) for s in STOPS}
        again = f"; {len(reopened)} reopened by N = {self.N}" if reopened and self.own else ""
        self.say(f"look at R = {replicates} ({_spent(self.looks[-1], m)}{again}): " + ", ".join(
            f"{n} {s}" for s, n in counts.items() if n))
        open_ = counts["continue"] > 0
        self.done = not open_ or replicates >= self.N
        if self.done:
            self.replayed = True  # the last wave ran at this R already
        else:
            self.next = min(replicates + self.design.wave, self.N)
        return decisions


# --- the report ------------------------------------------------------------------------------------------------

def _fmt(x: float) -> str:
    return "NA" if not math.isfinite(x) else f"{x:+.2f}"


def _level(level: float) -> str:
    """A two-sided confidence: 99.82 %, or 1 − 3e-05 where the percentage would round to 100."""
    error = 1 - level
    return f"{100 * level:.4g} %" if error >= 1e-3 else f"1 − {error:.2g}"


def _spent(record: dict, family_size: int) -> str:
    """A look's α in words: the family's α_k, or, where the comparisons looked at had levels of their own (reopened
    by another N), theirs."""
    levels = record.get("levels") or {}
    own = sorted({round(error * family_size, 12) for error, _, _ in levels.values()})
    if levels and not (len(own) == 1 and math.isclose(own[0], record["alpha"], rel_tol=1e-9, abs_tol=1e-15)):
        return (f"{len(levels)} comparison{'s' * (len(levels) != 1)} looked at, each at its own α_k "
                + ", ".join(f"{a:.2g}" for a in own) + f", two-sided error α_k/{family_size}")
    return f"α_k {record['alpha']:.2g}, each interval's two-sided error {record['error']:.2g}"


def _why(key: tuple[str, str], d: Decision, max_replicates: int) -> str:
    name = _key(key)
    interval = (f"{_level(d.level)} interval [{_fmt(d.lo)}, {_fmt(d.hi)}], mean {_fmt(d.mean)}, sd "
                f"{'NA' if not math.isfinite(d.sd) else f'{d.sd:.2f}'} over {d.n}, margin ±{d.margin:g}")
    if d.stopped == "decided":
        return f"{name}: {d.label}, decided at R = {d.replicates} ({interval})."
    if d.stopped == "futile":
        return (f"{name}: stopped at R = {d.replicates} as futile: at its spread it cannot be decided by N = "
                f"{max_replicates} ({interval}).")
    if d.stopped == "budget":
        return f"{name}: not decided at N = {d.replicates}, the budget ({interval})."
    return f"{name}: still open at R = {d.replicates} ({interval})."


def replay(found: dict, per: pd.DataFrame) -> list[dict[tuple[str, str], Decision]] | None:
    """The looks of looks.json applied again to the replicates' advantages (`per`, tables/replicates.csv), each
    at its recorded level (decided and futile ones frozen, reopened after an extension); None when `per` lacks a
    replicate a look read."""
    have = {i for i in per["replicate"].map(_index) if i is not None}
    out: list[dict[tuple[str, str], Decision]] = []
    earlier: dict[tuple[str, str], Decision] = {}
    for k, record in enumerate(found["looks"]):
        R = record["replicates"]
        if not set(range(1, R + 1)) <= have:
            return None
        if k and record["max_replicates"] != found["looks"][k - 1]["max_replicates"] and "levels" not in record:
            earlier = {key: d for key, d in earlier.items() if d.stopped == "decided"}
        margins = {_unkey(key): (math.nan if d["margin"] is None else d["margin"])
                   for key, d in record["decisions"].items()}
        values = {key: v for key, v in advantages(per, R).items() if key in margins}
        family = found["design"]["family_size"]
        if "levels" in record:  # each comparison looked at at its own recorded level; the others keep theirs
            now = dict(earlier)
            for key, (error, remaining, N) in record["levels"].items():
                key = _unkey(key)
                if key in values:
                    now.update(decide({key: values[key]}, margins, error=error, remaining=remaining, replicates=R,
                                      max_replicates=int(N)))
            earlier = {key: now[key] for key in values if key in now}
        else:
            earlier = decide(values, margins, error=record["error"],
                             remaining=(found["design"]["alpha"] - record["cumulative"]) / family, replicates=R,
                             max_replicates=record["max_replicates"], earlier=earlier)
        out.append(earlier)
    return out


def fixed_lines(replicates: int) -> list[str]:
    """What a report over replicates without looks.json says of its labels."""
    return [f"These labels are fixed-R labels: one look at R = {replicates} replicate{'s' * (replicates != 1)}. "
            "Their stated rates (the 95 % intervals, Holm's and Bonferroni's 5 %) assume R was fixed before any "
            "result was read: running more replicates because a label was undecided and reading the labels again "
            "is optional stopping, which those rates do not cover. `compare --replicates auto --max-replicates N` "
            "runs replicates in waves under a rule whose rate holds across the looks."]


def sequential_section(out: Path, per: pd.DataFrame | None = None,
                       replicates: int | None = None) -> list[str] | None:
    """The report's lines on the rule over looks. With OUT/looks.json (an auto run): the rule in one sentence, the
    looks, and where each comparison stopped and why, the looks applied again to the replicates' advantages (`per`,
    the report's replicates frame; default OUT/tables/replicates.csv), saying where they differ from what was
    recorded. Without it: that the labels are fixed-R labels (`fixed_lines`) when there are `replicates` (default:
    OUT/replicates.json's R); else None (no report over replicates)."""
    out = Path(out)
    found = read_looks(out)
    if found is None:
        if replicates is None:
            path = out / "replicates.json"
            replicates = json.loads(path.read_text())["replicates"] if path.exists() else None
        return None if replicates is None else fixed_lines(replicates)
    design = Design(**found["design"])
    looks = found["looks"]
    lines = [found.get("rule") or sentence(design)]
    if not looks:
        return lines + ["No look has been made yet."]
    lines.append("Looks: " + "; ".join(f"R = {r['replicates']} ({_spent(r, design.family_size)})" for r in looks) + ".")
    recorded = {_unkey(k): Decision.of(v) for k, v in looks[-1]["decisions"].items()}
    if per is None and (out / "tables" / "replicates.csv").exists():
        per = pd.read_csv(out / "tables" / "replicates.csv")
    replayed = None if per is None else replay(found, per)
    final = recorded if replayed is None else replayed[-1]
    N = looks[-1]["max_replicates"]
    lines += [_why(k, d, N) for k, d in final.items()]
    if replayed is None:
        lines.append("The decisions are those recorded at the looks (the replicates' advantages were not all "
                     "at hand to apply the rule again).")
    else:
        differ = [_key(k) for k, d in final.items()
                  if k in recorded and (d.label, d.stopped, d.replicates) != (recorded[k].label, recorded[k].stopped,
                                                                               recorded[k].replicates)]
        lines.append("Applied again to the replicates' advantages, the looks give the decisions recorded at them."
                     if not differ else "Applied again to the replicates' advantages, the looks differ from what "
                     "was recorded for " + ", ".join(differ) + ": the replicates' rows changed since.")
    if (own := found.get("own")):
        raised = next(k for k, r in enumerate(looks) if r["max_replicates"] == N)
        old, at = looks[raised - 1]["max_replicates"], looks[raised - 1]["replicates"]
        stops = sorted({Design(**d).since for d in own.values()})
        lines.append(f"N was raised from {old} to {N} after the look at R = {at}: the {len(own)} comparison"
                     f"{'s' * (len(own) != 1)} that had stopped as futile before it (at R = "
                     f"{', '.join(map(str, stops))}) reopened, each on the rest of its own share of α (its design "
                     "extended at the look it stopped at); those open at the old N had spent theirs there and stay "
                     "as they were.")
    last = looks[-1]["replicates"]
    still = [k for k, d in final.items() if d.stopped == "continue"]
    if still and last < N:
        lines.append(f"The job stopped at R = {last} of N = {N} with {len(still)} comparison"
                     f"{'s' * (len(still) != 1)} open: rerun the same command to continue its waves.")
    lines.append(f"The verdict table reads the replicates at 95 % as one fixed-R look; the labels this rule "
                 f"stands behind, at {100 * design.alpha:g} % over every look and comparison, are those above.")
    return lines
