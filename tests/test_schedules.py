"""Every schedule against values computed by hand (paper, Appendix "Descriptions of LR schedule benchmarks")."""
from __future__ import annotations

import math

import pytest

from trainables.schedules import SCHEDULE_NAMES, SCHEDULES, ScheduleSpec, SiloParams, cycle_peak, lr_at, silo_max_lr

TOTAL = 100  # iterations in the cycle; fractions below are of this


def lrs(spec: ScheduleSpec, ts, peak: float = 1.0, total: int = TOTAL) -> list[float]:
    return [lr_at(t, total, peak, spec) for t in ts]


def test_every_named_schedule_is_registered():
    assert set(SCHEDULES) == set(SCHEDULE_NAMES)


def test_constant():
    assert lrs(ScheduleSpec("constant"), [0, 1, 50, 99], peak=0.3) == [0.3] * 4


def test_decay_is_linear_from_peak_to_zero_over_its_length():
    assert lrs(ScheduleSpec("decay"), [0, 25, 50, 99, 100]) == pytest.approx([1.0, 0.75, 0.5, 0.01, 0.0])
    # b = half the cycle: zero from t = 50 on, never negative
    assert lrs(ScheduleSpec("decay", decay_length=0.5), [0, 25, 50, 80]) == pytest.approx([1.0, 0.5, 0.0, 0.0])


def test_cyclical_triangle():
    s = ScheduleSpec("cyclical", cyclical_low=0.0, cyclical_step=0.1)  # half-period 10 iterations
    assert lrs(s, [0, 5, 10, 15, 20, 25, 30]) == pytest.approx([0.0, 0.5, 1.0, 0.5, 0.0, 0.5, 1.0])
    low = ScheduleSpec("cyclical", cyclical_low=0.2, cyclical_step=0.1)  # between 0.2 * peak and peak
    assert lrs(low, [0, 5, 10, 15, 20], peak=2.0) == pytest.approx([0.4, 1.2, 2.0, 1.2, 0.4])


def test_warmup_rises_linearly_then_drops_tenfold_at_each_point():
    s = ScheduleSpec("warmup", warmup=0.1, drops=(0.6, 0.8))
    got = lrs(s, [0, 5, 9, 10, 59, 60, 79, 80, 99], peak=0.5)
    assert got == pytest.approx([0.0, 0.25, 0.45, 0.5, 0.5, 0.05, 0.05, 0.005, 0.005])
    three = ScheduleSpec("warmup", warmup=0.2, drops=(0.5, 0.75, 0.9))  # LR warmup(a, b, c, d, e)
    assert lrs(three, [10, 20, 50, 75, 90]) == pytest.approx([0.5, 1.0, 0.1, 0.01, 0.001])
    assert lrs(ScheduleSpec("warmup", warmup=0.0, drops=()), [0, 99]) == [1.0, 1.0]


def test_cosine():
    expected = [1.0, 0.5 * (1 + math.cos(math.pi / 4)), 0.5, 0.0]
    assert lrs(ScheduleSpec("cosine"), [0, 25, 50, 100]) == pytest.approx(expected)
    assert lrs(ScheduleSpec("cosine", cosine_length=0.5), [25, 50, 90]) == pytest.approx([0.5, 0.0, 0.0])


def test_silo_max_lr_algorithm_1():
    kw = dict(epsilon=0.04, delta=0.06, beta=5.0, rate=0.2)
    # m <= q: exactly epsilon
    assert [silo_max_lr(m, q=2, **kw) for m in (0, 1, 2)] == [0.04, 0.04, 0.04]
    # By hand, m = 3, q = 1: gamma = 1 - 0.8^2 = 0.36, gamma / (1 - gamma) = 9/16,
    # (9/16)^-5 = 16^5 / 9^5 = 1048576 / 59049, so max_lr = 0.04 + 0.06 * 59049 / (59049 + 1048576).
    assert silo_max_lr(3, q=1, **kw) == pytest.approx(0.04 + 0.06 * 59049 / 1107625, rel=1e-12)
    # The S-curve rises monotonically towards epsilon + delta.
    curve = [silo_max_lr(m, q=1, **kw) for m in range(1, 30)]
    assert all(a < b for a, b in zip(curve, curve[1:12]))
    assert curve[-1] == pytest.approx(0.1, abs=1e-9) and max(curve) <= 0.1


def test_silo_is_warmup_with_the_silo_peak():
    silo = ScheduleSpec("silo", warmup=0.1, drops=(0.6, 0.8), silo=SiloParams(0.04, 0.06, 1, 5.0))
    warm = ScheduleSpec("warmup", warmup=0.1, drops=(0.6, 0.8))
    peak = cycle_peak(silo, 3, 0.2, max_lr=None)
    assert peak == pytest.approx(0.04 + 0.06 * 59049 / 1107625, rel=1e-12)
    assert cycle_peak(silo, 1, 0.2, max_lr=0.5) == 0.04  # SILO ignores a given max_lr
    ts = [0, 5, 10, 59, 60, 80, 99]
    assert lrs(silo, ts, peak=peak) == lrs(warm, ts, peak=peak)
    assert lrs(silo, [5, 10, 60], peak=peak) == pytest.approx([peak / 2, peak, peak / 10])


def test_non_silo_peak_is_the_given_max_lr():
    assert cycle_peak(ScheduleSpec("warmup"), 4, 0.2, max_lr=0.07) == 0.07
