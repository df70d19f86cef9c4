"""Asynchronous local SGD with Delayed Nesterov momentum (Liu et al. 2024; spec §4.10).

Worker: H local SGD steps of size η_ℓ from the model it received, each on a fresh minibatch of
its own data; it sends the pseudo-gradient Δ = θ_start − θ_end. The schedule's job durations are
the durations of these H-step jobs.

Server, Delayed Nesterov (details [RECALLED] in the spec, so the rule is spelled out here):
on every arrival the server takes a plain step x ← x − η Δ/N and adds Δ to a buffer; every N-th
arrival it updates the momentum with the buffered average, m ← β m + (Σ buffer)/N, applies the
momentum part x ← x − η β m, and clears the buffer. With N = 1 this is Nesterov-style outer
momentum; with β = 0 and H = 1 it is vanilla ASGD with step η·η_ℓ.

Not yet here: the paper's AdamW inner optimiser and dynamic local updates (DyLU, H_i ∝ speed).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from algos import _checks
from algos.base import Algorithm, Event, HParams, Params
from algos.tables import _check_int


def local_sgd_work(hparams: HParams, point: Params, oracle, key) -> Params:
    """H steps of SGD from ``point``; returns Δ = point − (the model after H steps)."""
    lr = jnp.asarray(hparams["local_stepsize"])

    def body(k, x):
        _, g = oracle(x, jax.random.fold_in(key, k))
        return jax.tree.map(lambda a, b: a - lr.astype(a.dtype) * b, x, g)

    end = jax.lax.fori_loop(0, jnp.asarray(hparams["local_steps"]), body, point)
    return jax.tree.map(lambda a, b: a - b, point, end)


class DNState(NamedTuple):
    params: Params
    momentum: Params
    buffer: Params
    count: jax.Array  # int32 [], arrivals since the last momentum update


def _dn_init(hparams, params, n):
    z = jax.tree.map(jnp.zeros_like, params)
    return DNState(params, z, z, jnp.zeros((), jnp.int32))


def _dn_apply(hparams: HParams, s: DNState, delta: Params, event: Event):
    ok = event.delivered
    N = jnp.asarray(hparams["delay"])
    eta = jnp.asarray(hparams["stepsize"])
    beta = jnp.asarray(hparams["momentum"])
    scale = eta / N.astype(eta.dtype)
    x = jax.tree.map(lambda a, d: jnp.where(ok, a - scale.astype(a.dtype) * d, a), s.params, delta)
    buffer = jax.tree.map(lambda b, d: jnp.where(ok, b + d, b), s.buffer, delta)
    count = s.count + ok.astype(jnp.int32)
    flush = count >= N
    momentum = jax.tree.map(lambda m, b: jnp.where(flush, beta.astype(m.dtype) * m + b / N.astype(b.dtype), m),
                            s.momentum, buffer)
    x = jax.tree.map(lambda a, m: jnp.where(flush, a - (eta * beta).astype(a.dtype) * m, a), x, momentum)
    buffer = jax.tree.map(lambda b: jnp.where(flush, jnp.zeros_like(b), b), buffer)
    count = jnp.where(flush, 0, count)
    return DNState(x, momentum, buffer, count), x, {"stepsize": jnp.where(ok, scale, 0.0)}


def _validate_dn(hparams, n):
    _checks.check_stepsize("async_local_sgd", hparams["stepsize"])
    _checks.check_stepsize("async_local_sgd", hparams["local_stepsize"], argument="local_stepsize")
    m = jnp.asarray(hparams["momentum"])
    if not bool(jnp.all((m >= 0) & (m < 1))):
        raise ValueError(f"async_local_sgd: momentum must be in [0, 1); got {hparams['momentum']!r}")


def async_local_sgd(*, stepsize: float, local_stepsize: float, local_steps: int = 1, momentum: float = 0.9,
                    delay: int = 1) -> Algorithm:
    """Asynchronous local SGD with Delayed Nesterov outer momentum (see the module docstring).

    Args:
      stepsize: η, the outer step. local_stepsize: η_ℓ. local_steps: H ≥ 1.
      momentum: β ∈ [0, 1). delay: N ≥ 1, arrivals between momentum updates.
    """
    hp = {"stepsize": stepsize, "local_stepsize": local_stepsize,
          "local_steps": _check_int("async_local_sgd", "local_steps", local_steps),
          "momentum": momentum, "delay": _check_int("async_local_sgd", "delay", delay)}
    _validate_dn(hp, 0)
    return Algorithm("async_local_sgd", hp, _dn_init, local_sgd_work, _dn_apply, lambda s: s.params,
                     validate=_validate_dn)
