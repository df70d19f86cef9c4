import jax
import numpy as np
import pytest

from delaylab import algos, sim
from delaylab.sim import schedules
from delaylab.sim.reference import heap_server, quadratic_gradient
from tests.conftest import rel_err

TAUS = np.array([1.0, 1.5, 2.5])


def _dn_server(eta, beta, N):
    """The Delayed Nesterov server, spelled out in NumPy: (its state, the arrival handler)."""
    st = {"x": np.zeros(2), "m": np.zeros(2), "buf": np.zeros(2), "c": 0}

    def server(i, delta, point):
        st["x"] = st["x"] - eta * delta / N
        st["buf"] += delta
        st["c"] += 1
        if st["c"] == N:
            st["m"] = beta * st["m"] + st["buf"] / N
            st["x"] = st["x"] - eta * beta * st["m"]
            st["buf"][:] = 0
            st["c"] = 0
        return st["x"]

    return st, server


def test_delayed_nesterov_matches_plain_loop():
    prob = sim.problems.random_quadratic(3, 2, condition=3.0, seed=4)
    A, b = prob.curvature
    E, H, N, beta, eta, lr = 300, 3, 2, 0.8, 0.5, 0.05

    def job(i, p):  # H local SGD steps; returns Δ
        x = p.copy()
        for _ in range(H):
            x = x - lr * quadratic_gradient(A, b, i, x)
        return p - x

    st, server = _dn_server(eta, beta, N)

    heap_server(np.broadcast_to(TAUS[:, None], (3, E + 1)), E, job, server, np.zeros(2))
    alg = algos.async_local_sgd(stepsize=eta, local_stepsize=lr, local_steps=H, momentum=beta, delay=N)
    res = sim.run(alg, prob, schedules.fixed_computation(TAUS, num_events=E), key=jax.random.key(0))
    assert rel_err(res.params, st["x"]) < 1e-10


def test_no_momentum_one_step_is_asgd():
    """β = 0, N = 1, H = 1: x ← x − η·η_ℓ·g, vanilla ASGD with step η·η_ℓ (σ = 0: exact)."""
    sched = schedules.fixed_computation(TAUS, num_events=300)
    prob = sim.problems.random_quadratic(3, 4, seed=1)
    a = sim.run(algos.async_local_sgd(stepsize=2.0, local_stepsize=0.025, local_steps=1, momentum=0.0, delay=1),
                prob, sched, key=jax.random.key(3))
    v = sim.run(algos.asgd(stepsize=0.05), prob, sched, key=jax.random.key(3))
    assert rel_err(a.params, v.params) < 1e-13


def test_bad_inputs():
    with pytest.raises(ValueError, match=r"momentum must be in \[0, 1\)"):
        algos.async_local_sgd(stepsize=0.1, local_stepsize=0.1, momentum=1.0)
    with pytest.raises(ValueError, match="local_steps must be an integer >= 1"):
        algos.async_local_sgd(stepsize=0.1, local_stepsize=0.1, local_steps=0)


def _adamw_numpy(A, b, i, p, H, lr, b1, b2, eps, wd):
    """H AdamW steps (Loshchilov & Hutter; optax's form: decay added to the Adam direction)."""
    x, m, v = p.copy(), np.zeros_like(p), np.zeros_like(p)
    for t in range(1, H + 1):
        g = quadratic_gradient(A, b, i, x)
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        mh, vh = m / (1 - b1**t), v / (1 - b2**t)
        x = x - lr * (mh / (np.sqrt(vh) + eps) + wd * x)
    return p - x


@pytest.mark.parametrize("dylu", [False, True])
def test_adamw_inner_and_dylu_match_plain_loop(dylu):
    prob = sim.problems.random_quadratic(3, 2, condition=3.0, seed=4)
    A, b = prob.curvature
    E, H, N, beta, eta, lr, wd = 200, 4, 2, 0.5, 0.5, 0.02, 0.1
    steps = algos.dylu_local_steps(H, TAUS) if dylu else np.full(3, H)
    st, server = _dn_server(eta, beta, N)

    job = lambda i, p: _adamw_numpy(A, b, i, p, int(steps[i]), lr, 0.9, 0.999, 1e-8, wd)
    heap_server(np.broadcast_to(TAUS[:, None], (3, E + 1)), E, job, server, np.zeros(2))
    alg = algos.async_local_sgd(stepsize=eta, local_stepsize=lr, local_steps=H, momentum=beta, delay=N,
                                inner="adamw", weight_decay=wd, dylu_taus=TAUS if dylu else None)
    res = sim.run(alg, prob, schedules.fixed_computation(TAUS, num_events=E), key=jax.random.key(0))
    assert rel_err(res.params, st["x"]) < 1e-10


def test_dylu_steps_scale_with_speed():
    np.testing.assert_array_equal(algos.dylu_local_steps(4, [1.0, 2.0, 4.0, 100.0]), [4, 2, 1, 1])
    np.testing.assert_array_equal(algos.dylu_local_steps(10, [2.0, 3.0]), [10, 7])


def test_dylu_sgd_with_one_step_everywhere_is_plain():
    """DyLU with H = 1 gives every worker one step: the same run as without DyLU."""
    sched = schedules.fixed_computation(TAUS, num_events=200)
    prob = sim.problems.random_quadratic(3, 4, seed=1)
    kw = dict(stepsize=0.5, local_stepsize=0.05, local_steps=1, momentum=0.5, delay=2)
    a = sim.run(algos.async_local_sgd(**kw, dylu_taus=TAUS), prob, sched, key=jax.random.key(3))
    v = sim.run(algos.async_local_sgd(**kw), prob, sched, key=jax.random.key(3))
    assert rel_err(a.params, v.params) == 0.0


def test_local_options_bad_inputs():
    with pytest.raises(ValueError, match="inner must be one of"):
        algos.async_local_sgd(stepsize=0.1, local_stepsize=0.1, inner="adam")
    with pytest.raises(ValueError, match="weight_decay applies to inner='adamw' only"):
        algos.async_local_sgd(stepsize=0.1, local_stepsize=0.1, weight_decay=0.1)
    with pytest.raises(ValueError, match="b2 must be in"):
        algos.async_local_sgd(stepsize=0.1, local_stepsize=0.1, inner="adamw", b2=1.0)
    with pytest.raises(ValueError, match="dylu_taus must be positive"):
        algos.async_local_sgd(stepsize=0.1, local_stepsize=0.1, dylu_taus=[1.0, 0.0])
    alg = algos.async_local_sgd(stepsize=0.1, local_stepsize=0.1, dylu_taus=[1.0, 2.0])
    prob = sim.problems.random_quadratic(3, 2, seed=0)
    with pytest.raises(ValueError, match="DyLU gives local steps for 2 workers but the problem has 3"):
        sim.run(alg, prob, schedules.fixed_computation(TAUS, num_events=10), key=jax.random.key(0))
