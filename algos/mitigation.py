"""Straggler mitigation by staleness weighting: FedAsync and its staleness functions (Xie, Koyejo
and Gupta 2019; spec mitigation.md §7).

Staleness functions s(δ) of the number δ of server updates a result missed (the engine's
``event.staleness``):

- ``constant``: s = 1;
- ``polynomial``: s_a(δ) = (δ + 1)^(−a);
- ``hinge``: s_{a,b}(δ) = 1 for δ ≤ b, else 1 / (a (δ − b) + 1);
- ``fedbuff``: s = 1/√(1 + δ) (FedBuff, spec asgd.md §4.9; the polynomial one with a = ½).

FedAsync. A worker handed the server model x_τ runs H steps of SGD of size η on its proximal
objective f_i(z; ξ) + (ρ/2)‖z − x_τ‖², starting at z = x_τ, and sends the end point z. The server
mixes it in as it arrives: α_t = α s(δ), x ← (1 − α_t) x + α_t z, and hands the worker the new x.
With one worker, α = 1, H = 1 and ρ = 0 this is plain SGD.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from algos import _checks
from algos.base import Algorithm, Event, HParams, Params
from algos.tables import _check_int


def _constant(hparams, delta):
    return jnp.ones_like(delta)


def _polynomial(hparams, delta):
    return (delta + 1.0) ** (-jnp.asarray(hparams["a"], delta.dtype))


def _hinge(hparams, delta):
    a = jnp.asarray(hparams["a"], delta.dtype)
    b = jnp.asarray(hparams["b"], delta.dtype)
    return jnp.where(delta <= b, 1.0, 1.0 / (a * (delta - b) + 1.0))


def _fedbuff(hparams, delta):
    return 1.0 / jnp.sqrt(1.0 + delta)


STALENESS = {"constant": _constant, "polynomial": _polynomial, "hinge": _hinge, "fedbuff": _fedbuff}


def staleness_weight(kind: str, delta, *, a: float = 0.5, b: float = 4.0) -> jax.Array:
    """s(δ) of the named staleness function (see the module docstring), for δ ≥ 0."""
    if kind not in STALENESS:
        raise ValueError(f"unknown staleness function {kind!r}; allowed: {sorted(STALENESS)}")
    return STALENESS[kind]({"a": a, "b": b}, jnp.asarray(delta, jnp.result_type(float)))


class FedAsyncState(NamedTuple):
    params: Params


def _fedasync_work(hparams: HParams, point: Params, oracle, key) -> Params:
    lr = jnp.asarray(hparams["local_stepsize"])
    rho = jnp.asarray(hparams["prox"])

    def body(k, z):
        _, g = oracle(z, jax.random.fold_in(key, k))
        return jax.tree.map(lambda zz, gg, x0: zz - lr.astype(zz.dtype) * (gg + rho.astype(zz.dtype) * (zz - x0)),
                            z, g, point)

    return jax.lax.fori_loop(0, jnp.asarray(hparams["local_steps"]), body, point)


def _make_apply(kind: str):
    fn = STALENESS[kind]

    def apply(hparams: HParams, state: FedAsyncState, z: Params, event: Event):
        alpha = jnp.asarray(hparams["mixing"])
        at = alpha * fn(hparams, event.staleness.astype(alpha.dtype))
        at = jnp.where(event.delivered, at, 0.0)
        x = jax.tree.map(lambda xx, zz: (1 - at.astype(xx.dtype)) * xx + at.astype(xx.dtype) * zz, state.params, z)
        return FedAsyncState(x), x, {"mixing": at}

    apply.__name__ = f"fedasync_apply_{kind}"
    return apply


_APPLY = {k: _make_apply(k) for k in STALENESS}


def _init(hparams, params, n):
    return FedAsyncState(params)


def _validate(hparams: HParams, num_workers: int) -> None:
    alpha = np.asarray(hparams["mixing"], np.float64)
    if not np.all((alpha > 0) & (alpha <= 1)):
        raise ValueError(f"fedasync: mixing α must be in (0, 1]; got {hparams['mixing']!r}")
    _checks.check_stepsize("fedasync", hparams["local_stepsize"], argument="local_stepsize")
    _checks.check_stepsize("fedasync", hparams["prox"], argument="prox")
    for name in ("a", "b"):
        v = np.asarray(hparams[name], np.float64)
        if not np.all(np.isfinite(v) & (v >= 0)):
            raise ValueError(f"fedasync: staleness parameter {name} must be finite and >= 0; got {hparams[name]!r}")


def fedasync(*, mixing: float, local_stepsize: float, local_steps: int = 1, prox: float = 0.0,
             staleness: str = "polynomial", a: float = 0.5, b: float = 4.0) -> Algorithm:
    """FedAsync (see the module docstring).

    Args:
      mixing: α ∈ (0, 1], the mixing weight of a fresh result.
      local_stepsize: η ≥ 0. local_steps: H ≥ 1. prox: ρ ≥ 0, the proximal weight.
      staleness: one of ``constant``, ``polynomial`` (uses a), ``hinge`` (uses a, b), ``fedbuff``.
      a, b: the staleness function's parameters (≥ 0); sweepable.
    """
    if staleness not in STALENESS:
        raise ValueError(f"fedasync: staleness must be one of {sorted(STALENESS)}; got {staleness!r}")
    hp = {"mixing": mixing, "local_stepsize": local_stepsize,
          "local_steps": _check_int("fedasync", "local_steps", local_steps), "prox": prox, "a": a, "b": b}
    _validate(hp, 0)
    return Algorithm(f"fedasync_{staleness}", hp, _init, _fedasync_work, _APPLY[staleness], lambda s: s.params,
                     validate=_validate)
