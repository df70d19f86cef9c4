"""The engine's public face: :func:`run` and :func:`sweep` of any :class:`algos.base.Algorithm` on a
problem along a schedule, with the options they share (:class:`Options`).

How it is built (docs/layout.md; the event model is docs/theory.md §1): :mod:`sim.core` holds the compiled run (one run's
carry, chunks, blocks and metrics, as pure functions); this module compiles it in one place
(:func:`_program`: a segment of one run, or of a sweep's runs laid over the devices by
:mod:`sim.parallel`); :mod:`sim.driver` calls it segment by segment from the host (one segment for
a run in one call), with progress and checkpoints. Everything a run is checked for (the
algorithm's hyperparameters, keys, options) is checked here, before anything compiles.

The engine always traces with JAX's partitionable threefry (``jax.threefry_partitionable(True)``,
JAX's current default), whatever the caller's global setting, so the random stream is pinned.
(The legacy stream was measured 1.2-1.5x slower inside the engine on CPU, though faster in
isolation.)
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from typing import Any, Mapping, Optional

import jax
import jax.numpy as jnp
import numpy as np

from delaylab.algos.base import Algorithm, Event, check_protocol
from delaylab.sim import core, driver, parallel
from delaylab.sim.blocks import BlockPlan, plan_blocks
from delaylab.sim.core import WorkerOracle, Workers  # noqa: F401  (part of this module's API: the oracle a job is handed, the workers telemetry sees)
from delaylab.sim.problems import Problem
from delaylab.sim.schedules import Schedule

PyTree = Any


@dataclasses.dataclass(frozen=True)
class Divergence:
    """Where a run first produced a non-finite server model."""

    event: int
    worker: int
    time: float

    def message(self) -> str:
        return (
            f"the run diverged at event {self.event} (worker {self.worker}, simulated time "
            f"{self.time:.6g}): the server model became NaN or infinite. The update was not "
            "applied, the run stopped there, and metrics up to the last log point before it are kept. "
            "Try a smaller step size."
        )


@dataclasses.dataclass(frozen=True, eq=False)
class RunResult:
    """What a run (or, with leading batch axes, a sweep) returns.

    Attributes:
      params: the final server model (pytree of arrays); after a divergence, the last finite one.
      state: the final server state (after a divergence it holds the non-finite values).
      metrics: per log point (first row: before any event): ``time``, ``events`` (processed so
        far), ``loss`` (F), ``grad_norm`` (‖∇F‖), ``dist_<name>`` for every target (``optimum``
        is the problem's minimiser where known), ``updates_per_worker`` [.., n] (cumulative
        delivered arrivals), ``staleness_mean`` and ``staleness_max`` (over the chunk).
      worker_stats: per worker, the sum over its arrivals of each statistic the algorithm
        reports (for ASGD: ``stepsize``, the step mass, whose shares are the implicit weights).
      tail_average: the time-weighted average of the server model over ``tail_window``.
      tail_window: (t0, t1) in simulated time.
      diverged_at: first event that produced a non-finite model, −1 if none (batched in sweeps).
      schedule: the schedule's summary.
      block_size: slots per block; mean_fill: events per block / block_size.
      convolution: how the problem's convolutions were computed (``Problem.convolution``; None
        for a problem without any).
    """

    params: PyTree
    state: PyTree
    metrics: dict
    worker_stats: dict
    tail_average: PyTree
    tail_window: tuple
    diverged_at: np.ndarray
    schedule: dict
    block_size: int
    mean_fill: float
    divergence: Optional[Divergence] = None
    convolution: Optional[str] = None



# --- options ------------------------------------------------------------------------------------

_SWEEP_ONLY = ("runs", "devices", "run_batch")


@dataclasses.dataclass(frozen=True)
class Options:
    """How a run or a sweep is carried out: everything but the algorithm, problem, schedule, keys
    and hyperparameters. :func:`run` and :func:`sweep` take one (``options=``) or its fields as
    keyword arguments (which override it). Checked when made, before anything compiles.

    Attributes:
      log_every: events per metrics log point (default: about 100 log points).
      block_size: slots per block of simultaneous worker jobs; ``"auto"`` chooses from the
        schedule, 1 is the event-by-event engine (see :mod:`sim.blocks`).
      targets: named points whose distance to the server model is logged (``dist_<name>``).
      average_from: the tail average covers simulated time [average_from·T, T].
      record_params: also log the server model itself at every log point (``metrics["params"]``).
      batching: how a block's worker jobs run: ``"vmap"`` (batched) or ``"map"`` (``lax.map``,
        one after another; see benchmarks/RESULTS.md for when each is faster).
      telemetry: ``telemetry(data, server_params, workers) -> {name: array}``, computed inside the
        compiled run at every log point; ``workers`` is a :class:`sim.core.Workers` (what each
        worker holds, stacked on a leading worker axis, read through the algorithm's worker half:
        ``workers.models``, ``workers.after_job(keys)``); logged as ``metrics["telemetry/<name>"]``.
        Give a hashable function (a module-level one or a frozen dataclass such as
        :class:`sim.telemetry.WorkerSpread`): it keys the compiled code.
      segment: run in segments of this many log points (chunks), one compiled call each, the
        state staying on the device between them; the numbers are the same, bit for bit, as in
        one call. Default: one call, unless ``progress`` or ``checkpoint`` asks for segments
        (then about 20 segments).
      progress: ``True`` for a progress bar on stderr (:class:`sim.progress.ProgressBar`), or a
        function called with a :class:`sim.progress.Progress` after every segment.
      checkpoint: a file path (``.npz``). If it exists, the run resumes from it, after checking
        that it was written for this very run (:mod:`sim.checkpoint`; otherwise
        :class:`sim.checkpoint.CheckpointMismatch` says what differs); the run writes it every
        ``checkpoint_every`` seconds (0: after every segment) and when it ends.
      runs: (sweeps) "vmap" (the runs batched) or "map" (one after another, inside the same
        compiled call; same numbers up to floating-point reassociation).
      devices: (sweeps) the devices the runs are spread over (default: all of ``jax.devices()``,
        every host's where ``jax.distributed`` is initialised); see :mod:`sim.parallel`.
      run_batch: (sweeps) how many runs a device batches at once; XLA chooses kernels by batch
        width, so the width, not the number of devices, decides the last bits. Default:
        ⌈runs / jax.device_count()⌉ (see :func:`sim.parallel.default_run_batch`).
    """

    log_every: Optional[int] = None
    block_size: Any = "auto"
    targets: Optional[Mapping] = None
    average_from: float = 0.5
    record_params: bool = False
    batching: str = "vmap"
    telemetry: Any = None
    segment: Optional[int] = None
    progress: Any = None
    checkpoint: Optional[str] = None
    checkpoint_every: float = 60.0
    runs: str = "vmap"
    devices: Any = None
    run_batch: Optional[int] = None

    def __post_init__(self):
        if self.log_every is not None and (isinstance(self.log_every, bool) or not isinstance(self.log_every, (int, np.integer))
                                           or self.log_every < 1):
            raise ValueError(f"log_every must be a whole number of events >= 1; got {self.log_every!r}")
        if not (0.0 <= float(self.average_from) < 1.0):
            raise ValueError(f"average_from must be in [0, 1) (a fraction of the run's end time); got {self.average_from!r}")
        if self.batching not in ("vmap", "map"):
            raise ValueError(f"batching must be 'vmap' or 'map'; got {self.batching!r}")
        if self.runs not in ("vmap", "map"):
            raise ValueError(f"runs must be 'vmap' or 'map'; got {self.runs!r}")
        if self.telemetry is not None and not callable(self.telemetry):
            raise TypeError("telemetry must be a function (data, server_params, workers) -> dict; "
                            f"got {type(self.telemetry).__name__}")
        seg = self.segment
        if seg is not None and (isinstance(seg, bool) or not isinstance(seg, (int, np.integer)) or seg < 1):
            raise ValueError(f"segment must be a whole number of log points >= 1; got {seg!r}")
        if self.checkpoint is not None and not isinstance(self.checkpoint, (str, os.PathLike)):
            raise TypeError(f"checkpoint must be a file path; got {type(self.checkpoint).__name__}")
        if not (float(self.checkpoint_every) >= 0):
            raise ValueError(f"checkpoint_every must be >= 0 seconds; got {self.checkpoint_every!r}")
        p = self.progress
        if p is not None and not isinstance(p, bool) and not callable(p):
            raise TypeError(f"progress must be True, False, None or a function of sim.progress.Progress; got {p!r}")
        rb = self.run_batch
        if rb is not None and (isinstance(rb, bool) or not isinstance(rb, (int, np.integer)) or rb < 1):
            raise ValueError(f"run_batch must be a whole number of runs >= 1; got {rb!r}")

    def progress_callback(self):
        """The progress callback, or None."""
        if self.progress is True:
            from delaylab.sim.progress import ProgressBar

            return ProgressBar()
        return None if self.progress is False else self.progress

    def segment_size(self, plan: BlockPlan) -> Optional[int]:
        """Log points per segment: ``segment``; None (one call) unless progress or a checkpoint
        asks for segments, then about 20 of them."""
        if self.segment is None and (self.progress_callback() is not None or self.checkpoint is not None):
            return max(1, -(-int(plan.events.shape[0]) // 20))
        return None if self.segment is None else int(self.segment)


def _options(options: Optional[Options], kwargs: dict, *, sweep: bool) -> Options:
    if options is not None and not isinstance(options, Options):
        raise TypeError(f"options must be a sim.engine.Options; got {type(options).__name__}")
    unknown = set(kwargs) - {f.name for f in dataclasses.fields(Options)}
    if unknown:
        raise TypeError(f"unknown option(s) {sorted(unknown)}; allowed: {[f.name for f in dataclasses.fields(Options)]}")
    if not sweep:
        given = [k for k in _SWEEP_ONLY if k in kwargs] + [
            k for k in _SWEEP_ONLY if options is not None and getattr(options, k) != getattr(Options(), k)]
        if given:
            raise ValueError(f"option(s) {sorted(set(given))} apply to sim.sweep only")
    return dataclasses.replace(options or Options(), **kwargs)


# --- the compiled program: one place ------------------------------------------------------------


def _wrap_key(key_data, key_impl):
    return key_data if key_impl is None else jax.random.wrap_key_data(key_data, impl=key_impl)


def _segment_program(static: core.Static, layout, padded: tuple, start: bool, hparams, data, x0, keys, ev, targets,
                     carry, plans):
    """One segment (:func:`sim.core.segment`) of one run (``layout=None``; ``keys`` one key) or of
    a sweep's runs (``layout = (mesh, run_batch, key_impl)``; ``hparams``, ``keys`` (raw data) and
    ``carry`` with a flat runs axis laid over the mesh)."""
    if layout is None:
        return core.segment(static, padded, start, hparams, data, x0, keys, ev, targets, carry, plans)
    mesh, run_batch, key_impl = layout

    def one(h, k, c, shared):
        data, x0, ev, targets, plans = shared
        return core.segment(static, padded, start, h, data, x0, _wrap_key(k, key_impl), ev, targets, c, plans)

    return parallel.over_runs(static.runs, mesh, run_batch, one)(hparams, keys, carry, (data, x0, ev, targets, plans))


_program = jax.jit(_segment_program, static_argnums=(0, 1, 2, 3))


def compilations() -> int:
    """How many programs the engine has compiled in this process: a notebook user can check that
    rebuilding an algorithm with new hyperparameter values (or a sweep over them) compiled nothing
    new."""
    return _program._cache_size()


def _bind(static, hp, problem, keys, ev, tg, layout=None, runs: Optional[parallel.Runs] = None) -> driver.Program:
    """The compiled segment bound to a run's (``runs=None``) or a sweep's inputs."""
    if runs is None:
        shared = (problem.data, problem.x0, keys, ev, tg)

        def segment(carry, pieces, start):
            with jax.threefry_partitionable(True):
                return _program(static, None, tuple(p for _, p in pieces), start, hp, *shared, carry,
                                tuple(jnp.asarray(a) for a, _ in pieces))

        to_host = lambda t: jax.tree.map(np.asarray, t)  # noqa: E731
        return driver.Program(segment, to_host, lambda t: t, log_axis=0)

    data, x0 = parallel.replicate((problem.data, problem.x0), runs.mesh)
    ev, tg = parallel.replicate((ev, tg), runs.mesh)

    def segment(carry, pieces, start):
        plans = parallel.replicate(tuple(jnp.asarray(a) for a, _ in pieces), runs.mesh)
        with jax.threefry_partitionable(True):
            return _program(static, layout, tuple(p for _, p in pieces), start, runs.hparams, data, x0, runs.keys,
                            ev, tg, carry, plans)

    return driver.Program(segment, runs.to_host, runs.from_host, log_axis=1, runs=runs.R)


# --- run and sweep ------------------------------------------------------------------------------


def run(alg: Algorithm, problem: Problem, schedule: Schedule, *, key, hparams: Optional[dict] = None,
        options: Optional[Options] = None, **option_kwargs) -> RunResult:
    """Run ``alg`` on ``problem`` along ``schedule``.

    Args:
      alg: an :class:`algos.Algorithm`.
      problem: a :class:`sim.problems.Problem` with as many workers as the schedule.
      schedule: a :class:`sim.schedules.Schedule`.
      key: a PRNG key; event e's job uses ``fold_in(key, e)``.
      hparams: overrides of ``alg.hparams`` (same keys).
      options, **option_kwargs: how to run it (:class:`Options`: ``log_every``, ``block_size``,
        ``targets``, ``average_from``, ``record_params``, ``batching``, ``telemetry``, ``segment``,
        ``progress``, ``checkpoint``, ``checkpoint_every``).

    Returns:
      a :class:`RunResult`.
    """
    opts = _options(options, option_kwargs, sweep=False)
    _check_key(key, batched=False)
    _check_job_key(schedule, key, batched=False)
    static, hp, _, plan, ev, window, tg = _prepare(alg, problem, schedule, hparams=hparams, opts=opts, batched=False)
    segment = opts.segment_size(plan)
    fp = None if opts.checkpoint is None else driver.fingerprint(alg, problem, schedule, static, hp, key, plan, segment, tg)
    out = driver.drive(_bind(static, hp, problem, key, ev, tg), plan, schedule, segment=segment,
                       progress=opts.progress_callback(), checkpoint=opts.checkpoint,
                       checkpoint_every=opts.checkpoint_every, fingerprint=fp, keys=key)
    metrics = {**_host_metrics(schedule, plan), **out["metrics"]}
    bad = int(out["bad"])
    divergence = None
    if bad >= 0:
        divergence = Divergence(event=bad, worker=int(schedule.worker[bad]), time=float(schedule.finish[bad]))
        keep = int(np.sum(metrics["events"] <= bad))  # log points taken before the bad event
        metrics = {k: v[:keep] for k, v in metrics.items()}
        warnings.warn(divergence.message(), RuntimeWarning, stacklevel=2)
    return RunResult(
        params=out["params"], state=out["state"], metrics=metrics, worker_stats=out["stats"],
        tail_average=out["tail"], tail_window=window, diverged_at=np.asarray(bad), schedule=schedule.summary(),
        block_size=plan.block_size, mean_fill=plan.mean_fill, divergence=divergence, convolution=problem.convolution)


def _sweep_hparams(alg: Algorithm, hparams: Optional[dict]) -> dict:
    if hparams is None:  # the defaults, as a grid of one
        first = next(iter(alg.hparams))
        return {first: np.asarray(alg.hparams[first])[None]}
    return hparams


def sweep(alg: Algorithm, problem: Problem, schedule: Schedule, *, keys, hparams: Optional[dict] = None,
          options: Optional[Options] = None, **option_kwargs) -> RunResult:
    """Many runs in one compiled call: a grid of hyperparameter values × seeds.

    Args:
      keys: a batch of S PRNG keys (one run per key), e.g. ``jax.random.split(key, 256)``.
      hparams: None (the algorithm's defaults, grid size 1), or overrides in which at least one
        hyperparameter has a leading grid axis of size H (all swept ones the same H).
      options, **option_kwargs: as in :func:`run`, and ``runs``, ``devices``, ``run_batch``
        (:class:`Options`). The H × S runs are split evenly over the devices, the last one
        repeated to fill the last device (and dropped after); a progress callback sees the
        median loss over the runs; a checkpoint holds every run's state.

    Returns:
      a :class:`RunResult` whose arrays have leading axes [H, S]. Metrics of runs that diverged
      are NaN from the first log point at or after the divergence; ``diverged_at`` [H, S] gives
      the event (−1: none). Changing only hyperparameter values or keys reuses the compiled code.
    """
    opts = _options(options, option_kwargs, sweep=True)
    _check_key(keys, batched=True)
    _check_job_key(schedule, keys, batched=True)
    static, hp, _, plan, ev, window, tg = _prepare(alg, problem, schedule, hparams=_sweep_hparams(alg, hparams),
                                                   opts=opts, batched=True, num_keys=len(keys))
    runs = parallel.Runs(hp, keys, opts.devices, opts.run_batch)
    segment = opts.segment_size(plan)
    fp = None if opts.checkpoint is None else driver.fingerprint(alg, problem, schedule, static, hp, keys, plan,
                                                                 segment, tg, run_batch=runs.run_batch)
    layout = (runs.mesh, runs.run_batch, runs.key_impl)
    out = driver.drive(_bind(static, hp, problem, keys, ev, tg, layout, runs), plan, schedule, segment=segment,
                       progress=opts.progress_callback(), checkpoint=opts.checkpoint,
                       checkpoint_every=opts.checkpoint_every, fingerprint=fp, keys=keys)
    out = runs.unflatten(out)
    host = _host_metrics(schedule, plan)
    bad = out["bad"]
    metrics = dict(host)
    after = (bad[..., None] >= 0) & (host["events"][None, None, :] > bad[..., None])  # [H, S, logs]

    def blank(v):
        return np.where(after.reshape(after.shape + (1,) * (v.ndim - 3)), np.nan, v.astype(np.float64))

    for k, v in out["metrics"].items():
        metrics[k] = jax.tree.map(blank, v)
    if np.any(bad >= 0):
        warnings.warn(f"{int(np.sum(bad >= 0))} of {bad.size} runs diverged (see diverged_at); "
                      "their metrics are NaN after the divergence", RuntimeWarning, stacklevel=2)
    return RunResult(
        params=out["params"], state=out["state"], metrics=metrics, worker_stats=out["stats"],
        tail_average=out["tail"], tail_window=window, diverged_at=bad, schedule=schedule.summary(),
        block_size=plan.block_size, mean_fill=plan.mean_fill, convolution=problem.convolution)


def compiled_text(alg: Algorithm, problem: Problem, schedule: Schedule, *, keys=None, hparams: Optional[dict] = None,
                  options: Optional[Options] = None, **option_kwargs) -> str:
    """The optimised XLA program of a run in one call (``keys=None``) or of a sweep (``keys`` a
    batch), as text.

    For checking what XLA made of an algorithm, e.g. that a per-worker table is updated in
    place rather than copied at every event (tests/algos/test_rows.py). Same arguments as
    :func:`run` and :func:`sweep`; nothing is executed.
    """
    batched = keys is not None
    opts = _options(options, option_kwargs, sweep=batched)
    if batched:
        hparams = _sweep_hparams(alg, hparams)
    static, hp, _, plan, ev, _, tg = _prepare(alg, problem, schedule, hparams=hparams, opts=opts, batched=batched,
                                              num_keys=len(keys) if batched else 1)
    pieces = driver.segments(plan, None)[0].pieces
    padded, plans = tuple(p for _, p in pieces), tuple(jnp.asarray(a) for a, _ in pieces)
    with jax.threefry_partitionable(True):
        if batched:
            runs = parallel.Runs(hp, keys, opts.devices, opts.run_batch)
            lowered = _program.lower(static, (runs.mesh, runs.run_batch, runs.key_impl), padded, True, runs.hparams,
                                     problem.data, problem.x0, runs.keys, ev, tg, None, plans)
        else:
            lowered = _program.lower(static, None, padded, True, hp, problem.data, problem.x0, jax.random.key(0), ev,
                                     tg, None, plans)
    return lowered.compile().as_text()


# --- host-side preparation --------------------------------------------------------------------


def _float_dtype_of(x0) -> jnp.dtype:
    leaves = [l for l in jax.tree.leaves(x0) if jnp.issubdtype(jnp.asarray(l).dtype, jnp.floating)]
    return jnp.asarray(leaves[0]).dtype if leaves else jnp.asarray(0.0).dtype


def _prepare_hparams(alg: Algorithm, overrides: Optional[dict], dtype, *, batched: bool, num_workers: int):
    hp = dict(alg.hparams)
    if overrides:
        unknown = set(overrides) - set(hp)
        if unknown:
            raise ValueError(f"{alg.name}: unknown hyperparameters {sorted(unknown)}; allowed: {sorted(hp)}")
        hp.update(overrides)

    def cast(v):
        a = np.asarray(v)
        return jnp.asarray(a, dtype) if np.issubdtype(a.dtype, np.floating) else jnp.asarray(a)

    hp = {k: cast(v) for k, v in hp.items()}
    if alg.validate is not None:
        alg.validate({k: np.asarray(v) for k, v in hp.items()}, num_workers)
    if not batched:
        return hp, None
    # A sweep: leaves given in ``overrides`` carry the grid axis; defaults are broadcast to it.
    sizes = {k: int(np.shape(overrides[k])[0]) for k in (overrides or {}) if np.ndim(overrides[k]) > np.ndim(alg.hparams[k])}
    if not sizes:
        raise ValueError(
            "sweep: hparams must give at least one hyperparameter with a leading grid axis "
            f"(for example {{'stepsize': [0.01, 0.02]}}); got {overrides!r}"
        )
    if len(set(sizes.values())) != 1:
        raise ValueError(f"sweep: every swept hyperparameter needs the same number of values; got {sizes}")
    H = next(iter(sizes.values()))
    hp = {k: v if k in sizes else jnp.broadcast_to(v, (H,) + v.shape) for k, v in hp.items()}
    return hp, H


def _event_arrays(schedule: Schedule, average_from: float, dtype):
    t = schedule.finish
    T = schedule.end_time
    t0 = average_from * T
    t_next = np.r_[t[1:], T]
    weight = np.clip(np.minimum(t_next, T) - np.maximum(t, t0), 0.0, None)
    time_dtype = jnp.asarray(0.0).dtype  # float64 when x64 is on, else float32
    extra = {} if schedule.job_key is None else {"job": jnp.asarray(schedule.job_number, jnp.int32)}
    return {
        **extra,
        "worker": jnp.asarray(schedule.worker, jnp.int32),
        "time": jnp.asarray(t, time_dtype),
        "staleness": jnp.asarray(schedule.staleness, jnp.int32),
        "delivered": jnp.asarray(schedule.delivered),
        "tag": jnp.asarray(np.zeros(schedule.num_events, np.int32) if schedule.tag is None else schedule.tag, jnp.int32),
        "round_end": jnp.asarray(schedule.round_end),
        "tail_weight": jnp.asarray(weight, time_dtype),
    }, (t0, T)


def _validate(alg: Algorithm, problem: Problem, schedule: Schedule) -> bool:
    check_protocol(alg)
    if not isinstance(problem, Problem):
        raise TypeError(f"problem must be a sim.problems.Problem; got {type(problem).__name__}")
    if not isinstance(schedule, Schedule):
        raise TypeError(f"schedule must be a sim.schedules.Schedule; got {type(schedule).__name__}")
    if schedule.num_workers != problem.num_workers:
        raise ValueError(
            f"the schedule has {schedule.num_workers} workers but the problem has {problem.num_workers}; "
            "they must match"
        )
    if alg.check_schedule is not None:
        alg.check_schedule(schedule)
    return alg.server.by_round


def _shapes(tree) -> tuple:
    leaves, treedef = jax.tree.flatten(tree)
    return treedef, tuple((tuple(x.shape), jnp.dtype(x.dtype)) for x in leaves)


_CONTRACTS_CHECKED: set = set()


def check_contract(alg: Algorithm, problem: Problem) -> None:
    """Trace (without compiling) one job and one arrival (or a round of one) of ``alg`` on
    ``problem``, and raise ``ValueError`` naming the algorithm when what its halves return breaks
    the protocol of :mod:`delaylab.algos.base`: the handler must return ``(state, next_point,
    stats)`` with the state's structure kept, a next point shaped like the worker's start point, and
    a dict of scalar statistics (one per slot for a round). Errors the algorithm's own code raises
    while tracing are reported the same way. Checked once per algorithm, problem and shapes."""
    w, s = alg.worker, alg.server
    # the halves and the problem's functions are hashable (check_protocol, the engine's Static)
    key = (alg.functions, problem.fns, problem.num_workers, _shapes(problem.x0),
           tuple(sorted((k, np.shape(v), np.asarray(v).dtype.kind) for k, v in alg.hparams.items())))
    if key in _CONTRACTS_CHECKED:
        return
    hp, _ = _prepare_hparams(alg, None, _float_dtype_of(problem.x0), batched=False, num_workers=problem.num_workers)
    n, by_round = problem.num_workers, s.by_round

    def one_arrival():
        point = w.start(hp, problem.x0)
        state = s.init(hp, problem.x0, n)
        message = w.job(hp, point, WorkerOracle(problem.fns, problem.data, jnp.int32(0)), jax.random.key(0))
        event = Event(index=jnp.int32(0), worker=jnp.int32(0), time=jnp.asarray(0.0), staleness=jnp.int32(0),
                      delivered=jnp.asarray(True), tag=jnp.int32(0), round_end=jnp.asarray(False))
        if by_round:
            slot = lambda t: jax.tree.map(lambda a: jnp.asarray(a)[None], t)  # noqa: E731
            out = s.apply_round(hp, state, slot(message), slot(event), jnp.ones((1,), bool))
        else:
            out = s.apply(hp, state, message, event)
        return point, state, out

    handler = "apply_round" if by_round else "apply"
    try:
        point, state, out = jax.eval_shape(one_arrival)
    except Exception as err:  # noqa: BLE001 - the algorithm's own code, reported in one line naming it
        raise ValueError(f"{alg.name}: tracing one job and one arrival on this problem failed: "
                         f"{type(err).__name__}: {' '.join(str(err).split())[:400]}") from err
    if not isinstance(out, tuple) or len(out) != 3:
        raise ValueError(f"{alg.name}: server.{handler} must return (state, next_point, stats); got "
                         f"{type(out).__name__}{f' of {len(out)}' if isinstance(out, tuple) else ''}")
    new_state, next_point, stats = out
    if _shapes(new_state) != _shapes(state):
        raise ValueError(f"{alg.name}: server.{handler} must return a state of the structure, shapes and dtypes "
                         f"server.init gives; got {jax.tree.structure(new_state)} for {jax.tree.structure(state)}")
    want = _shapes(jax.tree.map(lambda a: jax.ShapeDtypeStruct((1,) + a.shape, a.dtype), point) if by_round else point)
    if _shapes(next_point) != want:
        raise ValueError(f"{alg.name}: server.{handler}'s next point must have the structure and shapes of the "
                         f"worker's start point{' (with a leading slot axis)' if by_round else ''}, "
                         f"{jax.tree.structure(point)}; got {jax.tree.structure(next_point)}")
    scalar = (1,) if by_round else ()
    if not isinstance(stats, dict) or any(not hasattr(v, "shape") or tuple(v.shape) != scalar
                                          for v in stats.values()):
        raise ValueError(f"{alg.name}: server.{handler}'s stats must be a dict of scalars"
                         f"{' (one per slot)' if by_round else ''}, which the engine sums per worker; got "
                         f"{ {k: getattr(v, 'shape', type(v).__name__) for k, v in stats.items()} if isinstance(stats, dict) else type(stats).__name__}")
    _CONTRACTS_CHECKED.add(key)


def _targets(problem: Problem, targets: Optional[dict], dtype) -> dict:
    out = {}
    if problem.minimiser is not None:
        out["optimum"] = jnp.asarray(problem.minimiser, dtype)
    for name, value in (targets or {}).items():
        arr = np.asarray(value, dtype=np.float64)
        shape = np.shape(problem.x0)
        if arr.shape != shape:
            raise ValueError(f"target {name!r} must have the parameters' shape {shape}; got {arr.shape}")
        out[name] = jnp.asarray(arr, dtype)
    return out


def _host_metrics(schedule: Schedule, plan: BlockPlan) -> dict:
    ends = plan.chunk_end
    delivered = schedule.delivered
    onehot = np.zeros((schedule.num_events, schedule.num_workers), dtype=np.int64)
    onehot[np.arange(schedule.num_events), schedule.worker] = delivered
    cum = np.cumsum(onehot, axis=0)
    updates = np.vstack([np.zeros((1, schedule.num_workers), np.int64), cum[ends]])
    st = schedule.staleness
    starts = np.r_[0, ends[:-1] + 1]
    st_mean = np.r_[np.nan, [st[a : b + 1].mean() for a, b in zip(starts, ends)]]
    st_max = np.r_[np.nan, [st[a : b + 1].max() for a, b in zip(starts, ends)]]
    return {
        "time": np.r_[0.0, schedule.finish[ends]],
        "events": np.r_[0, ends + 1],
        "updates_per_worker": updates,
        "staleness_mean": st_mean,
        "staleness_max": st_max,
    }


def _check_key(key, *, batched: bool):
    arr = key
    if jnp.issubdtype(getattr(arr, "dtype", np.float64), jax.dtypes.prng_key):
        ok_shape = arr.ndim == (1 if batched else 0)
    else:
        arr = np.asarray(arr)
        ok_shape = arr.dtype == np.uint32 and arr.ndim == (2 if batched else 1) and arr.shape[-1] == 2
    if not ok_shape:
        want = "a batch of keys, e.g. jax.random.split(jax.random.key(0), 16)" if batched else "one key, e.g. jax.random.key(0)"
        raise ValueError(f"key must be {want}; got {getattr(key, 'shape', key)!r}")


def _check_job_key(schedule: Schedule, keys, *, batched: bool) -> None:
    """A schedule whose durations come from the examples drawn with one key runs with that key."""
    if schedule.job_key is None:
        return
    data = np.asarray(jax.random.key_data(keys) if jnp.issubdtype(keys.dtype, jax.dtypes.prng_key) else keys)
    data = data.reshape(-1, 2)
    if not np.all(data == schedule.job_key[None, :]):
        raise ValueError(
            "this schedule's durations depend on the examples each job draws, drawn with the key "
            f"whose data is {schedule.job_key.tolist()}; run it with that key"
            + (" (a sweep over seeds needs one schedule per seed)" if batched else "")
            + f"; got key data {data[:4].tolist()}")


def _prepare(alg, problem, schedule, *, hparams, opts: Options, batched: bool, num_keys: int = 1):
    """Everything a run needs, checked, on the host: (static, hparams, grid size H, plan, event
    arrays, tail window, targets)."""
    by_round = _validate(alg, problem, schedule)
    dtype = _float_dtype_of(problem.x0)
    check_contract(alg, problem)
    hp, H = _prepare_hparams(alg, hparams, dtype, batched=batched, num_workers=problem.num_workers)
    log_every = opts.log_every if opts.log_every is not None else max(1, schedule.num_events // 100)
    batched_runs = (H or 1) * num_keys if opts.runs == "vmap" else 1  # the block-size choice depends on it
    plan = plan_blocks(schedule, log_every=log_every, block_size=opts.block_size, by_round=by_round, runs=batched_runs)
    ev, window = _event_arrays(schedule, opts.average_from, dtype)
    static = core.Static(alg.functions, problem.fns, problem.num_workers, by_round, bool(opts.record_params),
                         opts.batching, opts.runs, opts.telemetry, schedule.job_key is not None)
    return static, hp, H, plan, ev, window, _targets(problem, opts.targets, dtype)
