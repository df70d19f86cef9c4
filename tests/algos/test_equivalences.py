"""Degenerate settings in which two algorithms must coincide."""

import jax
import numpy as np

import algos
import sim
from sim import schedules
from sim.reference import loop_minibatch_sgd, quadratic_gradient
from tests.conftest import rel_err


def test_one_worker_asgd_is_sgd():
    A = np.array([[[2.0, 0.3], [0.3, 1.0]]])
    b = np.array([[1.0, -2.0]])
    prob = sim.problems.quadratic(A, b, x0=[3.0, 3.0])
    res = sim.run(algos.asgd(stepsize=0.1), prob, schedules.fixed_computation([1.7], num_events=50), key=jax.random.key(0))
    x = np.array([3.0, 3.0])
    for _ in range(50):
        x = x - 0.1 * quadratic_gradient(A, b, 0, x)
    assert rel_err(res.params, x) < 1e-13
    assert res.schedule["staleness_max"] == 0


def test_rescaled_with_equal_taus_is_vanilla_even_with_noise():
    prob = sim.problems.random_quadratic(5, 4, noise=0.7, seed=3)
    sched = schedules.fixed_computation([2.0] * 5, num_events=500)
    key = jax.random.key(11)
    a = sim.run(algos.asgd(stepsize=0.03), prob, sched, key=key)
    b = sim.run(algos.rescaled_asgd(stepsize=0.03, taus=[2.0] * 5), prob, sched, key=key)
    assert rel_err(a.params, b.params) < 1e-13
    assert rel_err(a.tail_average, b.tail_average) < 1e-13


def test_barrier_with_n_workers_is_minibatch_sgd():
    prob = sim.problems.random_quadratic(4, 3, seed=5)
    A, b = prob.curvature
    sched = schedules.synchronous([1.0, 3.0, 2.0, 5.0], num_rounds=40)
    res = sim.run(algos.minibatch_sgd(stepsize=0.2), prob, sched, key=jax.random.key(0))
    ref = loop_minibatch_sgd(A, b, np.zeros(3), 0.2, 40)
    assert rel_err(res.params, ref) < 1e-13
    # One server step per round of n arrivals; the time of round r's end is 5 r.
    np.testing.assert_array_equal(res.metrics["time"][-1], 5.0 * 40)


def test_barrier_minibatch_with_lost_results_averages_the_delivered():
    prob = sim.problems.random_quadratic(3, 2, seed=1)
    A, b = prob.curvature
    sched = schedules.with_failures(schedules.synchronous([1.0, 1.0, 1.0], num_rounds=3),
                                    intervals=[(2, 0.5, 1.5)])  # worker 2's result of round 0 is lost
    res = sim.run(algos.minibatch_sgd(stepsize=0.5), prob, sched, key=jax.random.key(0))
    x = np.zeros(2)
    x = x - 0.5 * (quadratic_gradient(A, b, 0, x) + quadratic_gradient(A, b, 1, x)) / 2
    for _ in range(2):
        x = x - 0.5 * sum(quadratic_gradient(A, b, i, x) for i in range(3)) / 3
    assert rel_err(res.params, x) < 1e-13


def test_minibatch_sgd_with_backup_workers_averages_the_first_n():
    """Against a plain loop: each round, x ← x − γ/N Σ over the N workers that finish first
    (random durations, so the set changes from round to round)."""
    prob = sim.problems.random_quadratic(5, 3, seed=2)
    A, b = prob.curvature
    timing = schedules.RandomTiming(np.array([1.0, 1.5, 2.0, 2.5, 3.0]), noise="exponential", seed=7)
    rounds, N = 30, 3
    sched = schedules.backup_workers(timing, num_rounds=rounds, backups=2)
    res = sim.run(algos.minibatch_sgd(stepsize=0.3), prob, sched, key=jax.random.key(0))
    dur = timing.durations(rounds)
    x = np.zeros(3)
    for r in range(rounds):
        first = np.lexsort((np.arange(5), dur[:, r]))[:N]
        x = x - 0.3 * sum(quadratic_gradient(A, b, i, x) for i in first) / N
    assert rel_err(res.params, x) < 1e-13
    sets = {tuple(sorted(sched.worker[(sched.round == r) & sched.delivered])) for r in range(rounds)}
    assert len(sets) > 3  # the first N differ from round to round: the test exercises the selection
