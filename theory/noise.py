"""Stationary noise floors of ASGD-type methods at small steps (docs/theory.md §5).

With additive isotropic gradient noise of total variance σ² (covariance σ²/d · I), small per-worker
steps γ_i and staleness ignored, the averaged dynamics is an Ornstein–Uhlenbeck process around
x_q with drift rate Γ = Σ_i γ_i/τ_i and noise injection rate V = Σ_i γ_i²/τ_i. Its stationary
covariance is P = (V σ² / (2Γd)) Ā_q^{-1}, Ā_q = Σ q_i A_i, so

    E F_q(x) − F_q(x_q) ≈ V σ² / (4Γ),
    E F(x) − F*        ≈ ½ eᵀ Ā e + (V σ² / (4Γd)) tr(Ā Ā_q^{-1}),   e = x_q − x*.

Vanilla (γ_i = γ): V/Γ = γ. Rescaled (γ_i = γτ_i/τ_H): V/Γ = γ τ_A/τ_H, larger by AM/HM ≥ 1.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from delaylab.theory.fixed_point import quadratic_fixed_point
from delaylab.theory.weights import implicit_weights


@dataclasses.dataclass(frozen=True)
class NoiseFloor:
    gap_weighted: float  # E F_q(x) − F_q(x_q)
    gap_true: float  # E F(x) − F*
    bias_part: float  # ½ eᵀĀe, the part of gap_true that noise does not cause
    drift_rate: float  # Γ
    injection_rate: float  # V


def noise_floor(A, b, taus, stepsizes, sigma2: float) -> NoiseFloor:
    """Predicted stationary gaps for per-worker steps γ_i on quadratics (see module docstring)."""
    A = np.asarray(A, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    taus = np.asarray(taus, dtype=np.float64)
    n, d = b.shape
    g = np.broadcast_to(np.asarray(stepsizes, dtype=np.float64), (n,))
    if not (np.isfinite(sigma2) and sigma2 >= 0):
        raise ValueError(f"sigma2 must be finite and >= 0; got {sigma2!r}")
    dense = A if A.ndim == 3 else np.stack([np.diag(a) for a in A])
    gamma_rate = float(np.sum(g / taus))
    v_rate = float(np.sum(g**2 / taus))
    q = implicit_weights(g, taus)
    x_q = quadratic_fixed_point(A, b, q)
    x_star = quadratic_fixed_point(A, b, np.ones(n))
    A_bar = dense.mean(0)
    A_q = np.einsum("i,ijk->jk", q, dense)
    e = x_q - x_star
    bias = 0.5 * float(e @ A_bar @ e)
    scale = v_rate * sigma2 / (4.0 * gamma_rate)
    return NoiseFloor(
        gap_weighted=scale,
        gap_true=bias + scale / d * float(np.trace(A_bar @ np.linalg.inv(A_q))),
        bias_part=bias,
        drift_rate=gamma_rate,
        injection_rate=v_rate,
    )


def quadratic_gaps(A, b, weights, xs) -> np.ndarray:
    """F_q(x) − F_q(x_q) for each row of ``xs`` [T, d] (weights normalised)."""
    A = np.asarray(A, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    q = np.asarray(weights, dtype=np.float64)
    q = q / q.sum()
    x_q = quadratic_fixed_point(A, b, q)
    dense = A if A.ndim == 3 else np.stack([np.diag(a) for a in A])
    A_q = np.einsum("i,ijk->jk", q, dense)
    diff = np.asarray(xs, dtype=np.float64) - x_q
    return 0.5 * np.einsum("tj,jk,tk->t", diff, A_q, diff)
