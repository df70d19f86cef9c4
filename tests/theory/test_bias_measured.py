"""Measured fixed points against the theory's predictions, on cases not used by `delaylab verify`."""

import jax
import numpy as np

from delaylab import algos, sim, theory
from delaylab.sim import schedules


def _tail(alg, prob, sched, **kw):
    return sim.run(alg, prob, sched, key=jax.random.key(0), average_from=0.5, **kw)


def test_vanilla_goes_to_frequency_weighted_point_rescaled_to_optimum():
    taus = np.array([1.0, 1.7, 4.2])
    prob = sim.problems.random_quadratic(3, 4, condition=4.0, spread=2.0, seed=11)
    A, b = prob.curvature
    sched = schedules.fixed_computation(taus, num_events=30000)
    xp = theory.quadratic_fixed_point(A, b, theory.frequency_weights(taus))
    xs = prob.minimiser
    bias = np.linalg.norm(xp - xs)
    assert bias > 0.3  # the two candidates are far apart, so the check can tell them apart
    v = _tail(algos.asgd(stepsize=0.005), prob, sched)
    r = _tail(algos.rescaled_asgd(stepsize=0.005, taus=taus), prob, sched)
    assert np.linalg.norm(v.tail_average - xp) < 0.05 * bias
    assert np.linalg.norm(r.tail_average - xs) < 0.05 * bias
    assert np.linalg.norm(v.tail_average - xs) > 0.9 * bias


def test_random_durations_weights_follow_mean_durations():
    taus = np.array([1.0, 2.0, 6.0])
    sched = schedules.random_durations(taus, num_events=20000, noise="halfnormal", scale=np.sqrt(taus), seed=4)
    prob = sim.problems.quadratic(np.ones((3, 1)), np.array([[-1.0], [0.5], [3.0]]))
    v = _tail(algos.asgd(stepsize=0.004), prob, sched)
    p = theory.frequency_weights(sched.mean_durations)
    measured = theory.measured_weights(v.worker_stats["stepsize"])
    np.testing.assert_allclose(measured, p, atol=0.01)
    xp = theory.quadratic_fixed_point(np.ones((3, 1)), np.array([[-1.0], [0.5], [3.0]]), p)
    assert abs(v.tail_average[0] - xp[0]) < 0.05 * abs(xp[0] - prob.minimiser[0])


def test_orbit_offset_is_linear_in_stepsize():
    """docs/theory.md §4: at finite γ the orbit average sits O(γ) away from x_q."""
    taus = np.array([1.0, 2.0, 3.0, 5.0, 8.0])
    prob = sim.problems.random_quadratic(5, 3, condition=3.0, spread=2.0, seed=5)
    A, b = prob.curvature
    xp = theory.quadratic_fixed_point(A, b, theory.frequency_weights(taus))
    # Averages over whole hyperperiods (lcm = 120) at the end of the run.
    offsets = []
    for gamma in (0.02, 0.005):
        sched = schedules.fixed_computation(taus, num_events=int(np.sum(120 / taus)) * 400)
        res = _tail(algos.asgd(stepsize=gamma), prob, sched)
        offsets.append(np.linalg.norm(res.tail_average - xp))
    ratio = offsets[0] / offsets[1]
    assert 3.0 < ratio < 5.0, (offsets, ratio)


def test_logistic_vanilla_targets_weighted_minimiser():
    prob = sim.problems.synthetic_logistic(3, 60, 2, heterogeneity=1.5, l2=0.05, seed=3)
    taus = np.array([1.0, 3.0, 6.0])
    sched = schedules.fixed_computation(taus, num_events=15000)
    xp = prob.weighted_minimiser(theory.frequency_weights(taus))
    bias = np.linalg.norm(xp - prob.minimiser)
    assert bias > 0.1
    v = _tail(algos.asgd(stepsize=0.05), prob, sched)
    r = _tail(algos.rescaled_asgd(stepsize=0.05, taus=taus), prob, sched)
    assert np.linalg.norm(v.tail_average - xp) < 0.1 * bias
    assert np.linalg.norm(r.tail_average - prob.minimiser) < 0.1 * bias
