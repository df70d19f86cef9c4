"""Straggler mitigation by staleness weighting: FedAsync and its staleness functions (Xie, Koyejo
and Gupta 2019; docs/theory.md §10.5).

Staleness functions s(δ) of the number δ of server updates a result missed (the engine's
``event.staleness``):

- ``constant``: s = 1;
- ``polynomial``: s_a(δ) = (δ + 1)^(−a);
- ``hinge``: s_{a,b}(δ) = 1 for δ ≤ b, else 1 / (a (δ − b) + 1);
- ``fedbuff``: s = 1/√(1 + δ) (FedBuff, docs/theory.md §7.3; the polynomial one with a = ½).

FedAsync. A worker handed the server model x_τ runs H steps of SGD of size η on its proximal
objective f_i(z; ξ) + (ρ/2)‖z − x_τ‖², starting at z = x_τ, and sends the end point z. The server
mixes it in as it arrives: α_t = α s(δ), x ← (1 − α_t) x + α_t z, and hands the worker the new x.
With one worker, α = 1, H = 1 and ρ = 0 this is plain SGD.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from delaylab.algos import _checks
from delaylab.algos.asgd import asgd_with_step_rule
from delaylab.algos.base import Algorithm, Event, HParams, Params, Server, Worker, algorithm, state_params
from delaylab.algos.local_steps import LocalSteps, ProximalSGD, message_is_model
from delaylab.theory import hierarchy, linalg


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


def _check_staleness_params(algo: str, hparams: HParams) -> None:
    """The staleness function's a and b must be finite and >= 0 (a sweep axis is allowed)."""
    for name in ("a", "b"):
        v = np.asarray(hparams[name], np.float64)
        if not np.all(np.isfinite(v) & (v >= 0)):
            raise ValueError(f"{algo}: staleness parameter {name} must be finite and >= 0; got {hparams[name]!r}")


class FedAsyncState(NamedTuple):
    params: Params


_FEDASYNC_WORK = LocalSteps(ProximalSGD(), output="end")  # H proximal SGD steps; sends the end point z


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
    _checks.check_int_hparam("fedasync", hparams, "local_steps")
    _check_staleness_params("fedasync", hparams)


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
          "local_steps": _checks.check_int("fedasync", "local_steps", local_steps), "prox": prox, "a": a, "b": b}
    return algorithm(f"fedasync_{staleness}", hp, Worker(_FEDASYNC_WORK, after_job=message_is_model),
                     Server(_init, state_params, apply=_APPLY[staleness]), validate=_validate)


# --- hierarchical SGD -------------------------------------------------------------------------

class HierarchicalState(NamedTuple):
    workers: Params  # every worker's parameters, stacked on a leading worker axis [n, ...]
    step: jax.Array  # int32 [], local steps taken so far


def _sgd_step_work(hparams: HParams, point: Params, oracle, key) -> Params:
    """One SGD step of size γ from the worker's own parameters; returns the new parameters."""
    _, g = oracle(point, key)
    lr = jnp.asarray(hparams["stepsize"])
    return jax.tree.map(lambda y, gg: y - lr.astype(y.dtype) * gg, point, g)


def _group_mean(x: jax.Array, size: int) -> jax.Array:
    """Each worker's row replaced by its group's mean (groups: consecutive blocks of ``size``), as
    one contraction with the block-averaging matrix (see theory.linalg on why)."""
    n = x.shape[0]
    return linalg.mix(jnp.asarray(np.kron(np.eye(n // size), np.full((size, size), 1.0 / size))), x)


def _stack_workers(hparams, params, n) -> HierarchicalState:
    stacked = jax.tree.map(lambda x: jnp.broadcast_to(x, (n,) + jnp.shape(x)), params)
    return HierarchicalState(stacked, jnp.zeros((), jnp.int32))


def _mean_of_workers(state: HierarchicalState) -> Params:
    """The model the metrics see: the mean of the workers (the synchronised model after a global average)."""
    return jax.tree.map(linalg.leading_mean, state.workers)


@dataclasses.dataclass(frozen=True)
class _HierarchicalApply:
    """A round of local steps, then the averaging of :func:`theory.hierarchy.sync_level` (levels:
    ``((period, group size), ...)`` sorted by period)."""

    levels: tuple
    warmup: int

    def which(self, step):
        """0: no averaging; ℓ + 1: level ℓ's groups average (the longest period dividing step)."""
        idx = jnp.asarray(0, jnp.int32)
        for l, (p, _) in enumerate(self.levels):  # ascending: the last match is the longest period
            idx = jnp.where(step % int(p) == 0, l + 1, idx)
        return jnp.where(step < self.warmup, len(self.levels), idx)

    def __call__(self, hparams, state: HierarchicalState, messages, events: Event, mask):
        sizes = [s for _, s in self.levels]
        ok = mask & events.delivered
        slot_worker = jnp.where(mask, events.worker, 0)  # for gathering: always in range
        n = jax.tree.leaves(state.workers)[0].shape[0]
        target = jnp.where(ok, events.worker, n)  # for scattering: lost and padding slots write nowhere

        def scatter(stacked, new):
            return stacked.at[target].set(new, mode="drop")

        workers = jax.tree.map(scatter, state.workers, messages)
        level = self.which(state.step)
        branches = [lambda w: w] + [lambda w, s=s: jax.tree.map(lambda x: _group_mean(x, s), w) for s in sizes]
        workers = jax.lax.switch(level, branches, workers)
        nxt = jax.tree.map(lambda x: x[slot_worker], workers)
        synced = jnp.asarray([0] + sizes, jnp.float32)[level]
        return (HierarchicalState(workers, state.step + 1), nxt,
                {"group_size": jnp.where(mask, synced, 0.0)})


@dataclasses.dataclass(frozen=True)
class _HierarchicalValidate:
    levels: tuple

    def __call__(self, hparams, n):
        _checks.check_stepsize("hierarchical_sgd", hparams["stepsize"])
        if n:
            try:
                hierarchy.check_levels(dict(self.levels), n)
            except ValueError as err:
                raise ValueError(f"hierarchical_sgd: {err} (the problem has {n} workers)") from None


def hierarchical_sgd(*, stepsize: float, levels: dict, warmup: int = 0) -> Algorithm:
    """Hierarchical SGD (docs/theory.md §10.3; PyTorch's HierarchicalModelAverager): every
    worker takes local SGD steps of size γ on its own parameters; after step k, the groups of
    ``theory.hierarchy.sync_level`` (consecutive blocks of workers) replace their members' parameters
    by the group mean: all n for the first ``warmup`` steps (synchronous SGD), then the groups of
    the longest period in ``levels = {period: group size}`` that divides k. Optimiser state is
    not averaged (plain SGD has none). Run it on ``sim.schedules.hierarchical`` with the same
    levels and warm-up, which gives the matching wall-clock; the model the metrics see is the
    mean of the workers (the synchronised model after a global average).

    A lost step (a failure) leaves that worker's parameters as they were.
    """
    try:
        n_top = max(int(v) for v in dict(levels).values())
    except (TypeError, ValueError):
        raise ValueError(f"hierarchical_sgd: levels must be a dict {{period: group size}}; got {levels!r}") from None
    lv = hierarchy.check_levels(levels, n_top)
    try:
        warmup = hierarchy.check_warmup(warmup)
    except ValueError as err:
        raise ValueError(f"hierarchical_sgd: {err}") from None
    return algorithm("hierarchical_sgd", {"stepsize": stepsize}, Worker(_sgd_step_work, after_job=message_is_model),
                     Server(_stack_workers, _mean_of_workers, apply_round=_HierarchicalApply(lv, warmup)),
                     validate=_HierarchicalValidate(lv))


# --- ASGD with a staleness weighting ----------------------------------------------------------

def _make_step_rule(kind: str):
    fn = STALENESS[kind]

    def step(hparams: HParams, event: Event) -> jax.Array:
        gamma = jnp.asarray(hparams["stepsize"])
        return gamma * fn(hparams, event.staleness.astype(gamma.dtype))

    step.__name__ = f"staleness_weighted_step_{kind}"
    return step


_STEP_RULES = {k: _make_step_rule(k) for k in STALENESS}


def _validate_weighted(hparams: HParams, num_workers: int) -> None:
    _checks.check_stepsize("staleness_weighted_asgd", hparams["stepsize"])
    _check_staleness_params("staleness_weighted_asgd", hparams)


def staleness_weighted_asgd(*, stepsize: float, staleness: str = "polynomial", a: float = 0.5, b: float = 4.0) -> Algorithm:
    """ASGD whose step for a gradient δ updates stale is γ·s(δ), with s one of this module's
    staleness functions (FedAsync's polynomial and hinge, FedBuff's; ``constant`` is vanilla ASGD).
    Staleness-aware ASGD's γ/max(1, δ) is ``algos.staleness_aware_asgd``."""
    if staleness not in STALENESS:
        raise ValueError(f"staleness_weighted_asgd: staleness must be one of {sorted(STALENESS)}; got {staleness!r}")
    return asgd_with_step_rule(f"staleness_weighted_asgd_{staleness}", _STEP_RULES[staleness],
                               {"stepsize": stepsize, "a": a, "b": b}, _validate_weighted)
