"""Delay-Compensated ASGD (Zheng et al., ICML 2017) as a delaylab plugin: notebook 04 writes it.

    delaylab verify --plugin notebooks/dc_asgd.py --scenario tau-i
"""

import jax
import jax.numpy as jnp

from delaylab import algos
from delaylab.registry import AlgorithmEntry


def delay_compensation(hparams, memory, grad, start, now, event):
    """g + λ g⊙g⊙(x_now − x_start): the stale gradient moved to the model now."""
    lam = hparams["dc_lambda"]
    return jax.tree.map(lambda g, x, y: g + lam * g * g * (x - y), grad, now, start), memory


def dc_asgd(stepsize, dc_lambda):
    return algos.server_correction(algos.asgd(stepsize=stepsize), algos.Correction(delay_compensation),
                                   hparams={"dc_lambda": dc_lambda}, name="dc_asgd")


# DC-ASGD-a: λ = λ₀/√(m + ε) elementwise, m the arriving worker's running mean of g⊙g.
def adaptive_compensation(hparams, memory, grad, start, now, event):
    beta, lam0, eps = hparams["dc_decay"], hparams["dc_lambda"], hparams["dc_eps"]
    memory = jax.tree.map(lambda m, g: beta * m + (1 - beta) * g * g, memory, grad)
    out = jax.tree.map(lambda g, m, x, y: g + lam0 / jnp.sqrt(m + eps) * g * g * (x - y), grad, memory, now, start)
    return out, memory


def zero_memory(hparams, params):
    return jax.tree.map(jnp.zeros_like, params)


def dc_asgd_a(stepsize, dc_lambda, dc_decay=0.95, dc_eps=1e-7):
    return algos.server_correction(algos.asgd(stepsize=stepsize), algos.Correction(adaptive_compensation, zero_memory),
                                   hparams={"dc_lambda": dc_lambda, "dc_decay": dc_decay, "dc_eps": dc_eps},
                                   name="dc_asgd_a")


def make_dc(stepsize, schedule):
    return dc_asgd(stepsize, 0.1)


def make_dc_a(stepsize, schedule):
    return dc_asgd_a(stepsize, 0.05)


def delaylab_algorithms():
    """The plugin hook: DC-ASGD's correction vanishes as γ → 0, so theory predicts vanilla's limit
    (rule "constant"); an arrival is not an affine map (g⊙g), so no finite-step model."""
    return [
        AlgorithmEntry("dc_asgd", make_dc, "constant", "DC-ASGD, λ = 0.1 (Zheng et al. 2017)",
                       exact_arrival_map=False),
        AlgorithmEntry("dc_asgd_a", make_dc_a, "constant", "DC-ASGD-a, λ₀ = 0.05, β = 0.95 (Zheng et al. 2017)",
                       exact_arrival_map=False),
    ]
