"""The exact periodic orbit of ASGD-type methods at a finite step (specs/asgd.md §2.3).

With σ = 0 and integer computation times τ_i, the arrival pattern repeats every hyperperiod
H = lcm(τ_i). Each arrival of worker i is an affine map of the state z = (x, y_1, …, y_n):

    x' = x − γ_k A_i (y_i − b_i),   y_i' = x'.

Composing one hyperperiod's maps, in time order with ties to the lower worker index, gives
z ↦ M z + c; if ρ(M) < 1 the orbit starts at z* = (I − M)^{-1} c, and the long-run average of x
is the holding-time-weighted mean of x along one cycle. This module derives the event order
itself from τ (it does not use ``sim.schedules``), so it is an independent prediction.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable

import numpy as np


@dataclasses.dataclass(frozen=True)
class Orbit:
    """Attributes:
    average: the orbit average of x (holding-time weighted, over one hyperperiod).
    start: x at the start of a hyperperiod on the orbit.
    spectral_radius: ρ(M) of the one-period map (< 1: the orbit attracts).
    period: H = lcm(τ_i).
    events_per_period: Σ_i H/τ_i.
    """

    average: np.ndarray
    start: np.ndarray
    spectral_radius: float
    period: int
    events_per_period: int


def hyperperiod_events(taus) -> list[tuple[int, int]]:
    """(time, worker) of the arrivals in (0, H], ordered by time then worker index."""
    t = np.asarray(taus, dtype=np.float64)
    if t.ndim != 1 or np.any(t <= 0) or np.any(t != np.round(t)):
        raise ValueError(f"the cycle map needs positive integer taus; got {t}")
    ints = [int(v) for v in t]
    H = math.lcm(*ints)
    return [(time, i) for time in range(1, H + 1) for i, tau in enumerate(ints) if time % tau == 0]


def steady_staleness(events: list[tuple[int, int]]) -> list[int]:
    """Staleness of each arrival once the pattern repeats: arrivals processed since the
    worker's previous one (which came one τ_i earlier, possibly in the previous period)."""
    K = len(events)
    out = []
    for k, (_, i) in enumerate(events):
        # previous arrival of worker i, cyclically
        p = next(j for j in range(1, K + 1) if events[(k - j) % K][1] == i)
        out.append(p - 1)
    return out


def periodic_orbit(A, b, taus, step: Callable[[int, int], float]) -> Orbit:
    """The orbit of ASGD with per-arrival step ``step(worker, staleness)`` on quadratics.

    Args:
      A: [n, d, d] or [n, d] (diagonal) curvatures; b: [n, d].
      taus: positive integers, one per worker.
      step: γ for an arrival of ``worker`` with the given (steady-state) staleness.
    """
    A = np.asarray(A, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    n, d = b.shape
    if A.ndim == 2:
        A = np.stack([np.diag(a) for a in A])
    events = hyperperiod_events(taus)
    stale = steady_staleness(events)
    H = events[-1][0]
    D = (n + 1) * d  # z = (x, y_0, ..., y_{n-1})

    def block(j):  # slice of z holding y_j
        return slice((j + 1) * d, (j + 2) * d)

    M = np.eye(D)
    c = np.zeros(D)
    maps = []
    for (_, i), delta in zip(events, stale):
        g = step(i, delta)
        Mk = np.eye(D)
        ck = np.zeros(D)
        # x' = x − g A_i y_i + g A_i b_i ; y_i' = x'
        Mk[:d, block(i)] = -g * A[i]
        ck[:d] = g * A[i] @ b[i]
        Mk[block(i), :] = Mk[:d, :]
        ck[block(i)] = ck[:d]
        maps.append((Mk, ck))
        M, c = Mk @ M, Mk @ c + ck
    rho = float(np.max(np.abs(np.linalg.eigvals(M))))
    if not rho < 1:
        raise ValueError(f"the one-period map does not contract (ρ(M) = {rho:.4g}); use a smaller step")
    z = np.linalg.solve(np.eye(D) - M, c)
    start = z[:d].copy()
    times = [t for t, _ in events]
    total = start * times[0]  # x holds its period-start value until the first arrival
    for k, (Mk, ck) in enumerate(maps):
        z = Mk @ z + ck
        hold = (times[k + 1] if k + 1 < len(times) else H + times[0]) - times[k]
        if k + 1 == len(times):
            hold -= times[0]  # the wrap-around part was counted as ``start * times[0]``
        total = total + z[:d] * hold
    return Orbit(average=total / H, start=start, spectral_radius=rho, period=H, events_per_period=len(events))
