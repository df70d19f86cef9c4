"""Rennala, Malenia and Ringleader against plain server loops, exactness and degenerate cases."""

import jax
import numpy as np

from delaylab import algos, sim
from delaylab.sim import schedules
from delaylab.sim.reference import heap_server, quadratic_gradient
from tests.conftest import rel_err

TAUS = np.array([1.0, 1.75, 2.25, 4.125])  # dyadic: the heap's running sums equal k·τ_i exactly
E = 600


def _setup(seed=0):
    prob = sim.problems.random_quadratic(4, 3, condition=3.0, spread=2.0, seed=seed)
    A, b = prob.curvature
    dur = np.broadcast_to(TAUS[:, None], (4, E + 1))
    return prob, schedules.fixed_computation(TAUS, num_events=E), dur, (lambda i, p: quadratic_gradient(A, b, i, p))


def test_rennala_matches_plain_loop():
    prob, sched, dur, grad = _setup()
    S, gamma = 3, 0.2
    st = {"x": np.zeros(3), "sum": np.zeros(3), "B": 0, "k": 0, "jr": np.zeros(4, int), "disc": np.zeros(4, int)}

    def server(i, g, point):
        if st["jr"][i] == st["k"]:
            st["sum"] += g
            st["B"] += 1
            if st["B"] == S:
                st["x"] = st["x"] - gamma * st["sum"] / S
                st["sum"][:] = 0
                st["B"] = 0
                st["k"] += 1
        else:
            st["disc"][i] += 1
        st["jr"][i] = st["k"]
        return st["x"]

    heap_server(dur, E, grad, server, np.zeros(3))
    res = sim.run(algos.rennala_sgd(stepsize=gamma, batch=S), prob, sched, key=jax.random.key(0))
    assert rel_err(res.params, st["x"]) < 1e-10
    np.testing.assert_array_equal(res.worker_stats["discarded"], st["disc"])
    assert st["disc"].sum() > 0


def test_malenia_matches_plain_loop_and_is_unbiased():
    prob, sched, dur, grad = _setup(1)
    S, gamma, n = 8, 0.3, 4
    st = {"x": np.zeros(3), "G": np.zeros((4, 3)), "B": np.zeros(4, int), "k": 0, "jr": np.zeros(4, int)}

    def server(i, g, point):
        if st["jr"][i] == st["k"]:
            st["G"][i] += g
            st["B"][i] += 1
            if st["B"].min() >= 1 and n / np.sum(1.0 / st["B"]) >= S / n:
                st["x"] = st["x"] - gamma * np.mean(st["G"] / st["B"][:, None], axis=0)
                st["G"][:] = 0
                st["B"][:] = 0
                st["k"] += 1
        st["jr"][i] = st["k"]
        return st["x"]

    heap_server(dur, E, grad, server, np.zeros(3))
    res = sim.run(algos.malenia_sgd(stepsize=gamma, batch=S), prob, sched, key=jax.random.key(0))
    assert rel_err(res.params, st["x"]) < 1e-10
    assert int(res.worker_stats["rounds"].sum()) == st["k"] > 10
    # σ = 0: every round is a full-gradient step, so Malenia converges to the true optimum
    long = sim.run(algos.malenia_sgd(stepsize=gamma, batch=S), prob, schedules.fixed_computation(TAUS, num_events=6000),
                   key=jax.random.key(0))
    assert np.linalg.norm(long.params - prob.minimiser) < 1e-8


def test_ringleader_matches_plain_loop_and_is_unbiased():
    prob, sched, dur, grad = _setup(2)
    gamma, n = 0.1, 4
    st = {"x": np.zeros(3), "G": np.zeros((n, 3)), "b": np.zeros(n, int), "Gp": np.zeros((n, 3)),
          "bp": np.zeros(n, int), "U": np.zeros(n, bool), "phase2": False, "max_b": 0}

    def server(i, g, point):
        if st["phase2"] and st["U"][i]:
            st["Gp"][i] += g
            st["bp"][i] += 1
            return point
        st["G"][i] += g
        st["b"][i] += 1
        st["max_b"] = max(st["max_b"], st["b"][i])
        if not st["phase2"] and st["b"].min() == 0:
            return point  # phase 1: keep computing at the same point
        st["phase2"] = True
        st["x"] = st["x"] - gamma * np.mean(st["G"] / st["b"][:, None], axis=0)
        st["U"][i] = True
        if st["U"].all():
            st["G"], st["b"] = st["Gp"].copy(), st["bp"].copy()
            st["Gp"][:] = 0
            st["bp"][:] = 0
            st["U"][:] = False
            st["phase2"] = False
        return st["x"]

    heap_server(dur, E, grad, server, np.zeros(3))
    res = sim.run(algos.ringleader_asgd(stepsize=gamma), prob, sched, key=jax.random.key(0))
    assert rel_err(res.params, st["x"]) < 1e-10
    assert st["max_b"] > 1  # fast workers contribute several gradients per table entry
    long = sim.run(algos.ringleader_asgd(stepsize=gamma), prob, schedules.fixed_computation(TAUS, num_events=8000),
                   key=jax.random.key(0))
    assert np.linalg.norm(long.params - prob.minimiser) < 1e-8  # docs/theory.md §7.6: exact with σ = 0


def test_one_worker_degenerate_cases_are_sgd():
    A = np.array([[[2.0, 0.3], [0.3, 1.0]]])
    b = np.array([[1.0, -2.0]])
    prob = sim.problems.quadratic(A, b, x0=[3.0, 3.0])
    sched = schedules.fixed_computation([1.0], num_events=40)
    x = np.array([3.0, 3.0])
    for _ in range(40):
        x = x - 0.1 * quadratic_gradient(A, b, 0, x)
    for alg in (algos.rennala_sgd(stepsize=0.1, batch=1), algos.malenia_sgd(stepsize=0.1, batch=1),
                algos.ringleader_asgd(stepsize=0.1)):
        assert rel_err(sim.run(alg, prob, sched, key=jax.random.key(0)).params, x) < 1e-13, alg.name
