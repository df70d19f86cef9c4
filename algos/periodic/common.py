"""What the periodic methods share: the round's server state, the outer step and the checks.

The outer step is Nesterov SGD on the combined pseudo-gradient Δ, as DiLoCo takes it (torch's
``SGD(nesterov=True)``): optax's ``trace(nesterov=True)`` followed by the learning rate, i.e.
m ← β m + Δ, x̄ ← x̄ − η (Δ + β m).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from delaylab.algos import _checks
from delaylab.algos.base import HParams, Params
from delaylab.theory import linalg


class PeriodicState(NamedTuple):
    params: Params  # x̄
    momentum: Params  # the outer Nesterov buffer m
    round: jax.Array  # int32 [], rounds completed
    detector: Any = ()  # EDiT: the per-layer anomaly detectors


class RoundPoint(NamedTuple):
    """What a worker is handed when its job needs the round number (PALSGD's shared coin)."""

    params: Params
    round: jax.Array


def init_state(hparams, params, n) -> PeriodicState:
    del hparams, n
    return PeriodicState(params, jax.tree.map(jnp.zeros_like, params), jnp.zeros((), jnp.int32))


def outer_step(hparams: HParams, state: PeriodicState, delta: Params, do_leaf: list) -> tuple[Params, Params]:
    """Nesterov SGD (η = ``stepsize``, β = ``momentum``) on Δ, for the leaves whose entry of
    ``do_leaf`` is True; the others keep x̄ and m. Returns (x̄, m)."""
    tx = optax.chain(optax.trace(decay=hparams["momentum"], nesterov=True),
                     optax.scale_by_learning_rate(hparams["stepsize"]))
    updates, (trace, _) = tx.update(delta, (optax.TraceState(trace=state.momentum), optax.EmptyState()))
    x = optax.apply_updates(state.params, updates)
    return _pick(do_leaf, x, state.params), _pick(do_leaf, trace.trace, state.momentum)


def _pick(do_leaf: list, new, old):
    """Leaf by leaf: ``new`` where ``do_leaf`` is True, else ``old``."""
    tdef = jax.tree.structure(old)
    return jax.tree.unflatten(tdef, [jnp.where(do, a, b)
                                     for a, b, do in zip(jax.tree.leaves(new), jax.tree.leaves(old), do_leaf)])


def broadcast(tree, slots: int):
    """The same point for every slot of a round (leading slot axis)."""
    return jax.tree.map(lambda x: jnp.broadcast_to(x, (slots,) + x.shape), tree)


def uniform_mean(deltas: Params, ok: jax.Array) -> Params:
    """The mean of the slots' Δ over the delivered ones (``ok``); zero if none was."""
    count = jnp.maximum(jnp.sum(ok), 1)
    return jax.tree.map(lambda d: linalg.weighted_sum(ok, d) / count.astype(d.dtype), deltas)


def check_local_steps(name: str, hparams: HParams, n: int) -> None:
    H = np.asarray(hparams["local_steps"])
    if not np.issubdtype(H.dtype, np.integer) or np.any(H < 1):
        raise ValueError(f"{name}: local_steps must be integers >= 1; got {hparams['local_steps']!r}")
    if H.ndim == 1 and n is not None and H.shape[0] != n:
        raise ValueError(f"{name}: local_steps gives {H.shape[0]} workers' steps but the problem has {n} workers")


def local_steps_arg(name: str, local_steps):
    """``local_steps`` as given to a factory: one integer H ≥ 1, or one per worker (int32)."""
    if np.ndim(local_steps) == 0:
        return _checks.check_int(name, "local_steps", local_steps)
    H = np.asarray(local_steps)
    if H.ndim != 1 or not np.issubdtype(H.dtype, np.integer) or np.any(H < 1):
        raise ValueError(f"{name}: local_steps must be an integer >= 1 or one such integer per worker; got {local_steps!r}")
    return H.astype(np.int32)
