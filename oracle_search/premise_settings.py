"""The premise's settings and the paper's numbers (§3.1, Fig. 1), torch-free: the command line builds and checks
them before anything loads (`oracle_search.premise` measures)."""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from trainables.spec import ExperimentSpec, SpecError

READINGS = ("all", "surviving")
MOMENTS = ("start", "end")
# The paper's Fig. 1(a) (§3.1, an MLP without normalisation on CIFAR-10, global magnitude at rate 0.2): σ of the
# weight gradients at λ = 100 and at λ = 13.4, and the window outside which "more than 7 %" of them lie at λ = 100
# and "less than 1 %" at λ = 13.4.
PAPER_SIGMA = (8.4e-3, 3.3e-3)
PAPER_OUTSIDE = (0.07, 0.01)
WINDOW = (-0.012, 0.008)
PAPER_RATE = 0.2  # the command's --rate unless given: the paper's Fig. 1 prunes 20 % of what remains per cycle
MAX_CYCLES = 200


@dataclass(frozen=True)
class PremiseSettings:
    """What the premise measures beyond the spec: the density it prunes to (the cycles follow from the spec's
    rate), the one max_lr every cycle trains at, the training batches each σ pools, and how many λ the figure's
    histograms show. Each field is checked on construction, a refusal naming its flag.

    max_lr 0.16: the Oracle's dense choice on the embedded default (issue 60), held fixed at every cycle, as the
    paper's Fig. 1 trains every cycle at one tuned LR."""

    density_target: float = 13.4
    max_lr: float = 0.16
    batches: int = 10
    figure_lambdas: int = 4

    def __post_init__(self) -> None:
        if not _number(self.density_target) or not 0 < self.density_target < 100:
            raise SpecError("density-target", f"must be a percentage in (0, 100), got {self.density_target!r}")
        if not _number(self.max_lr) or not self.max_lr > 0:
            raise SpecError("max-lr", f"must be a positive number, got {self.max_lr!r}")
        if not _whole(self.batches) or self.batches < 1:
            raise SpecError("batches", f"must be a whole number of at least 1, got {self.batches!r}")
        if not _whole(self.figure_lambdas) or self.figure_lambdas < 2:
            raise SpecError("figure-lambdas", f"must be a whole number of at least 2, got {self.figure_lambdas!r}")


def _number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _whole(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def cycles_to(density_target: float, rate: float) -> int:
    """The pruning cycles L whose density 100·(1 − rate)^L lies nearest `density_target` on a log scale (rate 0.2:
    9 cycles to 13.42 %, the paper's λ = 13.4); at least one. SpecError naming --density-target past MAX_CYCLES."""
    cycles = max(1, round(math.log(density_target / 100.0) / math.log(1.0 - rate)))
    if cycles > MAX_CYCLES:
        raise SpecError("density-target", f"{density_target:g} % takes {cycles} cycles at rate {rate:g} (at most "
                        f"{MAX_CYCLES}); choose a density nearer 100 or a larger --rate")
    return cycles


def figure_cycles(cycles: int, count: int = 4) -> list[int]:
    """`count` cycles spread evenly from 0 to `cycles`, both included (9 cycles, 4: 0, 3, 6, 9; λ = 100, 51.2,
    26.2, 13.4 at rate 0.2)."""
    return sorted({round(k * cycles / (count - 1)) for k in range(count)})


def premise_spec(spec: ExperimentSpec, settings: PremiseSettings) -> ExperimentSpec:
    """The spec the premise trains: `spec` pruned for `cycles_to(density_target, rate)` cycles. Every cycle's peak
    is `settings.max_lr`, so SILO's schedule (which derives its own) is refused, naming it."""
    if spec.schedule.name == "silo":
        raise SpecError("schedule", "the premise trains every cycle at one fixed --max-lr, which silo ignores (SILO "
                        "derives its own); use another schedule, e.g. warmup, SILO's shape")
    return dataclasses.replace(spec, cycles=cycles_to(settings.density_target, spec.rate))
