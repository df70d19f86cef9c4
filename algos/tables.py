"""Asynchronous methods whose server keeps more than the model: a clock of its own updates,
a table of the latest gradients, a buffer. Each follows docs/theory.md §7 under the event model.

The engine's ``event.staleness`` counts delivered *arrivals*; when arrivals do not all update
the model (discards, buffers, warm-up), the delay that these methods use is counted in server
*updates*, so they keep their own clock: ``version`` (updates so far) and ``handed[i]`` (the
version worker i's current job started from).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from delaylab.algos import _checks, _rows
from delaylab.algos.base import Algorithm, Event, HParams, Params, Server, Worker, algorithm, state_params


class Clock(NamedTuple):
    version: jax.Array  # int32 [], server updates so far
    handed: jax.Array  # int32 [n], the version each worker's current job started from


def _clock(n: int) -> Clock:
    return Clock(jnp.zeros((), jnp.int32), jnp.zeros((n,), jnp.int32))


def _tick(clock: Clock, worker, updated) -> Clock:
    version = clock.version + updated.astype(jnp.int32)
    return Clock(version, clock.handed.at[worker].set(version))


def _step(x: Params, g: Params, scale, use) -> Params:
    return jax.tree.map(lambda a, b: jnp.where(use, a - scale.astype(a.dtype) * b, a), x, g)


# --- Ringmaster ASGD ---------------------------------------------------------------------------


class RingmasterState(NamedTuple):
    params: Params
    clock: Clock


def _ringmaster_init(hparams, params, num_workers):
    return RingmasterState(params, _clock(num_workers))


def _ringmaster_apply(hparams: HParams, state: RingmasterState, grad: Params, event: Event):
    delay = state.clock.version - state.clock.handed[event.worker]
    use = event.delivered & (delay < jnp.asarray(hparams["threshold"]))
    gamma = jnp.asarray(hparams["stepsize"])
    params = _step(state.params, grad, gamma, use)
    stats = {"stepsize": jnp.where(use, gamma, 0.0), "discarded": (event.delivered & ~use).astype(jnp.int32)}
    return RingmasterState(params, _tick(state.clock, event.worker, use)), params, stats


def _validate_ringmaster(hparams, num_workers):
    _checks.check_stepsize("ringmaster_asgd", hparams["stepsize"])
    _checks.check_int_hparam("ringmaster_asgd", hparams, "threshold")


def ringmaster_asgd(*, stepsize: float, threshold: int) -> Algorithm:
    """Ringmaster ASGD (Maranjyan et al., ICML 2025; docs/theory.md §7.1): a gradient computed R or more
    server updates ago is discarded; otherwise x ← x − γ g. The worker then restarts at x.

    This is the poster's variant without cancelling jobs in flight. Discards are counted per
    worker in ``worker_stats["discarded"]``.

    Args:
      stepsize: γ ≥ 0.
      threshold: R ≥ 1, the delay (in server updates) from which gradients are discarded.
    """
    return algorithm("ringmaster_asgd",
                     {"stepsize": stepsize, "threshold": _checks.check_int("ringmaster_asgd", "threshold", threshold)},
                     Worker(), Server(_ringmaster_init, state_params, apply=_ringmaster_apply),
                     validate=_validate_ringmaster)


# --- IA²SGD (gradient table) ------------------------------------------------------------------


class TableState(NamedTuple):
    params: Params
    table: Params  # [n + 1, ...]: rows 0..n−1 each worker's latest gradient, row n their sum
    filled: jax.Array  # bool [n]


def _ia2_init(hparams, params, num_workers):
    table = jax.tree.map(lambda x: jnp.zeros((num_workers + 1,) + x.shape, x.dtype), params)
    return TableState(params, table, jnp.zeros((num_workers,), bool))


def _ia2_apply(hparams: HParams, state: TableState, grad: Params, event: Event):
    # The sum lives in the table's last row, so that an arrival is one in-place write, O(d)
    # (see algos/_rows.py for why a separate running total made XLA copy the table).
    i, ok = event.worker, event.delivered
    n = state.filled.shape[0]
    table = jax.tree.map(lambda T, g: _rows.replace_row_keep_total(T, i, n, g, ok), state.table, grad)
    total = jax.tree.map(lambda T: T[n], table)
    filled = state.filled.at[i].set(state.filled[i] | ok)
    use = ok & jnp.all(filled)  # warm-up: no update until every worker has reported once
    gamma = jnp.asarray(hparams["stepsize"])
    params = _step(state.params, total, gamma / n, use)
    return TableState(params, table, filled), params, {"stepsize": jnp.where(use, gamma, 0.0)}


_validate_ia2 = _checks.stepsize_only("ia2sgd")


def ia2sgd(*, stepsize: float) -> Algorithm:
    """IA²SGD (docs/theory.md §7.2): the server keeps every worker's latest gradient and, on each arrival
    once all have reported, steps along their mean: x ← x − γ (1/n) Σ_j T[j]. Memory n·d.

    ``worker_stats["stepsize"]`` counts the step of each update against the arriving worker.
    """
    return algorithm("ia2sgd", {"stepsize": stepsize}, Worker(), Server(_ia2_init, state_params, apply=_ia2_apply),
                     validate=_validate_ia2)


# --- FedBuff-style buffered ASGD --------------------------------------------------------------


class BufferState(NamedTuple):
    params: Params
    buffer: Params
    count: jax.Array  # int32 [], arrivals in the buffer
    clock: Clock


def _fedbuff_init(hparams, params, num_workers):
    return BufferState(params, jax.tree.map(jnp.zeros_like, params), jnp.zeros((), jnp.int32), _clock(num_workers))


def _fedbuff_apply(hparams: HParams, state: BufferState, grad: Params, event: Event):
    ok = event.delivered
    delay = (state.clock.version - state.clock.handed[event.worker]).astype(jnp.asarray(hparams["local_stepsize"]).dtype)
    weight = (1.0 + delay) ** (-jnp.asarray(hparams["staleness_exponent"]))  # s(δ) = (1 + δ)^(−a)
    contrib = jnp.where(ok, hparams["local_stepsize"] * weight, 0.0)
    buffer = jax.tree.map(lambda b, g: b + contrib.astype(b.dtype) * g, state.buffer, grad)
    count = state.count + ok.astype(jnp.int32)
    full = count >= jnp.asarray(hparams["buffer_size"])
    scale = jnp.asarray(hparams["server_stepsize"]) / jnp.asarray(hparams["buffer_size"])
    params = _step(state.params, buffer, scale, full)
    buffer = jax.tree.map(lambda b: jnp.where(full, jnp.zeros_like(b), b), buffer)
    count = jnp.where(full, 0, count)
    # Step mass of this arrival's gradient: applied when its buffer is flushed.
    stats = {"stepsize": contrib * scale}
    return BufferState(params, buffer, count, _tick(state.clock, event.worker, full)), params, stats


def _validate_fedbuff(hparams, num_workers):
    _checks.check_int_hparam("fedbuff_asgd", hparams, "buffer_size")
    _checks.check_stepsize("fedbuff_asgd", hparams["local_stepsize"], argument="local_stepsize")
    _checks.check_stepsize("fedbuff_asgd", hparams["server_stepsize"], argument="server_stepsize")
    _checks.check_stepsize("fedbuff_asgd", hparams["staleness_exponent"], argument="staleness_exponent")


def fedbuff_asgd(*, local_stepsize: float, server_stepsize: float = 1.0, buffer_size: int = 1,
                 staleness_exponent: float = 0.5) -> Algorithm:
    """FedBuff-style buffered asynchronous SGD (Nguyen et al., AISTATS 2022; docs/theory.md §7.3).

    Each arrival adds s(δ)·η_ℓ·g to a buffer, δ its delay in server updates and
    s(δ) = (1 + δ)^(−a) (a = 0.5 [RECALLED], a = 0: no staleness weighting); after K arrivals
    the server steps x ← x − η_g · buffer/K and clears the buffer. A client does one local step
    here (Q = 1), so its update is η_ℓ g. With K = 1, a = 0 and η_g = 1 this is vanilla ASGD
    with step η_ℓ.

    Args:
      local_stepsize: η_ℓ ≥ 0. server_stepsize: η_g ≥ 0. buffer_size: K ≥ 1.
      staleness_exponent: a ≥ 0.
    """
    hp = {"local_stepsize": local_stepsize, "server_stepsize": server_stepsize,
          "buffer_size": _checks.check_int("fedbuff_asgd", "buffer_size", buffer_size), "staleness_exponent": staleness_exponent}
    return algorithm("fedbuff_asgd", hp, Worker(), Server(_fedbuff_init, state_params, apply=_fedbuff_apply),
                     validate=_validate_fedbuff)
