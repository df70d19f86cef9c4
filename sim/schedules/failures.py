"""Failures: the same timing with some results lost (a transform of any schedule)."""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

import numpy as np

from delaylab.sim.schedules.schedule import Schedule, _versions_async, _versions_barrier, _versions_tagged


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


def outage_blocks(jobs_per_worker: Sequence[int], *, fraction: float = 1.0 / 3.0, lengths: tuple[int, int] = (5, 20),
                  seed: int = 0) -> list[tuple[int, int, int]]:
    """Long outages: for each worker i, blocks ``(i, first, end)`` of consecutive lost jobs
    ``first ≤ j < end`` (jobs counted from 0 in the worker's order), drawn with ``seed``.

    Block lengths are drawn uniformly from ``lengths`` (inclusive) until they cover
    ``round(fraction · jobs)`` of the worker's jobs; then the longest blocks are shortened one job
    at a time (never below ``lengths[0]``) until the cover is exactly that (or as near as that
    allows). The blocks keep their drawn order and are placed at random (sorted uniform offsets)
    with at least one delivered job between two blocks, so each block is a separate outage. The
    cover caps the lengths: with a target of 12 jobs, no block is longer than 12. A worker with too few jobs for one block of the
    shortest length gets none."""
    lo, hi = (int(v) for v in lengths)
    f = float(fraction)
    if not (math.isfinite(f) and 0.0 <= f < 1.0):
        raise ValueError(f"outage fraction must be in [0, 1); got {fraction!r}")
    if not (1 <= lo <= hi):
        raise ValueError(f"outage lengths must be (shortest, longest) with 1 <= shortest <= longest; got {lengths!r}")
    rng = np.random.default_rng(seed)
    blocks = []
    for i, jobs in enumerate(int(j) for j in jobs_per_worker):
        target = int(round(f * jobs))
        if target < lo:
            continue
        sizes = []
        while sum(sizes) < target:
            sizes.append(int(rng.integers(lo, hi + 1)))
        while sum(sizes) > target:
            k = int(np.argmax(sizes))
            if sizes[k] <= lo:
                break
            sizes[k] -= 1
        m = len(sizes)
        slack = jobs - sum(sizes) - (m - 1)  # delivered jobs not needed as separators
        if slack < 0:
            raise ValueError(f"worker {i}: {m} outages covering {sum(sizes)} of {jobs} jobs do not fit with a "
                             f"delivered job between them; lower the fraction or the lengths")
        offsets = np.sort(rng.integers(0, slack + 1, size=m))  # random placement
        start = 0
        for k, (off, size) in enumerate(zip(offsets, sizes)):
            first = int(off) + start + k  # k separators before block k
            blocks.append((i, first, first + size))
            start += size
    return blocks


def with_outages(schedule: Schedule, *, fraction: float = 1.0 / 3.0, lengths: tuple[int, int] = (5, 20),
                 seed: int = 0, blocks: Sequence[tuple[int, int, int]] | None = None) -> Schedule:
    """The same timing with long outages: each worker loses blocks of consecutive jobs
    (:func:`outage_blocks`, or the ``blocks`` given), about ``fraction`` of its jobs in all.

    A lost job's arrival is undelivered, as in :func:`with_failures` (an algorithm reads it by its
    own semantics: ``algos.elastic``'s "suppressed" worker trains on unheard; its "stale" worker
    makes no progress, so it restarts from its model at the outage's start)."""
    counts = np.bincount(schedule.worker, minlength=schedule.num_workers)
    if blocks is None:
        blocks = outage_blocks(counts, fraction=fraction, lengths=lengths, seed=seed)
    intervals = []
    for w, first, end in blocks:
        w, first, end = int(w), int(first), int(end)
        if not (0 <= w < schedule.num_workers and 0 <= first < end):
            raise ValueError(f"outage blocks must be (worker, first job, end job) with first < end; got {(w, first, end)!r}")
        finish = schedule.finish[schedule.worker == w]  # worker w's arrivals, in its job order
        if first >= finish.size:
            continue
        t1 = float(finish[end]) if end < finish.size else math.inf
        intervals.append((w, float(finish[first]), t1))
    out = with_failures(schedule, intervals=intervals)
    return dataclasses.replace(out, description=schedule.description + f"; {len(intervals)} outage(s), "
                                                                        f"{int(np.sum(~out.delivered & schedule.delivered))} jobs lost")
