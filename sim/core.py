"""The compiled run: one run of an algorithm along a schedule, as pure functions over arrays.

This is the engine's inside, in the shape of PureJaxRL's ``make_train``: :func:`make_run` takes
everything the compiled code depends on besides array shapes (:class:`Static`) and returns the
run's pieces, a :class:`Run` holding ``start`` (the carry before the first event and the metrics
at time 0) and ``advance`` (the carry moved over chunks of the plan, with the metrics after each).
Every loop is a named inner function handed to ``lax.scan``; the carry is a named tuple
(:class:`Carry`). :mod:`sim.engine` compiles these, batches them over a sweep's runs
(:mod:`sim.parallel`) and drives them from the host (:mod:`sim.driver`).

Inside, an outer ``lax.scan`` runs over metric chunks (``log_every`` events each) and an inner one
over blocks of events in which no worker appears twice (:mod:`sim.blocks`): each block's worker
jobs are computed at once (``vmap``, or ``lax.map``), then the server handles the arrivals in event
order. Metrics are computed once per chunk, never per event. Keys and divergence: :func:`make_run`.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax.tree_utils as otu

from delaylab.algos.base import Event, Worker

PyTree = Any


@dataclasses.dataclass(frozen=True)
class Static:
    """Everything the compiled program depends on besides array shapes (hashable: it keys the
    compilation cache, so equal algorithms and problems share one program).

    Attributes:
      alg_fns: the algorithm's two halves, ``(worker, server)`` (``Algorithm.functions``).
      prob_fns: the problem's functions (``sim.problems.ProblemFns``).
      num_workers: n.
      by_round: whether the algorithm handles whole rounds (``apply_round``) on this schedule.
      record_params: also log the server model at every log point.
      batching: how a block's worker jobs run, "vmap" or "map".
      runs: how a sweep's runs are batched, "vmap" or "map".
      telemetry: ``telemetry(data, server_params, workers) -> dict`` at every log point (``workers``
        a :class:`Workers`), or None.
      job_keys: key job k of worker i by ``fold_in(fold_in(key, i), k)`` (``Schedule.job_key``).
    """

    alg_fns: tuple
    prob_fns: Any
    num_workers: int
    by_round: bool
    record_params: bool = False
    batching: str = "vmap"
    runs: str = "vmap"
    telemetry: Any = None
    job_keys: bool = False


class Carry(NamedTuple):
    """What the scans carry from event to event. Nothing here costs more than O(d) per event
    besides the algorithm's own work: padding slots are skipped with a real branch, and a
    divergence is not undone by copying the state back but by keeping the last finite model."""

    state: PyTree  # the server state
    points: PyTree  # what each worker was last handed, stacked on a leading worker axis [n, ...]
    tail_sum: PyTree  # Σ (time weight) · (server model) over the tail window
    tail_weight: jax.Array  # Σ time weight
    stat_sums: dict  # per worker [n]: the sum over its arrivals of each statistic the algorithm reports
    bad: jax.Array  # int32: the first event that made the model non-finite, −1 if none
    last_good: PyTree  # the last finite server model


class WorkerOracle:
    """Worker ``worker``'s stochastic gradient oracle, as handed to a job (``Worker.job``):
    ``oracle(params, key) -> (loss, grad)``; ``oracle.worker`` is the worker's index (traced),
    for work that depends on the worker (e.g. DyLU's per-worker number of local steps)."""

    def __init__(self, fns, data, worker):
        self._fns, self._data, self.worker = fns, data, worker

    def __call__(self, params, key):
        return self._fns.value_and_grad(self._data, params, self.worker, key)

    def loss(self, params, key):
        """The minibatch loss whose gradient ``self(params, key)`` returns (same draw for the
        same key); for work that needs more than a gradient (e.g. Hessian-vector products)."""
        if self._fns.loss is None:
            raise NotImplementedError("this problem gives no minibatch loss function (ProblemFns.loss)")
        return self._fns.loss(self._data, params, self.worker, key)


class Workers(NamedTuple):
    """What telemetry sees of the workers at a log point: what each holds, read through the
    algorithm's worker half.

    Attributes:
      points: what each worker was last handed, stacked on a leading worker axis [n, ...].
      worker: the algorithm's :class:`algos.base.Worker` half.
      hparams: the run's hyperparameters (traced; in a sweep, this run's values).
      fns: the problem's functions (``sim.problems.ProblemFns``).
      data: the problem's data.
    """

    points: PyTree
    worker: Worker
    hparams: Any
    fns: Any
    data: Any

    @property
    def num_workers(self) -> int:
        return jax.tree.leaves(self.points)[0].shape[0]

    def oracle(self, i) -> "WorkerOracle":
        """Worker ``i``'s oracle (its own shard, its own sampler), as its jobs get it."""
        return WorkerOracle(self.fns, self.data, i)

    @property
    def models(self) -> PyTree:
        """The model each worker holds (``Worker.params`` of its point), stacked [n, ...]."""
        return jax.vmap(self.worker.params)(self.points)

    def after_job(self, keys: jax.Array) -> PyTree:
        """The model each worker would hold after one job from its point (``Worker.job`` with
        this run's hyperparameters, then ``Worker.after_job``), worker i drawing from ``keys[i]``;
        stacked [n, ...]."""
        w = self.worker

        def one(point, i, key):
            return w.after_job(point, w.job(self.hparams, point, self.oracle(i), key))

        return jax.vmap(one)(self.points, jnp.arange(self.num_workers), keys)


def _all_finite(tree) -> jax.Array:
    leaves = [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree) if jnp.issubdtype(x.dtype, jnp.inexact)]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.asarray(True)


# The worker's job and the metrics, traced once per program. Each is traced more than once while
# building a program (the job: for the statistics' dtypes and once per piece of the plan; the
# metrics: at the start and after each chunk), always with the same argument shapes; as jitted
# functions of module level with their static parts as static arguments, JAX's tracing cache
# returns the later traces for free (XLA inlines the calls: the compiled program is the same).
# This cuts JAX's tracing of programs with several CNN jobs by about a third, with results bit for
# bit unchanged (benchmarks/RESULTS.md, "After tracing the worker's job and the metrics once").
@functools.partial(jax.jit, static_argnums=(0, 1))
def _job(job, fns, hparams, point, data, worker, key):
    return job(hparams, point, WorkerOracle(fns, data, worker), key)


@functools.partial(jax.jit, static_argnums=(0,))
def _measure(static: "Static", x, points, data, targets, hparams=None):
    """The metrics at a log point. ``hparams`` only where telemetry is set (it reads them through
    :class:`Workers`); None otherwise, so that a program without telemetry does not take them."""
    fns = static.prob_fns
    loss, grad = jax.value_and_grad(fns.objective, argnums=1)(data, x)
    out = {"loss": loss, "grad_norm": otu.tree_norm(grad)}
    if fns.metrics is not None:
        out.update(fns.metrics(data, x))
    if static.record_params:
        out["params"] = x
    if static.telemetry is not None:
        workers = Workers(points, static.alg_fns[0], hparams, fns, data)
        out.update({f"telemetry/{k}": v for k, v in static.telemetry(data, x, workers).items()})
    for name, target in targets.items():
        out[f"dist_{name}"] = otu.tree_norm(otu.tree_sub(x, target))
    return out


class Run(NamedTuple):
    """One run's pieces, built while tracing.

    Attributes:
      start: ``() -> (carry, first metrics)``: the carry before the first event and the metrics
        at time 0.
      advance: ``(carry, plan, padded) -> (carry, metrics)``: the carry moved over the chunks of
        ``plan`` (int32 [chunks, blocks, slots] event indices, −1 for padding; ``padded`` (static)
        says whether any slot is padding), with the metrics after each chunk.
    """

    start: Callable
    advance: Callable


def make_run(static: Static, hparams, data, x0, key, ev: dict, targets: dict) -> Run:
    """The pieces of one run. ``ev`` holds the per-event arrays (``sim.engine``'s event arrays),
    ``targets`` the named points whose distance to the server model is logged.

    Randomness: event ``e``'s job draws from ``fold_in(key, e)`` (or, on a schedule whose durations
    came from the examples drawn, job k of worker i from ``fold_in(fold_in(key, i), k)``), so
    results do not depend on how the schedule was cut into blocks.

    Divergence: the server model is checked after every event. The first event that makes it
    non-finite is recorded, the update is not applied, and the state is frozen from there on."""
    worker, server = static.alg_fns
    apply, apply_round, params_of = server.apply, server.apply_round, server.params
    fns = static.prob_fns
    n = static.num_workers

    state0 = server.init(hparams, x0, n)
    start_point = worker.start(hparams, x0)
    points0 = jax.tree.map(lambda x: jnp.broadcast_to(x, (n,) + x.shape), start_point)
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

        def one(point, worker_index, k):
            return _job(worker.job, fns, hparams, point, data, worker_index, k)

        if static.batching == "map":
            # One job after another: no batched gathers of per-worker data (faster on CPU when
            # each worker's job reads its own large arrays, e.g. a dense A_i).
            return e, w, jax.lax.map(lambda a: one(*a), (start_points, w, keys))
        return e, w, jax.vmap(one)(start_points, w, keys)

    def stats_shape():
        """The statistics the algorithm reports per arrival: found by abstract evaluation (no compute)."""
        msg = jax.eval_shape(lambda: jobs(points0, jnp.zeros((1,), jnp.int32))[2])
        if static.by_round:
            out = jax.eval_shape(lambda m: apply_round(hparams, state0, m, jax.vmap(event_at)(jnp.zeros((1,), jnp.int32)),
                                                        jnp.ones((1,), bool))[2], msg)
            return {k: v.dtype for k, v in out.items()}
        one_msg = jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape[1:], s.dtype), msg)
        out = jax.eval_shape(lambda m: apply(hparams, state0, m, event_at(jnp.asarray(0, jnp.int32)))[2], one_msg)
        return {k: v.dtype for k, v in out.items()}

    carry0 = Carry(state=state0, points=points0, tail_sum=tail0,
                   tail_weight=jnp.zeros((), ev["tail_weight"].dtype),
                   stat_sums={k: jnp.zeros((n,), dt) for k, dt in stats_shape().items()},
                   bad=jnp.asarray(-1, jnp.int32), last_good=params_of(state0))

    def after_event(carry: Carry, new_state, e, workers, next_points, stats, valid_slots, x_before) -> Carry:
        """Bookkeeping shared by both block kinds, once the server has handled event(s) ``e``."""
        x = params_of(new_state)
        finite = _all_finite(x)
        commit = (carry.bad < 0) & finite
        bad = jnp.where((carry.bad < 0) & ~finite, e[0], carry.bad)
        last_good = otu.tree_where(commit, x, carry.last_good)
        keep = commit & valid_slots

        def scatter(Y, p):
            mask = keep.reshape((-1,) + (1,) * (p.ndim - 1))
            return Y.at[workers].set(jnp.where(mask, p, Y[workers]))

        points = jax.tree.map(scatter, carry.points, next_points)
        # x_before holds until the last arrival of a round; after it the new model holds.
        weights = jnp.where(keep, ev["tail_weight"][e], 0.0)
        w_last = weights[-1]
        if weights.shape[0] == 1:  # one arrival: no earlier arrival's weight (saves reading x_before)
            tail = jax.tree.map(lambda t, b: t + w_last.astype(b.dtype) * b, carry.tail_sum, x)
        else:
            w_rest = jnp.sum(weights) - w_last
            tail = jax.tree.map(lambda t, a, b: t + w_rest.astype(a.dtype) * a + w_last.astype(b.dtype) * b,
                                carry.tail_sum, x_before, x)
        sums = {k: v.at[workers].add(jnp.where(keep, stats[k], 0).astype(v.dtype)) for k, v in carry.stat_sums.items()}
        return Carry(new_state, points, tail, carry.tail_weight + jnp.sum(weights), sums, bad, last_good)

    def async_block(carry: Carry, idx, padded):
        e_blk, w_blk, msgs = jobs(carry.points, idx)

        def slot(carry: Carry, xs):
            msg, e, w, valid = xs

            def handle(carry: Carry):
                new_state, next_point, stats = apply(hparams, carry.state, msg, event_at(e))
                one = lambda t: jax.tree.map(lambda a: a[None], t)  # noqa: E731
                return after_event(carry, new_state, e[None], w[None], one(next_point), one(stats),
                                   jnp.ones((1,), bool), params_of(carry.state))

            if not padded:  # no padding: no branch (XLA copies a conditional's operands)
                return handle(carry), None
            return jax.lax.cond(valid, handle, lambda c: c, carry), None

        carry, _ = jax.lax.scan(slot, carry, (msgs, e_blk, w_blk, idx >= 0))
        return carry, None

    def round_block(carry: Carry, idx, padded):
        del padded  # a round's slots beyond its events are masked inside apply_round
        valid = idx >= 0

        def handle(carry: Carry):
            e_blk, w_blk, msgs = jobs(carry.points, idx)
            events = jax.vmap(event_at)(e_blk)
            new_state, next_points, stats = apply_round(hparams, carry.state, msgs, events, valid)
            # a round is reported by its first event if it diverges
            return after_event(carry, new_state, e_blk, w_blk, next_points, stats, valid, params_of(carry.state))

        return jax.lax.cond(jnp.any(valid), handle, lambda c: c, carry), None

    block = round_block if static.by_round else async_block

    def measure(state, points):
        return _measure(static, params_of(state), points, data, targets,
                        hparams if static.telemetry is not None else None)

    def advance(carry: Carry, plan, padded: bool):
        def chunk(carry: Carry, blocks):
            carry, _ = jax.lax.scan(lambda c, idx: block(c, idx, padded), carry, blocks)
            return carry, measure(carry.state, carry.points)

        return jax.lax.scan(chunk, carry, plan)

    return Run(start=lambda: (carry0, measure(state0, points0)), advance=advance)


def segment(static: Static, padded: tuple, start: bool, hparams, data, x0, key, ev, targets, carry, plans: tuple):
    """One segment of one run, the unit the engine compiles: the run's start if ``start`` (then
    ``carry`` is ignored), then the pieces ``plans`` of the plan in order (piece ``k`` holds
    padding slots iff ``padded[k]``). Returns ``(carry, first metrics or None, (metrics per piece))``."""
    run = make_run(static, hparams, data, x0, key, ev, targets)
    first = None
    if start:
        carry, first = run.start()
    parts = []
    for plan, pad in zip(plans, padded):
        carry, metrics = run.advance(carry, plan, pad)
        parts.append(metrics)
    return carry, first, tuple(parts)
