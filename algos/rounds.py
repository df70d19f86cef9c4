"""Methods that hold workers at a round's point: Rennala SGD, Malenia SGD, Ringleader ASGD
(docs/theory.md §7.4–§7.6; Tyurin & Richtárik 2023; Maranjyan et al., ICLR 2026).

Their jobs return the point they were computed at along with the gradient
(:func:`point_and_gradient_job`), so that the server can send a worker back to the *same*
point, and can tell a gradient of the current round from a stale one.

Rennala and Malenia "stop or ignore" unfinished work at a round boundary (docs/theory.md §7.5).
The algorithms here read whatever schedule they run on: on an asynchronous schedule a job in
flight at a round's close runs to completion and its gradient is discarded on arrival (counted
per worker in ``worker_stats["discarded"]``; the "ignore" reading); on
``sim.schedules.every_worker_rounds`` those jobs are cancelled at the close and every worker
restarts on the new point (the "stop" reading of Malenia SGD), so nothing is discarded.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax.tree_utils as otu

from delaylab.algos import _checks, _rows
from delaylab.algos.base import Algorithm, Event, HParams, Params, Server, Worker, algorithm, state_params


def point_and_gradient_job(hparams: HParams, point: Params, oracle, key) -> tuple:
    """One stochastic gradient, returned with the point it was computed at."""
    del hparams
    _, grad = oracle(point, key)
    return grad, point


_WORKER = Worker(point_and_gradient_job)  # a gradient job: the worker's model is what it was handed


# --- Rennala SGD -------------------------------------------------------------------------------


class RennalaState(NamedTuple):
    params: Params
    total: Params  # Σ of this round's gradients
    count: jax.Array  # int32 [], gradients in this round
    round: jax.Array  # int32 []
    job_round: jax.Array  # int32 [n], the round whose point each worker's job started from


def _rennala_init(hparams, params, n):
    return RennalaState(params, jax.tree.map(jnp.zeros_like, params), jnp.zeros((), jnp.int32),
                        jnp.zeros((), jnp.int32), jnp.zeros((n,), jnp.int32))


def _rennala_apply(hparams: HParams, state: RennalaState, message, event: Event):
    grad, _ = message
    i = event.worker
    fresh = event.delivered & (state.job_round[i] == state.round)
    total = jax.tree.map(lambda t, g: t + jnp.where(fresh, g, jnp.zeros_like(g)), state.total, grad)
    count = state.count + fresh.astype(jnp.int32)
    full = count >= jnp.asarray(hparams["batch"])
    gamma = jnp.asarray(hparams["stepsize"])
    scale = gamma / jnp.maximum(count, 1).astype(gamma.dtype)
    params = otu.tree_where(full, jax.tree.map(lambda x, t: x - scale.astype(x.dtype) * t, state.params, total), state.params)
    rnd = state.round + full.astype(jnp.int32)
    state = RennalaState(params, otu.tree_where(full, jax.tree.map(jnp.zeros_like, total), total), jnp.where(full, 0, count),
                         rnd, state.job_round.at[i].set(rnd))
    # Step mass of this gradient: γ/S once its round's update happens (counted at the arrival).
    stats = {"stepsize": jnp.where(fresh, gamma / jnp.asarray(hparams["batch"]).astype(gamma.dtype), 0.0),
             "discarded": (event.delivered & ~fresh).astype(jnp.int32)}
    return state, params, stats


def _validate_rennala(hparams, num_workers):
    _checks.check_stepsize("rennala_sgd", hparams["stepsize"])
    _checks.check_int_hparam("rennala_sgd", hparams, "batch")


def rennala_sgd(*, stepsize: float, batch: int) -> Algorithm:
    """Rennala SGD (docs/theory.md §7.4): collect S gradients computed at the round's point x^k, from
    whichever workers deliver them first, then x^{k+1} = x^k − γ · (their mean).

    Every worker restarts at the current point after each arrival; a gradient computed at an
    older round's point is discarded. Optimal for homogeneous data (Tyurin & Richtárik 2023);
    under heterogeneity the mean weights workers by how many gradients they contributed.

    Args:
      stepsize: γ ≥ 0. batch: S ≥ 1.
    """
    return algorithm("rennala_sgd", {"stepsize": stepsize, "batch": _checks.check_int("rennala_sgd", "batch", batch)},
                     _WORKER, Server(_rennala_init, state_params, apply=_rennala_apply), validate=_validate_rennala)


# --- Malenia SGD -------------------------------------------------------------------------------


class MaleniaState(NamedTuple):
    params: Params
    sums: Params  # [n + 1, ...]: row i < n, worker i's sum of gradients; row n, Σ_i sums_i / counts_i
    counts: jax.Array  # int32 [n + 1]
    stamp: jax.Array  # int32 [n + 1], the round in which each row was last written; older rows are empty
    round: jax.Array
    job_round: jax.Array  # int32 [n]


def _malenia_init(hparams, params, n):
    sums = jax.tree.map(lambda x: jnp.zeros((n + 1,) + x.shape, x.dtype), params)
    return MaleniaState(params, sums, jnp.zeros((n + 1,), jnp.int32), jnp.full((n + 1,), -1, jnp.int32),
                        jnp.zeros((), jnp.int32), jnp.zeros((n,), jnp.int32))


def _malenia_apply(hparams: HParams, state: MaleniaState, message, event: Event):
    grad, _ = message
    i = event.worker
    n = state.job_round.shape[0]
    fresh = event.delivered & (state.job_round[i] == state.round)
    # One in-place write of row i and the average row, O(d) (algos/_rows.py); a new round needs
    # no clearing, since rows stamped with an older round read as empty.
    sums, counts, stamp = _rows.accumulate_labelled(state.sums, state.counts, state.stamp, (i,), (n,), grad,
                                                    fresh, state.round)
    eff = jnp.where(stamp[:n] == state.round, counts[:n], 0)
    gamma = jnp.asarray(hparams["stepsize"])
    harmonic = n / jnp.sum(1.0 / jnp.maximum(eff, 1).astype(gamma.dtype))
    ready = jnp.all(eff >= 1) & (harmonic * n >= jnp.asarray(hparams["batch"]).astype(gamma.dtype))
    average = _rows.read_labelled(sums, stamp, (n,), state.round)
    params = otu.tree_where(ready, jax.tree.map(lambda x, a: x - gamma.astype(x.dtype) * a / n, state.params, average),
                    state.params)
    rnd = state.round + ready.astype(jnp.int32)  # a new round: every row's stamp is now stale
    state = MaleniaState(params, sums, counts, stamp, rnd, state.job_round.at[i].set(rnd))
    stats = {"discarded": (event.delivered & ~fresh).astype(jnp.int32), "rounds": ready.astype(jnp.int32)}
    return state, params, stats


def _validate_malenia(hparams, num_workers):
    _checks.check_stepsize("malenia_sgd", hparams["stepsize"])
    _checks.check_int_hparam("malenia_sgd", hparams, "batch")


def malenia_sgd(*, stepsize: float, batch: int) -> Algorithm:
    """Malenia SGD (docs/theory.md §7.5): per-worker sums g_i and counts B_i of gradients at x^k, until every
    B_i ≥ 1 and the harmonic-mean condition ((1/n) Σ 1/B_i)^{-1} ≥ S/n holds; then
    x^{k+1} = x^k − γ (1/n) Σ_i g_i/B_i, an unbiased estimate of ∇F (optimal under heterogeneity).

    Args:
      stepsize: γ ≥ 0. batch: S ≥ 1 (S ≤ n means: one gradient from every worker).
    """
    return algorithm("malenia_sgd", {"stepsize": stepsize, "batch": _checks.check_int("malenia_sgd", "batch", batch)},
                     _WORKER, Server(_malenia_init, state_params, apply=_malenia_apply), validate=_validate_malenia)


# --- Ringleader ASGD ---------------------------------------------------------------------------


class RingleaderState(NamedTuple):
    params: Params
    tables: Params  # [2, n + 1, ...]: slot k holds rounds r with r % 2 == k; row n is Σ_j G_j/b_j
    counts: jax.Array  # int32 [2, n + 1]
    labels: jax.Array  # int32 [2, n + 1]: the round a row belongs to; rows of another round are empty
    updated: jax.Array  # bool [n], U
    updating: jax.Array  # bool [], phase 2
    round: jax.Array  # int32 []


def _ringleader_init(hparams, params, n):
    z = jax.tree.map(lambda x: jnp.zeros((2, n + 1) + x.shape, x.dtype), params)
    return RingleaderState(params, z, jnp.zeros((2, n + 1), jnp.int32), jnp.full((2, n + 1), -1, jnp.int32),
                           jnp.zeros((n,), bool), jnp.zeros((), bool), jnp.zeros((), jnp.int32))


def _ringleader_apply(hparams: HParams, s: RingleaderState, message, event: Event):
    """O(d) per arrival: the 'current' and 'next' tables are two slots whose rows carry the
    round they belong to, so the round transition is a counter increment, not a copy; each
    arrival is one in-place write of its entry and its slot's average row (algos/_rows.py)."""
    grad, point = message
    i, ok = event.worker, event.delivered
    n = s.updated.shape[0]
    R = s.round
    in_u = s.updated[i]
    to_next = ok & s.updating & in_u  # i already updated this round: its gradient is at its new point
    label = jnp.where(to_next, R + 1, R)
    slot = label % 2

    tables, counts, labels = _rows.accumulate_labelled(s.tables, s.counts, s.labels, (slot, i), (slot, n),
                                                       grad, ok, label)

    cur = R % 2
    current_counts = jnp.where(labels[cur, :n] == R, counts[cur, :n], 0)
    # Phase 1 ends when the current table is full; that arrival is then the round's first update.
    updating = s.updating | (ok & jnp.all(current_counts > 0))
    do_update = ok & updating & ~in_u
    gamma = jnp.asarray(hparams["stepsize"])
    average = _rows.read_labelled(tables, labels, (cur, n), R)
    params = otu.tree_where(do_update, jax.tree.map(lambda x, a: x - gamma.astype(x.dtype) * a / n, s.params, average),
                    s.params)
    updated = s.updated.at[i].set(in_u | do_update)
    done = do_update & jnp.all(updated)  # after n updates the next table becomes current
    state = RingleaderState(params, tables, counts, labels,
                            jnp.where(done, jnp.zeros_like(updated), updated), jnp.where(done, False, updating),
                            R + done.astype(jnp.int32))
    # The worker moves to the new model only at its own update; otherwise (a lost result too)
    # it computes again at the same point, which keeps its table entries consistent.
    nxt = otu.tree_where(do_update, params, point)
    stats = {"stepsize": jnp.where(do_update, gamma, 0.0), "table_size": jnp.where(ok, current_counts[i], 0)}
    return state, nxt, stats


_validate_ringleader = _checks.stepsize_only("ringleader_asgd")


def ringleader_asgd(*, stepsize: float) -> Algorithm:
    """Ringleader ASGD (Maranjyan et al., ICLR 2026; docs/theory.md §7.6).

    The server keeps, per worker, the sum G_i and count b_i of gradients computed at that
    worker's current point. Phase 1 collects (workers keep computing at the same point) until
    every b_i > 0. Phase 2 performs exactly n updates x ← x − γ (1/n) Σ_j G_j/b_j, one at each
    worker's first arrival in the round, after which that worker moves to the new x; its later
    gradients go to the next round's table. Then the next table becomes current.

    A lost result (failure) changes nothing: the worker computes again at the same point.

    Args:
      stepsize: γ ≥ 0.
    """
    return algorithm("ringleader_asgd", {"stepsize": stepsize}, _WORKER,
                     Server(_ringleader_init, state_params, apply=_ringleader_apply), validate=_validate_ringleader)
