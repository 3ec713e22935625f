"""`compare --replicates auto` priced before it runs (issue 61): how wide a wave is, how many replicates the
sequential rule is expected to run, and the wall time of both on the slots.

- **The wave's width** (`choose_wave`) comes from the slots, simulated: one replicate of the compare alone on them
  (`simulate_job.simulate`, the drivers' own code on the accuracy model) keeps busy/wall slots busy on average;
  `sequential.wave_from_slots` fits as many replicates side by side as that leaves room for (at least 3, at most
  N). `--wave W` overrides it. The real run chooses it the same way on its cluster's slots (`pipeline`), and
  records it in OUT/looks.json, so a resume keeps it.
- **Each wave's wall**: that many replicates side by side on the slots, simulated (a wave resumes the replicates
  before it, which train nothing).
- **The replicates expected** (`sequential.expected`): the rule simulated on the run's family under stated
  assumptions (`sequential.scenarios`: the committed example's spreads as multiples of the margin, its effects, or
  every effect 0, at the margin, twice it). The expected wall is Σ_k P(the job reaches look k)·wall(wave k); the
  range is over the assumptions. The maximum: every wave, to N.

Imports Ray, Tune and torch (through the simulator): the command line imports it only for a dry run."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Callable

from oracle_search import sequential
from oracle_search.options import CompareOptions
from oracle_search.schema import BASELINES, HELD_OUT, SILO_METHODS
from oracle_search.sequential import Design, Simulated
from oracle_search.simulate_job import JobWalls, simulate
from trainables.spec import ExperimentSpec
from trainables.timestamps import duration

# What each SILO variant is compared with in the verdict's family (`analysis.verdict_sentences.VERSUS`'s keys).
REFERENCES = (*HELD_OUT, *BASELINES, "best_benchmark")


def family(options: CompareOptions) -> list[tuple[str, str]]:
    """The verdict's comparisons a compare with `options` will make: each SILO variant (silo_fit unless --trials
    0) against every reference."""
    variants = SILO_METHODS if options.silo_fit else SILO_METHODS[:1]
    return [(v, r) for v in variants for r in REFERENCES]


def side_by_side(spec: ExperimentSpec, options: CompareOptions, replicates: int, slots: int,
                 seconds_per_epoch: float) -> JobWalls:
    """`replicates` replicates of the compare side by side on `slots`, simulated."""
    fixed = dataclasses.replace(options, replicates=replicates, max_replicates=None)
    return simulate("compare", spec, fixed, slots, seconds_per_epoch).walls


def choose_wave(spec: ExperimentSpec, options: CompareOptions, slots: int,
                alone: JobWalls | None = None) -> tuple[int, JobWalls]:
    """The wave's width for `--replicates auto` without --wave, and the one replicate simulated alone on `slots`
    it was read from (`alone`, when already simulated; any seconds per epoch: the width is a ratio)."""
    alone = alone or side_by_side(spec, options, 1, slots, 1.0)
    return sequential.wave_from_slots(slots, alone.busy, alone.wall, options.max_replicates), alone


@dataclass
class AutoPrice:
    """An auto run's plan and price: `design` (its looks), each wave width's simulated wall (`walls`), one replicate
    alone (`alone`), and the rule simulated under each assumption (`expected`); `chosen`: the width came from the
    slots (else --wave)."""

    slots: int
    design: Design
    alone: JobWalls
    walls: dict[int, float]
    expected: dict[str, Simulated]
    chosen: bool
    other: "AutoPrice | None" = None  # the same run looking sooner (half the wave), where the wave is wide
    sims: int = 0
    members: list[tuple[str, str]] = field(default_factory=list)  # the family (`family`)

    def waves(self) -> list[tuple[int, int]]:
        """(R at the look, replicates the wave runs) for every planned look."""
        looks = self.design.schedule()
        return [(R, R - previous) for R, previous in zip(looks, [0, *looks[:-1]])]

    def most(self) -> float:
        return sum(self.walls[w] for _, w in self.waves())

    def expected_wall(self, found: Simulated) -> float:
        return sum(found.reach(R) * self.walls[w] for R, w in self.waves())

    def range(self) -> tuple[float, float, float, float]:
        """(fewest, most) expected replicates and (least, most) expected wall over the assumptions."""
        Rs = [s.replicates for s in self.expected.values()]
        walls = [self.expected_wall(s) for s in self.expected.values()]
        return min(Rs), max(Rs), min(walls), max(walls)

    def lines(self) -> list[str]:
        d, N = self.design, self.design.max_replicates
        looks = ", ".join(map(str, d.schedule()))
        busy = self.alone.busy / self.alone.wall if self.alone.wall else 0.0
        if self.chosen:
            why = (f"from the slots: one replicate alone on {self.slots} slots (simulated) keeps {busy:.1f} of them "
                   f"busy on average over its {duration(self.alone.wall)}, so "
                   f"{int(self.slots // busy) if busy else N} side by side fit in its wall; at least "
                   f"{sequential.MIN_WAVE}, at most N")
        else:
            why = "--wave"
        lines = [f"--replicates auto: waves of {d.wave} replicates side by side ({why}); looks at R = {looks}; N = "
                 f"{N}; {d.family_size} comparisons in the family"]
        lines.append("each wave's wall on these slots, simulated: " + "; ".join(
            f"{w} side by side {duration(self.walls[w])}" for w in sorted(set(w for _, w in self.waves())))
            + f" (one replicate alone: {duration(self.alone.wall)})")
        low, high, least, most_expected = self.range()
        sds = next(iter(sequential.scenarios(self.members).values()))[1]
        lines.append(
            f"replicates expected under the sequential rule, simulated ({self.sims:,} families of "
            f"{d.family_size} comparisons, normal replicates; each comparison's sd as {sequential.COMMITTED_WHERE} "
            f"measured it, {min(sds):.2f}–{max(sds):.2f} times its margin, scaled to this run's margin):")
        for name, found in self.expected.items():
            lines.append(f"  {name}: {found.replicates:.1f} ± {found.replicates_se:.1f} replicates, wall "
                         f"{duration(self.expected_wall(found))}; a comparison gets a correct decided label with "
                         f"chance {found.power:.2f}")
        lines.append(f"expected: {low:.1f}–{high:.1f} replicates, wall {duration(least)} – {duration(most_expected)}; "
                     f"at most: {N} replicates in {len(self.waves())} wave{'s' * (len(self.waves()) != 1)}, wall "
                     f"{duration(self.most())}")
        if len(self.waves()) == 1:
            lines.append(f"one wave: all {N} run side by side and are read once, at N (a fixed-R run of N at the "
                         "rule's levels); a narrower --wave looks sooner, and stops sooner only where every "
                         "comparison has stopped")
        if self.other is not None:
            o = self.other
            low, high, least, most_expected = o.range()
            lines.append(f"looking sooner, --wave {o.design.wave} (looks at R = "
                         f"{', '.join(map(str, o.design.schedule()))}; a wave of {o.design.wave} "
                         f"{duration(o.walls[o.design.wave])}): expected {low:.1f}–{high:.1f} replicates, wall "
                         f"{duration(least)} – {duration(most_expected)}; at most {duration(o.most())}")
        return lines


def price(spec: ExperimentSpec, options: CompareOptions, slots: int, seconds_per_epoch: float,
          alone: JobWalls | None = None, sims: int = 2000, other: bool = True,
          say: Callable[[str], None] | None = None) -> AutoPrice:
    """`options` (auto) priced on `slots` at `seconds_per_epoch`: the wave (--wave, else `choose_wave`), each
    wave's wall simulated, the rule simulated under each assumption; `alone`: one replicate already simulated on
    these slots at these seconds (the estimate's). With `other`, where the wave holds at least twice the least
    one, the same run with half the wave beside it."""
    if alone is None:
        alone = side_by_side(spec, options, 1, slots, seconds_per_epoch)
    chosen = options.wave is None
    wave = choose_wave(spec, options, slots, alone)[0] if chosen else options.wave
    members = family(options)
    design = Design(first=wave, wave=wave, max_replicates=options.max_replicates, family_size=len(members))
    walls = {1: alone.wall}
    for _, w in AutoPrice(slots, design, alone, {}, {}, chosen).waves():
        if w not in walls:
            if say:
                say(f"simulating a wave of {w} side by side on {slots} slots")
            walls[w] = side_by_side(spec, options, w, slots, seconds_per_epoch).wall
    found = AutoPrice(slots, design, alone, walls, sequential.expected(members, design, sims=sims), chosen,
                   sims=sims, members=members)
    half = -(-wave // 2)
    if other and half >= sequential.MIN_WAVE and half < wave:
        found.other = price(spec, dataclasses.replace(options, wave=half), slots, seconds_per_epoch, alone, sims,
                            other=False, say=say)
    return found
