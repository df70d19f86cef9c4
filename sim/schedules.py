"""Schedules: who arrives when, computed on the host before any model value exists.

Timing never depends on the model's values (DESIGN.md, "The event model"), so a whole run's
event sequence is a handful of NumPy arrays. A :class:`Schedule` is built from a *timing model*
(how long each job of each worker takes) and a *dispatch policy* (asynchronous: a worker
restarts the moment it reports; barrier: synchronous rounds; backup workers: rounds that close at
the N-th of N + b results). Time-varying speeds (slowdowns, stalls) wrap a timing model
(:class:`SlowdownTiming`). Failures are a transform that marks some arrivals as lost.

Conventions, fixed once for every schedule:

* Worker indices are 0-based. Every worker starts its first job at time 0.
* Events are ordered by finish time; ties are broken by the lower worker index
  (specs/asgd.md §1, event model rule 4). The finite-step orbit depends on this rule.
* ``version[e]`` is the number of *delivered* arrivals the server had processed when event
  ``e``'s job was dispatched, and ``staleness[e]`` the number processed since then, before ``e``.
* With fixed computation the k-th arrival (k = 1, 2, ...) of worker i is at exactly ``k * τ_i``.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import math
import os
from typing import Protocol, Sequence

import numpy as np

from algos.hierarchy import check_levels, check_warmup, sync_level

NOISE_KINDS = ("exponential", "lognormal", "uniform", "halfnormal")


# --- validation helpers ---------------------------------------------------------------------


def _short(arr: np.ndarray) -> str:
    flat = np.ravel(arr)
    text = np.array2string(flat[:8], precision=6, separator=", ")
    return text if flat.size <= 8 else text[:-1] + ", ...]"


def _check_taus(taus, argument: str = "taus") -> np.ndarray:
    arr = np.asarray(taus, dtype=np.float64)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{argument} must be a non-empty 1-D vector (one entry per worker); got shape {arr.shape}")
    if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise ValueError(f"{argument} must be positive and finite; got {_short(arr)}")
    return arr


def _check_count(value, argument: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{argument} must be a positive integer (a schedule needs at least one event); got {value!r}")
    return int(value)


# --- the schedule -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, eq=False)
class Schedule:
    """An explicit event sequence. All arrays have one entry per event, in processing order.

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

    def __post_init__(self):
        for name in ("worker", "start", "finish", "version", "delivered", "round"):
            arr = getattr(self, name)
            arr.setflags(write=False)
        for name in ("compute_finish", "job_key", "pull_only", "tag", "applied_at"):
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


# --- timing models ------------------------------------------------------------------------------


class Timing(Protocol):
    """How long jobs take: ``durations(J)`` gives an [n, J] table (job k of worker i)."""

    num_workers: int
    mean_durations: np.ndarray
    exact_clock: bool  # True when job k of worker i finishes at exactly k·τ_i

    def durations(self, jobs_per_worker: int) -> np.ndarray: ...


@dataclasses.dataclass(frozen=True, eq=False)
class FixedTiming:
    """Fixed computation: every job of worker i takes exactly τ_i (specs/asgd.md §1)."""

    taus: np.ndarray
    exact_clock = True

    def __post_init__(self):
        object.__setattr__(self, "taus", _check_taus(self.taus))

    @property
    def num_workers(self) -> int:
        return int(self.taus.shape[0])

    @property
    def mean_durations(self) -> np.ndarray:
        return self.taus

    def durations(self, jobs_per_worker: int) -> np.ndarray:
        return np.broadcast_to(self.taus[:, None], (self.num_workers, jobs_per_worker)).copy()


@dataclasses.dataclass(frozen=True, eq=False)
class RandomTiming:
    """Random computation: job duration τ_i + η with η ≥ 0 drawn afresh for every job.

    ``noise`` names η's distribution, with ``scale`` its scale (scalar or one per worker):
      * ``exponential``: η ~ Exp with mean ``scale``;
      * ``halfnormal``: η = |N(0, scale²)| (Ringleader's τ_i + |N(0, i)| is ``scale=sqrt(i)``);
      * ``uniform``: η ~ U(0, scale);
      * ``lognormal``: η = scale · exp(shape · Z − shape²/2), Z ~ N(0, 1), so E η = scale.
    Draws come from ``numpy.random.default_rng((seed, i))``, one stream per worker.
    """

    taus: np.ndarray
    noise: str = "exponential"
    scale: object = 1.0
    shape: float = 1.0
    seed: int = 0
    exact_clock = False

    def __post_init__(self):
        taus = _check_taus(self.taus)
        object.__setattr__(self, "taus", taus)
        if self.noise not in NOISE_KINDS:
            raise ValueError(f"noise must be one of {NOISE_KINDS}; got {self.noise!r}")
        scale = np.broadcast_to(np.asarray(self.scale, dtype=np.float64), taus.shape).copy()
        if not np.all(np.isfinite(scale)) or np.any(scale < 0):
            raise ValueError(f"scale must be finite and >= 0 (one value or one per worker); got {_short(scale)}")
        object.__setattr__(self, "scale", scale)
        if not (math.isfinite(self.shape) and self.shape > 0):
            raise ValueError(f"shape must be positive and finite; got {self.shape!r}")

    @property
    def num_workers(self) -> int:
        return int(self.taus.shape[0])

    @property
    def mean_durations(self) -> np.ndarray:
        factor = {"exponential": 1.0, "halfnormal": math.sqrt(2 / math.pi), "uniform": 0.5, "lognormal": 1.0}
        return self.taus + factor[self.noise] * self.scale

    def durations(self, jobs_per_worker: int) -> np.ndarray:
        out = np.empty((self.num_workers, jobs_per_worker))
        for i in range(self.num_workers):
            rng = np.random.default_rng((self.seed, i))
            s = self.scale[i]
            if self.noise == "exponential":
                eta = rng.exponential(1.0, jobs_per_worker) * s
            elif self.noise == "halfnormal":
                eta = np.abs(rng.standard_normal(jobs_per_worker)) * s
            elif self.noise == "uniform":
                eta = rng.uniform(0.0, 1.0, jobs_per_worker) * s
            else:
                z = rng.standard_normal(jobs_per_worker)
                eta = s * np.exp(self.shape * z - 0.5 * self.shape**2)
            out[i] = self.taus[i] + eta
        return out


@dataclasses.dataclass(frozen=True, eq=False)
class TraceTiming:
    """Replay of recorded job durations: worker i's k-th job takes ``table[i][k]``."""

    table: tuple
    exact_clock = False

    @property
    def num_workers(self) -> int:
        return len(self.table)

    @property
    def mean_durations(self) -> np.ndarray:
        return np.array([np.mean(d) for d in self.table])

    @property
    def jobs_available(self) -> int:
        return min(len(d) for d in self.table)

    def durations(self, jobs_per_worker: int) -> np.ndarray:
        if jobs_per_worker > max(len(d) for d in self.table):
            raise ValueError("trace exhausted")
        out = np.full((self.num_workers, jobs_per_worker), np.inf)
        for i, d in enumerate(self.table):
            k = min(len(d), jobs_per_worker)
            out[i, :k] = d[:k]
        return out


def _job_key(timing):
    """The key data a timing model drew its durations with, if they depend on drawn examples."""
    return getattr(timing, "job_key", None)


def job_keys(key, worker: int, jobs: int, steps: int | None = None):
    """The PRNG keys with which the engine's jobs 0..jobs−1 of ``worker`` draw their minibatches
    on a schedule with a ``job_key``: job k's key is ``fold_in(fold_in(key, worker), k)``; with
    ``steps = H`` (work of H local steps, each on ``fold_in(job key, s)``) one key per step,
    shape [jobs, H]."""
    import jax

    with jax.threefry_partitionable(True):  # as the engine runs
        base = jax.random.fold_in(key, worker)
        ks = jax.vmap(lambda k: jax.random.fold_in(base, k))(np.arange(jobs))
        if steps is None:
            return ks
        return jax.vmap(lambda k: jax.vmap(lambda s: jax.random.fold_in(k, s))(np.arange(steps)))(ks)


@dataclasses.dataclass(frozen=True, eq=False)
class ExampleCostTiming:
    """Data-dependent durations: a job's duration is set by the examples it draws.

    Worker i's shard has m examples with static costs ``costs[i]`` (for example sequence lengths,
    or any table the user provides). Job k of worker i draws ``batch_size`` of them with the
    problem's own sampler (``sim.problems.sample_indices``: uniform with replacement) and the key
    the engine will hand that job (:func:`job_keys`), and takes
    ``overhead_i + time_per_cost_i · Σ cost of the drawn examples``; with ``steps = H`` the job
    is H local steps, each on its own draw. So "the stragglers are the workers that drew costly
    examples" holds exactly, example for example, in the run.

    Schedules built from it carry ``job_key`` and must be run with ``key`` (the engine checks);
    a sweep over seeds needs one schedule per seed. The draws assume the problem samples with
    ``sample_indices(job key, batch_size, m)`` (every sharded problem here does).

    Args:
      costs: [n, m] per-example costs (finite, ≥ 0).
      batch_size: examples per draw (the problem's batch size).
      key: the run's PRNG key (``jax.random.key(seed)``).
      time_per_cost, overhead: one value or one per worker (≥ 0; overhead + cost must be > 0).
      steps: None for one draw per job with the job's key (one gradient per job, the default
        work), or H for H local steps per job.
    """

    costs: np.ndarray
    batch_size: int
    key: object
    time_per_cost: object = 1.0
    overhead: object = 0.0
    steps: int | None = None
    exact_clock = False

    def __post_init__(self):
        import jax

        costs = np.asarray(self.costs, np.float64)
        if costs.ndim != 2 or costs.size == 0:
            raise ValueError(f"costs must be [n, m] (one cost per example of each worker's shard); got shape {costs.shape}")
        if not np.all(np.isfinite(costs)) or np.any(costs < 0):
            raise ValueError(f"costs must be finite and >= 0; got {_short(costs)}")
        object.__setattr__(self, "costs", costs)
        n = costs.shape[0]
        _check_count(self.batch_size, "batch_size")
        if self.steps is not None:
            _check_count(self.steps, "steps")
        for name in ("time_per_cost", "overhead"):
            v = np.broadcast_to(np.asarray(getattr(self, name), np.float64), (n,)).copy()
            if not np.all(np.isfinite(v)) or np.any(v < 0):
                raise ValueError(f"{name} must be finite and >= 0 (one value or one per worker); got {_short(v)}")
            object.__setattr__(self, name, v)
        if np.any(self.mean_durations <= 0):
            raise ValueError("every worker's mean duration must be > 0 (give an overhead, or costs > 0)")
        key = self.key
        if isinstance(key, (int, np.integer)):
            raise ValueError("key must be a PRNG key (jax.random.key(seed)), the one the run will use; got an int")
        data = np.asarray(jax.random.key_data(key) if _is_key(key) else key)
        if data.dtype != np.uint32 or data.shape != (2,):
            raise ValueError(f"key must be one PRNG key, e.g. jax.random.key(0); got {getattr(key, 'shape', key)!r}")
        object.__setattr__(self, "key", key)
        object.__setattr__(self, "_key_data", data.copy())

    @property
    def job_key(self) -> np.ndarray:
        return self._key_data

    @property
    def num_workers(self) -> int:
        return int(self.costs.shape[0])

    @property
    def mean_durations(self) -> np.ndarray:
        draws = self.batch_size * (self.steps or 1)
        return self.overhead + self.time_per_cost * draws * self.costs.mean(axis=1)

    def drawn_indices(self, worker: int, jobs: int) -> np.ndarray:
        """[jobs, draws] indices into worker ``worker``'s shard that its jobs 0..jobs−1 draw."""
        import jax

        from sim.problems import sample_indices

        m = self.costs.shape[1]
        ks = job_keys(self.key, worker, jobs, self.steps)
        with jax.threefry_partitionable(True):
            flat = ks.reshape(-1)
            idx = jax.vmap(lambda k: sample_indices(k, self.batch_size, m))(flat)
        return np.asarray(idx).reshape(jobs, -1)

    def durations(self, jobs_per_worker: int) -> np.ndarray:
        out = np.empty((self.num_workers, jobs_per_worker))
        for i in range(self.num_workers):
            cost = self.costs[i][self.drawn_indices(i, jobs_per_worker)].sum(axis=1)
            out[i] = self.overhead[i] + self.time_per_cost[i] * cost
        return out


def _is_key(x) -> bool:
    import jax

    return hasattr(x, "dtype") and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)


@dataclasses.dataclass(frozen=True, eq=False)
class SlowdownTiming:
    """Time-varying speeds on top of another timing model.

    ``base``'s durations are read as *work*, done at speed 1. Each interval ``(worker, t0, t1,
    factor)`` makes that worker ``factor`` times slower during simulated time [t0, t1)
    (``factor = inf``: it stalls, doing no work; ``factor < 1``: it runs faster). A job that
    starts at s with work w ends at the first time f with ∫_s^f speed = w. Intervals of one
    worker must not overlap.

    ``mean_durations`` stay the base model's (the nominal τ_i that τ-aware step rules are given):
    a slowdown is something the algorithm is not told about.
    """

    base: object
    intervals: tuple = ()
    exact_clock = False

    def __post_init__(self):
        n = self.base.num_workers
        items = []
        for item in self.intervals:
            if len(item) != 4:
                raise ValueError(f"each slowdown must be (worker, t0, t1, factor); got {item!r}")
            w, t0, t1, f = item
            if isinstance(w, bool) or int(w) != w or not (0 <= int(w) < n):
                raise ValueError(f"slowdown worker must be an integer in [0, {n}); got {w!r}")
            t0, t1, f = float(t0), float(t1), float(f)
            if not (math.isfinite(t0) and math.isfinite(t1) and 0 <= t0 < t1):
                raise ValueError(f"slowdown interval needs finite 0 <= t0 < t1; got ({t0}, {t1})")
            if not (f > 0):
                raise ValueError(f"slowdown factor must be > 0 (inf: a stall); got {f}")
            items.append((int(w), t0, t1, f))
        for w in range(n):
            mine = sorted(x for x in items if x[0] == w)
            for a, b in zip(mine, mine[1:]):
                if b[1] < a[2]:
                    raise ValueError(f"worker {w}'s slowdowns overlap: [{a[1]}, {a[2]}) and [{b[1]}, {b[2]})")
        object.__setattr__(self, "intervals", tuple(items))

    @property
    def num_workers(self) -> int:
        return self.base.num_workers

    @property
    def mean_durations(self) -> np.ndarray:
        return self.base.mean_durations

    @property
    def job_key(self):
        return _job_key(self.base)

    def durations(self, jobs_per_worker: int) -> np.ndarray:
        return self.base.durations(jobs_per_worker)

    def _work_curve(self, worker: int) -> tuple[np.ndarray, np.ndarray]:
        """Breakpoints T and the work W(T) done by then; speed 1 after the last breakpoint."""
        T, W = [0.0], [0.0]
        for _, t0, t1, f in sorted(x for x in self.intervals if x[0] == worker):
            W.append(W[-1] + (t0 - T[-1]))
            T.append(t0)
            W.append(W[-1] + (0.0 if math.isinf(f) else (t1 - t0) / f))
            T.append(t1)
        return np.asarray(T), np.asarray(W)

    def work_at(self, worker: int, t) -> np.ndarray:
        """∫_0^t speed: the work worker ``worker`` has done by time t (array-valued)."""
        T, W = self._work_curve(worker)
        t = np.asarray(t, np.float64)
        return np.where(t <= T[-1], np.interp(t, T, W), W[-1] + (t - T[-1]))

    def time_at(self, worker: int, work) -> np.ndarray:
        """The first time by which ``work`` has been done (the inverse of :meth:`work_at`)."""
        T, W = self._work_curve(worker)
        v = np.asarray(work, np.float64)
        k = np.searchsorted(W, v, side="left") - 1  # segment k: W[k] < v <= W[k + 1] (or past the end)
        k = np.clip(k, 0, len(T) - 1)
        last = k >= len(T) - 1
        nxt = np.minimum(k + 1, len(T) - 1)
        seg_speed = np.where(last, 1.0, (W[nxt] - W[k]) / np.where(last, 1.0, T[nxt] - T[k]))
        with np.errstate(divide="ignore", invalid="ignore"):
            t = T[k] + (v - W[k]) / seg_speed
        return np.where(v <= 0, 0.0, t)


def _finish_time(timing, worker: int, start: float, work: float) -> float:
    """When worker ``worker``'s job that starts at ``start`` with work ``work`` ends."""
    if not isinstance(timing, SlowdownTiming):
        return start + work
    return float(timing.time_at(worker, timing.work_at(worker, start) + work))


def _advance(timing, start: np.ndarray, work: np.ndarray) -> np.ndarray:
    """Finish times of jobs that start at ``start[i]`` with work ``work[i]`` (per worker)."""
    if not isinstance(timing, SlowdownTiming):
        return start + work
    return np.array([_finish_time(timing, i, start[i], work[i]) for i in range(timing.num_workers)])


# --- dispatch policies ------------------------------------------------------------------------


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


def asynchronous(timing: Timing, *, num_events: int | None, description: str = "") -> Schedule:
    """Asynchronous dispatch: each worker restarts the moment it reports.

    Worker i's finish times are then the cumulative sums of its own durations (exactly k·τ_i
    for fixed computation), independent of the others; the schedule is their merge, ordered by
    (finish time, worker index). ``num_events=None`` is allowed for a trace only: every event
    that ends no later than the moment the first worker runs out of recorded jobs.
    """
    n = timing.num_workers
    is_trace = isinstance(timing, TraceTiming)
    if num_events is not None or not is_trace:
        num_events = _check_count(num_events, "num_events")
    if is_trace:
        jobs = max(len(d) for d in timing.table)
    else:
        rate = 1.0 / timing.mean_durations
        jobs = int(math.ceil(num_events * rate.max() / rate.sum() * 1.25)) + 8
    while True:
        dur = timing.durations(jobs)
        if timing.exact_clock:
            ks = np.arange(1, jobs + 1, dtype=np.float64)
            finish = ks[None, :] * timing.mean_durations[:, None]  # closed form k·τ_i
            start = (ks - 1)[None, :] * timing.mean_durations[:, None]
        elif isinstance(timing, SlowdownTiming):
            work = np.cumsum(dur, axis=1)  # each worker starts at 0 and never waits
            finish = np.stack([timing.time_at(i, work[i]) for i in range(n)])
            start = np.concatenate([np.zeros((n, 1)), finish[:, :-1]], axis=1)
        else:
            with np.errstate(invalid="ignore"):
                finish = np.cumsum(dur, axis=1)
                start = finish - dur
        workers = np.broadcast_to(np.arange(n)[:, None], finish.shape)
        order = np.lexsort((workers.ravel(), finish.ravel()))
        if is_trace:
            # Past the first worker's last recorded job, later events would need unrecorded jobs.
            cut = min(float(np.sum(d)) for d in timing.table)
            available = int(np.sum(finish <= cut))
            if num_events is None:
                num_events = available
            elif num_events > available:
                raise ValueError(
                    f"num_events={num_events} exceeds what the trace supports: {available} events "
                    "end before its first worker runs out of recorded jobs"
                )
            order = order[:num_events]
            break
        order = order[:num_events]
        # Enough jobs per worker if every worker's last generated job ends after the cut-off.
        if np.all(finish[:, -1] > finish.ravel()[order[-1]]):
            break
        jobs *= 2
    worker = workers.ravel()[order].astype(np.int32)
    delivered = np.ones(num_events, dtype=bool)
    return Schedule(
        worker=worker,
        start=start.ravel()[order].copy(),
        finish=finish.ravel()[order].copy(),
        version=_versions_async(worker, delivered, n),
        delivered=delivered,
        round=np.full(num_events, -1, dtype=np.int64),
        num_workers=n,
        policy="async",
        mean_durations=np.asarray(timing.mean_durations, dtype=np.float64).copy(),
        description=description or f"async {type(timing).__name__}, {num_events} events",
        job_key=_job_key(timing),
    )


def barrier(timing: Timing, *, num_rounds: int, description: str = "") -> Schedule:
    """Synchronous rounds: all n workers start together; the round ends when the last reports.

    Round r starts at the previous round's last finish; its n events are ordered by (finish,
    worker). Every event of a round carries the same version (the server steps between rounds).
    """
    num_rounds = _check_count(num_rounds, "num_rounds")
    n = timing.num_workers
    dur = timing.durations(num_rounds)  # [n, R]: worker i's duration in round r
    if not np.all(np.isfinite(dur)):
        raise ValueError(f"num_rounds={num_rounds} exceeds the rounds the trace records for every worker")
    worker_l, start_l, finish_l = [], [], []
    t = 0.0
    for r in range(num_rounds):
        fin = _advance(timing, np.full(n, t), dur[:, r])
        order = np.lexsort((np.arange(n), fin))
        worker_l.append(order)
        start_l.append(np.full(n, t))
        finish_l.append(fin[order])
        t = float(fin.max())
    return _rounds(timing, worker_l, start_l, finish_l, None,
                   description or f"barrier {type(timing).__name__}, {num_rounds} rounds")


def _rounds(timing, worker_l, start_l, finish_l, delivered, description, compute_finish=None) -> Schedule:
    """A barrier-policy schedule from per-round lists of n events each (``delivered=None``: all)."""
    n = timing.num_workers
    rounds = np.repeat(np.arange(len(worker_l)), n).astype(np.int64)
    delivered = np.ones(rounds.shape[0], dtype=bool) if delivered is None else delivered
    return Schedule(
        worker=np.concatenate(worker_l).astype(np.int32),
        start=np.concatenate(start_l),
        finish=np.concatenate(finish_l),
        version=_versions_barrier(rounds, delivered),
        delivered=delivered,
        round=rounds,
        num_workers=n,
        policy="barrier",
        mean_durations=np.asarray(timing.mean_durations, dtype=np.float64).copy(),
        description=description,
        compute_finish=None if compute_finish is None else np.concatenate(compute_finish),
        job_key=_job_key(timing),
    )


def backup_workers(timing: Timing, *, num_rounds: int, backups: int, cancel_on_close: bool = True,
                   description: str = "") -> Schedule:
    """Synchronous rounds with ``backups`` backup workers (Chen et al. 2016; spec mitigation.md §2).

    All n = N + b workers start round 0 on the same model; a round closes when its N-th result
    computed on the round's model arrives (N = n − ``backups``), in (finish, worker) order.

    ``cancel_on_close=True`` (the spec's idealised variant, the default): the other b jobs are
    cancelled at the close (undelivered events finishing at the close) and every worker starts the
    next round together: a barrier schedule, for round-based algorithms (``algos.minibatch_sgd``).
    ``backups=0`` is :func:`barrier` exactly.

    ``cancel_on_close=False``: TensorFlow's ``SyncReplicasOptimizer`` (the same team's
    implementation). A straggler's job runs on; its result, computed on an older model, arrives
    and is dropped by the server, and the worker starts again at once on the current model, so it
    can be dropped and then accepted in the same round. A worker whose result was accepted waits
    for the round to close (it takes a token the chief issues at the close) and is released then:
    a ``pull_only`` event at the close. An asynchronous schedule; run it with
    ``algos.rennala_sgd(batch=N)``, whose rule (accept only results computed on the current round's
    model, step on the mean of the first N) is the chief's. ``num_rounds`` counts closes.
    """
    num_rounds = _check_count(num_rounds, "num_rounds")
    n = timing.num_workers
    b = int(backups)
    if backups != b or not (0 <= b < n):
        raise ValueError(f"backups must be an integer in [0, n) = [0, {n}) (at least one result per round); got {backups!r}")
    keep = n - b
    if not cancel_on_close:
        return _sync_replicas(timing, num_rounds, keep, description)
    dur = timing.durations(num_rounds)
    if not np.all(np.isfinite(dur)):
        raise ValueError(f"num_rounds={num_rounds} exceeds the rounds the trace records for every worker")
    worker_l, start_l, finish_l, deliv_l = [], [], [], []
    t = 0.0
    for r in range(num_rounds):
        fin = _advance(timing, np.full(n, t), dur[:, r])
        order = np.lexsort((np.arange(n), fin))
        close = float(fin[order[keep - 1]])
        late = np.sort(order[keep:])  # cancelled at the close, listed by worker index
        worker_l.append(np.concatenate([order[:keep], late]))
        start_l.append(np.full(n, t))
        finish_l.append(np.concatenate([fin[order[:keep]], np.full(b, close)]))
        deliv_l.append(np.arange(n) < keep)
        t = close
    return _rounds(timing, worker_l, start_l, finish_l, np.concatenate(deliv_l),
                   description or f"barrier with {b} backup worker(s) of {n}, {type(timing).__name__}, {num_rounds} rounds")


class _Jobs:
    """Jobs in flight for the event-by-event builders: ``launch(i, t, label)`` starts worker i's
    next job (the next column of ``dur``) at t; ``pop()`` gives the next to finish, (finish, i),
    ties to the lower worker index. False from ``launch``: ``dur`` has too few jobs."""

    def __init__(self, timing, dur: np.ndarray):
        import heapq

        self._heapq, self._timing, self._dur = heapq, timing, dur
        n = dur.shape[0]
        self.started = np.zeros(n, np.int64)  # jobs started (the column of ``dur`` used next)
        self.began = np.zeros(n)
        self.label = np.zeros(n, np.int64)  # the round or tag of the job in flight
        self.heap: list = []

    def launch(self, i: int, t: float, label: int) -> bool:
        if self.started[i] >= self._dur.shape[1]:
            return False
        self._heapq.heappush(self.heap, (_finish_time(self._timing, i, t, self._dur[i, self.started[i]]), i))
        self.started[i] += 1
        self.began[i], self.label[i] = t, label
        return True

    def pop(self) -> tuple:
        return self._heapq.heappop(self.heap)


def _sync_replicas(timing, num_rounds: int, keep: int, description: str) -> Schedule:
    """:func:`backup_workers` with ``cancel_on_close=False``."""
    n = timing.num_workers
    # Every job but the last in flight spans a close (an accepted one waits for it, a dropped one
    # crossed one), and nothing starts after the last close: num_rounds jobs per worker suffice.
    dur = timing.durations(num_rounds)
    if not np.all(np.isfinite(dur)):
        raise ValueError(f"num_rounds={num_rounds} exceeds the jobs the trace records for every worker")
    J = _Jobs(timing, dur)

    def launch(i, t, r):
        if not J.launch(i, t, r):
            raise AssertionError("backup_workers: a worker started more jobs than rounds")

    ev_w, ev_s, ev_f, ev_p = [], [], [], []
    for i in range(n):
        launch(i, 0.0, 0)
    r, accepted, waiting = 0, 0, {}
    while r < num_rounds:
        f, i = J.pop()
        ev_w.append(i), ev_s.append(J.began[i]), ev_f.append(f), ev_p.append(False)
        if J.label[i] == r:  # accepted
            accepted += 1
            if accepted < keep:
                waiting[i] = f
                continue
            r, accepted = r + 1, 0
            if r == num_rounds:
                break
            for j in sorted(waiting):  # the tokens of the close, in worker order
                ev_w.append(j), ev_s.append(waiting[j]), ev_f.append(f), ev_p.append(True)
                launch(j, f, r)
            waiting = {}
        launch(i, f, r)  # the closer, or a dropped straggler: at once, on the current model
    worker = np.asarray(ev_w, np.int32)
    pull = np.asarray(ev_p, bool)
    return Schedule(
        worker=worker, start=np.asarray(ev_s), finish=np.asarray(ev_f),
        version=_versions_async(worker, ~pull, n), delivered=~pull,
        round=np.full(worker.shape[0], -1, np.int64), num_workers=n, policy="async",
        mean_durations=np.asarray(timing.mean_durations, dtype=np.float64).copy(),
        description=description or (f"SyncReplicas: first {keep} of {n} results per round, stragglers dropped and "
                                    f"restarted, {type(timing).__name__}, {num_rounds} rounds"),
        job_key=_job_key(timing), pull_only=pull)


def hierarchical(timing: Timing, *, num_steps: int, levels, warmup: int = 0, comm_time: float = 0.0,
                 description: str = "") -> Schedule:
    """Local steps with hierarchical group averaging (spec mitigation.md §4; PyTorch's
    HierarchicalModelAverager): round k is every worker's k-th local step. After step k the
    groups of :func:`sync_level` (consecutive blocks of workers) average, a blocking collective:
    each member starts step k + 1 at the group's last end plus ``comm_time``. Groups that do not
    average that step do not wait for anyone, so a straggler stalls only its own group until the
    next longer-period average.

    Events of round k carry ``finish`` = the time every worker has ended step k (non-decreasing),
    ``start`` and ``compute_finish`` = each worker's own start and end.
    """
    num_steps = _check_count(num_steps, "num_steps")
    n = timing.num_workers
    lv = check_levels(levels, n)
    warmup = check_warmup(warmup)
    comm = float(comm_time)
    if not (math.isfinite(comm) and comm >= 0):
        raise ValueError(f"comm_time must be finite and >= 0; got {comm_time!r}")
    dur = timing.durations(num_steps)
    if not np.all(np.isfinite(dur)):
        raise ValueError(f"num_steps={num_steps} exceeds the jobs the trace records for every worker")
    begin = np.zeros(n)
    worker_l, start_l, finish_l, compute_l = [], [], [], []
    for k in range(num_steps):
        end = _advance(timing, begin, dur[:, k])
        order = np.lexsort((np.arange(n), end))
        worker_l.append(order)
        start_l.append(begin[order])
        compute_l.append(end[order])
        finish_l.append(np.full(n, end.max()))
        size = sync_level(k, lv, warmup)
        if size:
            group_end = end.reshape(n // size, size).max(axis=1)
            begin = np.repeat(group_end, size) + comm
        else:
            begin = end
    return _rounds(timing, worker_l, start_l, finish_l, None,
                   description or f"hierarchical local steps, levels {dict(lv)}, warm-up {warmup}, {num_steps} steps",
                   compute_finish=compute_l)


def stale_synchronous(timing: Timing, *, num_jobs: int, groups, bound: int | None, description: str = "") -> Schedule:
    """Stale synchronous parallel within groups (SSP; the intra-group rule of GSP/GSSP, spec
    mitigation.md §5): a worker that has completed ``c_i`` iterations may start another only while
    ``c_i <= min_{j in its group} c_j + bound``; otherwise it waits, and it is released the moment
    the slowest of its group reports. ``bound=None``: no waiting (:func:`asynchronous`).

    A release is an event of its own: a ``pull_only``, undelivered event at the release time
    (``start`` = when the worker began to wait), so the released worker computes on the model as
    it is then, not as it was when it reported. Releases follow the report that caused them, in
    worker order. ``num_jobs`` counts the reports (the delivered events), not the releases.

    Args:
      groups: one group index per worker (workers of a group share the bound).
      bound: s ≥ 0, or None.
    """
    n = timing.num_workers
    num_jobs = _check_count(num_jobs, "num_jobs")
    group = np.asarray(groups)
    if group.shape != (n,) or not np.issubdtype(group.dtype, np.integer) or np.any(group < 0):
        raise ValueError(f"groups must give one group index (>= 0) per worker ({n}); got {groups!r}")
    if bound is not None and (isinstance(bound, bool) or int(bound) != bound or bound < 0):
        raise ValueError(f"bound must be an integer >= 0 or None (no waiting); got {bound!r}")
    members = {int(g): np.flatnonzero(group == g) for g in np.unique(group)}
    jobs = int(num_jobs) + 8
    while True:
        dur = timing.durations(jobs)
        if not np.all(np.isfinite(dur)):
            raise ValueError("the timing model ran out of recorded jobs")
        out = _ssp_events(timing, dur, group, members, bound, num_jobs)
        if out is not None:
            break
        jobs *= 2
    worker, start, finish, compute, pull = (np.asarray(a) for a in out)
    delivered = ~pull
    return Schedule(
        worker=worker.astype(np.int32), start=start, finish=finish,
        version=_versions_async(worker, delivered, n), delivered=delivered,
        round=np.full(worker.shape[0], -1, dtype=np.int64), num_workers=n, policy="async",
        mean_durations=np.asarray(timing.mean_durations, dtype=np.float64).copy(),
        description=description or f"SSP bound {bound} in {len(members)} group(s), {type(timing).__name__}, {num_jobs} jobs",
        compute_finish=compute, job_key=_job_key(timing), pull_only=pull)


def _ssp_events(timing, dur, group, members, bound, num_jobs):
    """The event lists of :func:`stale_synchronous`, or None if ``dur`` has too few jobs."""
    n = dur.shape[0]
    count = np.zeros(n, np.int64)  # completed iterations
    J = _Jobs(timing, dur)
    began = J.began
    waiting_since = np.full(n, np.nan)
    ev_w, ev_s, ev_f, ev_c, ev_p = [], [], [], [], []

    def launch(i, t):
        return J.launch(i, t, 0)

    for i in range(n):
        if not launch(i, 0.0):
            return None
    reports = 0
    while reports < num_jobs:
        t, i = J.pop()
        count[i] += 1
        reports += 1
        ev_w.append(i), ev_s.append(began[i]), ev_f.append(t), ev_c.append(t), ev_p.append(False)
        peers = members[int(group[i])]
        low = count[peers].min()
        if bound is None or count[i] <= low + bound:
            if not launch(i, t):
                return None
        else:
            waiting_since[i] = t
        for j in peers:  # releases, in worker order
            if j != i and not np.isnan(waiting_since[j]) and count[j] <= low + bound:
                ev_w.append(j), ev_s.append(waiting_since[j]), ev_f.append(t), ev_c.append(waiting_since[j])
                ev_p.append(True)
                waiting_since[j] = np.nan
                if not launch(j, t):
                    return None
    return ev_w, ev_s, ev_f, ev_c, ev_p


def time_bounded_rounds(timing: Timing, *, num_rounds: int, poll: float = 4.0, min_results: int = 1,
                        description: str = "") -> Schedule:
    """FedStrag's time-bounded rounds (spec mitigation.md §8, as in the authors' server and client).

    The server broadcasts model ``k`` (tag k) at ``T_k`` (``T_0 = 0``), then checks its queue
    every ``poll`` seconds; at the first check that finds at least ``min_results`` results queued
    it aggregates all of them, which makes model ``k + 1``, and broadcasts it at once. A client
    handles broadcasts first in, first out: its job on tag t starts at ``max(T_t, end of its job
    on t − 1)``, so a slow client builds a backlog and trains on ever older models.

    Events: every result, at its arrival, with ``tag`` = the broadcast it was trained from and
    ``round`` = the window that aggregates it (the last result of a window has ``round_end``);
    and, at each broadcast, a ``pull_only`` release for every client that was idle, waiting for
    it (tag: its last job's). The run ends with the ``num_rounds``-th aggregation. ``version`` is
    the number of results aggregated into the model a job was trained from, so ``staleness`` is
    the number of results aggregated since.

    Args:
      num_rounds: aggregations (≥ 1).
      poll: seconds between queue checks (> 0); the authors' code uses 4.
      min_results: results the queue must hold for a check to aggregate (1 ≤ m ≤ n; the code: 1).
    """
    n = timing.num_workers
    num_rounds = _check_count(num_rounds, "num_rounds")
    poll = float(poll)
    if not (math.isfinite(poll) and poll > 0):
        raise ValueError(f"poll must be a finite number of seconds > 0; got {poll!r}")
    if isinstance(min_results, bool) or int(min_results) != min_results or not (1 <= min_results <= n):
        raise ValueError(f"min_results must be an integer in [1, {n}] (the number of clients); got {min_results!r}")
    # A client's jobs are on broadcasts 0, 1, ..., each below num_rounds: that many jobs suffice.
    dur = timing.durations(num_rounds)
    if not np.all(np.isfinite(dur)):
        raise ValueError(f"num_rounds={num_rounds} exceeds the jobs the trace records for every worker")
    out = _time_bounded_events(timing, dur, num_rounds, poll, int(min_results))
    worker, start, finish, tag, window, pull, closes = (np.asarray(a) for a in out)
    return Schedule(
        worker=worker.astype(np.int32), start=start, finish=finish,
        version=_versions_tagged(tag, window, pull, ~pull),
        delivered=~pull, round=window.astype(np.int64), num_workers=n, policy="async",
        mean_durations=np.asarray(timing.mean_durations, dtype=np.float64).copy(),
        description=description or (f"time-bounded rounds (poll {poll:g} s, ≥ {min_results} result(s)), "
                                    f"{type(timing).__name__}, {num_rounds} rounds"),
        job_key=_job_key(timing), pull_only=pull, tag=tag.astype(np.int64),
        applied_at=np.where(pull, finish, closes[window - 1]))


def _time_bounded_events(timing, dur, num_rounds, poll, min_results):
    """The event lists of :func:`time_bounded_rounds`."""
    n = dur.shape[0]
    J = _Jobs(timing, dur)
    heap, began, job_tag = J.heap, J.began, J.label  # job_tag: the job in flight's

    def launch(i, t, tag):
        if not J.launch(i, t, tag):
            raise AssertionError("time_bounded_rounds: a client started more jobs than rounds")
    waiting: dict = {}  # clients idle until the next broadcast: worker -> since when
    ev = {k: [] for k in ("w", "s", "f", "tag", "win", "pull")}

    def record(i, s, f, tag, window, pull):
        for k, v in zip(ev, (i, s, f, tag, window, pull)):
            ev[k].append(v)

    for i in range(n):
        launch(i, 0.0, 0)
    k, T = 0, 0.0  # the latest broadcast and its time
    closes = []  # when each round closed
    while k < num_rounds:
        queued, check = 0, None
        while True:
            if check is None and queued >= min_results:
                # the first check at or after the arrival that filled the queue
                last = ev["f"][-1]
                check = T + poll * max(1, math.ceil((last - T) / poll - 1e-12))
            if not heap or (check is not None and heap[0][0] > check):
                break
            f, i = J.pop()
            record(i, began[i], f, job_tag[i], k + 1, False)
            queued += 1
            if job_tag[i] + 1 <= k:  # its backlog holds the next broadcast already
                launch(i, f, job_tag[i] + 1)
            else:
                waiting[i] = f
        if check is None:  # every client is busy or waits with a result queued, so m <= n are queued
            raise AssertionError("time_bounded_rounds: no check can close the round")
        k, T = k + 1, check
        closes.append(T)
        if k == num_rounds:
            break
        for i in sorted(waiting):  # releases, in worker order
            record(i, waiting[i], T, job_tag[i], k + 1, True)
            launch(i, T, k)
        waiting = {}
    return ev["w"], ev["s"], ev["f"], ev["tag"], ev["win"], ev["pull"], closes


# --- convenience constructors (the public names) ----------------------------------------------


def fixed_computation(taus, *, num_events: int) -> Schedule:
    """Asynchronous workers with fixed computation times: worker i reports at τ_i, 2τ_i, ...

    Args:
      taus: τ_i > 0, one per worker.
      num_events: how many arrivals the schedule holds (≥ 1).
    """
    timing = FixedTiming(np.asarray(taus, dtype=np.float64))
    return asynchronous(timing, num_events=num_events, description=f"fixed computation, τ={_short(timing.taus)}")


def random_durations(
    taus, *, num_events: int, noise: str = "exponential", scale=1.0, shape: float = 1.0, seed: int = 0
) -> Schedule:
    """Asynchronous workers whose every job takes τ_i + η (see :class:`RandomTiming`)."""
    timing = RandomTiming(np.asarray(taus, dtype=np.float64), noise=noise, scale=scale, shape=shape, seed=seed)
    return asynchronous(
        timing,
        num_events=num_events,
        description=f"random durations τ+{noise}(scale), τ={_short(timing.taus)}, seed {seed}",
    )


def synchronous(taus, *, num_rounds: int, noise: str | None = None, scale=1.0, seed: int = 0) -> Schedule:
    """Barrier rounds with fixed (``noise=None``) or random per-job durations."""
    taus = np.asarray(taus, dtype=np.float64)
    timing = FixedTiming(taus) if noise is None else RandomTiming(taus, noise=noise, scale=scale, seed=seed)
    return barrier(timing, num_rounds=num_rounds)


def read_trace(path: str | os.PathLike) -> TraceTiming:
    """Read a CSV trace with columns ``worker`` and ``duration`` (one row per job, in order).

    Workers are numbered 0..n−1; every worker from 0 to the largest index must appear.
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"trace file {path!r} does not exist; expected a CSV with columns worker,duration")
    with open(path, newline="") as fh:
        reader = csv.DictReader(fh)
        columns = reader.fieldnames or []
        missing = [c for c in ("worker", "duration") if c not in columns]
        if missing:
            raise ValueError(
                f"trace file {path!r} lacks column(s) {missing}; found {columns}, "
                "expected a CSV header with at least: worker,duration"
            )
        per_worker: dict[int, list[float]] = {}
        for line, row in enumerate(reader, start=2):
            try:
                w = int(row["worker"])
                d = float(row["duration"])
            except (TypeError, ValueError):
                raise ValueError(f"trace file {path!r}, line {line}: worker must be an integer and duration a number; got {row}") from None
            if w < 0:
                raise ValueError(f"trace file {path!r}, line {line}: worker must be >= 0; got {w}")
            if not (math.isfinite(d) and d > 0):
                raise ValueError(f"trace file {path!r}, line {line}: duration must be positive and finite; got {d}")
            per_worker.setdefault(w, []).append(d)
    if not per_worker:
        raise ValueError(f"trace file {path!r} has no rows; expected at least one job per worker")
    n = max(per_worker) + 1
    absent = [i for i in range(n) if i not in per_worker]
    if absent:
        raise ValueError(f"trace file {path!r} has no jobs for worker(s) {absent}; workers must be numbered 0..{n - 1}")
    return TraceTiming(tuple(np.asarray(per_worker[i]) for i in range(n)))


def from_trace(path: str | os.PathLike, *, num_events: int | None = None) -> Schedule:
    """A schedule from a recorded trace.

    Two kinds of trace:

    * durations only (columns ``worker,duration``, see :func:`read_trace`): asynchronous dispatch
      with those job durations. With ``num_events=None`` the schedule holds every event that
      finishes no later than the moment the first worker runs out of recorded jobs.
    * a real run's trace (:meth:`sim.real.RealResult.write_trace`: it has an ``applied`` column
      and a JSON file beside it): the server's own order, exactly. Event e is the e-th result the
      server applied, at time ``applied``; the job's start is ``start`` and its end on the worker
      ``finish`` (kept as ``compute_finish``). The schedule carries the run's base key as
      ``job_key``, so the engine keys job k of worker i as the real worker did; run it with
      ``sim.real.replay_key(path)``. ``num_events`` keeps the first that many.
    """
    path = os.fspath(path)
    if os.path.exists(path):
        with open(path, newline="") as fh:
            header = next(csv.reader(fh), [])
        if "applied" in header:
            return _from_real_trace(path, num_events)
    return asynchronous(read_trace(path), num_events=num_events, description=f"trace {path}")


def _from_real_trace(path: str, num_events: int | None) -> Schedule:
    import json

    meta_path = path + ".json"
    if not os.path.exists(meta_path):
        raise FileNotFoundError(f"{meta_path!r} does not exist: a real run's trace is the CSV and a JSON beside it")
    with open(meta_path) as fh:
        meta = json.load(fh)
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    if not rows:
        raise ValueError(f"trace file {path!r} has no events")
    need = ("event", "worker", "job", "start", "finish", "applied", "version", "delivered")
    missing = [c for c in need if c not in rows[0]]
    if missing:
        raise ValueError(f"trace file {path!r} lacks column(s) {missing}")
    if num_events is not None:
        rows = rows[: _check_count(num_events, "num_events")]
    col = lambda c, t: np.asarray([t(r[c]) for r in rows])  # noqa: E731
    event, worker, job = col("event", int), col("worker", int), col("job", int)
    if not np.array_equal(event, np.arange(len(rows))):
        raise ValueError(f"trace file {path!r}: events must be numbered 0, 1, 2, ... in the order applied")
    applied, start, finish = col("applied", float), col("start", float), col("finish", float)
    if np.any(np.diff(applied) < 0):
        raise ValueError(f"trace file {path!r}: 'applied' times must not decrease (they are the server's order)")
    n = int(meta["num_workers"])
    if worker.min() < 0 or worker.max() >= n:
        raise ValueError(f"trace file {path!r}: workers must be in 0..{n - 1}")
    delivered = col("delivered", int).astype(bool)
    version = _versions_async(worker, delivered, n)
    if not np.array_equal(version, col("version", int)):
        e = int(np.argmax(version != col("version", int)))
        raise ValueError(f"trace file {path!r}, event {e}: the recorded server version {rows[e]['version']} is not the "
                         f"asynchronous one ({version[e]}): the trace is not of a server that hands each worker the "
                         "model right after applying its result")
    sched = Schedule(
        worker=worker.astype(np.int32), start=start, finish=applied, version=version, delivered=delivered,
        round=np.full(len(rows), -1, np.int64), num_workers=n, policy="async",
        mean_durations=np.array([np.mean((finish - start)[worker == i]) if np.any(worker == i) else np.nan
                                 for i in range(n)]),
        description=f"replay of the real run {path}", compute_finish=finish,
        job_key=np.asarray(meta["base_key"], np.uint32))
    if not np.array_equal(sched.job_number, job):
        raise ValueError(f"trace file {path!r}: each worker's job numbers must run 0, 1, 2, ... in the order applied")
    return sched


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
