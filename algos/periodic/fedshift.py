"""FedShift on FedAvg (Seo et al. 2024; docs/theory.md §10.10; see :mod:`algos.periodic`): the
listed workers upload their model quantised to b bits per tensor; the server averages the models
and shifts every tensor by the quantised share of its mean."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from delaylab.algos import _checks
from delaylab.algos.base import Algorithm, Event, HParams, Params, Server, Worker, algorithm, state_params
from delaylab.algos.local_steps import SGD, LocalSteps, start_minus_message
from delaylab.algos.periodic.common import PeriodicState, broadcast, check_local_steps, init_state, local_steps_arg, uniform_mean


def quantise_uniform(x: jax.Array, bits) -> jax.Array:
    """Uniform min–max quantisation of one tensor to 2^bits levels spanning [min x, max x] (the
    FedShift code's quantise-then-dequantise); a constant tensor is returned as it is."""
    levels = (2.0 ** jnp.asarray(bits, x.dtype)) - 1.0
    lo, hi = jnp.min(x), jnp.max(x)
    span = hi - lo
    safe = jnp.where(span > 0, span, 1.0)
    q = lo + jnp.round((x - lo) / safe * levels) * safe / levels
    return jnp.where(span > 0, q, x)


_LOCAL = LocalSteps(SGD(), output="end")


def _fedshift_work(hparams: HParams, point: Params, oracle, key):
    end = _LOCAL(hparams, point, oracle, key)
    quantised = jnp.asarray(hparams["quantised"])[oracle.worker]
    bits = hparams["bits"]
    sent = jax.tree.map(lambda y: jnp.where(quantised, quantise_uniform(y, bits), y), end)
    return jax.tree.map(jnp.subtract, point, sent)


def _fedshift_apply(hparams: HParams, s: PeriodicState, deltas: Params, events: Event, mask):
    ok = mask & events.delivered
    K = jnp.sum(ok)
    q = jnp.asarray(hparams["quantised"])[jnp.where(mask, events.worker, 0)] & ok
    frac = (jnp.sum(q) / jnp.maximum(K, 1))
    mean = jax.tree.map(lambda x, d: x - d, s.params, uniform_mean(deltas, ok))
    shifted = jax.tree.map(lambda w: w - frac.astype(w.dtype) * jnp.mean(w), mean)
    x = jax.tree.map(lambda new, old: jnp.where(K > 0, new, old), shifted, s.params)
    return (PeriodicState(x, s.momentum, s.round + 1, s.detector), broadcast(x, mask.shape[0]),
            {"quantised": q.astype(jnp.float32)})


def _validate_fedshift(hparams, n):
    _checks.check_stepsize("fedshift", hparams["local_stepsize"], argument="local_stepsize")
    check_local_steps("fedshift", hparams, n)
    q = np.asarray(hparams["quantised"])
    if q.dtype != bool or q.ndim != 1 or (n is not None and q.shape[0] != n):
        raise ValueError(f"fedshift: quantised must be one bool per worker ({n or 'n'}); got shape {q.shape}, dtype {q.dtype}")
    bits = np.asarray(hparams["bits"])
    if not np.issubdtype(bits.dtype, np.integer) or np.any(bits < 1) or np.any(bits > 16):
        raise ValueError(f"fedshift: bits must be an integer in 1..16; got {hparams['bits']!r}")


def fedshift(*, local_stepsize: float, local_steps=1, quantised, bits: int = 4) -> Algorithm:
    """FedShift on FedAvg (see the module docstring).

    The listed workers upload their model quantised to b bits per tensor (uniform min–max, 2^b
    levels); the server averages the models and shifts every tensor k, w̄_k ← w̄_k − (I/K) mean(w̄_k),
    with I of the K delivered workers quantised.

    Args:
      local_stepsize, local_steps: each worker's local SGD from the global model.
      quantised: one bool per worker, True for the workers that upload b-bit weights
        ("inferior" clients: in this simulator, typically the slow ones).
      bits: b ∈ 1..16.
    With no quantised worker this is FedAvg (:func:`local_sgd` with η = 1, β = 0).
    """
    q = np.asarray(quantised)
    if q.dtype != bool or q.ndim != 1:
        raise ValueError(f"fedshift: quantised must be a 1-D sequence of bools, one per worker; got {quantised!r}")
    hp = {"local_stepsize": local_stepsize, "local_steps": local_steps_arg("fedshift", local_steps),
          "quantised": q, "bits": _checks.check_int("fedshift", "bits", bits)}
    # after a job, telemetry reads the model the worker uploaded (quantised where it is listed)
    return algorithm("fedshift", hp, Worker(_fedshift_work, after_job=start_minus_message),
                     Server(init_state, state_params, apply_round=_fedshift_apply), validate=_validate_fedshift)
