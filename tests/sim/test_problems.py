import jax
import jax.numpy as jnp
import numpy as np
import pytest

from delaylab import sim, theory


def test_quadratic_oracle_is_gradient_of_loss():
    prob = sim.problems.random_quadratic(3, 4, seed=0)
    x = jnp.asarray(np.linspace(-1, 2, 4))
    for i in range(3):
        loss, g = prob.fns.value_and_grad(prob.data, x, i, jax.random.key(0))
        A, b = prob.curvature
        assert np.isclose(loss, 0.5 * (x - b[i]) @ A[i] @ (x - b[i]), rtol=1e-13)
        auto = jax.grad(lambda z: prob.fns.value_and_grad(prob.data, z, i, jax.random.key(0))[0])(x)
        np.testing.assert_allclose(g, auto, rtol=1e-12)


def test_quadratic_noise_is_isotropic_with_total_variance_sigma2():
    sigma, d = 2.0, 5
    prob = sim.problems.quadratic(np.ones((1, d)), np.zeros((1, d)), noise=sigma)
    keys = jax.random.split(jax.random.key(0), 20000)
    x = jnp.ones(d)
    g = jax.vmap(lambda k: prob.fns.value_and_grad(prob.data, x, 0, k)[1])(keys)
    noise = np.asarray(g) - 1.0
    np.testing.assert_allclose(noise.mean(0), 0.0, atol=0.05)
    np.testing.assert_allclose(np.cov(noise.T), sigma**2 / d * np.eye(d), atol=0.05)


def test_minimiser_and_objective():
    prob = sim.problems.random_quadratic(4, 3, seed=2)
    g = jax.grad(prob.fns.objective, argnums=1)(prob.data, jnp.asarray(prob.minimiser))
    assert np.linalg.norm(g) < 1e-12
    assert prob.objective(jnp.asarray(prob.minimiser)) <= prob.objective(jnp.asarray(prob.minimiser) + 0.01)


def test_logistic_minimiser_and_derivatives():
    prob = sim.problems.synthetic_logistic(3, 30, 3, seed=1)
    w = jnp.asarray(prob.minimiser)
    assert np.linalg.norm(jax.grad(prob.fns.objective, argnums=1)(prob.data, w)) < 1e-10
    x = np.linspace(-0.5, 0.5, 4)
    G, H = prob.local_derivatives(x)
    for i in range(3):
        f = lambda z: prob.fns.local_objectives(prob.data, z)[i]
        np.testing.assert_allclose(G[i], jax.grad(f)(jnp.asarray(x)), rtol=1e-10)
        np.testing.assert_allclose(H[i], jax.hessian(f)(jnp.asarray(x)), rtol=1e-9)
    # Minibatch gradients are unbiased for the full local gradient.
    keys = jax.random.split(jax.random.key(0), 4000)
    stoch = sim.problems.logistic_regression(np.asarray(prob.data["X"]), np.asarray(prob.data["y"]), batch_size=4, l2=1e-2)
    g = jax.vmap(lambda k: stoch.fns.value_and_grad(stoch.data, jnp.asarray(x), 1, k)[1])(keys)
    np.testing.assert_allclose(np.mean(g, 0), G[1], atol=0.03)
    # Weighted minimiser: stationary for Σ q_i F_i
    q = theory.frequency_weights([1.0, 2.0, 5.0])
    xq = prob.weighted_minimiser(q)
    assert np.linalg.norm(q @ prob.local_derivatives(xq)[0]) < 1e-10


def test_logistic_split_flat_data():
    X = np.random.default_rng(0).standard_normal((103, 2))
    y = (X[:, 0] > 0).astype(float)
    prob = sim.problems.logistic_regression(X, y, num_workers=4)
    assert prob.data["X"].shape == (4, 25, 2)


@pytest.mark.parametrize(
    "A, b, match",
    [
        (np.ones((3, 2, 2)), np.zeros((2, 2)), r"A must be \[n, d, d\] \(dense\) or \[n, d\] \(diagonal\) with n=2, d=2"),
        (np.array([[[1.0, 1.0], [0.0, 1.0]]]), np.zeros((1, 2)), "must be symmetric"),
        (-np.ones((1, 2)), np.zeros((1, 2)), "diagonal curvatures A must be >= 0"),
        (np.ones((2, 3)), np.zeros(3), r"b must be \[n, d\]"),
        (np.zeros((2, 2)), np.zeros((2, 2)), "must be positive in every coordinate"),
    ],
)
def test_quadratic_bad_input(A, b, match):
    with pytest.raises(ValueError, match=match):
        sim.problems.quadratic(A, b)


def test_quadratic_bad_noise_and_x0():
    with pytest.raises(ValueError, match="noise must be finite and >= 0; got -1"):
        sim.problems.quadratic(np.ones((1, 2)), np.zeros((1, 2)), noise=-1)
    with pytest.raises(ValueError, match=r"x0 must have shape \(2,\)"):
        sim.problems.quadratic(np.ones((1, 2)), np.zeros((1, 2)), x0=[1.0, 2.0, 3.0])


def test_logistic_bad_labels():
    with pytest.raises(ValueError, match="labels must be in"):
        sim.problems.logistic_regression(np.zeros((1, 3, 2)), np.array([[0.0, 1.0, 2.0]]))


def test_nonconvex_quadratic_is_nonconvex_with_exact_heterogeneity():
    """The penalised quadratic: its gradients are the derivatives of its loss (JAX's, float64),
    ∇F_i − ∇F = −A δ_i with (1/n) Σ ‖A δ_i‖² = ζ² at every x, the Hessian at x = 1 has a negative
    eigenvalue (nonconvex), and the local derivatives for theory agree with JAX's."""
    import jax
    import jax.numpy as jnp

    from delaylab.sim.problems import nonconvex_quadratic

    prob = nonconvex_quadratic(5, 4, penalty=4.0, heterogeneity=0.7, noise=0.0, seed=3, dtype=jnp.float64)
    f = prob.fns
    x = jnp.asarray(np.random.default_rng(0).normal(size=4) * 1.5)
    grads = np.stack([np.asarray(f.value_and_grad(prob.data, x, i, jax.random.key(0))[1]) for i in range(5)])
    auto = np.stack([np.asarray(jax.grad(lambda z: f.local_objectives(prob.data, z)[i])(x)) for i in range(5)])
    np.testing.assert_allclose(grads, auto, rtol=1e-12, atol=1e-12)
    dev = grads - grads.mean(0)
    assert np.mean(np.sum(dev ** 2, axis=1)) == pytest.approx(0.7, rel=1e-10)
    G, H = prob.derivatives(np.asarray(x))
    np.testing.assert_allclose(G, grads, rtol=1e-10, atol=1e-12)
    hess = np.asarray(jax.hessian(lambda z: f.objective(prob.data, z))(jnp.ones(4)))
    np.testing.assert_allclose(prob.derivatives(np.ones(4))[1].mean(0), hess, rtol=1e-10, atol=1e-12)
    assert np.linalg.eigvalsh(hess).min() < 0  # nonconvex
    # σ: the noise has total variance σ² (2,000 draws at one point: the estimate's relative sd is
    # about 1.6%)
    noisy = nonconvex_quadratic(5, 4, penalty=4.0, heterogeneity=0.7, noise=0.5, seed=3, dtype=jnp.float64)
    keys = jax.random.split(jax.random.key(1), 2000)
    g = np.asarray(jax.vmap(lambda k: noisy.fns.value_and_grad(noisy.data, x, 0, k)[1])(keys))
    assert np.sum(g.var(0)) == pytest.approx(0.25, rel=0.06)
    with pytest.raises(ValueError, match="penalty"):
        nonconvex_quadratic(5, 4, penalty=-1.0)
    assert nonconvex_quadratic(5, 4, penalty=0.0).curvature is not None  # the plain quadratic


def test_weighted_gradient_against_closed_form_and_per_worker_gradients():
    """Problem.weighted_gradient: on a quadratic, Σ q_i A_i (x − b_i) (q normalised); on an MLP,
    the q-weighted mean of each worker's full-shard gradient from its own value_and_grad."""
    import jax

    from delaylab.sim import models

    quad = sim.problems.random_quadratic(3, 4, condition=3.0, spread=2.0, seed=4, dtype=jnp.float64)
    A, b = quad.curvature
    x = np.linspace(-1.0, 1.0, 4)
    q = np.array([1.0, 2.0, 5.0])
    expected = np.einsum("i,ijk,ik->j", q / q.sum(), A, x[None] - b)
    np.testing.assert_allclose(np.asarray(quad.weighted_gradient(jnp.asarray(x), q)), expected, rtol=1e-12)
    with pytest.raises(ValueError, match="weights must be 3"):
        quad.weighted_gradient(jnp.asarray(x), [1.0, -1.0, 1.0])

    from sklearn.datasets import load_digits

    digits = load_digits()
    mlp = models.mlp_classifier(digits.data[:300] / 16.0, digits.target[:300], num_workers=3, split="dirichlet",
                                alpha=0.5, hidden=8, batch_size=None, seed=1)
    w = np.array([0.5, 0.3, 0.2])
    got = mlp.weighted_gradient(mlp.x0, w)
    grads = [mlp.fns.value_and_grad(mlp.data, mlp.x0, i, jax.random.key(0))[1] for i in range(3)]
    want = jax.tree.map(lambda *g: sum(wi * gi for wi, gi in zip(w, g)), *grads)
    for a, c in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(c), rtol=2e-5, atol=1e-7)
