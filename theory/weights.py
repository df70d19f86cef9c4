"""Implicit worker weights of asynchronous step-size rules (docs/theory.md §2, §6).

As γ → 0 the iterates of an ASGD-type method follow the averaged flow
ẋ = −Σ_i (γ_i/τ_i) ∇F_i(x): worker i arrives 1/τ_i times per second and each arrival moves the
model by γ_i times its gradient. The method therefore minimises F_q = Σ_i q_i F_i with

    q_i ∝ γ_i / τ_i,

each worker's share of the step mass applied per unit of time. Vanilla ASGD (γ_i = γ) gives the
frequency weights p_i ∝ 1/τ_i; Rescaled ASGD (γ_i ∝ τ_i) gives uniform weights.
"""

from __future__ import annotations

import numpy as np


def _taus(taus) -> np.ndarray:
    arr = np.asarray(taus, dtype=np.float64)
    if arr.ndim != 1 or arr.size == 0 or not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise ValueError(f"taus must be a non-empty vector of positive finite numbers; got {arr}")
    return arr


def harmonic_mean(taus) -> float:
    """τ_H = ((1/n) Σ 1/τ_i)^{-1}."""
    t = _taus(taus)
    return float(t.size / np.sum(1.0 / t))


def arithmetic_mean(taus) -> float:
    """τ_A = (1/n) Σ τ_i."""
    return float(np.mean(_taus(taus)))


def implicit_weights(stepsizes, taus) -> np.ndarray:
    """q_i = (γ_i/τ_i) / Σ_j (γ_j/τ_j): the objective weights of per-worker steps γ_i (docs/theory.md §2)."""
    t = _taus(taus)
    g = np.broadcast_to(np.asarray(stepsizes, dtype=np.float64), t.shape)
    if not np.all(np.isfinite(g)) or np.any(g < 0) or not np.any(g > 0):
        raise ValueError(f"stepsizes must be finite, >= 0 and not all zero; got {g}")
    rate = g / t
    return rate / rate.sum()


def frequency_weights(taus) -> np.ndarray:
    """p_i = (1/τ_i) / Σ_j (1/τ_j) = τ_H/(n τ_i): vanilla ASGD's implicit weights (docs/theory.md §2)."""
    return implicit_weights(1.0, taus)


def rescaled_stepsizes(stepsize: float, taus) -> np.ndarray:
    """Rescaled ASGD's per-worker steps γ_i = γ τ_i/τ_H (docs/theory.md §6.2)."""
    t = _taus(taus)
    return stepsize * t / harmonic_mean(t)


def measured_weights(stepsize_mass) -> np.ndarray:
    """Weights read off a run: each worker's share of the total step mass it received."""
    m = np.asarray(stepsize_mass, dtype=np.float64)
    total = m.sum()
    if not total > 0:
        raise ValueError("no step mass was applied; cannot measure weights")
    return m / total
