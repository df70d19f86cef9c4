"""Ringmaster, IA²SGD and FedBuff against plain server loops (sim.reference.heap_server)."""

import jax
import numpy as np
import pytest

from delaylab import algos, sim
from delaylab.sim import schedules
from delaylab.sim.reference import heap_server, quadratic_gradient
from tests.conftest import rel_err

TAUS = np.array([1.0, 1.5, 2.0, 5.0])
E = 500


def _setup(seed=0):
    prob = sim.problems.random_quadratic(4, 3, condition=3.0, seed=seed)
    A, b = prob.curvature
    sched = schedules.fixed_computation(TAUS, num_events=E)
    dur = np.broadcast_to(TAUS[:, None], (4, E + 1))
    return prob, A, b, sched, dur, (lambda i, p: quadratic_gradient(A, b, i, p))


def test_ringmaster_matches_plain_loop():
    prob, A, b, sched, dur, grad = _setup()
    R, gamma = 3, 0.1
    st = {"x": np.zeros(3), "k": 0, "handed": np.zeros(4, int), "discarded": np.zeros(4, int)}

    def server(i, g, point):
        if st["k"] - st["handed"][i] < R:
            st["x"] = st["x"] - gamma * g
            st["k"] += 1
        else:
            st["discarded"][i] += 1
        st["handed"][i] = st["k"]
        return st["x"]

    heap_server(dur, E, grad, server, np.zeros(3))
    res = sim.run(algos.ringmaster_asgd(stepsize=gamma, threshold=R), prob, sched, key=jax.random.key(0))
    assert rel_err(res.params, st["x"]) < 1e-10
    np.testing.assert_array_equal(res.worker_stats["discarded"], st["discarded"])
    assert st["discarded"][3] > 0  # the slow worker's gradients are discarded: the test exercises it


def test_ia2sgd_matches_plain_loop():
    prob, A, b, sched, dur, grad = _setup(1)
    gamma = 0.05
    st = {"x": np.zeros(3), "T": np.zeros((4, 3)), "have": np.zeros(4, bool)}

    def server(i, g, point):
        st["T"][i] = g
        st["have"][i] = True
        if st["have"].all():
            st["x"] = st["x"] - gamma * st["T"].mean(0)
        return st["x"]

    heap_server(dur, E, grad, server, np.zeros(3))
    res = sim.run(algos.ia2sgd(stepsize=gamma), prob, sched, key=jax.random.key(0))
    assert rel_err(res.params, st["x"]) < 1e-10
    # with σ = 0 the table method is unbiased: it converges to the true optimum
    long = sim.run(algos.ia2sgd(stepsize=gamma), prob, schedules.fixed_computation(TAUS, num_events=8000),
                   key=jax.random.key(0))
    assert np.linalg.norm(long.params - prob.minimiser) < 1e-8


@pytest.mark.parametrize("K, a", [(3, 0.5), (2, 1.0)])
def test_fedbuff_matches_plain_loop(K, a):
    prob, A, b, sched, dur, grad = _setup(2)
    eta_l, eta_g = 0.1, 0.8
    st = {"x": np.zeros(3), "buf": np.zeros(3), "count": 0, "k": 0, "handed": np.zeros(4, int)}

    def server(i, g, point):
        delay = st["k"] - st["handed"][i]
        st["buf"] += (1 + delay) ** (-a) * eta_l * g
        st["count"] += 1
        if st["count"] == K:
            st["x"] = st["x"] - eta_g * st["buf"] / K
            st["buf"][:] = 0
            st["count"] = 0
            st["k"] += 1
        st["handed"][i] = st["k"]
        return st["x"]

    heap_server(dur, E, grad, server, np.zeros(3))
    alg = algos.fedbuff_asgd(local_stepsize=eta_l, server_stepsize=eta_g, buffer_size=K, staleness_exponent=a)
    res = sim.run(alg, prob, sched, key=jax.random.key(0))
    assert rel_err(res.params, st["x"]) < 1e-10


def test_degenerate_cases():
    prob = sim.problems.random_quadratic(4, 3, noise=0.5, seed=3)
    sched = schedules.fixed_computation(TAUS, num_events=400)
    key = jax.random.key(2)
    vanilla = sim.run(algos.asgd(stepsize=0.05), prob, sched, key=key)
    fb = sim.run(algos.fedbuff_asgd(local_stepsize=0.05, buffer_size=1, staleness_exponent=0.0), prob, sched, key=key)
    assert rel_err(fb.params, vanilla.params) < 1e-13  # buffer of 1, no weighting: plain asynchrony
    rm = sim.run(algos.ringmaster_asgd(stepsize=0.05, threshold=10**6), prob, sched, key=key)
    assert rel_err(rm.params, vanilla.params) < 1e-13  # a threshold never reached: vanilla ASGD
    assert int(rm.worker_stats["discarded"].sum()) == 0


def test_bad_inputs():
    with pytest.raises(ValueError, match="ringmaster_asgd: threshold must be an integer >= 1"):
        algos.ringmaster_asgd(stepsize=0.1, threshold=0)
    with pytest.raises(ValueError, match="fedbuff_asgd: buffer_size must be an integer >= 1"):
        algos.fedbuff_asgd(local_stepsize=0.1, buffer_size=0)
    with pytest.raises(ValueError, match="fedbuff_asgd: staleness_exponent must be finite and >= 0"):
        algos.fedbuff_asgd(local_stepsize=0.1, staleness_exponent=-1.0)
