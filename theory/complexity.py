"""Time-complexity lower bounds and reference rates in the fixed-computation model
(docs/theory.md §8; Tyurin & Richtárik 2023, restated in Tyurin's "Bridging the gap…", eqs. 2–3).

All are Θ(·) statements; the functions return the expression inside Θ with constant 1, so they
are for comparing shapes and scalings (against τ profiles, ε, σ), not absolute times.
Arguments: L smoothness, delta = F(x⁰) − inf F, sigma2 = σ², eps = ε (target E‖∇F‖² ≤ ε).
"""

from __future__ import annotations

import numpy as np


def _sorted_taus(taus) -> np.ndarray:
    t = np.sort(np.asarray(taus, dtype=np.float64))
    if t.ndim != 1 or t.size == 0 or not np.all(np.isfinite(t)) or np.any(t <= 0):
        raise ValueError(f"taus must be a non-empty vector of positive finite numbers; got {taus}")
    return t


def _check_positive(**values) -> None:
    for name, v in values.items():
        if not (np.isfinite(v) and v > 0):
            raise ValueError(f"{name} must be positive and finite; got {v!r}")


def homogeneous_lower_bound(taus, *, L: float, delta: float, sigma2: float, eps: float) -> tuple[float, int]:
    """min over m of τ_h^m (LΔ/ε + σ²LΔ/(mε²)), τ_h^m the harmonic mean of the m fastest.

    Returns the bound and the minimising m (a prefix of the fastest workers). Attained by
    Rennala SGD and Ringmaster ASGD when all F_i are equal.
    """
    _check_positive(L=L, delta=delta, eps=eps)
    t = _sorted_taus(taus)
    m = np.arange(1, t.size + 1)
    tau_h = m / np.cumsum(1.0 / t)
    values = tau_h * (L * delta / eps + sigma2 * L * delta / (m * eps**2))
    k = int(np.argmin(values))
    return float(values[k]), int(m[k])


def heterogeneous_lower_bound(taus, *, L: float, delta: float, sigma2: float, eps: float) -> float:
    """τ_n LΔ/ε + τ_A σ²LΔ/(nε²): attained by Malenia SGD, Ringleader ASGD, and in its leading
    term by Rescaled ASGD, when each worker samples only its own data."""
    _check_positive(L=L, delta=delta, eps=eps)
    t = _sorted_taus(taus)
    return float(t[-1] * L * delta / eps + t.mean() * sigma2 * L * delta / (t.size * eps**2))


def minibatch_sgd_time(taus, *, L: float, delta: float, sigma2: float, eps: float) -> float:
    """Synchronous minibatch SGD waits for the slowest worker: τ_n (LΔ/ε + σ²LΔ/(nε²))."""
    t = _sorted_taus(taus)
    return float(t[-1] * (L * delta / eps + sigma2 * L * delta / (t.size * eps**2)))


def vanilla_asgd_homogeneous_time(taus, *, L: float, delta: float, sigma2: float, eps: float) -> float:
    """Vanilla ASGD with homogeneous data: τ_H (LΔ/ε + σ²LΔ/(nε²))."""
    t = _sorted_taus(taus)
    tau_h = t.size / np.sum(1.0 / t)
    return float(tau_h * (L * delta / eps + sigma2 * L * delta / (t.size * eps**2)))


def time_to_target(times, values, target: float) -> float:
    """The first time at which ``values`` (a metric logged at ``times``) is ≤ ``target``;
    inf if it never is."""
    times = np.asarray(times, dtype=np.float64)
    values = np.asarray(values, dtype=np.float64)
    hit = np.flatnonzero(values <= target)
    return float(times[hit[0]]) if hit.size else float("inf")
