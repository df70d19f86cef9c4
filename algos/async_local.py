"""Asynchronous local SGD with Delayed Nesterov momentum (Liu et al. 2024; docs/theory.md §7.7).

Worker: H local SGD steps of size η_ℓ from the model it received, each on a fresh minibatch of
its own data; it sends the pseudo-gradient Δ = θ_start − θ_end. The schedule's job durations are
the durations of these H-step jobs.

Server, Delayed Nesterov (known from secondary sources, so the rule is spelled out here):
on every arrival the server takes a plain step x ← x − η Δ/N and adds Δ to a buffer; every N-th
arrival it updates the momentum with the buffered average, m ← β m + (Σ buffer)/N, applies the
momentum part x ← x − η β m, and clears the buffer. With N = 1 this is Nesterov-style outer
momentum; with β = 0 and H = 1 it is vanilla ASGD with step η·η_ℓ.

The inner optimiser (SGD or AdamW) is :func:`async_local_sgd`'s ``inner``; dynamic local updates
(DyLU, per-worker H_i) are :func:`dylu_local_steps`.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from delaylab.algos import _checks
from delaylab.algos.base import Algorithm, Event, HParams, Params, Server, Worker, algorithm, state_params
from delaylab.algos.local_steps import INNER, check_outer_and_inner, inner_hparams, start_minus_message


def dylu_local_steps(local_steps: int, taus) -> np.ndarray:
    """DyLU: H_i = max(1, round(H · τ_min / τ_i)), worker i's local steps given its time per step τ_i.

    That is, H scaled by the worker's speed relative to the fastest [RECALLED]. The schedule gives
    job durations; for DyLU they should be H_i steps' worth for worker i (e.g. fixed computation
    with τ_i^job = H_i · (time per step of worker i))."""
    _checks.check_taus("async_local_sgd", taus, argument="dylu_taus")
    taus = np.asarray(taus, dtype=np.float64)
    return np.maximum(1, np.round(local_steps * taus.min() / taus)).astype(np.int32)


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
    check_outer_and_inner("async_local_sgd", hparams)
    _checks.check_int_hparam("async_local_sgd", hparams, "delay")
    _checks.check_int_hparam("async_local_sgd", hparams, "local_steps")
    H = np.asarray(hparams["local_steps"])
    if H.ndim == 1 and n is not None and H.shape[0] != n:
        raise ValueError(f"async_local_sgd: DyLU gives local steps for {H.shape[0]} workers but the problem "
                         f"has {n}; give one τ per worker")


local_sgd_job = INNER["sgd"]  # H (or H_i) SGD steps from the handed point; sends Δ
local_adamw_job = INNER["adamw"]  # H (or H_i) AdamW steps from fresh moments; sends Δ


def async_local_sgd(*, stepsize: float, local_stepsize: float, local_steps: int = 1, momentum: float = 0.9,
                    delay: int = 1, inner: str = "sgd", weight_decay: float = 0.0, b1: float = 0.9,
                    b2: float = 0.999, eps: float = 1e-8, dylu_taus=None) -> Algorithm:
    """Asynchronous local SGD with Delayed Nesterov outer momentum (see the module docstring).

    Args:
      stepsize: η, the outer step. local_stepsize: η_ℓ, the inner optimiser's learning rate.
      local_steps: H ≥ 1. momentum: β ∈ [0, 1). delay: N ≥ 1, arrivals between momentum updates.
      inner: ``"sgd"`` or ``"adamw"`` (the paper's choice; optax's AdamW with bias correction).
        Each job starts the inner optimiser afresh at the handed model [INFERRED: the paper does
        not say whether workers keep their AdamW moments across jobs; a fresh start keeps a job a
        pure function of the handed model, as the event model requires].
      weight_decay, b1, b2, eps: AdamW's (``inner="adamw"`` only).
      dylu_taus: per-worker time per local step; if given, worker i runs
        :func:`dylu_local_steps` (H, taus)[i] local steps (DyLU).
    """
    extra = inner_hparams("async_local_sgd", inner, weight_decay=weight_decay, b1=b1, b2=b2, eps=eps)
    H = _checks.check_int("async_local_sgd", "local_steps", local_steps)
    hp = {"stepsize": stepsize, "local_stepsize": local_stepsize,
          "local_steps": H if dylu_taus is None else dylu_local_steps(H, dylu_taus),
          "momentum": momentum, "delay": _checks.check_int("async_local_sgd", "delay", delay), **extra}
    return algorithm("async_local_sgd", hp, Worker(INNER[inner], after_job=start_minus_message),
                     Server(_dn_init, state_params, apply=_dn_apply), validate=_validate_dn)
