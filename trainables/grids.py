"""The max_lr grid's text on the command line (`--grid`): a list, or a log- or linearly-spaced range."""
from __future__ import annotations

import math

import numpy as np

from trainables.errors import SpecError

SYNTAX = ("a list like 0.01,0.1, log:LO:HI:N (N >= 2 values log-spaced from LO to HI) or lin:LO:HI:STEP (LO, "
          "LO + STEP, ... up to HI; 0 < STEP <= HI - LO), with 0 < LO < HI")


def parse_grid(text: str) -> tuple[float, ...]:
    """`0.01,0.02,0.04`, `log:LO:HI:N` or `lin:LO:HI:STEP`; SpecError naming `grid` otherwise. Values are rounded
    to 6 significant digits, so `lin:0.002:0.01:0.002` is 0.002, 0.004, ..., 0.01 and not 0.006000000000000001."""
    try:
        if text.startswith("log:"):
            lo, hi, n = text[4:].split(":")
            lo_f, hi_f, n_i = float(lo), float(hi), int(n)
            if not (0 < lo_f < hi_f and n_i >= 2):
                raise ValueError
            return tuple(float(f"{v:.6g}") for v in np.geomspace(lo_f, hi_f, n_i))
        if text.startswith("lin:"):
            return _linear(*(float(v) for v in text[4:].split(":")))
        values = tuple(float(v) for v in text.split(","))
    except (ValueError, TypeError):
        raise SpecError("grid", f"expected {SYNTAX}, got {text!r}") from None
    if not all(math.isfinite(v) and v > 0 for v in values):
        raise SpecError("grid", f"every max_lr must be a positive number, got {text!r}")
    return values


MOST_LINEAR_VALUES = 1000  # a step that small is a typo, not a grid (each value is a training per seed and cycle)


def _linear(lo: float, hi: float, step: float) -> tuple[float, ...]:
    """LO, LO + STEP, ... while <= HI (HI itself when it lies on the step, within float error); each value computed
    as LO + i·STEP, not summed, so no error builds up."""
    if not (all(map(math.isfinite, (lo, hi, step))) and 0 < lo < hi and step > 0):
        raise ValueError
    n = math.floor((hi - lo) / step * (1 + 1e-9)) + 1
    if not 2 <= n <= MOST_LINEAR_VALUES:
        raise ValueError
    return tuple(float(f"{lo + i * step:.6g}") for i in range(n))
