"""Synchronous minibatch SGD: one server step per barrier round.

Each round every worker computes one stochastic gradient at the same model; the server
averages the delivered ones and takes one step, x ← x − γ · mean_i g_i, then hands everyone the
new model. Run it on a barrier schedule (``sim.schedules.barrier``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from delaylab.algos import _checks
from delaylab.algos.asgd import ASGDState, _init
from delaylab.algos.base import Algorithm, Event, HParams, Params, Server, Worker, algorithm, state_params


def _apply_round(hparams: HParams, state: ASGDState, grads: Params, events: Event, mask):
    use = mask & events.delivered  # [slots]
    count = jnp.sum(use)
    gamma = jnp.asarray(hparams["stepsize"])
    # Rounds in which every result was lost leave the model unchanged.
    scale = jnp.where(count > 0, gamma / jnp.maximum(count, 1), 0.0)

    def step(x, g):
        w = use.astype(g.dtype).reshape((-1,) + (1,) * (g.ndim - 1))
        return x - scale.astype(x.dtype) * jnp.sum(w * g, axis=0)

    new_params = jax.tree.map(step, state.params, grads)
    slots = mask.shape[0]
    next_points = jax.tree.map(lambda x: jnp.broadcast_to(x, (slots,) + x.shape), new_params)
    return ASGDState(new_params), next_points, {"stepsize": jnp.where(use, scale, 0.0)}


_validate = _checks.stepsize_only("minibatch_sgd")


def minibatch_sgd(*, stepsize: float) -> Algorithm:
    """Synchronous minibatch SGD over barrier rounds (one step of size γ per round).

    Args:
      stepsize: γ ≥ 0, applied to the mean of the round's delivered gradients.
    """
    return algorithm("minibatch_sgd", {"stepsize": stepsize}, Worker(),
                     Server(_init, state_params, apply_round=_apply_round), validate=_validate)
