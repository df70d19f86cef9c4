"""The job every local-update method shares: H steps of a local optimiser from the handed point.

Local SGD, PALSGD, EDiT, FedShift, FedStrag, FedAsync, asynchronous local SGD and the elastic
family all run one loop (:class:`LocalSteps`): from the point the worker was handed, step k draws
its minibatch with ``fold_in(job key, k)`` and takes one step of the local optimiser. The methods
differ in the optimiser and in what they send (the end point, or the pseudo-gradient start − end).

A local optimiser is a *recipe*, a frozen dataclass that builds an optax transformation from the
hyperparameters at trace time (:class:`SGD`, :class:`AdamW`, :class:`ProximalSGD`, and
``algos.adahessian.AdaHessianRecipe``). The recipe names the ``hparams`` entries it reads, so the
values are traced: two algorithms that differ only in those values are equal as static arguments
and share one compiled program, and a sweep can vary them. A recipe that needs more than a
gradient per step (AdaHessian's Hessian diagonal) says so with ``hessian = True``; one whose step
is not an optax transformation (PALSGD's coin between a pull and a gradient step) defines
``step`` itself (see :class:`StepRule`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple, Optional, Protocol

import jax
import jax.numpy as jnp
import numpy as np
import optax
import optax.tree_utils as otu

from delaylab.algos import _checks
from delaylab.algos.base import HParams, Oracle, Params


class StepRule(Protocol):
    """One local step: ``step(hparams, x, state, oracle, key, k, start) -> (x, state, aux)``,
    with ``init(hparams, start) -> state`` and ``aux`` a pytree of scalars summed over the steps
    (``None`` for none). ``key`` is step k's key, ``start`` the job's starting point. A rule that
    supports a gradient point other than the iterate (elastic averaging's first step of a period,
    :meth:`LocalSteps.run` ``first_at``) takes it as the keyword ``at``."""

    def init(self, hparams: HParams, start: Params) -> Any: ...

    def step(self, hparams: HParams, x: Params, state: Any, oracle: Oracle, key: jax.Array, k: jax.Array,
             start: Params) -> tuple: ...


class OptaxRecipe:
    """Base of the recipes whose step is one optax update on the step's stochastic gradient.

    Subclasses (frozen dataclasses) define ``transform(hparams, start)``; ``start`` is the job's
    starting point, for transformations that pull towards it (:class:`ProximalSGD`)."""

    hessian = False  # True: the step also estimates diag(H) and passes it as ``hessian=``

    def transform(self, hparams: HParams, start: Params) -> optax.GradientTransformation:
        raise NotImplementedError

    def init(self, hparams: HParams, start: Params):
        return self.transform(hparams, start).init(start)

    def gradient(self, x: Params, oracle: Oracle, key: jax.Array) -> tuple:
        """``(grad, extra update arguments)`` of one step at ``x``."""
        _, g = oracle(x, key)
        return g, {}

    def step(self, hparams, x, state, oracle, key, k, start, at=None):
        """One update of the iterate ``x`` by the gradient taken at ``at`` (default: ``x``)."""
        del k
        g, extra = self.gradient(x if at is None else at, oracle, key)
        updates, state = self.transform(hparams, start).update(g, state, x, **extra)
        return optax.apply_updates(x, updates), state, None


@dataclasses.dataclass(frozen=True)
class SGD(OptaxRecipe):
    """``optax.sgd`` with the learning rate ``hparams[learning_rate]`` and, if ``momentum`` names
    an entry, that heavy-ball (or ``nesterov``) momentum."""

    learning_rate: str = "local_stepsize"
    momentum: Optional[str] = None
    nesterov: bool = False

    def transform(self, hparams, start):
        del start
        m = None if self.momentum is None else hparams[self.momentum]
        return optax.sgd(hparams[self.learning_rate], momentum=m, nesterov=self.nesterov)


@dataclasses.dataclass(frozen=True)
class AdamW(OptaxRecipe):
    """``optax.adamw`` (bias-corrected) reading ``learning_rate`` and ``b1``, ``b2``, ``eps``,
    ``weight_decay`` from the hyperparameters; each job starts from fresh moments."""

    learning_rate: str = "local_stepsize"

    def transform(self, hparams, start):
        del start
        return optax.adamw(learning_rate=hparams[self.learning_rate], b1=hparams["b1"], b2=hparams["b2"],
                           eps=hparams["eps"], weight_decay=hparams["weight_decay"])


def add_proximal(weight, anchor: Params) -> optax.GradientTransformation:
    """g ← g + ρ (z − anchor): the gradient of the proximal term (ρ/2)‖z − anchor‖²."""

    def update(updates, state, params=None):
        return jax.tree.map(lambda g, z, a: g + jnp.asarray(weight).astype(z.dtype) * (z - a), updates, params,
                            anchor), state

    return optax.GradientTransformation(optax.init_empty_state, update)


@dataclasses.dataclass(frozen=True)
class ProximalSGD(OptaxRecipe):
    """SGD on f(z) + (ρ/2)‖z − start‖² (FedAsync's local objective), ρ = ``hparams[prox]``."""

    learning_rate: str = "local_stepsize"
    prox: str = "prox"

    def transform(self, hparams, start):
        return optax.chain(add_proximal(hparams[self.prox], start), optax.sgd(hparams[self.learning_rate]))


def num_steps(hparams: HParams, name: str, worker) -> jax.Array:
    """H from ``hparams[name]``: one value, or one per worker (then the entry of ``worker``)."""
    H = jnp.asarray(hparams[name])
    return H[worker] if H.ndim else H


class Job(NamedTuple):
    """What :meth:`LocalSteps.run` returns: the end point, the optimiser state, and the sum of
    the steps' ``aux`` (``None`` for optax recipes)."""

    end: Params
    state: Any
    aux: Any


@dataclasses.dataclass(frozen=True)
class LocalSteps:
    """The job: ``hparams[steps]`` steps of ``optimizer`` from the handed point, step k on the
    minibatch of ``fold_in(key, k)``. As a job (``Worker.job``) it returns the pseudo-gradient
    Δ = start − end (``output="delta"``) or the end point (``"end"``); with a recipe whose steps
    report ``aux`` (PALSGD), ``(that, aux)``.

    Attributes:
      optimizer: a recipe (:class:`OptaxRecipe` subclass or any :class:`StepRule`).
      steps: the hyperparameter that holds H (one integer, or one per worker).
      output: ``"delta"`` or ``"end"``.
    """

    optimizer: Any
    steps: str = "local_steps"
    output: str = "delta"

    def __post_init__(self):
        if self.output not in ("delta", "end"):
            raise ValueError(f"LocalSteps: output must be 'delta' or 'end'; got {self.output!r}")

    def run(self, hparams: HParams, start: Params, oracle: Oracle, key: jax.Array, state: Any = None,
            first_at: Optional[Params] = None) -> Job:
        """The loop itself, from ``start`` and optimiser ``state`` (None: the recipe's fresh one).

        ``first_at``: where step 0 takes its gradient (default: ``start``, the iterate). Elastic
        averaging passes the worker's point before its last exchange: in EASGD's Algorithm 1 the
        first gradient of a period is taken there and applied to the point after the exchange
        (Zhang, Choromanska, LeCun 2015). Later steps take it at the iterate."""
        opt = self.optimizer
        if state is None:
            state = opt.init(hparams, start)
        at_kw = {} if first_at is None else {"at": first_at}
        aux0 = jax.eval_shape(lambda: opt.step(hparams, start, state, oracle, key, jnp.zeros((), jnp.int32), start,
                                               **at_kw)[2])
        zeros = jax.tree.map(lambda a: jnp.zeros(a.shape, a.dtype), aux0)

        def body(k, carry):
            x, s, total = carry
            kw = {} if first_at is None else {"at": otu.tree_where(k == 0, first_at, x)}
            x, s, aux = opt.step(hparams, x, s, oracle, jax.random.fold_in(key, k), k, start, **kw)
            return x, s, jax.tree.map(jnp.add, total, aux)

        end, state, aux = jax.lax.fori_loop(0, num_steps(hparams, self.steps, oracle.worker), body,
                                            (start, state, zeros))
        return Job(end, state, None if aux0 is None else aux)

    def __call__(self, hparams: HParams, point: Params, oracle: Oracle, key: jax.Array):
        job = self.run(hparams, point, oracle, key)
        out = job.end if self.output == "end" else jax.tree.map(jnp.subtract, point, job.end)
        return out if job.aux is None else (out, job.aux)


def start_minus_message(point: Params, delta: Params) -> Params:
    """``Worker.after_job`` of a job that sends Δ = start − end: the end, start − Δ."""
    return jax.tree.map(jnp.subtract, point, delta)


def message_is_model(point: Params, end: Params) -> Params:
    """``Worker.after_job`` of a job that sends the model it ends at."""
    del point
    return end


# --- the inner optimisers of the local-update methods, by name --------------------------------

INNER = {"sgd": LocalSteps(SGD()), "adamw": LocalSteps(AdamW())}
"""The jobs of ``inner="sgd"`` and ``inner="adamw"``: H steps from the handed point, sending Δ."""


def inner_hparams(name: str, inner: str, *, weight_decay: float, b1: float, b2: float, eps: float) -> dict:
    """The inner optimiser's hyperparameters to add to a method's: AdamW's four for
    ``inner="adamw"``, none for ``"sgd"`` (which refuses a weight decay)."""
    if inner not in INNER:
        raise ValueError(f"{name}: inner must be one of {sorted(INNER)}; got {inner!r}")
    if inner == "adamw":
        return {"weight_decay": weight_decay, "b1": b1, "b2": b2, "eps": eps}
    if weight_decay != 0.0:
        raise ValueError(f"{name}: weight_decay applies to inner='adamw' only")
    return {}


def check_outer_and_inner(name: str, hparams: HParams) -> None:
    """The checks every local-update method shares: outer step η ≥ 0, inner learning rate ≥ 0,
    outer momentum β ∈ [0, 1), and AdamW's weight decay ≥ 0 and b1, b2 ∈ [0, 1) where the inner
    optimiser is AdamW."""
    _checks.check_stepsize(name, hparams["stepsize"])
    _checks.check_stepsize(name, hparams["local_stepsize"], argument="local_stepsize")
    m = np.asarray(hparams["momentum"], np.float64)
    if not np.all((m >= 0) & (m < 1)):
        raise ValueError(f"{name}: momentum must be in [0, 1); got {hparams['momentum']!r}")
    if "weight_decay" in hparams:
        _checks.check_stepsize(name, hparams["weight_decay"], argument="weight_decay")
        for key in ("b1", "b2"):
            v = np.asarray(hparams[key])
            if not np.all((v >= 0) & (v < 1)):
                raise ValueError(f"{name}: {key} must be in [0, 1); got {hparams[key]!r}")
