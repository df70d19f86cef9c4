"""AdaHessian (Yao et al. 2021, arXiv 2006.00719) and its Hutchinson Hessian-diagonal estimator.

Two independent pure pieces (docs/theory.md §9.3): :func:`hutchinson` estimates diag(H) of a
loss, and :func:`hessian_diagonal` turns that into what AdaHessian feeds its second moment (D, its
absolute value averaged over each convolution kernel's spatial axes, :func:`spatial_average`);
:func:`adahessian` is an optax ``GradientTransformationExtraArgs`` whose ``update`` takes that D
as the keyword ``hessian``. ``layout`` names the kernels' convention (Flax's HWIO or PyTorch's
OIHW). Outside the simulator::

    opt = adahessian(learning_rate=0.01)
    state = opt.init(params)
    loss, grads, D = hessian_diagonal(lambda p: loss_fn(p, batch), params, key)
    updates, state = opt.update(grads, state, params, hessian=D)
    params = optax.apply_updates(params, updates)
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import optax

from delaylab.algos.local_steps import OptaxRecipe

# The spatial axes of a convolution kernel of each layout, by the kernel's number of dimensions.
LAYOUTS = {
    "HWIO": {3: (0,), 4: (0, 1), 5: (0, 1, 2)},  # Flax / JAX (…spatial, in, out)
    "OIHW": {3: (2,), 4: (2, 3), 5: (2, 3, 4)},  # PyTorch (out, in, …spatial)
}


def _check_layout(layout: Optional[str]) -> None:
    if layout is not None and layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {sorted(LAYOUTS)} or None; got {layout!r}")


def spatial_average(tree, layout: Optional[str] = "HWIO"):
    """Average every convolution kernel (a leaf of 3 to 5 dimensions) over its spatial axes for
    ``layout`` and broadcast back to the kernel's shape; other leaves unchanged. ``None``: no
    averaging.

    Flax stores convolution kernels HWIO, so the spatial axes are (0, 1); PyTorch's OIHW keeps
    them at (2, 3). Averaging the trailing axes of a Flax kernel (what a port of PyTorch code does)
    averages over input and output channels instead. Dense kernels (2-D) and biases (1-D) are never
    averaged."""
    _check_layout(layout)
    if layout is None:
        return tree
    axes_of = LAYOUTS[layout]

    def one(x):
        axes = axes_of.get(x.ndim)
        if axes is None:
            return x
        return jnp.broadcast_to(jnp.mean(x, axis=axes, keepdims=True), x.shape)

    return jax.tree.map(one, tree)


def rademacher_like(key, tree):
    """A ±1 tensor shaped like each leaf of ``tree``, from an independent key per leaf."""
    leaves, treedef = jax.tree.flatten(tree)
    keys = jax.random.split(key, len(leaves))
    return treedef.unflatten([jax.random.rademacher(k, x.shape, x.dtype) for k, x in zip(keys, leaves)])


def hutchinson(loss_fn: Callable, params, key, *, num_probes: int = 1):
    """``(loss, grad, diag)``: the loss and gradient at ``params`` and the Hutchinson estimate of
    diag(∇²loss), the mean over ``num_probes`` Rademacher probes of z ⊙ Hz (signed, unaveraged).

    Each probe is an independent Rademacher tensor z per parameter leaf (the key is split once per
    leaf) and one forward-over-reverse pass ``jax.jvp(jax.grad(loss), (θ,), (z,))`` that gives the
    gradient and Hz together; the estimate is unbiased (E[z zᵀ] = I). All passes run on the same
    ``loss_fn`` (so on the same minibatch); the gradient is the first probe's primal output."""
    if isinstance(num_probes, bool) or int(num_probes) != num_probes or num_probes < 1:
        raise ValueError(f"num_probes must be a positive integer; got {num_probes!r}")
    value_and_grad = jax.value_and_grad(loss_fn)

    def probe(k):
        z = rademacher_like(k, params)
        (loss, grad), (_, hz) = jax.jvp(value_and_grad, (params,), (z,))
        return loss, grad, jax.tree.map(jnp.multiply, z, hz)

    keys = jax.random.split(key, int(num_probes))
    loss, grad, est = probe(keys[0])
    for k in keys[1:]:  # a few probes at most; unrolled
        est = jax.tree.map(jnp.add, est, probe(k)[2])
    return loss, grad, jax.tree.map(lambda e: e / num_probes, est)


def hessian_diagonal(loss_fn: Callable, params, key, *, num_probes: int = 1, layout: Optional[str] = "HWIO"):
    """``(loss, grad, D)`` with D = spatial_average(|Hutchinson estimate|): what :func:`adahessian`
    takes as ``hessian``."""
    loss, grad, est = hutchinson(loss_fn, params, key, num_probes=num_probes)
    return loss, grad, spatial_average(jax.tree.map(jnp.abs, est), layout)


class AdaHessianState(NamedTuple):
    count: jax.Array  # int32 [], steps taken
    mu: optax.Updates  # first moment of the gradient
    nu: optax.Updates  # second moment of the Hessian diagonal


def _check_hyper(learning_rate, b1, b2, eps, hessian_power, weight_decay) -> None:
    """Host-side checks; a traced learning rate (a sweepable hyperparameter) is checked where it
    is given, not here."""
    for name, v, lo, hi in (("b1", b1, 0.0, 1.0), ("b2", b2, 0.0, 1.0), ("hessian_power", hessian_power, 0.0, 1.0)):
        if not (lo <= float(v) <= hi) or (name != "hessian_power" and float(v) == 1.0):
            allowed = "[0, 1]" if name == "hessian_power" else "[0, 1)"
            raise ValueError(f"adahessian: {name} must be in {allowed}; got {v!r}")
    concrete_lr = not isinstance(learning_rate, jax.core.Tracer)
    for name, v in (("learning_rate", learning_rate), ("weight_decay", weight_decay)):
        if (name != "learning_rate" or concrete_lr) and not float(v) >= 0.0:
            raise ValueError(f"adahessian: {name} must be non-negative; got {v!r}")
    if not float(eps) > 0.0:
        raise ValueError(f"adahessian: eps must be positive; got {eps!r}")


def bias_correction(beta: float, count: jax.Array) -> jax.Array:
    """1 − βᵗ for a step count t (traced), from β as a Python float: −expm1(t log β), log β in
    double precision, in float64 where JAX has it enabled (else float32: about 1e-7 relative,
    against 1.3e-5 for 1 − β₂ᵗ with β₂ = 0.999 rounded to float32 first). The authors compute
    1 − βᵗ in Python floats (double precision) and apply it to float32 tensors."""
    if float(beta) == 0.0:
        return jnp.ones((), jnp.result_type(float))
    wide = jnp.result_type(float)  # float64 with jax_enable_x64, else float32
    return -jnp.expm1(count.astype(wide) * jnp.asarray(math.log(float(beta)), wide))


def adahessian(learning_rate: float = 0.15, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-4,
               hessian_power: float = 1.0, weight_decay: float = 0.0) -> optax.GradientTransformationExtraArgs:
    """AdaHessian as an optax transformation; ``update(grads, state, params, *, hessian)``.

    ``hessian`` is the (spatially averaged, non-negative) Hessian-diagonal estimate D, for example
    from :func:`hessian_diagonal`; ``params`` is needed when ``weight_decay`` > 0. Returns the
    update to add to the parameters (already multiplied by −η, as optax's optimisers do):

        t ← t + 1;  m ← β₁ m + (1 − β₁) g;  v ← β₂ v + (1 − β₂) D²
        Δθ = −η ( m/(1 − β₁ᵗ) / ((√v / √(1 − β₂ᵗ))ᵏ + ε) + λ θ )

    (k: the Hessian power; λ: weight decay, scaled by η as in the authors' optimiser; the bias
    corrections by :func:`bias_correction`). The defaults are the authors' optimiser's (η 0.15,
    β (0.9, 0.999), ε 1e-4, k 1, λ 0); their image classification script passes λ = 5e-4/η, a
    shrink of 5e-4 per step. The target paper uses η = 0.01 and does not state λ.
    """
    _check_hyper(learning_rate, b1, b2, eps, hessian_power, weight_decay)

    def init_fn(params):
        zeros = jax.tree.map(jnp.zeros_like, params)
        return AdaHessianState(jnp.zeros((), jnp.int32), zeros, zeros)

    def update_fn(updates, state, params=None, *, hessian=None, **extra):
        del extra
        if hessian is None:
            raise ValueError("adahessian: update needs the Hessian-diagonal estimate as hessian=...")
        if weight_decay and params is None:
            raise ValueError("adahessian: weight_decay > 0 needs params in update(grads, state, params, hessian=...)")
        count = state.count + 1
        mu = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, state.mu, updates)
        nu = jax.tree.map(lambda v, d: b2 * v + (1 - b2) * d * d, state.nu, hessian)

        c1, c2 = bias_correction(b1, count), bias_correction(b2, count)
        root_c2 = jnp.sqrt(c2) ** hessian_power

        def step(m, v, p):
            # the authors' order: (√v)ᵏ / (√(1 − β₂ᵗ))ᵏ + ε; m / (1 − β₁ᵗ) / denom; corrections
            # rounded to the parameters' precision where applied (as a Python scalar is in PyTorch)
            denom = jnp.sqrt(v) ** hessian_power / root_c2.astype(m.dtype) + eps
            u = m / c1.astype(m.dtype) / denom
            if weight_decay:
                u = u + weight_decay * p
            return -learning_rate * u

        new = jax.tree.map(step, mu, nu, params if params is not None else mu)
        return new, AdaHessianState(count, mu, nu)

    return optax.GradientTransformationExtraArgs(init_fn, update_fn)


@dataclasses.dataclass(frozen=True)
class AdaHessianRecipe(OptaxRecipe):
    """AdaHessian as a local optimiser of :class:`algos.local_steps.LocalSteps`: every step
    estimates D with :func:`hessian_diagonal` on the step's own minibatch (its probes from
    ``fold_in(step key, 1)``) and calls :func:`adahessian`'s update with ``hessian=D``. The learning
    rate is the hyperparameter ``hparams[learning_rate]`` (traced: sweepable, no recompilation);
    the other constants are fixed by the recipe."""

    learning_rate: str = "learning_rate"
    b1: float = 0.9
    b2: float = 0.999
    eps: float = 1e-4
    hessian_power: float = 1.0
    weight_decay: float = 0.0
    num_probes: int = 1
    layout: Optional[str] = "HWIO"
    hessian = True

    def __post_init__(self):
        _check_hyper(0.0, self.b1, self.b2, self.eps, self.hessian_power, self.weight_decay)
        _check_layout(self.layout)
        if isinstance(self.num_probes, bool) or int(self.num_probes) != self.num_probes or self.num_probes < 1:
            raise ValueError(f"num_probes must be a positive integer; got {self.num_probes!r}")

    def transform(self, hparams, start):
        del start
        return adahessian(hparams[self.learning_rate], self.b1, self.b2, self.eps, self.hessian_power,
                          self.weight_decay)

    def gradient(self, x, oracle, key):
        _, g, D = hessian_diagonal(lambda p: oracle.loss(p, key), x, jax.random.fold_in(key, 1),
                                   num_probes=self.num_probes, layout=self.layout)
        return g, {"hessian": D}
