"""The ASGD step-rule family against the plain heap simulator, and in degenerate settings."""

import jax
import numpy as np
import pytest

from delaylab import algos, sim
from delaylab.sim import schedules
from delaylab.sim.reference import heap_asgd, quadratic_gradient
from tests.conftest import rel_err

TAUS = np.array([1.0, 2.0, 3.0, 7.0])


def _setup(E=600, seed=0):
    prob = sim.problems.random_quadratic(4, 3, condition=3.0, seed=seed)
    A, b = prob.curvature
    return prob, A, b, schedules.fixed_computation(TAUS, num_events=E), np.broadcast_to(TAUS[:, None], (4, E + 1))


CASES = {
    "delay_adaptive": (lambda: algos.delay_adaptive_asgd(stepsize=0.05, num_workers=4),
                       lambda i, st: 0.05 * 4 / max(4, st)),
    "staleness_aware": (lambda: algos.staleness_aware_asgd(stepsize=0.05), lambda i, st: 0.05 / max(1, st)),
    "fedasync_polynomial": (lambda: algos.staleness_weighted_asgd(stepsize=0.05, staleness="polynomial", a=0.5),
                            lambda i, st: 0.05 * (st + 1.0) ** -0.5),
    "fedasync_hinge": (lambda: algos.staleness_weighted_asgd(stepsize=0.05, staleness="hinge", a=0.5, b=2.0),
                       lambda i, st: 0.05 if st <= 2 else 0.05 / (0.5 * (st - 2) + 1.0)),
    "inverse_tau": (lambda: algos.inverse_tau_asgd(stepsize=0.05, taus=TAUS),
                    lambda i, st: 0.05 * (4 / np.sum(1 / TAUS)) / TAUS[i]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_rule_matches_heap_reference(name):
    make, step = CASES[name]
    prob, A, b, sched, dur = _setup()
    res = sim.run(make(), prob, sched, key=jax.random.key(0))
    ref, _ = heap_asgd(A, b, np.zeros(3), dur, sched.num_events, step)
    assert rel_err(res.params, ref) < 1e-10


def test_clipped_matches_heap_reference():
    prob, A, b, sched, dur = _setup()
    prob = sim.problems.quadratic(A, b, x0=[4.0, -4.0, 4.0])

    def clipped(A_, b_, i, x):
        g = quadratic_gradient(A_, b_, i, x)
        nrm = np.linalg.norm(g)
        return g * min(1.0, 0.5 / nrm) if nrm > 0 else g

    res = sim.run(algos.clipped_asgd(stepsize=0.05, threshold=0.5), prob, sched, key=jax.random.key(0))
    ref, _ = heap_asgd(A, b, np.array([4.0, -4.0, 4.0]), dur, sched.num_events, lambda i, st: 0.05, gradient=clipped)
    assert rel_err(res.params, ref) < 1e-10
    # the threshold binds early on (otherwise this would not test clipping)
    assert np.linalg.norm(quadratic_gradient(A, b, 0, np.array([4.0, -4.0, 4.0]))) > 5


def test_degenerate_equivalences():
    prob = sim.problems.random_quadratic(4, 3, noise=0.5, seed=2)
    key = jax.random.key(5)
    equal = schedules.fixed_computation([1.0] * 4, num_events=400)  # staleness n − 1 < n always
    vanilla = sim.run(algos.asgd(stepsize=0.05), prob, equal, key=key)
    assert equal.summary()["staleness_max"] == 3
    da = sim.run(algos.delay_adaptive_asgd(stepsize=0.05, num_workers=4), prob, equal, key=key)
    assert rel_err(da.params, vanilla.params) < 1e-13
    inv = sim.run(algos.inverse_tau_asgd(stepsize=0.05, taus=[1.0] * 4), prob, equal, key=key)
    assert rel_err(inv.params, vanilla.params) < 1e-13
    big = sim.run(algos.clipped_asgd(stepsize=0.05, threshold=1e9), prob, equal, key=key)
    assert rel_err(big.params, vanilla.params) < 1e-13
    one = schedules.fixed_computation([1.0], num_events=100)  # one worker: staleness 0
    p1 = sim.problems.random_quadratic(1, 3, noise=0.5, seed=2)
    sa = sim.run(algos.staleness_aware_asgd(stepsize=0.05), p1, one, key=key)
    v1 = sim.run(algos.asgd(stepsize=0.05), p1, one, key=key)
    assert rel_err(sa.params, v1.params) < 1e-13


def test_bad_inputs():
    with pytest.raises(ValueError, match="clipped_asgd: threshold must be positive and finite"):
        algos.clipped_asgd(stepsize=0.1, threshold=0.0)
    with pytest.raises(ValueError, match="delay_adaptive_asgd: num_workers must be a positive integer"):
        algos.delay_adaptive_asgd(stepsize=0.1, num_workers=0)
    prob = sim.problems.random_quadratic(3, 2)
    with pytest.raises(ValueError, match="num_workers=4 but the problem has 3 workers"):
        sim.run(algos.delay_adaptive_asgd(stepsize=0.1, num_workers=4), prob,
                schedules.fixed_computation([1.0, 2.0, 3.0], num_events=5), key=jax.random.key(0))
