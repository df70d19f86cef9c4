import numpy as np
import pytest

import theory
from sim.reference import heap_asgd


def test_hyperperiod_order_and_staleness_by_hand():
    ev = theory.hyperperiod_events([1, 2])
    assert ev == [(1, 0), (2, 0), (2, 1)]
    from theory.orbit import steady_staleness

    # w0 at 1: previous w0 at 0 (= 2 of the last period), w1 arrived in between -> 1
    # w0 at 2: nothing in between -> 0; w1 at 2: previous w1 at 0, then w0@1, w0@2 -> 2
    assert steady_staleness(ev) == [1, 0, 2]


def test_one_worker_orbit_is_its_minimiser():
    A = np.array([[[2.0, 0.5], [0.5, 1.0]]])
    b = np.array([[1.0, -3.0]])
    orb = theory.periodic_orbit(A, b, [3], lambda i, st: 0.2)
    np.testing.assert_allclose(orb.average, b[0], rtol=1e-12)


def test_orbit_matches_long_heap_simulation():
    rng = np.random.default_rng(0)
    n, d = 3, 2
    M = rng.standard_normal((n, d, d))
    A = M @ np.swapaxes(M, 1, 2) + np.eye(d)
    b = rng.standard_normal((n, d))
    taus = np.array([1.0, 2.0, 4.0])
    step = lambda i, st: 0.05 / max(1, st)  # staleness-dependent: exercises the steady staleness
    orb = theory.periodic_orbit(A, b, taus, step)
    periods = 300
    E = periods * orb.events_per_period
    _, trace = heap_asgd(A, b, np.zeros(d), np.broadcast_to(taus[:, None], (n, E + 1)), E, step, record=True)
    # holding-time average of x over the last 100 whole periods, by hand
    t0, T = (periods - 100) * orb.period, periods * orb.period
    times = np.array([t for t, _, _ in trace] + [T])
    xs = np.array([x for _, _, x in trace])
    hold = np.clip(np.minimum(times[1:], T) - np.maximum(times[:-1], t0), 0, None)
    measured = (hold[:, None] * xs).sum(0) / (T - t0)
    assert np.linalg.norm(measured - orb.average) < 1e-10


def test_orbit_offset_linear_in_step_and_tie_rule_matters():
    rng = np.random.default_rng(1)
    n, d = 4, 2
    A = rng.uniform(0.5, 2.0, (n, d))
    b = 2 * rng.standard_normal((n, d))
    taus = np.array([1.0, 2.0, 2.0, 4.0])
    xp = theory.quadratic_fixed_point(A, b, theory.frequency_weights(taus))
    off = [np.linalg.norm(theory.periodic_orbit(A, b, taus, lambda i, st, g=g: g).average - xp) for g in (0.02, 0.005)]
    assert 3.5 < off[0] / off[1] < 4.5
    # Swapping the two τ = 2 workers swaps their tie order: the orbit moves by far more than 1e-8.
    perm = [0, 2, 1, 3]
    swapped = theory.periodic_orbit(A[perm], b[perm], taus[perm], lambda i, st: 0.02).average
    same = theory.periodic_orbit(A, b, taus, lambda i, st: 0.02).average
    assert np.linalg.norm(swapped - same) > 1e-6


def test_orbit_rejects_non_integer_taus_and_large_steps():
    with pytest.raises(ValueError, match="positive integer taus"):
        theory.periodic_orbit(np.ones((2, 1)), np.zeros((2, 1)), [1.0, 1.5], lambda i, st: 0.1)
    with pytest.raises(ValueError, match="does not contract"):
        theory.periodic_orbit(np.ones((2, 1)), np.zeros((2, 1)), [1, 2], lambda i, st: 5.0)
