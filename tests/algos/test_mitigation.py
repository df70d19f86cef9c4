"""Straggler-mitigation rules (algos.mitigation) against hand-computed values and plain loops."""

import jax
import numpy as np
import pytest

from delaylab import algos, sim
from delaylab.sim import schedules
from delaylab.sim.reference import quadratic_gradient
from tests.conftest import rel_err


def test_staleness_functions_take_their_tabulated_values():
    d = np.array([0.0, 3.0, 4.0, 6.0, 8.0])
    np.testing.assert_allclose(algos.staleness_weight("constant", d), [1, 1, 1, 1, 1])
    np.testing.assert_allclose(algos.staleness_weight("polynomial", d, a=0.5), [1, 0.5, 1 / np.sqrt(5), 1 / np.sqrt(7), 1 / 3])
    np.testing.assert_allclose(algos.staleness_weight("hinge", d, a=0.5, b=4.0), [1, 1, 1, 0.5, 1 / 3])
    np.testing.assert_allclose(algos.staleness_weight("fedbuff", d), algos.staleness_weight("polynomial", d, a=0.5))
    with pytest.raises(ValueError, match="unknown staleness function 'linear'; allowed"):
        algos.staleness_weight("linear", d)


def _loop_fedasync(A, b, sched, *, alpha, lr, H, rho, s):
    n, dim = b.shape
    x = np.zeros(dim)
    points = np.zeros((n, dim))
    for e, i in enumerate(sched.worker):
        z = points[i].copy()
        for _ in range(H):
            z = z - lr * (quadratic_gradient(A, b, i, z) + rho * (z - points[i]))
        at = alpha * s(sched.staleness[e]) if sched.delivered[e] else 0.0
        x = (1 - at) * x + at * z
        points[i] = x
    return x


@pytest.mark.parametrize("kind,fn", [
    ("polynomial", lambda d: (d + 1.0) ** -0.5),
    ("hinge", lambda d: 1.0 if d <= 2 else 1.0 / (0.5 * (d - 2) + 1.0)),
])
def test_fedasync_equals_a_plain_loop(kind, fn):
    prob = sim.problems.random_quadratic(4, 3, seed=3)
    A, b = prob.curvature
    sched = schedules.with_failures(
        schedules.random_durations([1.0, 2.0, 4.0, 8.0], num_events=120, seed=2), probability=0.1, seed=1)
    alg = algos.fedasync(mixing=0.6, local_stepsize=0.05, local_steps=3, prox=0.1, staleness=kind, a=0.5, b=2.0)
    res = sim.run(alg, prob, sched, key=jax.random.key(0))
    ref = _loop_fedasync(A, b, sched, alpha=0.6, lr=0.05, H=3, rho=0.1, s=fn)
    assert sched.staleness.max() > 3  # the hinge's both branches are used
    assert rel_err(res.params, ref) < 1e-12


def test_fedasync_with_one_worker_and_full_mixing_is_sgd():
    prob = sim.problems.random_quadratic(1, 3, seed=4)
    A, b = prob.curvature
    sched = schedules.fixed_computation([1.0], num_events=25)
    res = sim.run(algos.fedasync(mixing=1.0, local_stepsize=0.2, staleness="constant"), prob, sched,
                  key=jax.random.key(0))
    x = np.zeros(3)
    for _ in range(25):
        x = x - 0.2 * quadratic_gradient(A, b, 0, x)
    assert rel_err(res.params, x) < 1e-13


def test_fedasync_refuses_bad_hyperparameters():
    with pytest.raises(ValueError, match=r"mixing α must be in \(0, 1\]"):
        algos.fedasync(mixing=0.0, local_stepsize=0.1)
    with pytest.raises(ValueError, match="staleness must be one of"):
        algos.fedasync(mixing=0.5, local_stepsize=0.1, staleness="exp")
    with pytest.raises(ValueError, match="local_steps must be an integer >= 1"):
        algos.fedasync(mixing=0.5, local_stepsize=0.1, local_steps=0)
    with pytest.raises(ValueError, match="staleness parameter a must be finite and >= 0"):
        algos.fedasync(mixing=0.5, local_stepsize=0.1, a=-1.0)


def _loop_hierarchical(A, b, steps, lr, levels, warmup):
    from delaylab.theory.hierarchy import check_levels, sync_level

    lv = check_levels(levels, b.shape[0])
    Y = np.zeros(b.shape)
    for k in range(steps):
        Y = np.stack([Y[i] - lr * quadratic_gradient(A, b, i, Y[i]) for i in range(b.shape[0])])
        s = sync_level(k, lv, warmup)
        if s:
            Y = np.repeat(Y.reshape(-1, s, Y.shape[1]).mean(axis=1), s, axis=0)
    return Y


def test_hierarchical_sgd_equals_a_plain_loop():
    prob = sim.problems.random_quadratic(8, 3, seed=6)
    A, b = prob.curvature
    levels, steps = {2: 2, 3: 4, 6: 8}, 25
    sched = schedules.hierarchical(schedules.RandomTiming(np.arange(1.0, 9.0), seed=1), num_steps=steps,
                                   levels=levels, warmup=2)
    res = sim.run(algos.hierarchical_sgd(stepsize=0.1, levels=levels, warmup=2), prob, sched,
                  key=jax.random.key(0), record_params=False)
    Y = _loop_hierarchical(A, b, steps, 0.1, levels, 2)
    assert rel_err(res.state.workers, Y) < 1e-13
    assert rel_err(res.params, Y.mean(axis=0)) < 1e-13


def test_hierarchical_sgd_degenerates_to_minibatch_and_local_sgd():
    prob = sim.problems.random_quadratic(4, 3, seed=7)
    A, b = prob.curvature
    timing = schedules.FixedTiming(np.array([1.0, 2.0, 3.0, 4.0]))
    # every step, everyone: synchronous minibatch SGD
    every = sim.run(algos.hierarchical_sgd(stepsize=0.2, levels={1: 4}), prob,
                    schedules.hierarchical(timing, num_steps=20, levels={1: 4}), key=jax.random.key(0))
    mb = sim.run(algos.minibatch_sgd(stepsize=0.2), prob, schedules.barrier(timing, num_rounds=20), key=jax.random.key(0))
    assert rel_err(every.params, mb.params) < 1e-13
    np.testing.assert_allclose(every.metrics["time"][-1], mb.metrics["time"][-1])
    # one level, period H: local SGD averaged every H steps (and at step 0, harmlessly)
    loc = sim.run(algos.hierarchical_sgd(stepsize=0.2, levels={5: 4}), prob,
                  schedules.hierarchical(timing, num_steps=20, levels={5: 4}), key=jax.random.key(0))
    Y = np.zeros((4, 3))
    for k in range(20):
        Y = np.stack([Y[i] - 0.2 * quadratic_gradient(A, b, i, Y[i]) for i in range(4)])
        if k % 5 == 0:
            Y[:] = Y.mean(axis=0)
    assert rel_err(loc.state.workers, Y) < 1e-13
    with pytest.raises(ValueError, match="hold all 8 workers"):
        sim.run(algos.hierarchical_sgd(stepsize=0.2, levels={2: 2, 4: 4}), sim.problems.random_quadratic(8, 2),
                schedules.synchronous(np.ones(8), num_rounds=3), key=jax.random.key(0))


def test_staleness_weighted_asgd_refuses_bad_input_and_constant_is_vanilla():
    with pytest.raises(ValueError, match="staleness must be one of"):
        algos.staleness_weighted_asgd(stepsize=0.1, staleness="exp")
    with pytest.raises(ValueError, match="staleness parameter b must be finite and >= 0"):
        algos.staleness_weighted_asgd(stepsize=0.1, b=-1.0)
    prob = sim.problems.random_quadratic(3, 2, seed=1)
    sched = schedules.fixed_computation([1.0, 2.0, 5.0], num_events=60)
    assert sched.staleness.max() > 2  # stale arrivals, where a non-constant s would differ
    c = sim.run(algos.staleness_weighted_asgd(stepsize=0.1, staleness="constant"), prob, sched, key=jax.random.key(0))
    v = sim.run(algos.asgd(stepsize=0.1), prob, sched, key=jax.random.key(0))
    assert rel_err(c.params, v.params) < 1e-13


def _loop_wbsp(A, b, sched, *, lr, slow):
    n, dim = b.shape
    x = np.zeros(dim)
    points = np.zeros((n, dim))
    pull = np.zeros(n, bool)
    pulled = []
    for e, i in enumerate(sched.worker):
        delta = -lr * quadratic_gradient(A, b, i, points[i])
        ok = sched.delivered[e]
        if ok:
            x = x + delta / n
            if i == slow:
                pull[:] = True
        pulls = pull[i] or not ok
        pull[i] = pull[i] and not pulls
        points[i] = x.copy() if pulls else points[i] + delta
        pulled.append(pulls)
    return x, points, np.array(pulled)


def test_wbsp_equals_a_plain_loop_and_fast_workers_pull_after_the_slow_push():
    prob = sim.problems.random_quadratic(3, 3, seed=5)
    A, b = prob.curvature
    sched = schedules.with_failures(schedules.random_durations([1.0, 1.5, 4.0], num_events=90, seed=3),
                                    probability=0.1, seed=2)
    slow = algos.wbsp_slowest_worker(sched)
    assert slow == 2
    res = sim.run(algos.wbsp(stepsize=0.05, slowest=slow), prob, sched, key=jax.random.key(0))
    x, _, pulled = _loop_wbsp(A, b, sched, lr=0.05, slow=slow)
    assert rel_err(res.params, x) < 1e-12
    per_worker = [pulled[(sched.worker == i) & sched.delivered].mean() for i in range(3)]
    assert per_worker[2] == 1.0 and max(per_worker[:2]) < 0.6  # the slow one always pulls, fast ones rarely


def test_wbsp_by_hand_on_two_workers():
    # worker 0 every 1 s, worker 1 (slow) every 3 s; at t = 3 worker 0 is ordered first, so it
    # does not see the slow push's flag until its next push (docs/theory.md §1's tie rule).
    prob = sim.problems.random_quadratic(2, 1, seed=0)
    A, b = prob.curvature
    sched = schedules.fixed_computation([1.0, 3.0], num_events=5)  # order: 0, 0, 0(t=3), 1(t=3), 0(t=4)
    assert list(sched.worker) == [0, 0, 0, 1, 0]
    res = sim.run(algos.wbsp(stepsize=0.1, slowest=1), prob, sched, key=jax.random.key(0))
    x, points, pulled = _loop_wbsp(A, b, sched, lr=0.1, slow=1)
    assert list(pulled) == [False, False, False, True, True]  # worker 0 pulls on its first push after the slow one
    assert rel_err(res.params, x) < 1e-13


def test_wbsp_with_one_worker_is_sgd_and_refuses_bad_input():
    prob = sim.problems.random_quadratic(1, 3, seed=4)
    A, b = prob.curvature
    res = sim.run(algos.wbsp(stepsize=0.2, slowest=0), prob, schedules.fixed_computation([1.0], num_events=25),
                  key=jax.random.key(0))
    x = np.zeros(3)
    for _ in range(25):
        x = x - 0.2 * quadratic_gradient(A, b, 0, x)
    assert rel_err(res.params, x) < 1e-13
    with pytest.raises(ValueError, match=r"slowest must be a worker index \(0..2\)"):
        sim.run(algos.wbsp(stepsize=0.1, slowest=3), sim.problems.random_quadratic(3, 2),
                schedules.fixed_computation([1.0, 1.0, 2.0], num_events=5), key=jax.random.key(0))


def _loop_gsp(A, b, sched, *, lr, group, P, topology="peer"):
    n, dim = b.shape
    G = group.max() + 1
    X = np.zeros((G, dim))
    glob = np.zeros(dim)
    pending = np.zeros((G, dim))
    pushes = np.zeros(G, int)
    points = np.zeros((n, dim))
    for e, i in enumerate(sched.worker):
        k = group[i]
        if sched.delivered[e]:
            g = quadratic_gradient(A, b, i, points[i])
            X[k] -= lr / n * g
            pending[k] += g
            pushes[k] += 1
            if pushes[k] % P == 0:
                if topology == "peer":
                    for h in range(G):
                        if h != k:
                            X[h] -= lr / n * pending[k]
                else:  # the global server applies the sum; the group takes its model back
                    glob = glob - lr / n * pending[k]
                    X[k] = glob
                pending[k] = 0.0
                pushes[k] = 0
        points[i] = X[k]
    return X, glob


@pytest.mark.parametrize("topology", ["peer", "global_ps"])
def test_gsp_on_stale_synchronous_groups_equals_a_plain_loop(topology):
    prob = sim.problems.random_quadratic(6, 3, seed=11)
    A, b = prob.curvature
    taus = np.array([1.0, 1.2, 3.0, 3.5, 8.0, 9.0])
    group = algos.groups_by_speed(taus, 3)
    np.testing.assert_array_equal(group, [0, 0, 1, 1, 2, 2])
    sched = schedules.with_failures(
        schedules.stale_synchronous(schedules.RandomTiming(taus, seed=4), num_jobs=150, groups=group, bound=1),
        probability=0.1, seed=6)
    assert sched.pull_only.sum() > 5  # some workers did wait for their group
    res = sim.run(algos.gsp(stepsize=0.3, groups=group, forward_every=2, topology=topology), prob, sched,
                  key=jax.random.key(0))
    X, glob = _loop_gsp(A, b, sched, lr=0.3, group=group, P=2, topology=topology)
    assert rel_err(res.state.models, X) < 1e-12
    assert rel_err(res.params, X.mean(axis=0) if topology == "peer" else glob) < 1e-12


def test_gsp_with_one_group_or_immediate_forwarding_is_asgd():
    prob = sim.problems.random_quadratic(4, 3, seed=12)
    sched = schedules.fixed_computation([1.0, 2.0, 3.0, 5.0], num_events=60)
    ref = sim.run(algos.asgd(stepsize=0.1 / 4), prob, sched, key=jax.random.key(0))
    one = sim.run(algos.gsp(stepsize=0.1, groups=[0, 0, 0, 0]), prob, sched, key=jax.random.key(0))
    fwd = sim.run(algos.gsp(stepsize=0.1, groups=[0, 0, 1, 1], forward_every=1), prob, sched, key=jax.random.key(0))
    assert rel_err(one.params, ref.params) < 1e-13
    assert rel_err(fwd.params, ref.params) < 1e-13
    glob_fwd = sim.run(algos.gsp(stepsize=0.1, groups=[0, 0, 1, 1], forward_every=1, topology="global_ps"), prob, sched,
                       key=jax.random.key(0))
    glob_one = sim.run(algos.gsp(stepsize=0.1, groups=[0, 0, 0, 0], forward_every=3, topology="global_ps"), prob, sched,
                       key=jax.random.key(0))
    assert rel_err(glob_fwd.params, ref.params) < 1e-13
    assert rel_err(glob_one.state.models[0], ref.params) < 1e-13  # the global model lags by < 3 pushes
    with pytest.raises(ValueError, match="topology must be one of"):
        algos.gsp(stepsize=0.1, groups=[0, 1], topology="ring")
    with pytest.raises(ValueError, match="groups must use the indices 0..G−1, each at least once"):
        algos.gsp(stepsize=0.1, groups=[0, 2])
