"""Malenia SGD's two readings of "stop or ignore all unfinished computations" (docs/theory.md §7.5):
"stop" on ``schedules.every_worker_rounds``, "ignore" on an asynchronous schedule."""

import jax
import numpy as np

from delaylab import algos, sim
from delaylab.sim import schedules
from delaylab.sim.reference import loop_minibatch_sgd
from tests.conftest import rel_err


def test_stop_reading_steps_once_per_round_and_discards_nothing():
    """σ = 0: each of Malenia's rounds is one full-gradient step x ← x − γ (1/n) Σ_i ∇F_i(x)
    whatever the per-worker counts, so R rounds are R steps of the plain loop. The "ignore"
    reading on the same timing discards the jobs that cross a close (the count is live)."""
    prob = sim.problems.random_quadratic(5, 3, condition=3.0, spread=2.0, seed=6)
    A, b = prob.curvature
    timing = schedules.RandomTiming(np.array([1.0, 1.5, 2.0, 4.0, 7.0]), noise="exponential", seed=2)
    rounds, gamma = 25, 0.3
    stop = schedules.every_worker_rounds(timing, num_rounds=rounds)
    res = sim.run(algos.malenia_sgd(stepsize=gamma, batch=5), prob, stop, key=jax.random.key(0))
    assert int(res.worker_stats["rounds"].sum()) == rounds
    assert int(res.worker_stats["discarded"].sum()) == 0
    assert rel_err(res.params, loop_minibatch_sgd(A, b, np.zeros(3), gamma, rounds)) < 1e-12
    ignore = sim.run(algos.malenia_sgd(stepsize=gamma, batch=5), prob,
                     schedules.asynchronous(timing, num_events=int(np.sum(stop.delivered))), key=jax.random.key(0))
    assert int(ignore.worker_stats["discarded"].sum()) > 0


def test_stop_reading_with_equally_fast_workers_is_synchronous_minibatch_sgd():
    """Every worker takes τ = 2: each round every worker delivers exactly one result, the last
    in worker order closes it at 2(r + 1), and Malenia equals minibatch SGD on barrier rounds."""
    prob = sim.problems.random_quadratic(4, 3, seed=8)
    timing = schedules.FixedTiming(np.full(4, 2.0))
    stop = schedules.every_worker_rounds(timing, num_rounds=12)
    np.testing.assert_array_equal(stop.arrivals_per_worker(), np.full(4, 12))
    closes = stop.finish[stop.worker == 3]
    np.testing.assert_array_equal(closes, 2.0 * np.arange(1, 13))
    res = sim.run(algos.malenia_sgd(stepsize=0.25, batch=4), prob, stop, key=jax.random.key(0))
    ref = sim.run(algos.minibatch_sgd(stepsize=0.25), prob, schedules.barrier(timing, num_rounds=12),
                  key=jax.random.key(0))
    assert rel_err(res.params, ref.params) < 1e-13
    assert int(res.worker_stats["rounds"].sum()) == 12 and int(res.worker_stats["discarded"].sum()) == 0
