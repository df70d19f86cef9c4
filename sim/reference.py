"""Plain reference simulators: a priority queue, a loop, NumPy arithmetic. Nothing shared
with the engine or the schedule builder, so that tests and benchmarks compare the engine with
an independent implementation of the event model (docs/theory.md §1, §2).
"""

from __future__ import annotations

import heapq
from typing import Callable, Optional

import numpy as np


def quadratic_gradient(A: np.ndarray, b: np.ndarray, worker: int, x: np.ndarray) -> np.ndarray:
    r = x - b[worker]
    return A[worker] * r if A.ndim == 2 else A[worker] @ r


def heap_asgd(
    A: np.ndarray,
    b: np.ndarray,
    x0: np.ndarray,
    durations: np.ndarray,
    num_events: int,
    step: Callable[[int, int], float],
    *,
    lost: Optional[set] = None,
    noise: float = 0.0,
    rng: Optional[np.random.Generator] = None,
    gradient: Callable = quadratic_gradient,
    record: bool = False,
) -> tuple[np.ndarray, list]:
    """Asynchronous SGD on heterogeneous quadratics with a heap of pending jobs.

    Args:
      A, b: the quadratic (A [n, d, d] dense or [n, d] diagonal; b [n, d]).
      x0: initial model.
      durations: [n, J], duration of job k of worker i (its k-th job, 0-based).
      num_events: arrivals to process.
      step: ``step(worker, staleness) -> γ`` for the arriving gradient.
      lost: set of (worker, job) pairs whose results are not delivered; the worker restarts at
        the current model.
      noise: σ of additive isotropic gradient noise (covariance σ²/d · I), drawn from ``rng``.

    Returns:
      the final model and the processed events as (finish time, worker) pairs, or with
      ``record=True`` as (finish time, worker, model after the event) triples.
    """
    n, d = b.shape
    lost = lost or set()
    x = np.array(x0, dtype=A.dtype, copy=True)
    delivered_count = 0
    heap = []
    for i in range(n):
        # (finish, worker) orders ties by the lower worker index.
        heapq.heappush(heap, (float(durations[i, 0]), i, 0, delivered_count, x.copy()))
    trace = []
    for _ in range(num_events):
        t, i, k, version, point = heapq.heappop(heap)
        if (i, k) not in lost:
            g = gradient(A, b, i, point)
            if noise > 0:
                g = g + noise / np.sqrt(d) * rng.standard_normal(d).astype(A.dtype)
            x = x - step(i, delivered_count - version) * g
            delivered_count += 1
        trace.append((t, i, x.copy()) if record else (t, i))
        heapq.heappush(heap, (t + float(durations[i, k + 1]), i, k + 1, delivered_count, x.copy()))
    return x, trace


def loop_minibatch_sgd(A: np.ndarray, b: np.ndarray, x0: np.ndarray, stepsize: float, num_rounds: int) -> np.ndarray:
    """Minibatch SGD with exact local gradients: x ← x − γ · mean_i ∇F_i(x)."""
    x = np.array(x0, dtype=A.dtype, copy=True)
    n = b.shape[0]
    for _ in range(num_rounds):
        x = x - stepsize * sum(quadratic_gradient(A, b, i, x) for i in range(n)) / n
    return x


def heap_server(
    durations: np.ndarray,
    num_events: int,
    gradient: Callable[[int, np.ndarray], np.ndarray],
    server: Callable[[int, np.ndarray, np.ndarray], np.ndarray],
    x0: np.ndarray,
) -> list:
    """A generic event loop: ``server(worker, grad, point)`` handles each arrival and returns
    the point the worker computes at next. The server keeps its own state (a closure).

    Returns the processed (finish time, worker) pairs.
    """
    n = durations.shape[0]
    heap = [(float(durations[i, 0]), i, 0, np.array(x0, copy=True)) for i in range(n)]
    heapq.heapify(heap)
    trace = []
    for _ in range(num_events):
        t, i, k, point = heapq.heappop(heap)
        trace.append((t, i))
        nxt = server(i, gradient(i, point), point)
        heapq.heappush(heap, (t + float(durations[i, k + 1]), i, k + 1, np.array(nxt, copy=True)))
    return trace
