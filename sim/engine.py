"""The engine: runs any :class:`algos.base.Algorithm` on a problem along a schedule.

One compiled program per (algorithm functions, problem functions, shapes). Inside it, an outer
``lax.scan`` runs over metric chunks (``log_every`` events each) and an inner one over blocks of
events in which no worker appears twice (see :mod:`sim.blocks`): each block's worker jobs are
computed at once with ``vmap``, then the server handles the arrivals in event order. Metrics are
computed once per chunk, never per event.

Randomness: event ``e``'s job draws from ``fold_in(key, e)``, so results do not depend on how the
schedule was cut into blocks, and the same key gives the same bits. The engine always traces with
JAX's partitionable threefry (``jax.threefry_partitionable(True)``, JAX's current default),
whatever the caller's global setting, so the random stream is pinned. (The legacy stream was
measured 1.2-1.5x slower inside the engine on CPU, though faster in isolation.)

Divergence: the server model is checked after every event. The first event that makes it
non-finite is recorded, the update is not applied, and the state is frozen from there on; the
result reports the event and worker, and the metrics end at the last log point before it.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np

from jax.sharding import PartitionSpec

from algos.base import Algorithm, Event
from sim import parallel
from sim.blocks import BlockPlan, plan_blocks
from sim.problems import Problem, ProblemFns
from sim.schedules import Schedule

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


@dataclasses.dataclass(frozen=True)
class _Static:
    """Everything the compiled program depends on besides array shapes."""

    alg_fns: tuple  # (init, work, apply, params, apply_round, point_init)
    prob_fns: ProblemFns
    num_workers: int
    by_round: bool
    record_params: bool = False
    batching: str = "vmap"  # how a block's worker jobs are batched: "vmap" or "map" (lax.map)
    runs: str = "vmap"  # how a sweep's runs are batched: "vmap" or "map" (one after another)
    telemetry: Any = None  # telemetry(data, server_params, worker_points) -> dict, at every log point
    job_keys: bool = False  # key job k of worker i by fold_in(fold_in(key, i), k) (Schedule.job_key)


class WorkerOracle:
    """Worker ``worker``'s stochastic gradient oracle, as handed to ``Algorithm.work``:
    ``oracle(params, key) -> (loss, grad)``; ``oracle.worker`` is the worker's index (traced),
    for work that depends on the worker (e.g. DyLU's per-worker number of local steps)."""

    def __init__(self, fns: ProblemFns, data, worker):
        self._fns, self._data, self.worker = fns, data, worker

    def __call__(self, params, key):
        return self._fns.value_and_grad(self._data, params, self.worker, key)

    def loss(self, params, key):
        """The minibatch loss whose gradient ``self(params, key)`` returns (same draw for the
        same key); for work that needs more than a gradient (e.g. Hessian-vector products)."""
        if self._fns.loss is None:
            raise NotImplementedError("this problem gives no minibatch loss function (ProblemFns.loss)")
        return self._fns.loss(self._data, params, self.worker, key)


def _tree_where(pred, new, old):
    return jax.tree.map(lambda a, b: jnp.where(pred, a, b), new, old)


def _all_finite(tree) -> jax.Array:
    leaves = [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree) if jnp.issubdtype(x.dtype, jnp.inexact)]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.asarray(True)


@dataclasses.dataclass(frozen=True)
class _Machine:
    """One run's pieces, built while tracing: the carry before the first event, the initial
    metrics, and ``chunks(carry, plan, padded)``, which advances the carry over the chunks of a
    plan (a scan over chunks, each a scan over blocks, then the metrics). A whole run is
    ``chunks`` over every part of the plan; a run in segments calls it once per segment."""

    carry0: Any
    first: Any  # () -> the metrics before any event
    chunks: Any


def _machine(static: _Static, hparams, data, x0, key, ev, targets) -> _Machine:
    """``ev`` holds per-event arrays; ``targets`` the named points whose distance is logged."""
    init, work, apply, params_of, apply_round, point_init = static.alg_fns
    fns = static.prob_fns
    n = static.num_workers

    state0 = init(hparams, x0, n)
    start = x0 if point_init is None else point_init(hparams, x0)
    points0 = jax.tree.map(lambda x: jnp.broadcast_to(x, (n,) + x.shape), start)
    tail0 = jax.tree.map(jnp.zeros_like, x0)

    def event_at(e):
        return Event(index=e, worker=ev["worker"][e], time=ev["time"][e],
                     staleness=ev["staleness"][e], delivered=ev["delivered"][e], tag=ev["tag"][e],
                     round_end=ev["round_end"][e])

    def jobs(points, idx):
        """All of a block's worker computations at once."""
        e = jnp.maximum(idx, 0)
        w = ev["worker"][e]
        start_points = jax.tree.map(lambda y: y[w], points)
        if static.job_keys:  # durations were drawn from these jobs' examples (Schedule.job_key)
            keys = jax.vmap(lambda i, j: jax.random.fold_in(jax.random.fold_in(key, i), j))(w, ev["job"][e])
        else:
            keys = jax.vmap(lambda i: jax.random.fold_in(key, i))(e)

        def one(point, worker, k):
            return work(hparams, point, WorkerOracle(fns, data, worker), k)

        if static.batching == "map":
            # One job after another: no batched gathers of per-worker data (faster on CPU when
            # each worker's job reads its own large arrays, e.g. a dense A_i).
            return e, w, jax.lax.map(lambda a: one(*a), (start_points, w, keys))
        return e, w, jax.vmap(one)(start_points, w, keys)

    # Stats the algorithm reports per arrival: discovered by abstract evaluation (no compute).
    def stats_shape():
        msg = jax.eval_shape(lambda: jobs(points0, jnp.zeros((1,), jnp.int32))[2])
        if static.by_round:
            out = jax.eval_shape(lambda m: apply_round(hparams, state0, m, jax.vmap(event_at)(jnp.zeros((1,), jnp.int32)),
                                                        jnp.ones((1,), bool))[2], msg)
            return {k: v.dtype for k, v in out.items()}
        one_msg = jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape[1:], s.dtype), msg)
        out = jax.eval_shape(lambda m: apply(hparams, state0, m, event_at(jnp.asarray(0, jnp.int32)))[2], one_msg)
        return {k: v.dtype for k, v in out.items()}

    stat_sums0 = {k: jnp.zeros((n,), dt) for k, dt in stats_shape().items()}
    # Carry: (state, worker points, tail sum, tail weight, per-worker stat sums, first bad event,
    # last finite model). Nothing here costs more than O(d) per event besides the algorithm's own
    # work: padding slots are skipped with a real branch (their mask comes from the schedule, so it
    # is the same for every run of a sweep), and a divergence is not undone by copying the state
    # back (O(state) per event) but by keeping the last finite model aside.
    carry0 = (state0, points0, tail0, jnp.zeros((), ev["tail_weight"].dtype), stat_sums0,
              jnp.asarray(-1, jnp.int32), params_of(state0))

    def after_event(carry, new_state, e, workers, next_points, stats, valid_slots, x_before):
        """Bookkeeping shared by both block kinds, once the server has handled event(s) ``e``."""
        _, points, tail, tail_w, sums, bad, last_good = carry
        x = params_of(new_state)
        finite = _all_finite(x)
        commit = (bad < 0) & finite
        bad = jnp.where((bad < 0) & ~finite, e[0], bad)
        last_good = _tree_where(commit, x, last_good)
        keep = commit & valid_slots

        def scatter(Y, p):
            mask = keep.reshape((-1,) + (1,) * (p.ndim - 1))
            return Y.at[workers].set(jnp.where(mask, p, Y[workers]))

        points = jax.tree.map(scatter, points, next_points)
        # x_before holds until the last arrival of a round; after it the new model holds.
        weights = jnp.where(keep, ev["tail_weight"][e], 0.0)
        w_last = weights[-1]
        w_rest = jnp.sum(weights) - w_last
        tail = jax.tree.map(lambda t, a, b: t + w_rest.astype(a.dtype) * a + w_last.astype(b.dtype) * b,
                            tail, x_before, x)
        sums = {k: v.at[workers].add(jnp.where(keep, stats[k], 0).astype(v.dtype)) for k, v in sums.items()}
        return (new_state, points, tail, tail_w + jnp.sum(weights), sums, bad, last_good)

    def async_block(carry, idx, padded):
        e_blk, w_blk, msgs = jobs(carry[1], idx)

        def slot(carry, xs):
            msg, e, w, valid = xs

            def handle(carry):
                state = carry[0]
                new_state, next_point, stats = apply(hparams, state, msg, event_at(e))
                one = lambda t: jax.tree.map(lambda a: a[None], t)
                return after_event(carry, new_state, e[None], w[None], one(next_point), one(stats),
                                   jnp.ones((1,), bool), params_of(state))

            if not padded:  # no padding: no branch (XLA copies a conditional's operands)
                return handle(carry), None
            return jax.lax.cond(valid, handle, lambda c: c, carry), None

        carry, _ = jax.lax.scan(slot, carry, (msgs, e_blk, w_blk, idx >= 0))
        return carry, None

    def round_block(carry, idx, padded):
        del padded  # a round's slots beyond its events are masked inside apply_round
        valid = idx >= 0

        def handle(carry):
            state, points = carry[0], carry[1]
            e_blk, w_blk, msgs = jobs(points, idx)
            events = jax.vmap(event_at)(e_blk)
            new_state, next_points, stats = apply_round(hparams, state, msgs, events, valid)
            # a round is reported by its first event if it diverges
            return after_event(carry, new_state, e_blk, w_blk, next_points, stats, valid, params_of(state))

        return jax.lax.cond(jnp.any(valid), handle, lambda c: c, carry), None

    block = round_block if static.by_round else async_block

    def measure(state, points):
        x = params_of(state)
        loss, grad = jax.value_and_grad(fns.objective, argnums=1)(data, x)
        out = {"loss": loss, "grad_norm": jnp.sqrt(sum(jnp.sum(g * g) for g in jax.tree.leaves(grad)))}
        if fns.metrics is not None:
            out.update(fns.metrics(data, x))
        if static.record_params:
            out["params"] = x
        if static.telemetry is not None:
            out.update({f"telemetry/{k}": v for k, v in static.telemetry(data, x, points).items()})
        for name, target in targets.items():
            out[f"dist_{name}"] = jnp.sqrt(sum(jnp.sum((a - b) ** 2) for a, b in zip(jax.tree.leaves(x), jax.tree.leaves(target))))
        return out

    def chunks(carry, plan, padded):
        def chunk(carry, blocks):
            carry, _ = jax.lax.scan(lambda c, idx: block(c, idx, padded), carry, blocks)
            return carry, measure(carry[0], carry[1])

        return jax.lax.scan(chunk, carry, plan)

    return _Machine(carry0=carry0, first=lambda: measure(state0, points0), chunks=chunks)


def _plan_parts(plan_events) -> list:
    """[(plan, padded)] in order: the chunks without padding slots, then the rest (empty parts
    left out). ``plan_events`` is :func:`_split_plan`'s pair, as device or NumPy arrays."""
    clean, ragged = plan_events
    return [(p, False) for p in clean if p.shape[0]] + ([(ragged, True)] if ragged.shape[0] else [])


def _finish(carry, metrics) -> dict:
    state, _, tail, tail_w, sums, bad, last_good = carry
    return {"state": state, "params": last_good, "metrics": metrics, "tail_sum": tail, "tail_weight": tail_w,
            "stats": sums, "bad": bad}


def _tail_average(out: dict) -> dict:
    """On the host: the tail sums over their weight, NaN where no event was committed inside the
    window (a run that diverged before it). Divided here, not in the compiled program, because
    XLA's vectorised division on CPU is not correctly rounded, and its result depended on how many
    runs a device held; NumPy's is, whatever the batching."""
    out = dict(out)
    w = np.asarray(out.pop("tail_weight"))

    def average(t):
        t = np.asarray(t)
        ww = w.reshape(w.shape + (1,) * (t.ndim - w.ndim))
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(ww > 0, t / np.where(ww > 0, ww, 1).astype(t.dtype), np.nan).astype(t.dtype)

    out["tail"] = jax.tree.map(average, out.pop("tail_sum"))
    return out


def _join(first, parts):
    """The initial metrics, then each part's, along the log-point axis."""
    return jax.tree.map(lambda f, *a: jnp.concatenate([f[None], *a]), first, *parts)


def _simulate(static: _Static, hparams, data, x0, key, ev, plan_events, targets):
    """One run in one call. ``plan_events`` is a pair of [chunks, blocks, slots] arrays: the
    leading chunks that hold no padding, then the rest (see :func:`_split_plan`)."""
    m = _machine(static, hparams, data, x0, key, ev, targets)
    carry, parts = m.carry0, []
    for plan, padded in _plan_parts(plan_events):
        carry, metrics = m.chunks(carry, plan, padded)
        parts.append(metrics)
    return _finish(carry, _join(m.first(), parts))


_simulate_jit = jax.jit(_simulate, static_argnums=0)


def _over_runs(static: _Static, mesh, run_batch: int, fn):
    """``fn(hparams, key, carry, shared)`` for one run → the same over a flat runs axis laid over
    ``mesh`` (:mod:`sim.parallel`). Each device takes its runs in groups of ``run_batch``, one group
    after another (``lax.map``); a group's runs are batched with ``vmap``, or for ``runs="map"``
    computed one after another too (for convolutions on CPU batching runs whose kernels differ is
    slower than a loop; benchmarks/RESULTS.md). ``shared`` is replicated.

    Why groups: XLA picks kernels (matmul blockings, reduction orders) by the batch width, so the
    same run batched 16-wide and 2-wide can differ in the last bits; with the width fixed, every
    run's arithmetic is the same whatever the number of devices."""

    def local(h, k, c, shared):
        def group(args):
            h, k, c = args
            if static.runs == "map":
                return jax.lax.map(lambda a: fn(*a, shared), (h, k, c))
            return jax.vmap(fn, in_axes=(0, 0, 0, None))(h, k, c, shared)

        G = k.shape[0] // run_batch  # explicit sizes: a leaf may have a zero-size axis
        groups = jax.tree.map(lambda v: v.reshape((G, run_batch) + v.shape[1:]), (h, k, c))
        out = jax.lax.map(group, groups)
        return jax.tree.map(lambda v: v.reshape((G * run_batch,) + v.shape[2:]), out)

    runs = PartitionSpec(parallel.AXIS)
    return jax.shard_map(local, mesh=mesh, in_specs=(runs, runs, runs, PartitionSpec()), out_specs=runs,
                         check_vma=False)


def _wrap_key(key_data, key_impl):
    return key_data if key_impl is None else jax.random.wrap_key_data(key_data, impl=key_impl)


def _sweep_impl(static, mesh, run_batch, key_impl, hparams, data, x0, keys, ev, plan_events, targets):
    """A sweep in one call: ``hparams`` and ``keys`` (raw key data) carry a flat runs axis."""

    def one(h, k, _, shared):
        data, x0, ev, plan_events, targets = shared
        return _simulate(static, h, data, x0, _wrap_key(k, key_impl), ev, plan_events, targets)

    return _over_runs(static, mesh, run_batch, one)(hparams, keys, None, (data, x0, ev, plan_events, targets))


_sweep_jit = jax.jit(_sweep_impl, static_argnums=(0, 1, 2, 3))


# --- runs in segments: one compiled program per segment shape, the carry kept on the device -----
# A run in segments computes exactly what the one-call program computes, the same chunk body in
# the same order; the host only sees the carry between segments (for checkpoints) and the metrics
# (for progress). tests/sim/test_segments.py checks that the bits agree.


def _start_impl(static, hparams, data, x0, key, ev, targets):
    m = _machine(static, hparams, data, x0, key, ev, targets)
    return m.carry0, m.first()


def _advance_impl(static, padded, hparams, data, x0, key, ev, targets, carry, plan):
    return _machine(static, hparams, data, x0, key, ev, targets).chunks(carry, plan, padded)


_start_jit = jax.jit(_start_impl, static_argnums=0)
_advance_jit = jax.jit(_advance_impl, static_argnums=(0, 1))


def _sweep_start_impl(static, mesh, run_batch, key_impl, hparams, data, x0, keys, ev, targets):
    def one(h, k, _, shared):
        return _start_impl(static, h, shared[0], shared[1], _wrap_key(k, key_impl), shared[2], shared[3])

    return _over_runs(static, mesh, run_batch, one)(hparams, keys, None, (data, x0, ev, targets))


def _sweep_advance_impl(static, mesh, run_batch, key_impl, padded, hparams, data, x0, keys, ev, targets, carry, plan):
    def one(h, k, c, shared):
        data, x0, ev, targets, plan = shared
        return _advance_impl(static, padded, h, data, x0, _wrap_key(k, key_impl), ev, targets, c, plan)

    return _over_runs(static, mesh, run_batch, one)(hparams, keys, carry, (data, x0, ev, targets, plan))


_sweep_start_jit = jax.jit(_sweep_start_impl, static_argnums=(0, 1, 2, 3))
_sweep_advance_jit = jax.jit(_sweep_advance_impl, static_argnums=(0, 1, 2, 3, 4))


@dataclasses.dataclass
class _Programs:
    """A run's or a sweep's compiled pieces, bound to its inputs: ``start() -> (carry, first)``,
    ``advance(carry, plan, padded) -> (carry, metrics)``; ``to_host`` and
    ``from_host`` move a carry (or metrics) between its device form and the NumPy form a
    checkpoint holds (a sweep's padding runs dropped); ``log_axis`` is the metrics' log axis."""

    start: Any
    advance: Any
    to_host: Any
    from_host: Any
    log_axis: int
    runs: Optional[int] = None  # a sweep's number of runs (its host form's leading axis)

    def host_like(self, tree):
        """Abstract shapes of ``tree``'s host form."""
        if self.runs is None:
            return tree
        return jax.tree.map(lambda v: jax.ShapeDtypeStruct((self.runs,) + tuple(v.shape[1:]), v.dtype), tree)


def _run_programs(static, hp, problem, key, ev, tg) -> _Programs:
    shared = (problem.data, problem.x0, key, ev, tg)
    return _Programs(
        start=lambda: _start_jit(static, hp, *shared),
        advance=lambda c, plan, padded: _advance_jit(static, padded, hp, *shared, c, plan),
        to_host=_to_numpy, from_host=lambda t: t, log_axis=0)


def _sweep_programs(static, hp, problem, runs: "_SweepRuns", ev, tg) -> _Programs:
    head = (static, runs.mesh, runs.run_batch, runs.key_impl)
    data, x0 = parallel.replicate((problem.data, problem.x0), runs.mesh)
    ev, tg = parallel.replicate((ev, tg), runs.mesh)
    size = runs.padded

    def to_host(tree):
        return jax.tree.map(lambda v: v[: runs.R], parallel.to_host(tree))

    def from_host(tree):
        return parallel.split_runs(parallel.pad_runs(tree, size), runs.mesh)

    return _Programs(
        start=lambda: _sweep_start_jit(*head, runs.hparams, data, x0, runs.keys, ev, tg),
        advance=lambda c, plan, padded: _sweep_advance_jit(*head, padded, runs.hparams, data, x0, runs.keys, ev, tg, c,
                                                           parallel.replicate(plan, runs.mesh)),
        to_host=to_host, from_host=from_host, log_axis=1, runs=runs.R)


def _drive(programs: _Programs, plan: BlockPlan, schedule: Schedule, *, segment: int, progress, checkpoint,
           checkpoint_every: float, fingerprint: dict, keys) -> dict:
    """Run the segments one after another: metrics to the host after each, progress reported,
    a checkpoint written every ``checkpoint_every`` seconds and after the last segment; resume
    from ``checkpoint`` if it exists. Returns what the one-call program returns, on the host."""
    import time

    from sim import checkpoint as ckpt
    from sim.progress import Progress

    segments = _segments(plan, segment)
    axis = programs.log_axis
    with jax.threefry_partitionable(True):
        if checkpoint is not None and os.path.exists(checkpoint):
            carry_like, first_like = programs.host_like(jax.eval_shape(programs.start))
            saved = ckpt.load(checkpoint, fingerprint=fingerprint, carry_like=carry_like, first_like=first_like,
                              log_axis=axis)
            carry, first, parts, done = programs.from_host(saved.carry), saved.first, [saved.metrics], saved.done
        else:
            carry, first = programs.start()
            first, parts, done = programs.to_host(first), [], 0
        resumed, t0 = done, time.monotonic()
        last_save, saved = t0, done
        events0 = int(plan.chunk_end[segments[done - 1][2]]) + 1 if done else 0

        def save(k):  # the carry and metrics after segment k (1-based)
            ckpt.save(checkpoint, carry=programs.to_host(carry), first=first,
                      metrics=jax.tree.map(lambda *a: np.concatenate(a, axis=axis), *parts), done=k,
                      fingerprint=fingerprint, events=int(plan.chunk_end[segments[k - 1][2]]) + 1, keys=keys)

        try:
            for i in range(done, len(segments)):
                piece, padded, last_chunk = segments[i]
                carry, metrics = programs.advance(carry, jnp.asarray(piece), padded)
                parts.append(programs.to_host(metrics))
                done = i + 1
                now = time.monotonic()
                if checkpoint is not None and (done == len(segments) or now - last_save >= checkpoint_every):
                    save(done)
                    last_save, saved = time.monotonic(), done
                if progress is not None:
                    events = int(plan.chunk_end[last_chunk]) + 1
                    loss = np.take(np.asarray(parts[-1]["loss"], np.float64), -1, axis=axis)
                    finite = loss[np.isfinite(loss)]
                    progress(Progress(segment=done, segments=len(segments), events=events,
                                      num_events=schedule.num_events, time=float(schedule.finish[events - 1]),
                                      end_time=schedule.end_time,
                                      loss=float(np.median(finite)) if finite.size else np.nan,
                                      elapsed=now - t0, events_per_second=(events - events0) / max(now - t0, 1e-9),
                                      resumed_from=resumed))
        except KeyboardInterrupt:
            # Ctrl-C: keep the segments finished since the last checkpoint (the one interrupted is lost)
            if checkpoint is not None and done > saved:
                save(done)
            raise
        out = _tail_average(programs.to_host(_finish(carry, None)))
    metrics = jax.tree.map(lambda f, *a: np.concatenate([np.expand_dims(f, axis), *a], axis=axis), first, *parts)
    return {**out, "metrics": metrics}


def _fingerprint(alg, problem, schedule, static: _Static, hp, keys, plan: BlockPlan, segment: int, tg,
                 run_batch=None) -> dict:
    """What a checkpoint must match: hashes of every input the numbers depend on."""
    from sim import checkpoint as ckpt

    sched = {name: ckpt.digest(getattr(schedule, name)) for name in (
        "worker", "start", "finish", "version", "delivered", "round", "job_key", "pull_only", "tag")
        if getattr(schedule, name) is not None}
    return {
        "algorithm": alg.name,
        "hyperparameters": {k: ckpt.digest(v) for k, v in hp.items()},
        "keys": ckpt.digest(keys),
        "x0": ckpt.tree_digest(problem.x0),
        "problem_data": ckpt.tree_digest(problem.data),
        "targets": {k: ckpt.digest(v) for k, v in tg.items()},
        "schedule": sched,
        "plan": {"chunks": int(plan.events.shape[0]), "block_size": int(plan.block_size),
                 "chunk_end": ckpt.digest(plan.chunk_end), "segment": int(segment)},
        "options": {"batching": static.batching, "runs": static.runs, "record_params": static.record_params,
                    "by_round": static.by_round, "telemetry": type(static.telemetry).__name__,
                    "run_batch": run_batch, "x64": bool(jax.config.jax_enable_x64),
                    "platform": jax.default_backend()},
    }


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
    if not isinstance(alg, Algorithm):
        raise TypeError(f"algorithm must be an algos.Algorithm; got {type(alg).__name__}")
    if not isinstance(problem, Problem):
        raise TypeError(f"problem must be a sim.problems.Problem; got {type(problem).__name__}")
    if not isinstance(schedule, Schedule):
        raise TypeError(f"schedule must be a sim.schedules.Schedule; got {type(schedule).__name__}")
    if schedule.num_workers != problem.num_workers:
        raise ValueError(
            f"the schedule has {schedule.num_workers} workers but the problem has {problem.num_workers}; "
            "they must match"
        )
    if alg.apply is None and alg.apply_round is None:
        raise ValueError(f"{alg.name}: the algorithm defines neither apply nor apply_round")
    by_round = alg.apply is None
    if not by_round and schedule.policy == "barrier" and alg.apply_round is not None:
        by_round = True  # round-capable algorithms take whole rounds on barrier schedules
    if alg.check_schedule is not None:
        alg.check_schedule(schedule)
    return by_round


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


def _prepare(alg, problem, schedule, *, hparams, log_every, block_size, targets, average_from, batched,
             record_params=False, batching="vmap", num_keys=1, runs="vmap", telemetry=None):
    by_round = _validate(alg, problem, schedule)
    if telemetry is not None and not callable(telemetry):
        raise TypeError(f"telemetry must be a function (data, server_params, worker_points) -> dict; got {type(telemetry).__name__}")
    if not (0.0 <= float(average_from) < 1.0):
        raise ValueError(f"average_from must be in [0, 1) (a fraction of the run's end time); got {average_from!r}")
    dtype = _float_dtype_of(problem.x0)
    hp, H = _prepare_hparams(alg, hparams, dtype, batched=batched, num_workers=problem.num_workers)
    if log_every is None:
        log_every = max(1, schedule.num_events // 100)
    if batching not in ("vmap", "map"):
        raise ValueError(f"batching must be 'vmap' or 'map'; got {batching!r}")
    if runs not in ("vmap", "map"):
        raise ValueError(f"runs must be 'vmap' or 'map'; got {runs!r}")
    batched_runs = (H or 1) * num_keys if runs == "vmap" else 1  # the block-size choice depends on it
    plan = plan_blocks(schedule, log_every=log_every, block_size=block_size, by_round=by_round, runs=batched_runs)
    ev, window = _event_arrays(schedule, average_from, dtype)
    static = _Static(alg.functions, problem.fns, problem.num_workers, by_round, bool(record_params), batching, runs,
                     telemetry, schedule.job_key is not None)
    return static, hp, H, plan, ev, window, _targets(problem, targets, dtype)


def _split_plan_np(plan: BlockPlan) -> tuple[list, np.ndarray]:
    """The plan as (parts without padding slots, the part with), as NumPy arrays.

    Padding slots are skipped with a branch, and XLA copies a branch's operands, the whole
    server state, on every slot; so the engine branches only where the plan has padding. With
    one event per block, only a ragged last chunk has any, and it is cut to its real length.
    """
    has_pad = np.any(plan.events < 0, axis=(1, 2))
    c = int(np.argmax(has_pad)) if has_pad.any() else has_pad.shape[0]
    clean, rest = [plan.events[:c]], plan.events[c:]
    if plan.block_size == 1 and rest.shape[0] == 1:
        last = rest[0][rest[0, :, 0] >= 0]
        clean.append(last[None])
        rest = rest[:0]
    return clean, rest


def _split_plan(plan: BlockPlan) -> tuple:
    """:func:`_split_plan_np` as device arrays, the form the one-call programs take."""
    clean, rest = _split_plan_np(plan)
    return tuple(jnp.asarray(p) for p in clean), jnp.asarray(rest)


def _segments(plan: BlockPlan, size: int) -> list[tuple[np.ndarray, bool, int]]:
    """The plan cut into segments of at most ``size`` chunks (never across a part boundary of
    :func:`_split_plan_np`): per segment, (its chunks, whether they hold padding, the index of its
    last chunk in the plan)."""
    out, c0 = [], 0
    for part, padded in _plan_parts(_split_plan_np(plan)):
        for a in range(0, part.shape[0], size):
            piece = part[a : a + size]
            out.append((piece, padded, c0 + a + piece.shape[0] - 1))
        c0 += part.shape[0]
    return out


def _to_numpy(tree):
    return jax.tree.map(np.asarray, tree)


def _segment_options(plan: BlockPlan, segment, progress, checkpoint, checkpoint_every):
    """Checked (segment, progress callback); segment None means one call."""
    chunks = int(plan.events.shape[0])
    if segment is not None and (isinstance(segment, bool) or not isinstance(segment, (int, np.integer)) or segment < 1):
        raise ValueError(f"segment must be a whole number of log points >= 1 (this run has {chunks}); got {segment!r}")
    if checkpoint is not None and not isinstance(checkpoint, (str, os.PathLike)):
        raise TypeError(f"checkpoint must be a file path; got {type(checkpoint).__name__}")
    if not (float(checkpoint_every) >= 0):
        raise ValueError(f"checkpoint_every must be >= 0 seconds; got {checkpoint_every!r}")
    if progress is True:
        from sim.progress import ProgressBar

        progress = ProgressBar()
    elif progress is False:
        progress = None
    elif progress is not None and not callable(progress):
        raise TypeError(f"progress must be True, False, None or a function of sim.progress.Progress; got {progress!r}")
    if segment is None and (progress is not None or checkpoint is not None):
        segment = max(1, -(-chunks // 20))
    return (None if segment is None else int(segment)), progress


def run(alg: Algorithm, problem: Problem, schedule: Schedule, *, key, hparams: Optional[dict] = None,
        log_every: Optional[int] = None, block_size: int | str = "auto", targets: Optional[dict] = None,
        average_from: float = 0.5, record_params: bool = False, batching: str = "vmap",
        telemetry=None, segment: Optional[int] = None, progress=None, checkpoint: Optional[str] = None,
        checkpoint_every: float = 60.0) -> RunResult:
    """Run ``alg`` on ``problem`` along ``schedule``.

    Args:
      alg: an :class:`algos.Algorithm`.
      problem: a :class:`sim.problems.Problem` with as many workers as the schedule.
      schedule: a :class:`sim.schedules.Schedule`.
      key: a PRNG key; event e's job uses ``fold_in(key, e)``.
      hparams: overrides of ``alg.hparams`` (same keys).
      log_every: events per metrics log point (default: about 100 log points).
      block_size: slots per block of simultaneous worker jobs; ``"auto"`` chooses from the
        schedule, 1 is the event-by-event engine.
      targets: named points whose distance to the server model is logged (``dist_<name>``).
      average_from: the tail average covers simulated time [average_from·T, T].
      record_params: also log the server model itself at every log point (``metrics["params"]``).
      batching: how a block's worker jobs run: ``"vmap"`` (batched) or ``"map"`` (``lax.map``,
        one after another; see benchmarks/RESULTS.md for when each is faster).
      telemetry: ``telemetry(data, server_params, worker_points) -> {name: array}``, computed
        inside the compiled run at every log point (``worker_points`` is what each worker was
        last handed, stacked on a leading worker axis); logged as ``metrics["telemetry/<name>"]``.
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

    Returns:
      a :class:`RunResult`.
    """
    _check_key(key, batched=False)
    _check_job_key(schedule, key, batched=False)
    static, hp, _, plan, ev, window, tg = _prepare(
        alg, problem, schedule, hparams=hparams, log_every=log_every, block_size=block_size,
        targets=targets, average_from=average_from, batched=False, record_params=record_params,
        batching=batching, telemetry=telemetry)
    segment, progress = _segment_options(plan, segment, progress, checkpoint, checkpoint_every)
    if segment is None:
        with jax.threefry_partitionable(True):
            out = _simulate_jit(static, hp, problem.data, problem.x0, key, ev, _split_plan(plan), tg)
        out = _tail_average(_to_numpy(out))
    else:
        out = _drive(_run_programs(static, hp, problem, key, ev, tg), plan, schedule, segment=segment,
                     progress=progress, checkpoint=checkpoint, checkpoint_every=checkpoint_every,
                     fingerprint=_fingerprint(alg, problem, schedule, static, hp, key, plan, segment, tg), keys=key)
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
        block_size=plan.block_size, mean_fill=plan.mean_fill, divergence=divergence)


class _SweepRuns:
    """A sweep's H × S runs as one flat axis (hyperparameter-major), padded to a multiple of
    devices × ``run_batch`` and laid over the devices; ``unflatten`` drops the padding and
    restores [H, S]."""

    def __init__(self, hp: dict, keys, devices, run_batch: Optional[int]):
        self.mesh = parallel.mesh(devices)
        self.H = int(jax.tree.leaves(hp)[0].shape[0])
        typed = jnp.issubdtype(keys.dtype, jax.dtypes.prng_key)
        self.key_impl = str(jax.random.key_impl(keys)) if typed else None
        data = np.asarray(jax.random.key_data(keys) if typed else keys)
        self.S = data.shape[0]
        self.R = self.H * self.S
        D = self.mesh.size
        if run_batch is None:  # the width a sweep over all of this machine's devices gives each
            run_batch = parallel.default_run_batch(self.R)
        elif isinstance(run_batch, bool) or not isinstance(run_batch, (int, np.integer)) or run_batch < 1:
            raise ValueError(f"run_batch must be a whole number of runs >= 1 (this sweep has {self.R}); got {run_batch!r}")
        self.run_batch = run_batch
        self.padded = size = parallel.padded_size(self.R, D * self.run_batch)
        flat_h = {k: np.repeat(np.asarray(v), self.S, axis=0) for k, v in hp.items()}
        flat_k = np.tile(data, (self.H,) + (1,) * (data.ndim - 1))
        self.hparams, self.keys = parallel.split_runs(parallel.pad_runs((flat_h, flat_k), size), self.mesh)

    def unflatten(self, tree):
        return jax.tree.map(lambda v: v[: self.R].reshape((self.H, self.S) + v.shape[1:]), tree)


def sweep(alg: Algorithm, problem: Problem, schedule: Schedule, *, keys, hparams: Optional[dict] = None,
          log_every: Optional[int] = None, block_size: int | str = "auto", targets: Optional[dict] = None,
          average_from: float = 0.5, record_params: bool = False, batching: str = "vmap",
          runs: str = "vmap", telemetry=None, devices=None, run_batch: Optional[int] = None,
          segment: Optional[int] = None, progress=None, checkpoint: Optional[str] = None,
          checkpoint_every: float = 60.0) -> RunResult:
    """Many runs in one compiled call: a grid of hyperparameter values × seeds.

    Args:
      keys: a batch of S PRNG keys (one run per key), e.g. ``jax.random.split(key, 256)``.
      hparams: None (the algorithm's defaults, grid size 1), or overrides in which at least one
        hyperparameter has a leading grid axis of size H (all swept ones the same H).
      runs: "vmap" (the runs batched) or "map" (one after another, inside the same compiled
        call; same numbers up to floating-point reassociation).
      devices: the devices the runs are spread over (default: all of ``jax.devices()``, every
        host's where ``jax.distributed`` is initialised); see :mod:`sim.parallel`. The H × S runs
        are split evenly, the last one repeated to fill the last device (and dropped after).
      run_batch: how many runs a device batches at once; it takes its runs in groups of this
        many, one group after another. XLA chooses kernels by batch width, so the width, not the
        number of devices, decides the last bits. Default: ⌈runs / jax.device_count()⌉, the share
        of each device when all of them are used, so a sweep gives the same bits on all of this
        machine's devices or on any subset of them; on a machine with one device, all runs at
        once. Give it to get the same bits across machines with different device counts.
      segment, progress, checkpoint, checkpoint_every: as in :func:`run` (the progress reports
        the median loss over the runs; a checkpoint holds every run's state).
      Other arguments as in :func:`run`.

    Returns:
      a :class:`RunResult` whose arrays have leading axes [H, S]. Metrics of runs that diverged
      are NaN from the first log point at or after the divergence; ``diverged_at`` [H, S] gives
      the event (−1: none). Changing only hyperparameter values or keys reuses the compiled code.
    """
    _check_key(keys, batched=True)
    _check_job_key(schedule, keys, batched=True)
    if hparams is None:
        first = next(iter(alg.hparams))
        hparams = {first: np.asarray(alg.hparams[first])[None]}
    static, hp, _, plan, ev, window, tg = _prepare(
        alg, problem, schedule, hparams=hparams, log_every=log_every, block_size=block_size,
        targets=targets, average_from=average_from, batched=True, record_params=record_params,
        batching=batching, num_keys=len(keys), runs=runs, telemetry=telemetry)
    runs = _SweepRuns(hp, keys, devices, run_batch)
    segment, progress = _segment_options(plan, segment, progress, checkpoint, checkpoint_every)
    if segment is None:
        with jax.threefry_partitionable(True):
            out = _sweep_jit(static, runs.mesh, runs.run_batch, runs.key_impl, runs.hparams, *parallel.replicate(
                (problem.data, problem.x0), runs.mesh), runs.keys, *parallel.replicate((ev, _split_plan(plan), tg), runs.mesh))
        out = _tail_average(parallel.to_host(out))
    else:
        fp = _fingerprint(alg, problem, schedule, static, hp, keys, plan, segment, tg, run_batch=runs.run_batch)
        out = _drive(_sweep_programs(static, hp, problem, runs, ev, tg), plan, schedule, segment=segment,
                     progress=progress, checkpoint=checkpoint, checkpoint_every=checkpoint_every, fingerprint=fp,
                     keys=keys)
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
        block_size=plan.block_size, mean_fill=plan.mean_fill)


def compiled_text(alg: Algorithm, problem: Problem, schedule: Schedule, *, keys=None, hparams: Optional[dict] = None,
                  **kwargs) -> str:
    """The optimised XLA program of a run (``keys=None``) or a sweep (``keys`` a batch), as text.

    For checking what XLA made of an algorithm, e.g. that a per-worker table is updated in
    place rather than copied at every event (tests/algos/test_rows.py). Same arguments as
    :func:`run` and :func:`sweep`; nothing is executed.
    """
    batched = keys is not None
    devices = kwargs.pop("devices", None)
    if batched and hparams is None:
        first = next(iter(alg.hparams))
        hparams = {first: np.asarray(alg.hparams[first])[None]}
    static, hp, _, plan, ev, _, tg = _prepare(
        alg, problem, schedule, hparams=hparams, batched=batched, num_keys=len(keys) if batched else 1,
        log_every=kwargs.pop("log_every", None), block_size=kwargs.pop("block_size", "auto"),
        targets=kwargs.pop("targets", None), average_from=kwargs.pop("average_from", 0.5), **kwargs)
    with jax.threefry_partitionable(True):
        if batched:
            runs = _SweepRuns(hp, keys, devices, kwargs.pop("run_batch", None))
            lowered = _sweep_jit.lower(static, runs.mesh, runs.run_batch, runs.key_impl, runs.hparams, problem.data, problem.x0,
                                       runs.keys, ev, _split_plan(plan), tg)
        else:
            lowered = _simulate_jit.lower(static, hp, problem.data, problem.x0, jax.random.key(0), ev,
                                          _split_plan(plan), tg)
    return lowered.compile().as_text()
