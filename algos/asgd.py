"""Asynchronous SGD with a per-arrival step-size rule: vanilla and Rescaled ASGD.

Server protocol (specs/asgd.md §2.1): on the arrival of worker i's gradient g, computed at the
model the worker was handed, the server applies ``x ← x − γ_k g`` at once and hands worker i the
new ``x``. Only the step-size rule ``γ_k`` differs between members of the family, so a named
method is this file's :func:`asgd_with_step_rule` composed with one rule, the way optax builds
``sgd`` from primitives.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

from algos import _checks
from algos.base import Algorithm, Event, HParams, Params, gradient_work

StepRule = Callable[[HParams, Event], jax.Array]


class ASGDState(NamedTuple):
    params: Params  # the server model x_k, same pytree as the problem's parameters


def _init(hparams: HParams, params: Params, num_workers: int) -> ASGDState:
    del hparams, num_workers
    return ASGDState(params=params)


def _params(state: ASGDState) -> Params:
    return state.params


@dataclasses.dataclass(frozen=True)
class _ApplyWithRule:
    """``apply`` of ASGD for one step rule. A frozen dataclass, not a closure, so that two
    algorithms built from the same rule compare equal and share one compilation."""

    step_rule: StepRule

    def __call__(self, hparams: HParams, state: ASGDState, grad: Params, event: Event):
        gamma = self.step_rule(hparams, event)
        # A lost result (failure) leaves the server unchanged; the worker restarts at x.
        gamma = jnp.where(event.delivered, gamma, 0.0)

        def step(x, g):
            return jnp.where(event.delivered, x - gamma.astype(x.dtype) * g, x)

        new_params = jax.tree.map(step, state.params, grad)
        return ASGDState(new_params), new_params, {"stepsize": gamma}


def asgd_with_step_rule(
    name: str,
    step_rule: StepRule,
    hparams: dict,
    validate: Callable[[HParams, int], None] | None = None,
) -> Algorithm:
    """ASGD whose step for each arrival is ``step_rule(hparams, event)``.

    ``step_rule`` should be a module-level function (not a fresh lambda per call) so that
    repeated constructions share one compiled program.
    """
    return Algorithm(
        name=name,
        hparams=dict(hparams),
        init=_init,
        work=gradient_work,
        apply=_ApplyWithRule(step_rule),
        params=_params,
        validate=validate,
    )


# --- vanilla ---------------------------------------------------------------------------------


def constant_step(hparams: HParams, event: Event) -> jax.Array:
    """γ_k = γ for every arrival (vanilla ASGD)."""
    del event
    return jnp.asarray(hparams["stepsize"])


def _validate_vanilla(hparams: HParams, num_workers: int) -> None:
    del num_workers
    _checks.check_stepsize("asgd", hparams["stepsize"])


def asgd(*, stepsize: float) -> Algorithm:
    """Vanilla asynchronous SGD with a constant step size γ (specs/asgd.md §2.1).

    Under the fixed-computation model it converges, as γ → 0, to a stationary point of the
    frequency-weighted objective Σ_i p_i F_i with p_i ∝ 1/τ_i (§2.2), not of F = mean F_i.

    Args:
      stepsize: γ ≥ 0, applied to every arriving gradient.
    """
    _checks.check_stepsize("asgd", stepsize)
    return asgd_with_step_rule("asgd", constant_step, {"stepsize": stepsize}, _validate_vanilla)


# --- Rescaled ----------------------------------------------------------------------------------


def rescaled_step(hparams: HParams, event: Event) -> jax.Array:
    """γ_i = γ · τ_i / τ_H, τ_H the harmonic mean of the τ vector (specs/asgd.md §3.1 (a))."""
    taus = jnp.asarray(hparams["taus"])
    tau_h = taus.shape[-1] / jnp.sum(1.0 / taus)
    return jnp.asarray(hparams["stepsize"]) * taus[event.worker] / tau_h


def _validate_rescaled(hparams: HParams, num_workers: int) -> None:
    _checks.check_stepsize("rescaled_asgd", hparams["stepsize"])
    _checks.check_taus("rescaled_asgd", hparams["taus"], num_workers)


def rescaled_asgd(*, stepsize: float, taus) -> Algorithm:
    """Rescaled ASGD (Mahran, Maranjyan, Richtárik, arXiv 2605.13434).

    Each worker's step is proportional to its computation time: γ_i = γ · τ_i / τ_H, where
    τ_H = ((1/n) Σ 1/τ_j)^{-1} is the harmonic mean. Over a window of length T worker i
    arrives T/τ_i times, so it contributes γ T / τ_H of step mass, the same for every worker,
    and the limit objective is the true F (specs/asgd.md §3.1).

    Normalisation: the paper's constant could not be read (spec §3.1, [INFERRED]). We divide
    by τ_H so that the *mean step per update* equals γ: arrivals happen at rate Σ 1/τ_j, and
    Σ_j (1/τ_j)·γ τ_j/τ_H / Σ_j (1/τ_j) = γ. Learning rates are then directly comparable with
    vanilla ASGD's.

    Args:
      stepsize: γ ≥ 0, the mean step per update.
      taus: the τ_i used by the rule, one per worker (with random durations, their means).
    """
    _checks.check_stepsize("rescaled_asgd", stepsize)
    _checks.check_taus("rescaled_asgd", taus)
    return asgd_with_step_rule(
        "rescaled_asgd",
        rescaled_step,
        {"stepsize": stepsize, "taus": jnp.asarray(taus)},
        _validate_rescaled,
    )
