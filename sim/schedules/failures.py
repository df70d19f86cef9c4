"""Failures: the same timing with some results lost (a transform of any schedule)."""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

import numpy as np

from sim.schedules.schedule import Schedule, _versions_async, _versions_barrier, _versions_tagged


def with_failures(
    schedule: Schedule,
    *,
    probability: float = 0.0,
    intervals: Sequence[tuple[int, float, float]] = (),
    seed: int = 0,
) -> Schedule:
    """The same timing with some results lost.

    Args:
      probability: q ∈ [0, 1): each arrival is independently lost with probability q.
      intervals: ``(worker, t0, t1)`` triples: worker's arrivals with ``t0 <= finish < t1`` are lost.
      seed: seed of the Bernoulli draws.

    A lost arrival changes nothing at the server; the worker starts its next job at the
    server's current model (the server notices the loss and re-sends, as on a time-out).
    """
    q = float(probability)
    if not (math.isfinite(q) and 0.0 <= q < 1.0):
        raise ValueError(f"failure probability must be in [0, 1); got {probability!r}")
    lost = np.random.default_rng(seed).random(schedule.num_events) < q
    for item in intervals:
        if len(item) != 3:
            raise ValueError(f"each failure interval must be (worker, t0, t1); got {item!r}")
        w, t0, t1 = item
        if not (0 <= int(w) < schedule.num_workers):
            raise ValueError(f"failure interval worker must be in [0, {schedule.num_workers}); got {w!r}")
        if not (t0 < t1):
            raise ValueError(f"failure interval needs t0 < t1; got ({t0}, {t1})")
        lost |= (schedule.worker == int(w)) & (schedule.finish >= t0) & (schedule.finish < t1)
    delivered = schedule.delivered & ~lost
    if schedule.tag is not None:  # time-bounded rounds
        version = _versions_tagged(schedule.tag, schedule.round, schedule.pull_only, delivered)
    elif schedule.policy == "barrier":
        version = _versions_barrier(schedule.round, delivered)
    else:
        version = _versions_async(schedule.worker, delivered, schedule.num_workers)
    return dataclasses.replace(
        schedule,
        worker=schedule.worker.copy(),
        start=schedule.start.copy(),
        finish=schedule.finish.copy(),
        round=schedule.round.copy(),
        delivered=delivered,
        version=version,
        description=schedule.description + f"; failures q={q}, {len(intervals)} interval(s)",
    )
