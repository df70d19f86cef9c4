"""The exact periodic orbit of ASGD-type methods at a finite step (docs/theory.md §4).

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
    amplitude: max over the cycle of ‖x − average‖ (bounds what a window of whole periods plus a
      part of one can differ from ``average``).
    """

    average: np.ndarray
    start: np.ndarray
    spectral_radius: float
    period: int
    events_per_period: int
    amplitude: float = 0.0


def arrivals(taus, end: float) -> tuple[np.ndarray, np.ndarray]:
    """(times, workers) of fixed computation's arrivals k τ_i in (0, end], every worker starting
    at 0, ordered by time then worker index (the tie rule of ``sim.schedules``)."""
    t = np.asarray(taus, dtype=np.float64)
    counts = [int(end // tau) for tau in t]
    times = np.concatenate([np.arange(1, c + 1) * tau for tau, c in zip(t, counts)])
    workers = np.concatenate([np.full(c, i) for i, c in enumerate(counts)])
    order = np.lexsort((workers, times))
    return times[order], workers[order]


def hyperperiod_arrays(taus) -> tuple[np.ndarray, np.ndarray, int]:
    """(times, workers, H) of the arrivals in (0, H], H = lcm τ_i, for positive integer τ."""
    t = np.asarray(taus, dtype=np.float64)
    if t.ndim != 1 or t.size == 0 or np.any(t <= 0) or np.any(t != np.round(t)):
        raise ValueError(f"the cycle map needs positive integer taus; got {t}")
    H = math.lcm(*(int(v) for v in t))
    times, workers = arrivals(t, H)
    return times, workers, H


def hyperperiod_events(taus) -> list[tuple[int, int]]:
    """(time, worker) of the arrivals in (0, H], ordered by time then worker index."""
    times, workers, _ = hyperperiod_arrays(taus)
    return [(int(t), int(i)) for t, i in zip(times, workers)]


def steady_staleness(events) -> list[int]:
    """Staleness of each arrival once the pattern repeats: arrivals processed since the
    worker's previous one (which came one τ_i earlier, possibly in the previous period)."""
    workers = np.array([i for _, i in events], dtype=np.int64)
    return [int(v) for v in cyclic_staleness(workers)]


def _previous_arrival(workers, *, cyclic: bool) -> np.ndarray:
    """For each arrival, the index of the same worker's previous one: for its first arrival,
    its last one a period back (``cyclic``, index − K) or the start (−1)."""
    workers = np.asarray(workers, dtype=np.int64)
    K = workers.size
    index = np.arange(K)
    order = np.lexsort((index, workers))  # each worker's arrivals, in event order
    w, k = workers[order], index[order]
    previous = np.roll(k, 1)
    first = np.r_[True, w[1:] != w[:-1]]
    if cyclic:
        last = np.r_[np.nonzero(first)[0][1:] - 1, K - 1]
        previous[first] = k[last] - K
    else:
        previous[first] = -1
    out = np.empty(K, dtype=np.int64)
    out[k] = previous
    return out


def cyclic_staleness(workers) -> np.ndarray:
    """:func:`steady_staleness` for an array of the period's workers, in O(K log K)."""
    return np.arange(len(workers)) - _previous_arrival(workers, cyclic=True) - 1


def periodic_orbit(A, b, taus, step: Callable[[int, int], float], *,
                   staleness: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None,
                   compose: Callable | None = None) -> Orbit:
    """The orbit of ASGD with per-arrival step ``step(worker, staleness)`` on quadratics.

    Args:
      A: [n, d, d] or [n, d] (diagonal) curvatures; b: [n, d].
      taus: positive integers, one per worker.
      step: γ for an arrival of ``worker`` with the given (steady-state) staleness.
      staleness: ``(workers, taus) -> staleness`` of one period's arrivals (default: counted in
        updates, :func:`cyclic_staleness`); ``compose``: ``(M_k, c_k, M, c) -> (M', c')`` folds
        arrival k's affine map into the period's (default: applied after, M' = M_k M). Both
        exist so that ``delaylab verify --mutants`` can state wrong theories; leave them alone.
    """
    A = np.asarray(A, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    n, d = b.shape
    if A.ndim == 2:
        A = np.stack([np.diag(a) for a in A])
    times, workers, H = hyperperiod_arrays(taus)
    stale = (cyclic_staleness(workers) if staleness is None
             else staleness(workers, np.asarray(taus, dtype=np.float64)))
    if compose is None:
        compose = lambda Mk, ck, M, c: (Mk @ M, Mk @ c + ck)  # noqa: E731
    D = (n + 1) * d  # z = (x, y_0, ..., y_{n-1})

    def block(j):  # slice of z holding y_j
        return slice((j + 1) * d, (j + 2) * d)

    M = np.eye(D)
    c = np.zeros(D)
    maps = []
    for i, delta in zip(workers, stale):
        g = step(int(i), int(delta))
        Mk = np.eye(D)
        ck = np.zeros(D)
        # x' = x − g A_i y_i + g A_i b_i ; y_i' = x'
        Mk[:d, block(i)] = -g * A[i]
        ck[:d] = g * A[i] @ b[i]
        Mk[block(i), :] = Mk[:d, :]
        ck[block(i)] = ck[:d]
        maps.append((Mk, ck))
        M, c = compose(Mk, ck, M, c)
    rho = float(np.max(np.abs(np.linalg.eigvals(M))))
    if not rho < 1:
        raise ValueError(f"the one-period map does not contract (ρ(M) = {rho:.4g}); use a smaller step")
    z = np.linalg.solve(np.eye(D) - M, c)
    start = z[:d].copy()
    times = [int(t) for t in times]
    total = start * times[0]  # x holds its period-start value until the first arrival
    visited = [start]
    for k, (Mk, ck) in enumerate(maps):
        z = Mk @ z + ck
        visited.append(z[:d].copy())
        hold = (times[k + 1] if k + 1 < len(times) else H + times[0]) - times[k]
        if k + 1 == len(times):
            hold -= times[0]  # the wrap-around part was counted as ``start * times[0]``
        total = total + z[:d] * hold
    average = total / H
    amplitude = float(max(np.linalg.norm(v - average) for v in visited))
    return Orbit(average=average, start=start, spectral_radius=rho, period=H, events_per_period=len(maps),
                 amplitude=amplitude)


def arrival_staleness(workers) -> np.ndarray:
    """Staleness in updates of each arrival of a run that starts with every worker handed the
    initial model: arrivals processed since the worker's previous arrival (or since the start)."""
    return np.arange(len(workers)) - _previous_arrival(workers, cyclic=False) - 1


@dataclasses.dataclass(frozen=True)
class StepOffset:
    """The O(γ) offset of a finite-step average from its γ → 0 limit, by Richardson extrapolation.

    From averages x(γ), x(γ/2), x(γ/4) with x(h) = x₀ + c₁h + c₂h² + O(h³):
    ``limit`` = (8x(γ/4) − 6x(γ/2) + x(γ))/3, ``offset`` = ‖x(γ) − limit‖, and ``uncertainty`` =
    ‖limit − (2x(γ/4) − x(γ/2))‖, the distance to the two-point extrapolation (whose error is
    O(γ²), a conservative estimate of the three-point one's O(γ³)).
    """

    offset: float
    uncertainty: float
    limit: np.ndarray


def richardson(averages) -> StepOffset:
    x1, x2, x4 = (np.asarray(a, dtype=np.float64) for a in averages)
    limit = (8 * x4 - 6 * x2 + x1) / 3
    return StepOffset(float(np.linalg.norm(x1 - limit)), float(np.linalg.norm(limit - (2 * x4 - x2))), limit)


def replayed_averages(A, b, x0, finish, workers, end_time: float, steps, *, average_from: float = 0.5,
                      start=None):
    """The exact dynamics of per-arrival steps on quadratics, replayed along a given event list.

    Every arrival of worker i applies x' = x − γ_k A_i (y_i − b_i) and hands worker i the new x
    (every arrival delivered). Several step sequences run side by side.

    Args:
      A: [n, d, d] or [n, d]; b: [n, d]; x0: [d], every worker's first model.
      finish, workers: the arrivals' times (non-decreasing) and workers, [K] each.
      end_time: T; the average is over simulated time [average_from·T, T], x held between arrivals.
      steps: [C, K], γ of every arrival in each of C sequences.
      start: optional (x [C, d], y [C, n, d]) to start from instead of x0.
    Returns:
      (averages [C, d], (x, y) at the end).
    """
    A = np.asarray(A, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    steps = np.asarray(steps, dtype=np.float64)
    C, K = steps.shape
    n, d = b.shape
    if start is None:
        x = np.broadcast_to(np.asarray(x0, dtype=np.float64), (C, d)).copy()
        y = np.broadcast_to(x[:, None, :], (C, n, d)).copy()
    else:
        x, y = (np.array(v, dtype=np.float64) for v in start)
    t = np.asarray(finish, dtype=np.float64)
    t0 = average_from * end_time
    hold = np.clip(np.minimum(np.r_[t[1:], end_time], end_time) - np.maximum(t, t0), 0.0, None)
    total = np.zeros((C, d))
    diagonal = A.ndim == 2
    for k, i in enumerate(np.asarray(workers, dtype=np.int64)):
        r = y[:, i] - b[i]
        x = x - steps[:, k, None] * (r * A[i] if diagonal else r @ A[i].T)
        y[:, i] = x
        if hold[k]:
            total += hold[k] * x
    return total / (end_time - t0), (x, y)
