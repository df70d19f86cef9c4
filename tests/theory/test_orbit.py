import numpy as np
import pytest

from delaylab import theory
from delaylab.sim.reference import heap_asgd


def test_hyperperiod_order_and_staleness_by_hand():
    ev = theory.hyperperiod_events([1, 2])
    assert ev == [(1, 0), (2, 0), (2, 1)]
    from delaylab.theory.orbit import steady_staleness

    # w0 at 1: previous w0 at 0 (= 2 of the last period), w1 arrived in between -> 1
    # w0 at 2: nothing in between -> 0; w1 at 2: previous w1 at 0, then w0@1, w0@2 -> 2
    assert steady_staleness(ev) == [1, 0, 2]


def test_one_worker_orbit_is_its_minimiser():
    A = np.array([[[2.0, 0.5], [0.5, 1.0]]])
    b = np.array([[1.0, -3.0]])
    orb = theory.periodic_orbit(A, b, [3], lambda i, st: 0.2)
    np.testing.assert_allclose(orb.average, b[0], rtol=1e-12)


def _dense_quadratic(seed, n=3, d=2):
    """Random dense curvatures A_i = M Mᵀ + I and minimisers b_i."""
    rng = np.random.default_rng(seed)
    M = rng.standard_normal((n, d, d))
    return M @ np.swapaxes(M, 1, 2) + np.eye(d), rng.standard_normal((n, d))


def test_orbit_matches_long_heap_simulation():
    n, d = 3, 2
    A, b = _dense_quadratic(0, n, d)
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


def test_vectorised_staleness_matches_the_definition():
    """cyclic_staleness against the definition, arrivals strictly between a worker's two arrivals
    counted by hand; arrival_staleness against the schedule's own staleness (sim.schedules)."""
    from delaylab import sim
    from delaylab.theory.orbit import arrival_staleness, cyclic_staleness

    ev = theory.hyperperiod_events([2, 3, 4])
    workers = [i for _, i in ev]
    K = len(ev)
    by_hand = []
    for k, i in enumerate(workers):
        j = next(j for j in range(1, K + 1) if workers[(k - j) % K] == i)
        by_hand.append(j - 1)
    assert cyclic_staleness(workers).tolist() == by_hand
    sched = sim.schedules.fixed_computation([1.0, 2.0, 3.0, 5.0], num_events=200)
    np.testing.assert_array_equal(arrival_staleness(sched.worker), sched.staleness)


def test_replay_over_whole_periods_equals_the_orbit():
    """The replayed dynamics (theory.orbit.replayed_averages), started at 0 and averaged over the
    second half of 400 whole hyperperiods, equals the periodic orbit's average; two step sequences
    at once."""
    from delaylab.theory.orbit import cyclic_staleness, hyperperiod_arrays, replayed_averages

    d = 2
    A, b = _dense_quadratic(2, 3, d)
    taus = np.array([1.0, 2.0, 3.0])
    steps = {g: (lambda i, st, g=g: g / max(1, st)) for g in (0.05, 0.02)}
    orbits = {g: theory.periodic_orbit(A, b, taus, s) for g, s in steps.items()}
    times, period_workers, H = hyperperiod_arrays(taus)
    periods = 400
    finish = np.concatenate([times + p * H for p in range(periods)]).astype(float)
    workers = np.tile(period_workers, periods)
    stale = np.tile(cyclic_staleness(period_workers), periods)
    seq = np.stack([[steps[g](0, s) for s in stale] for g in steps])
    avg, _ = replayed_averages(A, b, np.zeros(d), finish, workers, float(periods * H), seq, average_from=0.5)
    for row, g in zip(avg, steps):
        assert np.linalg.norm(row - orbits[g].average) < 1e-10


def test_richardson_recovers_a_polynomial_limit():
    from delaylab.theory.orbit import richardson

    x0, c1, c2 = np.array([1.0, -2.0]), np.array([0.3, 0.1]), np.array([-0.2, 0.5])
    xs = [x0 + c1 * h + c2 * h**2 for h in (0.1, 0.05, 0.025)]
    est = richardson(xs)
    np.testing.assert_allclose(est.limit, x0, atol=1e-14)
    assert abs(est.offset - np.linalg.norm(xs[0] - x0)) < 1e-14
    assert est.uncertainty == pytest.approx(np.linalg.norm(c2) * 0.05 * 0.025, rel=1e-9)


def test_arrivals_match_the_schedule_and_the_hyperperiod():
    """theory.orbit.arrivals against sim.schedules.fixed_computation's own event list (times,
    workers, tie order), for integer and irrational τ."""
    from delaylab import sim
    from delaylab.theory.orbit import arrivals, hyperperiod_arrays

    for taus in ([1.0, 2.0, 3.0, 5.0], list(np.sqrt([1.0, 2.0, 3.0]))):
        sched = sim.schedules.fixed_computation(taus, num_events=300)
        times, workers = arrivals(taus, sched.finish[-1])
        k = min(len(times), sched.num_events) - 3  # the schedule may stop inside a tie at its end
        np.testing.assert_allclose(times[:k], sched.finish[:k], rtol=0, atol=1e-12)
        np.testing.assert_array_equal(workers[:k], sched.worker[:k])
    times, workers, H = hyperperiod_arrays([2, 3])
    assert H == 6 and times.tolist() == [2, 3, 4, 6, 6] and workers.tolist() == [0, 1, 0, 0, 1]
