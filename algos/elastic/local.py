"""The local optimisers of elastic averaging (docs/theory.md §9): a recipe of
:mod:`delaylab.algos.local_steps` with the default values of the hyperparameters it reads."""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp

from delaylab.algos import adahessian as ah
from delaylab.algos.local_steps import SGD, OptaxRecipe


class Local(NamedTuple):
    """A worker's local optimiser: a recipe of :mod:`algos.local_steps` (it builds an optax
    transformation from the hyperparameters, so their values are traced) and the default values
    of the hyperparameters it reads, which become the algorithm's (``learning_rate``, ...)."""

    recipe: Any
    hparams: dict


@dataclasses.dataclass(frozen=True)
class OptaxTransform(OptaxRecipe):
    """A recipe around a ready-made optax transformation (its hyperparameters are constants of
    the transformation: build it once and reuse it, since a new one compiles anew)."""

    tx: Any

    def transform(self, hparams, start):
        del hparams, start
        return self.tx


def sgd(learning_rate: float) -> Local:
    return Local(SGD(learning_rate="learning_rate"), {"learning_rate": learning_rate})


@dataclasses.dataclass(frozen=True)
class ElasticNesterov:
    """EAMSGD's local step, Algorithm 2 of Zhang, Choromanska and LeCun (2015): with the velocity
    v (the optimiser state, kept across periods) and x the gradient point,

        g = ∇ℓ(x + δ v; ξ);  v ← δ v − η g;  xⁱ ← xⁱ + v.

    Written out rather than built from optax's ``sgd(nesterov=True)``: optax keeps the look-ahead
    point x + δv as its iterate (Sutskever et al.'s reformulation), and the elastic move acts on
    xⁱ; the two agree without exchanges but not across one."""

    learning_rate: str = "learning_rate"
    momentum: str = "momentum"

    def init(self, hparams, start):
        del hparams
        return jax.tree.map(jnp.zeros_like, start)

    def step(self, hparams, x, v, oracle, key, k, start, at=None):
        del k, start
        base = x if at is None else at
        delta = jnp.asarray(hparams[self.momentum])
        eta = jnp.asarray(hparams[self.learning_rate])
        _, g = oracle(jax.tree.map(lambda b, vi: b + delta.astype(vi.dtype) * vi, base, v), key)
        v = jax.tree.map(lambda vi, gi: delta.astype(vi.dtype) * vi - eta.astype(vi.dtype) * gi, v, g)
        return jax.tree.map(jnp.add, x, v), v, None


def nesterov(learning_rate: float, momentum: float) -> Local:
    """EAMSGD's local optimiser: Nesterov momentum δ as in the paper's Algorithm 2
    (:class:`ElasticNesterov`)."""
    return Local(ElasticNesterov(), {"learning_rate": learning_rate, "momentum": momentum})


def adahessian(learning_rate: float = 0.01, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-4,
               hessian_power: float = 1.0, weight_decay: float = 0.0, num_probes: int = 1,
               layout: Optional[str] = "HWIO") -> Local:
    """AdaHessian as the local optimiser (the paper: η = 0.01, β = (0.9, 0.999), one probe,
    spatial averaging; the authors' optimiser's ε, k and weight decay, 0: the paper states none).
    η is a hyperparameter (``learning_rate``); the other constants are the recipe's."""
    return Local(ah.AdaHessianRecipe("learning_rate", b1, b2, eps, hessian_power, weight_decay, num_probes, layout),
                 {"learning_rate": learning_rate})


def optax_local(tx) -> Local:
    """Any optax transformation as the local optimiser (its constants fixed; see
    :class:`OptaxTransform`)."""
    return Local(OptaxTransform(tx), {})
