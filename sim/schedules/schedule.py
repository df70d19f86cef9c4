"""The :class:`Schedule` type: an explicit event sequence, and the rule that gives every event its
server version (hence its staleness) under each kind of dispatch."""

from __future__ import annotations

import dataclasses
import hashlib

import numpy as np

from delaylab.theory.arguments import as_numbers


# --- validation helpers ---------------------------------------------------------------------


def _short(arr: np.ndarray) -> str:
    flat = np.ravel(arr)
    text = np.array2string(flat[:8], precision=6, separator=", ")
    return text if flat.size <= 8 else text[:-1] + ", ...]"


def _check_taus(taus, argument: str = "taus") -> np.ndarray:
    arr = as_numbers(taus, argument)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{argument} must be a non-empty 1-D vector (one entry per worker); got shape {arr.shape}")
    with np.errstate(divide="ignore", over="ignore"):
        rates = 1.0 / arr
    if not np.all(np.isfinite(arr)) or np.any(arr <= 0) or not np.all(np.isfinite(rates)):
        raise ValueError(f"{argument} must be positive and finite, and 1/τ finite too; got {_short(arr)}")
    return arr


def _check_count(value, argument: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{argument} must be a positive integer (a schedule needs at least one event); got {value!r}")
    return int(value)


# The Schedule fields with one entry per event (the optional ones may be None); job_key is not one.
_PER_EVENT = ("worker", "start", "finish", "version", "delivered", "round", "compute_finish", "pull_only", "tag",
              "applied_at")


@dataclasses.dataclass(frozen=True, eq=False)
class Schedule:
    """An explicit event sequence. All arrays have one entry per event, in processing order.

    Conventions, fixed once for every schedule:

    * Worker indices are 0-based. Every worker starts its first job at time 0.
    * Events are ordered by finish time; ties are broken by the lower worker index
      (docs/theory.md §1, rule 4). The finite-step orbit depends on this rule.
    * ``version[e]`` is the number of *delivered* arrivals the server had processed when event
      ``e``'s job was dispatched, and ``staleness[e]`` the number processed since then, before ``e``.
    * With fixed computation the k-th arrival (k = 1, 2, ...) of worker i is at exactly ``k * τ_i``.

    Attributes:
      worker: int32, the worker whose job finished.
      start: float64, the job's dispatch time.
      finish: float64, the job's finish (arrival) time; non-decreasing.
      version: int64, delivered arrivals processed before the job was dispatched.
      delivered: bool, False where a failure lost the result.
      round: int64, the server round of each event: the barrier round, or under time-bounded
        rounds (:func:`time_bounded_rounds`) the polling window whose aggregation takes it in;
        −1 under asynchronous dispatch. See :attr:`round_end`.
      num_workers: n.
      policy: ``"async"`` or ``"barrier"``.
      mean_durations: float64 [n], the timing model's expected duration per worker: the τ_i
        that theory and τ-aware step rules use.
      description: a one-line human-readable summary of how it was built.
      compute_finish: float64 or None: when each job's computation ended, where that is earlier
        than ``finish`` (hierarchical rounds: ``finish`` is when every worker has ended the
        round's step, so that ``finish`` stays non-decreasing; this is each worker's own end).
      pull_only: bool or None: True for events that carry no result, only a worker's pull of the
        current model when a blocking rule releases it (:func:`stale_synchronous`); they are
        undelivered events, so every algorithm already treats them as "ignore the message and
        hand the worker the current model".
      job_key: None, or the raw data (uint32) of the PRNG key the durations were drawn with
        (:class:`ExampleCostTiming`). The engine then keys job k of worker i by
        ``fold_in(fold_in(key, i), k)`` instead of by its event index, so that the examples a
        job draws are the ones its duration was computed from; it must be run with that key.
      tag: int64 or None: the model tag of each event's job, handed to the algorithm as
        ``Event.tag``. Under :func:`time_bounded_rounds`, the broadcast the job was trained from
        (a client works through its backlog of broadcasts in order, so a job's model can be
        older than the server's model when the job starts); for a release event, the tag of the
        worker's last job.
      applied_at: float64 or None: when the server applies each event's result, where that is
        later than ``finish`` and not a barrier round's end (time-bounded rounds: at the check
        that closes the round). :func:`sim.telemetry.worker_timing` reads it for queue delays.
      server: None, or the :class:`~sim.schedules.served.Server` the updates went through
        (:func:`~sim.schedules.served.served`): theory reads the workers' update rates from it
        (docs/theory.md §14) instead of 1/τ_i.
    """

    worker: np.ndarray
    start: np.ndarray
    finish: np.ndarray
    version: np.ndarray
    delivered: np.ndarray
    round: np.ndarray
    num_workers: int
    policy: str
    mean_durations: np.ndarray
    description: str = ""
    compute_finish: np.ndarray | None = None
    job_key: np.ndarray | None = None
    pull_only: np.ndarray | None = None
    tag: np.ndarray | None = None
    applied_at: np.ndarray | None = None
    server: object = None

    def __post_init__(self):
        for name in _PER_EVENT + ("job_key",):
            if getattr(self, name) is not None:
                getattr(self, name).setflags(write=False)
        if self.num_events < 1:
            raise ValueError("a schedule needs at least one event; got 0")

    @property
    def num_events(self) -> int:
        return int(self.worker.shape[0])

    @property
    def staleness(self) -> np.ndarray:
        """Delivered arrivals processed between each job's dispatch and its arrival."""
        delivered_before = np.cumsum(self.delivered) - self.delivered
        return (delivered_before - self.version).astype(np.int64)

    @property
    def durations(self) -> np.ndarray:
        return self.finish - self.start

    @property
    def round_end(self) -> np.ndarray:
        """True on the last event of each server round (``round >= 0``): the server closes the
        round right after it. All False under asynchronous dispatch (``round == -1``)."""
        r = self.round
        last = np.r_[r[1:] != r[:-1], True]
        return last & (r >= 0)

    @property
    def job_number(self) -> np.ndarray:
        """Each event's job number for its worker (0-based): column k of the timing model's
        duration table, in every dispatch policy here (one event per worker per round). A
        release event (``pull_only``) is not a job; it carries the number of the job it starts."""
        out = np.empty(self.num_events, np.int64)
        seen = np.zeros(self.num_workers, np.int64)
        for e, i in enumerate(self.worker):
            out[e] = seen[i]
            if self.pull_only is None or not self.pull_only[e]:
                seen[i] += 1
        return out

    @property
    def end_time(self) -> float:
        return float(self.finish[-1])

    def head(self, k: int) -> "Schedule":
        """The first ``k`` events: the same run stopped after its k-th event. An event never
        changes an earlier one, so a run on the head is the full run's first k events, bit for
        bit. Its use: runs of one length share a compiled program (the engine compiles one per
        schedule length), so schedules whose length varies with their timing draws (the release
        events of :func:`stale_synchronous`) can be cut to one length. Where events belong to
        server rounds (``round >= 0``), k must end a round."""
        k = _check_count(k, "k")
        if k > self.num_events:
            raise ValueError(f"k must be at most the schedule's {self.num_events} events; got {k}")
        if self.round[k - 1] >= 0 and not self.round_end[k - 1]:
            ends = np.flatnonzero(self.round_end) + 1
            raise ValueError(f"k = {k} cuts server round {int(self.round[k - 1])} in two; a head must end a round "
                             f"(the nearest ends are after events {ends[ends < k][-1:].tolist()} and "
                             f"{ends[ends > k][:1].tolist()})")
        cut = {f: np.array(getattr(self, f)[:k]) for f in _PER_EVENT if getattr(self, f) is not None}
        return dataclasses.replace(self, **cut, description=f"{self.description}; its first {k} events")

    def arrivals_per_worker(self, *, delivered_only: bool = True) -> np.ndarray:
        mask = self.delivered if delivered_only else np.ones_like(self.delivered)
        return np.bincount(self.worker[mask], minlength=self.num_workers)

    def summary(self) -> dict:
        st = self.staleness
        return {
            "policy": self.policy,
            "description": self.description,
            "num_workers": self.num_workers,
            "num_events": self.num_events,
            "end_time": self.end_time,
            "delivered_fraction": float(np.mean(self.delivered)),
            "mean_durations": self.mean_durations.tolist(),
            "arrivals_per_worker": self.arrivals_per_worker().tolist(),
            "staleness_mean": float(np.mean(st)),
            "staleness_max": int(np.max(st)),
            **({} if self.server is None else {"server": self.server.describe()}),
        }

    def digest(self) -> str:
        """A hash of the event arrays: equal digests mean the same schedule."""
        h = hashlib.sha256()
        for arr in (self.worker, self.start, self.finish, self.version, self.delivered, self.round):
            h.update(np.ascontiguousarray(arr).tobytes())
        for extra in (self.job_key, self.pull_only, self.tag):
            if extra is not None:
                h.update(np.ascontiguousarray(extra).tobytes())
        h.update(f"{self.num_workers}/{self.policy}".encode())
        return h.hexdigest()[:16]


# --- server versions, by dispatch ------------------------------------------------------------


def _versions_async(worker: np.ndarray, delivered: np.ndarray, num_workers: int) -> np.ndarray:
    """version[e] = delivered arrivals up to and including the worker's previous arrival."""
    delivered_through = np.cumsum(delivered)  # inclusive count after each event
    version = np.zeros(worker.shape[0], dtype=np.int64)
    last = np.full(num_workers, -1, dtype=np.int64)
    # One pass: each event's job was dispatched at its worker's previous arrival.
    prev = np.empty(worker.shape[0], dtype=np.int64)
    for e, i in enumerate(worker):
        prev[e] = last[i]
        last[i] = e
    has_prev = prev >= 0
    version[has_prev] = delivered_through[prev[has_prev]]
    return version


def _versions_barrier(rounds: np.ndarray, delivered: np.ndarray) -> np.ndarray:
    """version[e] = delivered arrivals in all rounds before e's round."""
    per_round = np.bincount(rounds, weights=delivered.astype(np.float64)).astype(np.int64)
    before = np.concatenate([[0], np.cumsum(per_round)[:-1]])
    return before[rounds]


def _versions_tagged(tag: np.ndarray, window: np.ndarray, pull: np.ndarray, delivered: np.ndarray) -> np.ndarray:
    """Time-bounded rounds: version[e] = delivered results aggregated into model ``tag[e]``
    (window w makes model w); a release's is every delivered result before it (staleness 0)."""
    arrived = ~pull & delivered
    per_window = np.bincount(window[arrived], minlength=int(max(window.max(), tag.max())) + 1)
    made_from = np.cumsum(per_window)
    before = np.cumsum(delivered) - delivered
    return np.where(pull, before, made_from[tag]).astype(np.int64)
