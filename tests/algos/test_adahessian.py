"""AdaHessian and the Hutchinson estimator against closed forms and a plain NumPy step."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.flatten_util import ravel_pytree

from delaylab.algos import adahessian as ah


def _small_model():
    rng = np.random.default_rng(0)
    params = {"w1": jnp.asarray(rng.normal(size=(3, 4))), "b1": jnp.asarray(rng.normal(size=4)),
              "w2": jnp.asarray(rng.normal(size=(4, 2)))}
    X = jnp.asarray(rng.normal(size=(5, 3)))
    Y = jnp.asarray(rng.normal(size=(5, 2)))

    def loss(p):
        return jnp.mean((jnp.tanh(X @ p["w1"] + p["b1"][None, :]) @ p["w2"] - Y) ** 2)

    return params, loss


def test_jvp_of_grad_is_the_dense_hessian_times_z():
    params, loss = _small_model()
    key = jax.random.key(3)
    _, grad, est = ah.hutchinson(loss, params, key, num_probes=1)
    flat, unravel = ravel_pytree(params)
    H = jax.hessian(lambda f: loss(unravel(f)))(flat)
    z = ravel_pytree(ah.rademacher_like(jax.random.split(key, 1)[0], params))[0]
    np.testing.assert_allclose(ravel_pytree(est)[0], z * (H @ z), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(ravel_pytree(grad)[0], jax.grad(lambda f: loss(unravel(f)))(flat), rtol=1e-12)
    assert set(np.unique(np.asarray(z))) == {-1.0, 1.0}


def test_probes_are_independent_per_leaf():
    tree = {"a": jnp.zeros((50,)), "b": jnp.zeros((50,))}
    z = ah.rademacher_like(jax.random.key(0), tree)
    assert not np.array_equal(np.asarray(z["a"]), np.asarray(z["b"]))  # one key per leaf


def test_hutchinson_converges_to_the_diagonal():
    """Diagonal-dominant quadratic: the mean of z ⊙ Az over N probes has standard error
    sqrt(Σ_{j≠i} A_ij² / N) per entry; all entries must lie within 5 of them."""
    rng = np.random.default_rng(1)
    d, N = 6, 4000
    B = rng.normal(size=(d, d)) * 0.3
    A = (B + B.T) / 2 + np.diag(rng.uniform(2.0, 5.0, d))
    loss = lambda x: 0.5 * x @ jnp.asarray(A) @ x
    x = jnp.asarray(rng.normal(size=d))
    ests = jax.vmap(lambda k: ah.hutchinson(loss, x, k)[2])(jax.random.split(jax.random.key(0), N))
    mean = np.asarray(ests).mean(axis=0)
    se = np.sqrt(((A ** 2).sum(axis=1) - np.diag(A) ** 2) / N)
    assert np.all(np.abs(mean - np.diag(A)) < 5 * se), (mean, np.diag(A), se)
    # several probes per call average the same way
    many = ah.hutchinson(loss, x, jax.random.key(1), num_probes=8)[2]
    assert np.all(np.abs(np.asarray(many) - np.diag(A)) < 5 * np.sqrt(((A ** 2).sum(1) - np.diag(A) ** 2) / 8))


def test_first_step_is_eta_g_over_abs_d_plus_eps():
    rng = np.random.default_rng(2)
    g = {"w": jnp.asarray(rng.normal(size=(3, 2))), "b": jnp.asarray(rng.normal(size=2))}
    D = jax.tree.map(lambda a: jnp.abs(a) * 0.7 + 0.1, g)
    opt = ah.adahessian(learning_rate=0.3, eps=1e-4, hessian_power=1.0, weight_decay=0.0)
    upd, _ = opt.update(g, opt.init(g), g, hessian=D)
    for k in g:
        np.testing.assert_allclose(upd[k], -0.3 * g[k] / (jnp.abs(D[k]) + 1e-4), rtol=1e-12)


def test_hwio_and_oihw_averaging_agree_after_transposition():
    rng = np.random.default_rng(3)
    hwio = jnp.asarray(rng.normal(size=(5, 5, 3, 4)))
    oihw = jnp.transpose(hwio, (3, 2, 0, 1))
    a = ah.spatial_average({"k": hwio}, "HWIO")["k"]
    b = ah.spatial_average({"k": oihw}, "OIHW")["k"]
    np.testing.assert_allclose(jnp.transpose(a, (3, 2, 0, 1)), b, rtol=1e-12)
    np.testing.assert_allclose(a[0, 0], np.asarray(hwio).mean(axis=(0, 1)), rtol=1e-12)
    # averaging a Flax kernel as if it were OIHW mixes channels: a different answer
    assert not np.allclose(ah.spatial_average({"k": hwio}, "OIHW")["k"], a)
    dense = {"w": jnp.asarray(rng.normal(size=(3, 4))), "b": jnp.asarray(rng.normal(size=4))}
    same = ah.spatial_average(dense, "HWIO")
    for k in dense:
        np.testing.assert_array_equal(same[k], dense[k])
    with pytest.raises(ValueError, match="layout must be one of"):
        ah.spatial_average(dense, "NCHW")


def test_matches_a_plain_numpy_adahessian_on_a_small_dense_model():
    """Ten steps of training with the estimator and the transformation, against the same steps in
    NumPy given the same (g, D) (weight decay and a fractional Hessian power included)."""
    params, loss = _small_model()
    lr, b1, b2, eps, k, wd = 0.05, 0.8, 0.99, 1e-3, 0.5, 1e-2
    opt = ah.adahessian(lr, b1, b2, eps, k, wd)
    state = opt.init(params)
    ref = {n: np.asarray(v) for n, v in params.items()}
    m = {n: np.zeros_like(v) for n, v in ref.items()}
    v2 = {n: np.zeros_like(v) for n, v in ref.items()}
    p = params
    for t in range(1, 11):
        _, g, D = ah.hessian_diagonal(loss, p, jax.random.key(t))
        upd, state = opt.update(g, state, p, hessian=D)
        g_ref = jax.grad(loss)({kk: jnp.asarray(vv) for kk, vv in ref.items()})  # at the reference's point
        for n in ref:  # the NumPy step, given the same D
            gn = np.asarray(g_ref[n])
            np.testing.assert_allclose(gn, g[n], rtol=1e-10, atol=1e-12)
            m[n] = b1 * m[n] + (1 - b1) * gn
            v2[n] = b2 * v2[n] + (1 - b2) * np.asarray(D[n]) ** 2
            mh = m[n] / (1 - b1 ** t)
            vh = np.sqrt(v2[n]) / np.sqrt(1 - b2 ** t)
            ref[n] = ref[n] - lr * (mh / (vh ** k + eps) + wd * ref[n])
        p = optax.apply_updates(p, upd)
        for n in ref:
            np.testing.assert_allclose(p[n], ref[n], rtol=1e-10, atol=1e-12)
    assert int(state.count) == 10


@pytest.mark.parametrize("dtype,rtol", [(np.float64, 1e-12), (np.float32, 1e-6)])
def test_update_matches_the_authors_rule_over_ten_steps(dtype, rtol):
    """The transformation against the update rule of the authors' optimiser (Yao et al.'s
    published PyTorch code), written here in NumPy in its order of operations: bias corrections
    1 − βᵗ from Python floats, applied to arrays of the parameters' precision; denominator
    (√v)ᵏ / (√(1 − β₂ᵗ))ᵏ + ε; p ← p − η (m / (1 − β₁ᵗ) / denom + λ p). Default betas, explicit
    η, ε, k and λ (their training script's 5e-4/η); (g, D) drawn here, not by our estimator."""
    lr, eps, k, wd = 0.01, 1e-4, 1.0, 5e-4 / 0.01
    b1, b2 = 0.9, 0.999
    rng = np.random.default_rng(11)
    p0 = {"w": rng.normal(size=(5, 3)).astype(dtype), "b": rng.normal(size=3).astype(dtype)}
    opt = ah.adahessian(lr, eps=eps, hessian_power=k, weight_decay=wd)
    p, state = {n: jnp.asarray(v) for n, v in p0.items()}, None
    state = opt.init(p)
    ref = {n: v.copy() for n, v in p0.items()}
    m = {n: np.zeros_like(v) for n, v in ref.items()}
    v2 = {n: np.zeros_like(v) for n, v in ref.items()}
    for t in range(1, 11):
        g = {n: rng.normal(size=v.shape).astype(dtype) for n, v in ref.items()}
        D = {n: np.abs(rng.normal(size=v.shape)).astype(dtype) * 3 for n, v in ref.items()}
        upd, state = opt.update({n: jnp.asarray(x) for n, x in g.items()}, state, p,
                                hessian={n: jnp.asarray(x) for n, x in D.items()})
        p = optax.apply_updates(p, upd)
        bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t  # Python floats
        for n in ref:
            m[n] = m[n] * b1 + g[n] * (1 - b1)
            v2[n] = v2[n] * b2 + D[n] * D[n] * (1 - b2)
            denom = np.sqrt(v2[n]) ** k / math.sqrt(bc2) ** k + eps
            ref[n] = ref[n] - lr * (m[n] / bc1 / denom + wd * ref[n])
            assert ref[n].dtype == dtype and p[n].dtype == dtype
    for n in ref:
        err = np.max(np.abs(np.asarray(p[n], np.float64) - ref[n]) / np.abs(ref[n]))
        print(f"{np.dtype(dtype).name} {n}: largest relative difference after 10 steps {err:.1e} (tolerance {rtol:.0e})")
        assert err <= rtol
    # the bias corrections themselves, to the double-precision value (to its own cancellation error)
    for beta in (b1, b2):
        for t in (1, 9, 1000):
            c = float(ah.bias_correction(beta, jnp.asarray(t, jnp.int32)))
            assert abs(c - (1 - beta ** t)) <= 1e-13 * (1 - beta ** t)  # 1 − βᵗ in double loses digits itself


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="b1 must be in"):
        ah.adahessian(b1=1.0)
    with pytest.raises(ValueError, match="eps must be positive"):
        ah.adahessian(eps=0.0)
    with pytest.raises(ValueError, match="hessian_power must be in"):
        ah.adahessian(hessian_power=2.0)
    with pytest.raises(ValueError, match="num_probes must be a positive integer"):
        ah.hutchinson(lambda x: x @ x, jnp.ones(2), jax.random.key(0), num_probes=0)
    opt = ah.adahessian()
    with pytest.raises(ValueError, match="needs the Hessian-diagonal estimate"):
        opt.update({"w": jnp.ones(2)}, opt.init({"w": jnp.ones(2)}), {"w": jnp.ones(2)})
