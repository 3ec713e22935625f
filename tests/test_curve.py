"""One cycle's curve (oracle_search/curve.py): which values are tried, trained and complete, b, a_s(x) and the
leave-one-out b, on a table small enough to check by eye."""
from __future__ import annotations

import numpy as np
import pytest

from oracle_search.curve import Curve, DuplicateRows


def curve(seeds=None) -> Curve:
    """0.1 on every seed; 0.2 on every seed but diverged on seed 1; 0.4 on seeds 0 and 1 only; 0.8 on every seed."""
    acc = {0.1: [80, 81, 82], 0.2: [84, 10, 86], 0.4: [83, 84, None], 0.8: [70, 71, 75]}
    rows = [{"max_lr": v, "seed": s, "val_acc": a, "diverged": (v, s) == (0.2, 1)}
            for v, per_seed in acc.items() for s, a in enumerate(per_seed) if a is not None]
    return Curve.from_rows(rows, seeds)


def test_tried_trained_complete_and_b():
    c = curve()
    assert c.seeds == [0, 1, 2]
    assert c.tried == [0.1, 0.2, 0.4, 0.8]  # some seed trained it
    assert c.trained == [0.1, 0.2, 0.8]  # every seed trained it, diverged or not
    assert c.complete == [0.1, 0.8]  # every seed, none diverged
    assert c.best == 0.1  # 0.2 and 0.4 lead on their seeds but are not complete
    assert c.mean().to_dict() == pytest.approx({0.1: 81, 0.2: 60, 0.4: 83.5, 0.8: 72})


def test_the_chains_seeds_restrict_the_curve():
    c = curve(seeds=[0, 1])
    assert c.trained == [0.1, 0.2, 0.4, 0.8] and c.complete == [0.1, 0.4, 0.8] and c.best == 0.4


def test_interpolation_in_ln_x_and_the_leave_one_out_b():
    c = curve(seeds=[0, 2])  # complete: 0.1, 0.2 (seed 1's divergence left out), 0.8
    assert c.at(0.2).tolist() == [84, 86]
    half = 0.1 * 2 ** 0.5  # half way from 0.1 to 0.2 in ln x
    assert c.at(half) == pytest.approx(np.array([82, 84]))
    assert c.at(0.05) is None and c.at(1.0) is None  # outside the complete values
    assert c.loo_best() == [0.2, 0.2] and c.oracle_acc().tolist() == [84, 86]
    assert curve(seeds=[0, 1, 2]).at(0.3) is None  # between 0.2 (diverged) and 0.8: undefined


def test_a_repeated_value_and_seed_is_refused():
    rows = [{"max_lr": 0.1, "seed": 0, "val_acc": 80, "diverged": False}] * 2
    with pytest.raises(DuplicateRows, match="refusing to average"):
        Curve.from_rows(rows)
