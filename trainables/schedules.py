"""Per-iteration learning-rate schedules (paper, Appendix table "Descriptions of LR schedule benchmarks").

Every schedule is a pure function of the iteration `t` within one cycle, so each cycle restarts it from t = 0
(LR rewinding). Lengths and drop points are given as fractions of the cycle's total iterations, so one preset
works whatever the epoch count; `peak` is the schedule's largest LR (the value the Oracle and the baselines tune).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from trainables.fields import flag

SCHEDULE_NAMES = ("constant", "decay", "cyclical", "warmup", "cosine", "silo")


@dataclass(frozen=True)
class SiloParams:
    """Algorithm 1's parameters: max_lr rises from epsilon to epsilon + delta in an S-shape after cycle q."""

    epsilon: float = flag(0.1, "epsilon", "the dense cycles' max_lr")
    delta: float = flag(0.4, "delta", "the rise: max_lr tends to epsilon + delta")
    q: int = flag(1, "q", "the last cycle before the rise")
    beta: float = flag(5.0, "beta", "the rise's steepness")


@dataclass(frozen=True)
class ScheduleSpec:
    """A schedule by name plus its shape; all positions are fractions of the cycle's iterations."""

    name: str = flag("warmup", "schedule", "LR schedule within a cycle", dest="schedule", choices=SCHEDULE_NAMES)
    warmup: float = 0.1  # LR warmup's b: linear rise from 0 to the peak over this fraction
    drops: tuple[float, ...] = (0.6, 0.8)  # LR warmup's c, d, e: 10x drop at each
    decay_length: float = 1.0  # LR decay's b
    cyclical_low: float = 0.0  # cyclical's a, as a fraction of the peak b
    cyclical_step: float = 0.125  # cyclical's c: half-period of the triangle
    cosine_length: float = 1.0  # cosine's b
    silo: SiloParams = SiloParams()


def silo_max_lr(cycle: int, *, epsilon: float, delta: float, q: int, beta: float, rate: float) -> float:
    """Algorithm 1: max_lr(m) = epsilon for m <= q, else delta / (1 + (g / (1 - g))^-beta) + epsilon."""
    if cycle <= q:
        return epsilon
    gamma = 1.0 - (1.0 - rate) ** (cycle - q)
    return delta / (1.0 + (gamma / (1.0 - gamma)) ** (-beta)) + epsilon


def constant(t: float, total: int, peak: float, s: ScheduleSpec) -> float:
    return peak


def decay(t: float, total: int, peak: float, s: ScheduleSpec) -> float:
    return peak * max(0.0, 1.0 - t / (s.decay_length * total))


def cyclical(t: float, total: int, peak: float, s: ScheduleSpec) -> float:
    low, step = s.cyclical_low * peak, max(1.0, s.cyclical_step * total)
    phase = (t / step) % 2.0  # 0 -> 1 rising, 1 -> 2 falling
    return low + (peak - low) * (phase if phase <= 1.0 else 2.0 - phase)


def warmup(t: float, total: int, peak: float, s: ScheduleSpec) -> float:
    rise = s.warmup * total
    lr = peak * t / rise if t < rise else peak
    return lr * 0.1 ** sum(t >= d * total for d in s.drops)


def cosine(t: float, total: int, peak: float, s: ScheduleSpec) -> float:
    return peak * 0.5 * (1.0 + math.cos(math.pi * min(1.0, t / (s.cosine_length * total))))


# SILO is LR warmup whose peak comes from silo_max_lr; the driver computes that peak per cycle.
SCHEDULES: dict[str, Callable[[float, int, float, ScheduleSpec], float]] = {
    "constant": constant,
    "decay": decay,
    "cyclical": cyclical,
    "warmup": warmup,
    "cosine": cosine,
    "silo": warmup,
}


def lr_at(t: int, total: int, peak: float, spec: ScheduleSpec) -> float:
    """The learning rate at iteration t (0-based) of a cycle of `total` iterations."""
    return SCHEDULES[spec.name](t, total, peak, spec)


def cycle_peak(spec: ScheduleSpec, cycle: int, rate: float, max_lr: float | None) -> float:
    """The peak LR of a cycle: SILO's curve for `silo`, else the given max_lr."""
    if spec.name == "silo":
        p = spec.silo
        return silo_max_lr(cycle, epsilon=p.epsilon, delta=p.delta, q=p.q, beta=p.beta, rate=rate)
    assert max_lr is not None
    return max_lr
