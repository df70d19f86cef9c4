"""Synchronous local SGD with an outer Nesterov step (DiLoCo-style), and a proactive planner of
per-worker local steps (see :mod:`algos.periodic`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from delaylab.algos import _checks
from delaylab.algos.base import Algorithm, Event, HParams, Params, Server, Worker, algorithm, state_params
from delaylab.algos.local_steps import INNER, check_outer_and_inner, inner_hparams, start_minus_message
from delaylab.algos.periodic.common import (PeriodicState, broadcast, check_local_steps, init_state, local_steps_arg,
                                   outer_step, uniform_mean)


def local_apply(hparams: HParams, s: PeriodicState, deltas: Params, events: Event, mask):
    """The round: Δ = the mean of the delivered Δ_i, then the outer step (a round whose results
    were all lost keeps x̄ and m)."""
    ok = mask & events.delivered
    any_ok = jnp.any(ok)
    x, m = outer_step(hparams, s, uniform_mean(deltas, ok), [any_ok] * len(jax.tree.leaves(s.params)))
    share = jnp.where(ok, 1.0 / jnp.maximum(jnp.sum(ok), 1), 0.0)
    return PeriodicState(x, m, s.round + 1, s.detector), broadcast(x, mask.shape[0]), {"weight": share}


def _validate(hparams, n):
    check_outer_and_inner("local_sgd", hparams)
    check_local_steps("local_sgd", hparams, n)


def local_sgd(*, stepsize: float = 1.0, local_stepsize: float, local_steps=1, momentum: float = 0.0,
              inner: str = "sgd", weight_decay: float = 0.0, b1: float = 0.9, b2: float = 0.999,
              eps: float = 1e-8) -> Algorithm:
    """Synchronous local SGD with an outer Nesterov step (DiLoCo-style; see :mod:`algos.periodic`).

    Args:
      stepsize: η, the outer step (1 with momentum 0: plain model averaging).
      local_stepsize: the inner optimiser's learning rate. local_steps: H ≥ 1, or one H_i per worker.
      momentum: β ∈ [0, 1), the outer Nesterov momentum.
      inner: ``"sgd"`` or ``"adamw"`` (fresh moments every round); weight_decay, b1, b2, eps: AdamW's.
    """
    extra = inner_hparams("local_sgd", inner, weight_decay=weight_decay, b1=b1, b2=b2, eps=eps)
    hp = {"stepsize": stepsize, "local_stepsize": local_stepsize,
          "local_steps": local_steps_arg("local_sgd", local_steps), "momentum": momentum, **extra}
    return algorithm("local_sgd", hp, Worker(INNER[inner], after_job=start_minus_message),
                     Server(init_state, state_params, apply_round=local_apply), validate=_validate)


def dpro_sm_like_local_steps(observed, local_steps: int, *, smoothing: float = 0.3) -> np.ndarray:
    """A "DPro-SM-like" proactive rule (docs/theory.md §10.11, a reconstruction; DPro-SM itself is published as an
    abstract only, so its LSTM predictor and allocation rule are not reproduced): per worker, an
    EWMA of its observed per-step times (``observed`` [n, k], oldest first) predicts the next one,
    and the local steps are set so that predicted finish times line up,
    H_i = max(1, round(H · T̂_min / T̂_i)). Run :func:`local_sgd` with ``local_steps=H_i`` on job
    durations worth H_i steps. With equal predictions every worker gets H (plain local SGD)."""
    obs = np.asarray(observed, np.float64)
    if obs.ndim != 2 or obs.shape[1] < 1 or not np.all(np.isfinite(obs)) or np.any(obs <= 0):
        raise ValueError(f"dpro_sm_like_local_steps: observed must be [n, k >= 1] positive step times; got shape {obs.shape}")
    H = _checks.check_int("dpro_sm_like_local_steps", "local_steps", local_steps)
    if not 0 < smoothing <= 1:
        raise ValueError(f"dpro_sm_like_local_steps: smoothing must be in (0, 1]; got {smoothing!r}")
    pred = obs[:, 0].copy()
    for k in range(1, obs.shape[1]):
        pred = (1 - smoothing) * pred + smoothing * obs[:, k]
    return np.maximum(1, np.round(H * pred.min() / pred)).astype(np.int32)
