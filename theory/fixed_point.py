"""Where an ASGD-type method with implicit weights q settles: x_q, the minimiser of Σ q_i F_i.

For quadratics F_i(x) = ½ (x − b_i)ᵀ A_i (x − b_i) it is closed form (docs/theory.md §3):

    x_q = (Σ_i q_i A_i)^{-1} Σ_i q_i A_i b_i.

For other smooth strongly convex problems it is found by Newton's method on the weighted
objective, from per-worker gradients and Hessians supplied as NumPy float64 arrays.
"""

from __future__ import annotations

from typing import Callable

import numpy as np


def _weights(weights, n: int) -> np.ndarray:
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (n,):
        raise ValueError(f"weights must have one entry per worker ({n}); got shape {w.shape}")
    if not np.all(np.isfinite(w)) or np.any(w < 0) or not w.sum() > 0:
        raise ValueError(f"weights must be finite, >= 0 and not all zero; got {w}")
    return w / w.sum()


def quadratic_fixed_point(A, b, weights) -> np.ndarray:
    """x_q = (Σ q_i A_i)^{-1} Σ q_i A_i b_i.

    Args:
      A: [n, d, d] symmetric curvatures, or [n, d] diagonals.
      b: [n, d] the local minimisers.
      weights: [n] non-negative weights q (normalised here).
    """
    A = np.asarray(A, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if b.ndim != 2 or A.shape[:2] != b.shape or A.ndim not in (2, 3) or (A.ndim == 3 and A.shape[2] != b.shape[1]):
        raise ValueError(
            f"A must be [n, d, d] or [n, d] and b [n, d] with matching n and d; got A {A.shape}, b {b.shape}"
        )
    q = _weights(weights, b.shape[0])
    if A.ndim == 2:
        num = np.einsum("i,id,id->d", q, A, b)
        den = np.einsum("i,id->d", q, A)
        if np.any(den <= 0):
            raise ValueError("Σ q_i A_i is singular: some coordinate has no curvature under these weights")
        return num / den
    M = np.einsum("i,ijk->jk", q, A)
    rhs = np.einsum("i,ijk,ik->j", q, A, b)
    return np.linalg.solve(M, rhs)


def quadratic_gap(A, b, x) -> tuple[float, float]:
    """F(x) − F* and ‖∇F(x)‖ for F = (1/n) Σ ½(x − b_i)ᵀA_i(x − b_i) (docs/theory.md §3)."""
    A = np.asarray(A, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    x = np.asarray(x, dtype=np.float64)
    n = b.shape[0]
    x_star = quadratic_fixed_point(A, b, np.ones(n))
    e = x - x_star
    Abar = np.mean(A, axis=0)
    if A.ndim == 2:
        return float(0.5 * e @ (Abar * e)), float(np.linalg.norm(Abar * e))
    return float(0.5 * e @ Abar @ e), float(np.linalg.norm(Abar @ e))


def _newton_root(residual: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]], x0, *, tol: float,
                 max_iter: int) -> np.ndarray:
    """A root of ``residual(x) -> (r, J)`` by Newton's method, each step halved until ‖r‖ decreases."""
    x = np.array(x0, dtype=np.float64)
    r, J = residual(x)
    for _ in range(max_iter):
        if np.linalg.norm(r) <= tol:
            return x
        newton = np.linalg.cond(J) < 1e12
        # Where J is singular (e.g. every gradient clipped in 1-D: a flat residual), step along
        # the residual itself, as the algorithm does, and accept steps that do not increase it.
        step = np.linalg.solve(J, r) if newton else r
        t = 1.0
        for _ in range(50):
            r_new, J_new = residual(x - t * step)
            better = np.linalg.norm(r_new) < np.linalg.norm(r) if newton else np.linalg.norm(r_new) <= np.linalg.norm(r)
            if better or t < 1e-8:
                break
            t *= 0.5
        x = x - t * step
        r, J = r_new, J_new
    if np.linalg.norm(r) <= tol * 10:
        return x
    raise RuntimeError(f"Newton did not converge: residual {np.linalg.norm(r):.3e} after {max_iter} steps")


def weighted_minimiser(
    local_derivatives: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]],
    weights,
    x0,
    *,
    tol: float = 1e-12,
    max_iter: int = 100,
) -> np.ndarray:
    """Minimiser of Σ q_i F_i by damped Newton, for a smooth strongly convex problem.

    Args:
      local_derivatives: ``x -> (G, H)`` with G [n, d] the full local gradients ∇F_i(x) and
        H [n, d, d] the local Hessians, in float64.
      weights: [n] non-negative weights (normalised here).
      x0: starting point [d].
    Raises:
      RuntimeError: when Newton does not reach ‖Σ q_i ∇F_i‖ ≤ tol in ``max_iter`` steps.
    """
    G, _ = local_derivatives(np.asarray(x0, dtype=np.float64))
    q = _weights(weights, G.shape[0])

    def residual(x):
        G, H = local_derivatives(x)
        return q @ G, np.einsum("i,ijk->jk", q, H)

    return _newton_root(residual, x0, tol=tol, max_iter=max_iter)


def clipped_fixed_point(
    local_derivatives: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]],
    weights,
    threshold: float,
    x0,
    *,
    tol: float = 1e-12,
    max_iter: int = 200,
) -> np.ndarray:
    """Where ASGD with per-gradient clipping settles (σ = 0): the root of Σ q_i clip_c(∇F_i(x)).

    clip_c(g) = min(1, c/‖g‖) g. With exact local gradients every arrival from worker i moves the
    model by −γ_i clip_c(∇F_i(x)), so the small-step limit balances the clipped gradients with
    the step-mass weights q (docs/theory.md §3, §6.7). Where no gradient is clipped there,
    this is x_q; otherwise clipping shrinks the pull of the workers whose gradients are long.
    Solved by Newton with the Jacobian of the clip, (c/‖g‖)(I − ĝĝᵀ) H_i for clipped gradients.
    """
    c = float(threshold)
    if not (np.isfinite(c) and c > 0):
        raise ValueError(f"threshold must be positive and finite; got {threshold!r}")
    G, _ = local_derivatives(np.asarray(x0, dtype=np.float64))
    q = _weights(weights, G.shape[0])

    def residual(x):
        G, H = local_derivatives(x)
        norms = np.linalg.norm(G, axis=1)
        scale = np.where(norms > c, c / np.where(norms > 0, norms, 1.0), 1.0)
        r = (q * scale) @ G
        J = np.zeros(H.shape[1:])
        for i in range(G.shape[0]):
            if norms[i] > c:
                u = G[i] / norms[i]
                J += q[i] * scale[i] * (H[i] - np.outer(u, u @ H[i]))
            else:
                J += q[i] * H[i]
        return r, J

    return _newton_root(residual, x0, tol=tol, max_iter=max_iter)
