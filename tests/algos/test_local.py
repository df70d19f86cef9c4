import jax
import numpy as np
import pytest

import algos
import sim
from sim import schedules
from sim.reference import heap_server, quadratic_gradient
from tests.conftest import rel_err

TAUS = np.array([1.0, 1.5, 2.5])


def test_delayed_nesterov_matches_plain_loop():
    prob = sim.problems.random_quadratic(3, 2, condition=3.0, seed=4)
    A, b = prob.curvature
    E, H, N, beta, eta, lr = 300, 3, 2, 0.8, 0.5, 0.05

    def job(i, p):  # H local SGD steps; returns Δ
        x = p.copy()
        for _ in range(H):
            x = x - lr * quadratic_gradient(A, b, i, x)
        return p - x

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
