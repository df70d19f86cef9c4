"""Asynchronous SGD with a per-arrival step-size rule: vanilla and Rescaled ASGD.

Server protocol (docs/theory.md §2): on the arrival of worker i's gradient g, computed at the
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
import numpy as np

from delaylab.algos import _checks
from delaylab.algos.base import Algorithm, Event, HParams, Params, Server, Worker, algorithm, state_params
from delaylab.algos.corrections import clipping, server_correction

StepRule = Callable[[HParams, Event], jax.Array]


class ASGDState(NamedTuple):
    params: Params  # the server model x_k, same pytree as the problem's parameters


def _init(hparams: HParams, params: Params, num_workers: int) -> ASGDState:
    del hparams, num_workers
    return ASGDState(params=params)


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

    Args:
      name: the algorithm's name in reports.
      step_rule: ``(hparams, event) -> γ``. It should be a module-level function (not a fresh
        lambda per call) so that repeated constructions share one compiled program.
      hparams: default hyperparameters.
      validate: ``(hparams, num_workers) -> None``, raising ValueError for bad values (called
        here with ``num_workers=None``, and by the engine with the problem's n).

    A correction of the arriving gradient (clipping, delay compensation) wraps the result:
    :func:`algos.server_correction`.
    """
    return algorithm(name, hparams, Worker(), Server(_init, state_params, apply=_ApplyWithRule(step_rule)),
                     validate=validate)


# --- vanilla ---------------------------------------------------------------------------------


def constant_step(hparams: HParams, event: Event) -> jax.Array:
    """γ_k = γ for every arrival (vanilla ASGD)."""
    del event
    return jnp.asarray(hparams["stepsize"])


_validate_vanilla = _checks.stepsize_only("asgd")


def asgd(*, stepsize: float) -> Algorithm:
    """Vanilla asynchronous SGD with a constant step size γ (docs/theory.md §2).

    Under the fixed-computation model it converges, as γ → 0, to a stationary point of the
    frequency-weighted objective Σ_i p_i F_i with p_i ∝ 1/τ_i (docs/theory.md §2), not of F = mean F_i.

    Args:
      stepsize: γ ≥ 0, applied to every arriving gradient.
    """
    return asgd_with_step_rule("asgd", constant_step, {"stepsize": stepsize}, _validate_vanilla)


# --- Rescaled ----------------------------------------------------------------------------------


def rescaled_step(hparams: HParams, event: Event) -> jax.Array:
    """γ_i = γ · τ_i / τ_H, τ_H the harmonic mean of the τ vector (docs/theory.md §6.2)."""
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
    and the limit objective is the true F (docs/theory.md §6.2).

    Normalisation: the paper's constant could not be read (a reconstruction, docs/theory.md §6.2). We divide
    by τ_H so that the *mean step per update* equals γ: arrivals happen at rate Σ 1/τ_j, and
    Σ_j (1/τ_j)·γ τ_j/τ_H / Σ_j (1/τ_j) = γ. Learning rates are then directly comparable with
    vanilla ASGD's.

    Args:
      stepsize: γ ≥ 0, the mean step per update.
      taus: the τ_i used by the rule, one per worker (with random durations, their means).
    """
    return asgd_with_step_rule(
        "rescaled_asgd",
        rescaled_step,
        {"stepsize": stepsize, "taus": _checks.numbers_arg("rescaled_asgd", taus, "taus")},
        _validate_rescaled,
    )


# --- delay-dependent rules -------------------------------------------------------------------


def delay_adaptive_step(hparams: HParams, event: Event) -> jax.Array:
    """γ_k = γ · n / max(n, δ_k) (Mishchenko et al. 2022, the authors' code; docs/theory.md §6.4)."""
    gamma = jnp.asarray(hparams["stepsize"])
    n = jnp.asarray(hparams["num_workers"]).astype(gamma.dtype)
    return gamma * n / jnp.maximum(n, event.staleness.astype(gamma.dtype))


def _validate_delay_adaptive(hparams: HParams, num_workers: int | None) -> None:
    _checks.check_stepsize("delay_adaptive_asgd", hparams["stepsize"])
    k = np.asarray(hparams["num_workers"])
    if k.ndim or k.dtype == bool or not np.issubdtype(k.dtype, np.integer) or k < 1:
        raise ValueError(f"delay_adaptive_asgd: num_workers must be a positive integer; got {hparams['num_workers']!r}")
    if num_workers is not None and int(hparams["num_workers"]) != num_workers:
        raise ValueError(
            f"delay_adaptive_asgd: num_workers={int(hparams['num_workers'])} but the problem has "
            f"{num_workers} workers; they must match"
        )


def delay_adaptive_asgd(*, stepsize: float, num_workers: int) -> Algorithm:
    """Delay-adaptive ASGD (Mishchenko, Bach, Even, Woodworth, NeurIPS 2022; docs/theory.md §6.4).

    A gradient that is δ server updates stale gets step γ·n/max(n, δ): full step up to n
    updates of delay, shrinking beyond. Under fixed computation worker i's delay is about
    nτ_i/τ_H, so its implicit weight is ≈ (1/τ_i)·min(1, τ_H/τ_i) (docs/theory.md §6): the data bias
    is worse than vanilla's.

    Args:
      stepsize: γ ≥ 0.
      num_workers: n, the delay threshold.
    """
    # refused here: int() below would truncate a fractional count before validate sees it
    if isinstance(num_workers, bool) or int(num_workers) != num_workers or num_workers < 1:
        raise ValueError(f"delay_adaptive_asgd: num_workers must be a positive integer; got {num_workers!r}")
    return asgd_with_step_rule("delay_adaptive_asgd", delay_adaptive_step,
                               {"stepsize": stepsize, "num_workers": int(num_workers)}, _validate_delay_adaptive)


def staleness_aware_step(hparams: HParams, event: Event) -> jax.Array:
    """γ_k = γ / max(1, δ_k): the step divided by the staleness (Zhang et al. 2016; docs/theory.md §6.5).

    A fresh gradient (δ = 0) gets the full step; the paper's α₀/δ is undefined there.
    """
    gamma = jnp.asarray(hparams["stepsize"])
    return gamma / jnp.maximum(1, event.staleness).astype(gamma.dtype)


_validate_staleness_aware = _checks.stepsize_only("staleness_aware_asgd")


def staleness_aware_asgd(*, stepsize: float) -> Algorithm:
    """Staleness-aware ASGD: step γ/max(1, δ) for a gradient δ updates stale (docs/theory.md §6.5).

    Predicted implicit weight ≈ 1/τ_i² (docs/theory.md §6).
    """
    return asgd_with_step_rule("staleness_aware_asgd", staleness_aware_step, {"stepsize": stepsize},
                               _validate_staleness_aware)


def inverse_tau_step(hparams: HParams, event: Event) -> jax.Array:
    """γ_i = γ · τ_H / τ_i: the exponent printed on the Rescaled ASGD poster (docs/theory.md §6.3)."""
    taus = jnp.asarray(hparams["taus"])
    tau_h = taus.shape[-1] / jnp.sum(1.0 / taus)
    return jnp.asarray(hparams["stepsize"]) * tau_h / taus[event.worker]


def _validate_inverse_tau(hparams: HParams, num_workers: int) -> None:
    _checks.check_stepsize("inverse_tau_asgd", hparams["stepsize"])
    _checks.check_taus("inverse_tau_asgd", hparams["taus"], num_workers)


def inverse_tau_asgd(*, stepsize: float, taus) -> Algorithm:
    """ASGD with γ_i ∝ 1/τ_i, the rule the Rescaled ASGD poster prints (docs/theory.md §6.3).

    Kept to settle the discrepancy numerically: its implicit weights are ∝ 1/τ_i², i.e. it is
    *more* biased than vanilla ASGD. Normalised like Rescaled ASGD, γ_i = γ τ_H/τ_i.
    """
    return asgd_with_step_rule("inverse_tau_asgd", inverse_tau_step,
                               {"stepsize": stepsize, "taus": _checks.numbers_arg("inverse_tau_asgd", taus, "taus")},
                               _validate_inverse_tau)


# --- clipping ----------------------------------------------------------------------------------


def clipped_asgd(*, stepsize: float, threshold: float) -> Algorithm:
    """Clipped ASGD: x ← x − γ clip_c(g) (Erickson & Johansson 2026, form reconstructed, docs/theory.md §6.7):
    vanilla ASGD with the clipping correction (:func:`algos.clipped`), which any family can take.

    Args:
      stepsize: γ ≥ 0.
      threshold: c > 0; gradients longer than c are scaled to length c.
    """
    return server_correction(asgd(stepsize=stepsize), clipping, hparams={"threshold": threshold}, name="clipped_asgd")
