"""Degenerate settings in which two algorithms must coincide."""

import jax
import numpy as np
import pytest

from delaylab import algos, sim
from delaylab.sim import schedules
from delaylab.sim.reference import loop_minibatch_sgd, quadratic_gradient
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


def _sync_replicas_loop(A, b, table, *, N, rounds, gamma):
    """TensorFlow's SyncReplicasOptimizer as docs/theory.md §10.1 reads it, tick by tick:
    the chief accepts a gradient only if it was computed on the current global step's model; at
    the N-th it steps on their mean; a worker whose gradient was accepted waits for that close,
    a worker whose gradient was dropped starts again at once on the current model."""
    n = len(table)
    jobs = [1] * n
    x = np.zeros(A.shape[-1])
    step, accepted, total = 0, 0, np.zeros_like(x)
    busy = [(table[i][0], 0, x.copy()) for i in range(n)]  # (finish tick, step of the model, model)

    def next_job(i, t):
        jobs[i] += 1
        return (t + table[i][jobs[i] - 1], step, x.copy())

    waiting, twice = [], 0
    seen = set()
    t = 0
    while step < rounds:
        t += 1
        for i in range(n):
            if busy[i] is None or busy[i][0] != t:
                continue
            _, base, point = busy[i]
            busy[i] = None
            if base == step:
                total = total + quadratic_gradient(A, b, i, point)
                accepted += 1
                if (i, step) in seen:
                    twice += 1
                seen.add((i, step))
                if accepted < N:
                    waiting.append(i)
                    continue
                x, step, accepted, total = x - gamma * total / N, step + 1, 0, np.zeros_like(x)
                for j in waiting:
                    busy[j] = next_job(j, t)
                waiting = []
            else:
                seen.add((i, step))  # dropped in this round
            busy[i] = next_job(i, t)
    return x, twice


def test_sync_replicas_backup_workers_are_rennala_on_their_schedule():
    """backup_workers(cancel_on_close=False) + rennala_sgd(batch=N) against the chief and workers
    run tick by tick; one worker is both dropped and accepted in a round."""
    prob = sim.problems.random_quadratic(5, 3, seed=3)
    A, b = prob.curvature
    N, rounds = 3, 25
    table = np.random.default_rng(0).integers(1, 7, size=(5, 200)).astype(float)
    sched = schedules.backup_workers(schedules.TraceTiming(tuple(table)), num_rounds=rounds, backups=2,
                                     cancel_on_close=False)
    res = sim.run(algos.rennala_sgd(stepsize=0.2, batch=N), prob, sched, key=jax.random.key(0))
    ref, twice = _sync_replicas_loop(A, b, table.astype(int), N=N, rounds=rounds, gamma=0.2)
    assert twice > 0
    assert int(res.state.round) == rounds
    assert rel_err(res.params, ref) < 1e-13
    assert int(res.worker_stats["discarded"].sum()) > 0  # stragglers' results were dropped


def test_sync_replicas_without_backups_is_minibatch_sgd():
    prob = sim.problems.random_quadratic(4, 3, seed=4)
    timing = schedules.RandomTiming(np.array([1.0, 1.5, 2.0, 3.0]), noise="exponential", seed=2)
    sync = schedules.backup_workers(timing, num_rounds=15, backups=0, cancel_on_close=False)
    res = sim.run(algos.rennala_sgd(stepsize=0.3, batch=4), prob, sync, key=jax.random.key(0))
    ref = sim.run(algos.minibatch_sgd(stepsize=0.3), prob, schedules.barrier(timing, num_rounds=15), key=jax.random.key(0))
    assert rel_err(res.params, ref.params) < 1e-13
    assert sync.end_time == pytest.approx(schedules.barrier(timing, num_rounds=15).end_time, rel=1e-15)
