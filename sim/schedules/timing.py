"""Timing models: how long each job of each worker takes (a table of durations, drawn on the host).

Fixed computation, random durations (a named noise distribution), replay of recorded durations,
data-dependent durations (the examples a job draws set its time), and time-varying speeds on top
of any of them (slowdowns and stalls). A dispatch policy (:mod:`sim.schedules.dispatch`) turns a
timing model into a :class:`~sim.schedules.schedule.Schedule`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Protocol

import numpy as np

from delaylab.sim.schedules.schedule import _check_count, _check_taus, _short, as_numbers

NOISE_KINDS = ("exponential", "lognormal", "uniform", "halfnormal")


class Timing(Protocol):
    """How long jobs take: ``durations(J)`` gives an [n, J] table (job k of worker i)."""

    num_workers: int
    mean_durations: np.ndarray
    exact_clock: bool  # True when job k of worker i finishes at exactly k·τ_i

    def durations(self, jobs_per_worker: int) -> np.ndarray: ...


@dataclasses.dataclass(frozen=True, eq=False)
class FixedTiming:
    """Fixed computation: every job of worker i takes exactly τ_i (docs/theory.md §1)."""

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
        scale = np.broadcast_to(as_numbers(self.scale, "scale"), taus.shape).copy()
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
    """Replay of recorded job durations: worker i's k-th job takes ``table[i][k]``, finite and
    ≥ 0 (a zero-length job, as integer-tick traces record, arrives when it starts; a negative one
    would arrive before it started, so it is refused, naming the worker and job)."""

    table: tuple
    exact_clock = False

    def __post_init__(self):
        for i, d in enumerate(self.table):
            try:
                d = np.asarray(d, dtype=np.float64)
            except (TypeError, ValueError):
                raise ValueError(f"TraceTiming: worker {i}'s durations must be numbers; got {d!r}") from None
            if d.ndim != 1:
                raise ValueError(f"TraceTiming: worker {i}'s durations must be a 1-D sequence; got shape {d.shape}")
            bad = np.flatnonzero(~(np.isfinite(d) & (d >= 0)))
            if bad.size:
                k = int(bad[0])
                raise ValueError(f"TraceTiming: worker {i}, job {k}: duration must be finite and >= 0; got {d[k]}")

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
        return _programs()["keys"](key, np.int32(worker), jobs, steps)


@functools.lru_cache(maxsize=None)
def _programs() -> dict:
    """The compiled key and index programs of :func:`job_keys` and
    :meth:`ExampleCostTiming.drawn_indices`. Compiled, not run op by op: a figure asks for them
    once per worker and run, and each eager call re-traces its ``vmap`` (benchmarks/RESULTS.md has
    the cost); the bits are the same either way (integer PRNG arithmetic). Built on first use, so
    that importing the module does not import jax."""
    import jax

    from delaylab.sim.sampling import sample_indices

    @functools.partial(jax.jit, static_argnums=(2, 3))
    def keys(key, worker, jobs, steps):
        base = jax.random.fold_in(key, worker)
        ks = jax.vmap(lambda k: jax.random.fold_in(base, k))(np.arange(jobs))
        if steps is None:
            return ks
        return jax.vmap(lambda k: jax.vmap(lambda s: jax.random.fold_in(k, s))(np.arange(steps)))(ks)

    @functools.partial(jax.jit, static_argnums=(1, 2))
    def indices(flat, count, size):
        return jax.vmap(lambda k: sample_indices(k, count, size))(flat)

    return {"keys": keys, "indices": indices}


@dataclasses.dataclass(frozen=True, eq=False)
class ExampleCostTiming:
    """Data-dependent durations: a job's duration is set by the examples it draws.

    Worker i's shard has m examples with static costs ``costs[i]`` (for example sequence lengths,
    or any table the user provides). Job k of worker i draws ``batch_size`` of them with the
    problem's own sampler (``sim.sampling.sample_indices``: uniform with replacement) and the key
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

        ks = job_keys(self.key, worker, jobs, self.steps)
        with jax.threefry_partitionable(True):
            idx = _programs()["indices"](ks.reshape(-1), self.batch_size, int(self.costs.shape[1]))
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
