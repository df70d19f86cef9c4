"""Cutting a schedule into blocks of events whose worker computations are all known upfront.

A job's result depends only on the point its worker was handed, fixed at that worker's
previous arrival. In a run of consecutive events where no worker appears twice, every job's
point is therefore known before the run starts, and all of the run's worker computations can
be done at once (batched), followed by the server's updates in event order. This is exact.

The plan is host-side NumPy: ``events[c, k, j]`` is the schedule index of slot ``j`` of block
``k`` of log chunk ``c`` (−1 marks padding). Metrics are taken after each chunk, i.e. after
exactly ``log_every`` events (the last chunk may be shorter).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import numpy as np

from delaylab.sim.schedules import Schedule

# Cost of one block, in units of one slot's worker computation, for a single run: the fixed
# per-block overhead of a scan step and a batched launch, by JAX backend. Only used to pick the
# block size automatically. When R runs are batched (a sweep), each slot already does R runs' work,
# so the relative overhead is BLOCK_OVERHEAD / R.
# CPU: 0, i.e. never pad. Measured (benchmarks/RESULTS.md): on a 2-core CPU, batching a block's
# jobs costs as much as running them one by one (XLA:CPU gathers the per-worker data and runs the
# batched products no faster), so padding slots is pure loss; blocks won only for d = 10 single
# runs (1.4x), and lost 1.4-2.8x for d >= 100. Accelerators: 4, a guess not yet measured here.
BLOCK_OVERHEAD = {"cpu": 0.0}
BLOCK_OVERHEAD_DEFAULT = 4.0


@dataclasses.dataclass(frozen=True, eq=False)
class BlockPlan:
    """Attributes:
    events: int32 [chunks, blocks_per_chunk, block_size], schedule indices, −1 for padding.
    chunk_end: int64 [chunks], index of the last event of each chunk (a metrics log point).
    block_size: slots per block.
    mean_fill: real events per block / block_size, over the blocks that hold any event.
    """

    events: np.ndarray
    chunk_end: np.ndarray
    block_size: int
    mean_fill: float

    @property
    def padded_slots(self) -> int:
        return int(self.events.size)


def _natural_blocks(worker: np.ndarray, chunk_starts: np.ndarray) -> list[list[tuple[int, int]]]:
    """Greedy maximal blocks without a repeated worker, never crossing a chunk start.

    Returns, per chunk, a list of (first, stop) event ranges."""
    E = worker.shape[0]
    bounds = list(chunk_starts) + [E]
    out = []
    for c in range(len(chunk_starts)):
        lo, hi = bounds[c], bounds[c + 1]
        blocks = []
        seen: set[int] = set()
        first = lo
        for e in range(lo, hi):
            w = int(worker[e])
            if w in seen:
                blocks.append((first, e))
                seen = set()
                first = e
            seen.add(w)
        blocks.append((first, hi))
        out.append(blocks)
    return out


def _round_blocks(rounds: np.ndarray, chunk_starts: np.ndarray) -> list[list[tuple[int, int]]]:
    E = rounds.shape[0]
    bounds = list(chunk_starts) + [E]
    out = []
    for c in range(len(chunk_starts)):
        lo, hi = bounds[c], bounds[c + 1]
        cuts = [lo] + [e for e in range(lo + 1, hi) if rounds[e] != rounds[e - 1]] + [hi]
        out.append(list(zip(cuts[:-1], cuts[1:])))
    return out


def _cost(natural, B: int, overhead: float) -> float:
    per_chunk = [sum(math.ceil((s - f) / B) for f, s in blocks) for blocks in natural]
    return len(natural) * max(per_chunk) * (overhead + B)


def _one_per_block(E: int, L: int) -> BlockPlan:
    """The plan of block size 1: chunk c holds events cL … min((c+1)L, E) − 1, one per block, the
    last chunk padded with −1."""
    C, K = -(-E // L), min(L, E)  # K < L only when E < L, in one chunk
    idx = np.arange(C * K, dtype=np.int64).reshape(C, K)
    events = np.where(idx < E, idx, -1).astype(np.int32)[..., None]
    chunk_end = np.minimum((np.arange(C, dtype=np.int64) + 1) * L, E) - 1
    return BlockPlan(events=events, chunk_end=chunk_end, block_size=1, mean_fill=1.0)


def plan_blocks(schedule: Schedule, *, log_every: int, block_size: int | str = "auto",
                by_round: bool = False, runs: int = 1) -> BlockPlan:
    """Cut ``schedule`` into chunks of ``log_every`` events and those into blocks.

    Args:
      log_every: events per metrics chunk (with ``by_round``: rounded to whole rounds).
      block_size: slots per block; ``"auto"`` picks the size that minimises the padded cost
        (blocks × (overhead + size)); 1 gives the event-by-event engine.
      by_round: blocks are whole barrier rounds (round-based algorithms).
      runs: how many runs are batched together (a sweep's grid × seeds), for ``"auto"``.
    """
    E = schedule.num_events
    if isinstance(log_every, bool) or not isinstance(log_every, (int, np.integer)) or log_every < 1:
        raise ValueError(f"log_every must be a positive integer number of events; got {log_every!r}")
    if by_round:
        if schedule.policy != "barrier":
            raise ValueError(
                "this algorithm handles whole synchronous rounds and needs a barrier schedule "
                f"(sim.schedules.synchronous / barrier); got a {schedule.policy!r} schedule"
            )
        n = schedule.num_workers
        rounds_per_chunk = max(1, int(round(log_every / n)))
        round_starts = np.flatnonzero(np.r_[True, schedule.round[1:] != schedule.round[:-1]])
        chunk_starts = round_starts[::rounds_per_chunk]
        natural = _round_blocks(schedule.round, chunk_starts)
        B = n
    else:
        if block_size != "auto" and (isinstance(block_size, bool) or not isinstance(block_size, (int, np.integer))
                                     or block_size < 1):
            raise ValueError(f"block_size must be 'auto' or a positive integer; got {block_size!r}")
        overhead = BLOCK_OVERHEAD.get(jax.default_backend(), BLOCK_OVERHEAD_DEFAULT) / max(1, int(runs))
        if block_size == 1 or (block_size == "auto" and overhead == 0.0):
            # One event per block: "auto" always picks it without a per-block overhead (CPU), since
            # any larger size pads (cost blocks × size ≥ events). Laid out directly: the general path
            # below walks every event in Python, which costs seconds on long schedules
            # (benchmarks/RESULTS.md); tests/sim/test_engine.py checks the layout against plain loops
            # (the general path's plans matched the same reference).
            return _one_per_block(E, int(log_every))
        chunk_starts = np.arange(0, E, int(log_every))
        natural = _natural_blocks(schedule.worker, chunk_starts)
        longest = max(s - f for blocks in natural for f, s in blocks)
        if block_size == "auto":
            candidates = sorted({1, longest} | {2**k for k in range(1, 12) if 2**k < longest})
            B = min(candidates, key=lambda b: (_cost(natural, b, overhead), b))
        else:
            B = int(min(block_size, longest))
    # Split natural blocks longer than B and lay them out, padded, in a dense array.
    chunks = []
    for blocks in natural:
        rows = []
        for f, s in blocks:
            for g in range(f, s, B):
                rows.append(np.arange(g, min(g + B, s)))
        chunks.append(rows)
    K = max(len(rows) for rows in chunks)
    events = np.full((len(chunks), K, B), -1, dtype=np.int32)
    for c, rows in enumerate(chunks):
        for k, r in enumerate(rows):
            events[c, k, : r.shape[0]] = r
    real_blocks = sum(len(rows) for rows in chunks)
    chunk_end = np.array([rows[-1][-1] for rows in chunks], dtype=np.int64)
    return BlockPlan(events=events, chunk_end=chunk_end, block_size=B, mean_fill=E / (real_blocks * B))
