"""PALSGD, pseudo-asynchronous local SGD (Naganuma et al. 2025; docs/theory.md §10.8, the
authors' decoupled variant; see :mod:`algos.periodic`).

Each local step is, with probability p, a *pseudo-synchronisation* step y ← y − (γ/p) η_p (y − x̄),
which needs no gradient, and otherwise an SGD step of size γ/(1 − p). It is a step rule of
:class:`algos.local_steps.LocalSteps` (the shared local-step loop), reporting how many of its
steps were pseudo-synchronisations.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from delaylab.algos import _checks
from delaylab.algos.base import Algorithm, Event, HParams, Params, Server, Worker, algorithm, state_params
from delaylab.algos.local_steps import LocalSteps, check_outer_and_inner
from delaylab.algos.periodic.common import PeriodicState, RoundPoint, broadcast, check_local_steps, init_state, local_steps_arg
from delaylab.algos.periodic.local_sgd import local_apply

COINS = ("shared", "per_worker")


@dataclasses.dataclass(frozen=True)
class PseudoSyncStep:
    """PALSGD's local step (a :class:`algos.local_steps.StepRule`); its state is the job's coin key
    (step k's coin is drawn from ``fold_in(coin key, k)``)."""

    def init(self, hparams, start):
        return ()

    def step(self, hparams, y, coin_key, oracle, key, k, start):
        p = jnp.asarray(hparams["probability"])
        lr = jnp.asarray(hparams["local_stepsize"])
        pull = jnp.asarray(hparams["pull"])
        prox = jnp.where(p > 0, lr * pull / jnp.where(p > 0, p, 1.0), 0.0)
        grad_lr = lr / (1.0 - p)
        pseudo = jax.random.uniform(jax.random.fold_in(coin_key, k)) < p

        def sync_step(y):
            return jax.tree.map(lambda a, b: a - prox.astype(a.dtype) * (a - b), y, start)

        def grad_step(y):
            _, g = oracle(y, key)
            return jax.tree.map(lambda a, gg: a - grad_lr.astype(a.dtype) * gg, y, g)

        return jax.lax.cond(pseudo, sync_step, grad_step, y), coin_key, pseudo.astype(jnp.int32)


@dataclasses.dataclass(frozen=True)
class _Work:
    """The job from a :class:`RoundPoint`: the shared loop with the coin key as the step rule's
    state; returns (Δ, number of pseudo-synchronisation steps)."""

    shared: bool

    def __call__(self, hparams: HParams, point: RoundPoint, oracle, key):
        if self.shared:  # every worker flips the same coins in a round
            coin_key = jax.random.fold_in(jax.random.key(jnp.asarray(hparams["coin_seed"])), point.round)
        else:
            coin_key = jax.random.fold_in(key, jnp.uint32(0xFFFFFFFF))  # never a step's index
        job = LocalSteps(PseudoSyncStep()).run(hparams, point.params, oracle, key, coin_key)
        return jax.tree.map(jnp.subtract, point.params, job.end), job.aux


def _apply(hparams: HParams, s: PeriodicState, messages, events: Event, mask):
    deltas, n_pseudo = messages
    s, _, stats = local_apply(hparams, s, deltas, events, mask)
    nxt = broadcast(RoundPoint(s.params, s.round), mask.shape[0])
    return s, nxt, {**stats, "pseudo_steps": jnp.where(mask, n_pseudo, 0).astype(jnp.float32)}


def _start(hparams, params) -> RoundPoint:
    return RoundPoint(params, jnp.zeros((), jnp.int32))


def _point_params(point: RoundPoint) -> Params:
    return point.params


def _after_job(point: RoundPoint, message) -> Params:
    """The model at the end of the job: start − Δ (the message is (Δ, pseudo-step count))."""
    return jax.tree.map(jnp.subtract, point.params, message[0])


def _validate(hparams, n):
    check_outer_and_inner("palsgd", hparams)
    check_local_steps("palsgd", hparams, n)
    p = np.asarray(hparams["probability"], np.float64)
    if not np.all((p >= 0) & (p < 1)):
        raise ValueError(f"palsgd: probability p must be in [0, 1); got {hparams['probability']!r}")
    _checks.check_stepsize("palsgd", hparams["pull"], argument="pull")
    seed = np.asarray(hparams["coin_seed"])
    if seed.dtype == bool or not np.issubdtype(seed.dtype, np.integer) or np.any(seed < 0) or np.any(seed >= 2**31):
        raise ValueError(f"palsgd: coin_seed must be an integer in [0, 2**31); got {hparams['coin_seed']!r}")


def palsgd(*, stepsize: float = 1.0, local_stepsize: float, local_steps=1, probability: float = 0.1,
           pull: float = 1.0, momentum: float = 0.0, coin: str = "shared", coin_seed: int = 0) -> Algorithm:
    """Pseudo-asynchronous local SGD (see the module docstring).

    Args:
      stepsize, momentum: the outer Nesterov step (η, β).
      local_stepsize: γ. local_steps: H (both step kinds count), or one H_i per worker.
      probability: p ∈ [0, 1), the chance that a local step is a pseudo-synchronisation.
      pull: η_p ≥ 0, the pull towards x̄ of a pseudo-synchronisation step.
      coin: ``"shared"`` (the authors' code: all workers flip the same coins, from ``coin_seed``
        and the round number) or ``"per_worker"`` (from each job's own key).
    With p = 0 this is :func:`algos.periodic.local_sgd` (same minibatches; equal to rounding). The
    DDP warm start is not modelled (start the run from a warmed-up model instead).
    """
    if coin not in COINS:
        raise ValueError(f"palsgd: coin must be one of {list(COINS)}; got {coin!r}")
    hp = {"stepsize": stepsize, "local_stepsize": local_stepsize,
          "local_steps": local_steps_arg("palsgd", local_steps), "momentum": momentum,
          "probability": probability, "pull": pull, "coin_seed": coin_seed}
    return algorithm(f"palsgd_{coin}", hp, Worker(_Work(coin == "shared"), _start, _point_params, _after_job),
                     Server(init_state, state_params, apply_round=_apply), validate=_validate)
