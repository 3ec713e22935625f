"""Theorem 1's activation-energy bound C and Remark 2's implied learning rate α(k) ∝ C^(-1/2); SILO's curve."""
from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import erfcinv

from trainables.schedules import silo_max_lr


def activation_bound(sigma_x: float, sigma_w: float, d: int, p: float, k: ArrayLike) -> np.ndarray:
    """C = σ_W² + d σ_X² σ_W² ((1−p)^k + √(4/π) x e^(−x²)), x = erfinv(1 − (1−p)^k): the bound on 4·E_AA(H)."""
    kept = (1.0 - p) ** np.asarray(k, dtype=float)
    x = erfcinv(kept)  # erfinv(1 - kept), without losing precision when kept is tiny
    return sigma_w**2 + d * sigma_x**2 * sigma_w**2 * (kept + np.sqrt(4.0 / np.pi) * x * np.exp(-(x**2)))


def theory_lr(k: ArrayLike, p: float, *, sigma_x: float = 1.0, sigma_w: float = 1.0, d: int = 1) -> np.ndarray:
    """α(k)/α(0) with α ∝ C^(−1/2), the rate that holds Theorem 2's weight-gradient energy bound α²γC fixed."""
    c0 = activation_bound(sigma_x, sigma_w, d, p, 0)
    return np.sqrt(c0 / activation_bound(sigma_x, sigma_w, d, p, k))


def silo_curve(cycles: ArrayLike, *, epsilon: float, delta: float, q: int, beta: float, rate: float) -> np.ndarray:
    """SILO's max_lr (Algorithm 1) at each cycle."""
    return np.array([silo_max_lr(int(m), epsilon=epsilon, delta=delta, q=q, beta=beta, rate=rate) for m in cycles])
