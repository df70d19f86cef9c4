"""The engine against independent references, and its contract (determinism, compilation,
divergence handling, bad input)."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from delaylab import algos, sim
from delaylab.sim import engine, schedules
from delaylab.sim.reference import heap_asgd
from tests.conftest import rel_err


def _quad(n=4, d=3, diagonal=False, seed=0):
    rng = np.random.default_rng(seed)
    b = rng.standard_normal((n, d))
    if diagonal:
        A = rng.uniform(0.5, 2.0, (n, d))
    else:
        M = rng.standard_normal((n, d, d))
        A = np.einsum("nij,nkj->nik", M, M) / d + 0.5 * np.eye(d)
    return A, b


@pytest.mark.parametrize("diagonal", [False, True])
@pytest.mark.parametrize("rule", ["vanilla", "rescaled"])
def test_engine_equals_heap_simulator_fixed(diagonal, rule):
    taus = np.array([1.0, 2.0, 3.0, 7.0])
    A, b = _quad(diagonal=diagonal)
    E = 700
    sched = schedules.fixed_computation(taus, num_events=E)
    gamma = 0.05
    if rule == "vanilla":
        alg, step = algos.asgd(stepsize=gamma), (lambda i, st: gamma)
    else:
        tau_h = len(taus) / np.sum(1 / taus)
        alg, step = algos.rescaled_asgd(stepsize=gamma, taus=taus), (lambda i, st: gamma * taus[i] / tau_h)
    x0 = np.linspace(-1, 1, 3)
    res = sim.run(alg, sim.problems.quadratic(A, b, x0=x0), sched, key=jax.random.key(0))
    dur = np.broadcast_to(taus[:, None], (4, E + 1))
    ref, trace = heap_asgd(A, b, x0, dur, E, step)
    assert [w for _, w in trace] == sched.worker.tolist()
    assert rel_err(res.params, ref) < 1e-10


def test_engine_equals_heap_simulator_random_durations_and_failures():
    taus = np.array([1.0, 1.5, 4.0])
    timing = schedules.RandomTiming(taus, noise="exponential", scale=1.0, seed=2)
    E = 600
    sched = schedules.asynchronous(timing, num_events=E)
    failed = schedules.with_failures(sched, probability=0.2, seed=1)
    # Map lost events to (worker, job number) for the reference.
    job = np.zeros(E, dtype=int)
    seen = np.zeros(3, dtype=int)
    for e, w in enumerate(failed.worker):
        job[e] = seen[w]
        seen[w] += 1
    lost = {(int(failed.worker[e]), int(job[e])) for e in np.flatnonzero(~failed.delivered)}
    assert len(lost) > 50
    A, b = _quad(n=3, d=2)
    res = sim.run(algos.asgd(stepsize=0.1), sim.problems.quadratic(A, b), failed, key=jax.random.key(0))
    ref, _ = heap_asgd(A, b, np.zeros(2), timing.durations(E + 1), E, lambda i, st: 0.1, lost=lost)
    assert rel_err(res.params, ref) < 1e-10
    # Step mass is only counted for delivered arrivals.
    np.testing.assert_allclose(res.worker_stats["stepsize"], 0.1 * failed.arrivals_per_worker())


def test_staleness_seen_by_algorithm_matches_heap():
    """A staleness-dependent step makes the run depend on every event's staleness."""
    taus = np.array([1.0, 2.0, 5.0])
    A, b = _quad(n=3, d=2, diagonal=True)
    E = 300

    def rule(hp, ev):
        return hp["stepsize"] / (1.0 + ev.staleness)

    alg = algos.asgd_with_step_rule("stale", rule, {"stepsize": 0.3})
    res = sim.run(alg, sim.problems.quadratic(A, b), schedules.fixed_computation(taus, num_events=E), key=jax.random.key(0))
    ref, _ = heap_asgd(A, b, np.zeros(2), np.broadcast_to(taus[:, None], (3, E + 1)), E, lambda i, st: 0.3 / (1 + st))
    assert rel_err(res.params, ref) < 1e-10


@pytest.mark.parametrize("taus", [[1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7], [1.0, 10.0, 10.0, 10.0], [1.0, 2.0, 3.0]])
def test_block_engine_equals_event_by_event(taus):
    n = len(taus)
    prob = sim.problems.random_quadratic(n, 5, noise=0.5, seed=1)
    sched = schedules.fixed_computation(taus, num_events=900)
    alg = algos.asgd(stepsize=0.02)
    a = sim.run(alg, prob, sched, key=jax.random.key(3), block_size=n, log_every=50)
    b = sim.run(alg, prob, sched, key=jax.random.key(3), block_size=1, log_every=50)
    assert a.block_size > 1
    assert rel_err(a.params, b.params) < 1e-12
    assert rel_err(a.tail_average, b.tail_average) < 1e-12
    np.testing.assert_allclose(a.metrics["loss"], b.metrics["loss"], rtol=1e-12)


def test_logistic_block_engine_equals_event_by_event():
    prob = sim.problems.synthetic_logistic(6, 40, 4, batch_size=8, seed=0)
    sched = schedules.random_durations(np.arange(1.0, 7.0), num_events=400, seed=0)
    alg = algos.rescaled_asgd(stepsize=0.1, taus=sched.mean_durations)
    a = sim.run(alg, prob, sched, key=jax.random.key(1))
    b = sim.run(alg, prob, sched, key=jax.random.key(1), block_size=1)
    assert rel_err(a.params, b.params) < 1e-12


def test_same_seed_same_bits_different_seed_different():
    prob = sim.problems.random_quadratic(4, 6, noise=1.0, seed=0)
    sched = schedules.fixed_computation([1.0, 2.0, 3.0, 4.0], num_events=400)
    alg = algos.asgd(stepsize=0.05)
    r1 = sim.run(alg, prob, sched, key=jax.random.key(7))
    r2 = sim.run(alg, prob, sched, key=jax.random.key(7))
    r3 = sim.run(alg, prob, sched, key=jax.random.key(8))
    assert np.array_equal(r1.params, r2.params) and np.array_equal(r1.metrics["loss"], r2.metrics["loss"])
    assert not np.allclose(r1.params, r3.params)


def test_sweep_equals_individual_runs_and_no_recompilation():
    prob = sim.problems.random_quadratic(4, 3, noise=0.3, seed=2)
    sched = schedules.fixed_computation([1.0, 2.0, 3.0, 4.0], num_events=300)
    alg = algos.asgd(stepsize=0.05)
    keys = jax.random.split(jax.random.key(0), 3)
    steps = np.array([0.01, 0.05])
    out = sim.sweep(alg, prob, sched, keys=keys, hparams={"stepsize": steps})
    assert out.params.shape == (2, 3, 3)
    for h, g in enumerate(steps):
        for s in range(3):
            single = sim.run(alg, prob, sched, key=keys[s], hparams={"stepsize": g})
            assert rel_err(out.params[h, s], single.params) < 1e-12
    # Only the values change: the compiled sweep and run are reused.
    n = engine.compilations()
    sim.sweep(alg, prob, sched, keys=keys, hparams={"stepsize": np.array([0.2, 0.3])})
    sim.sweep(algos.asgd(stepsize=0.7), prob, sched, keys=jax.random.split(jax.random.key(5), 3),
              hparams={"stepsize": np.array([0.02, 0.04])})
    sim.run(algos.asgd(stepsize=0.123), prob, sched, key=keys[0])
    other = schedules.fixed_computation([2.0, 1.0, 3.0, 4.0], num_events=300)  # same shape, new times
    sim.run(algos.asgd(stepsize=0.123), prob, other, key=keys[0], block_size=1)
    sim.run(algos.asgd(stepsize=0.123), prob, sched, key=keys[0], block_size=1)
    assert engine.compilations() <= n + 1  # block_size=1 is a new shape, once


def test_divergence_is_reported_and_metrics_kept():
    prob = sim.problems.random_quadratic(3, 4, condition=50.0, seed=0)
    sched = schedules.fixed_computation([1.0, 2.0, 3.0], num_events=2000)
    with pytest.warns(RuntimeWarning, match=r"diverged at event \d+ \(worker \d"):
        res = sim.run(algos.asgd(stepsize=1.0), prob, sched, key=jax.random.key(0), log_every=10)
    d = res.divergence
    assert d is not None and 0 < d.event < 2000
    assert d.worker == int(sched.worker[d.event]) and d.time == sched.finish[d.event]
    # Metrics end at the last log point before the bad event; the kept model is the last finite
    # one (its loss may already overflow: F of a finite 1e160 model is not representable).
    assert res.metrics["events"][-1] <= d.event < res.metrics["events"][-1] + 10
    assert len(res.metrics["loss"]) == len(res.metrics["time"]) == d.event // 10 + 1
    assert np.all(np.isfinite(res.metrics["loss"][:3])) and res.metrics["loss"][2] > res.metrics["loss"][0]
    assert np.all(np.isfinite(res.params))
    # A reference run truncated just before the bad event reaches the same model.
    A, b = prob.curvature
    ref, _ = heap_asgd(A, b, np.zeros(4), np.broadcast_to(np.array([1.0, 2.0, 3.0])[:, None], (3, 2001)), d.event,
                       lambda i, st: 1.0)
    assert np.all(np.isfinite(ref))
    np.testing.assert_allclose(res.params, ref, rtol=1e-9)  # elementwise: norms of 1e307 overflow
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ok = sim.run(algos.asgd(stepsize=0.01), prob, sched, key=jax.random.key(0))
    assert ok.divergence is None and int(ok.diverged_at) == -1


def test_sweep_marks_diverged_runs():
    prob = sim.problems.random_quadratic(3, 4, condition=50.0, seed=0)
    sched = schedules.fixed_computation([1.0, 2.0, 3.0], num_events=500)
    with pytest.warns(RuntimeWarning, match="1 of 2 runs diverged"):
        out = sim.sweep(algos.asgd(stepsize=0.01), prob, sched, keys=jax.random.split(jax.random.key(0), 1),
                        hparams={"stepsize": np.array([0.01, 1.0])})
    assert out.diverged_at[0, 0] == -1 and out.diverged_at[1, 0] > 0
    assert np.all(np.isfinite(out.metrics["loss"][0, 0]))
    assert np.isnan(out.metrics["loss"][1, 0, -1])


def test_float32_default_dtype_runs():
    prob = sim.problems.random_quadratic(3, 4, seed=0, dtype=jnp.float32)
    res = sim.run(algos.asgd(stepsize=0.05), prob, schedules.fixed_computation([1.0, 2.0, 3.0], num_events=200),
                  key=jax.random.key(0))
    assert res.params.dtype == np.float32


# --- bad input ------------------------------------------------------------------------------


def test_mismatched_workers():
    prob = sim.problems.random_quadratic(3, 2)
    with pytest.raises(ValueError, match="schedule has 4 workers but the problem has 3"):
        sim.run(algos.asgd(stepsize=0.1), prob, schedules.fixed_computation([1.0] * 4, num_events=5), key=jax.random.key(0))


@pytest.mark.parametrize("gamma", [-0.1, float("nan"), float("inf")])
def test_bad_stepsize(gamma):
    with pytest.raises(ValueError, match=r"asgd: stepsize must be finite and >= 0; got \["):
        algos.asgd(stepsize=gamma)
    prob = sim.problems.random_quadratic(2, 2)
    with pytest.raises(ValueError, match="stepsize must be finite and >= 0"):
        sim.run(algos.asgd(stepsize=0.1), prob, schedules.fixed_computation([1.0, 2.0], num_events=5),
                key=jax.random.key(0), hparams={"stepsize": gamma})


def test_rescaled_taus_must_match_workers():
    prob = sim.problems.random_quadratic(3, 2)
    alg = algos.rescaled_asgd(stepsize=0.1, taus=[1.0, 2.0])
    with pytest.raises(ValueError, match="taus has 2 entries but the problem has 3 workers"):
        sim.run(alg, prob, schedules.fixed_computation([1.0, 2.0, 3.0], num_events=5), key=jax.random.key(0))
    with pytest.raises(ValueError, match=r"taus must be positive and finite; got \[1\., 0\.\]"):
        algos.rescaled_asgd(stepsize=0.1, taus=[1.0, 0.0])


def test_round_algorithm_needs_barrier_schedule():
    prob = sim.problems.random_quadratic(2, 2)
    with pytest.raises(ValueError, match="needs a barrier schedule"):
        sim.run(algos.minibatch_sgd(stepsize=0.1), prob, schedules.fixed_computation([1.0, 2.0], num_events=5),
                key=jax.random.key(0))


def test_bad_key_and_unknown_hparam():
    prob = sim.problems.random_quadratic(2, 2)
    sched = schedules.fixed_computation([1.0, 2.0], num_events=5)
    with pytest.raises(ValueError, match="key must be one key"):
        sim.run(algos.asgd(stepsize=0.1), prob, sched, key=jax.random.split(jax.random.key(0), 2))
    with pytest.raises(ValueError, match=r"unknown hyperparameters \['lr'\]; allowed: \['stepsize'\]"):
        sim.run(algos.asgd(stepsize=0.1), prob, sched, key=jax.random.key(0), hparams={"lr": 0.1})


def test_lax_map_batching_equals_vmap():
    prob = sim.problems.synthetic_least_squares(5, 20, 3, batch_size=4, seed=0)
    sched = schedules.fixed_computation([1.0, 1.2, 1.4, 1.6, 1.8], num_events=300)
    alg = algos.asgd(stepsize=0.1)
    a = sim.run(alg, prob, sched, key=jax.random.key(0), block_size=5, batching="vmap")
    b = sim.run(alg, prob, sched, key=jax.random.key(0), block_size=5, batching="map")
    assert rel_err(a.params, b.params) < 1e-12
    with pytest.raises(ValueError, match="batching must be 'vmap' or 'map'"):
        sim.run(alg, prob, sched, key=jax.random.key(0), batching="pmap")


def test_least_squares_is_the_quadratic_it_claims():
    prob = sim.problems.synthetic_least_squares(3, 10, 4, seed=1)
    A, b = prob.curvature
    x = np.linspace(-1, 1, 4)
    for i in range(3):
        _, g = prob.fns.value_and_grad(prob.data, jnp.asarray(x), i, jax.random.key(0))
        np.testing.assert_allclose(g, A[i] @ (x - b[i]), rtol=1e-9, atol=1e-12)
    from delaylab import theory

    np.testing.assert_allclose(prob.minimiser, theory.quadratic_fixed_point(A, b, np.ones(3)), rtol=1e-9)


def test_random_stream_does_not_depend_on_global_threefry_setting():
    prob = sim.problems.random_quadratic(3, 4, noise=1.0, seed=0)
    sched = schedules.fixed_computation([1.0, 2.0, 3.0], num_events=200)
    alg = algos.asgd(stepsize=0.05)
    outs = []
    for flag in (True, False):
        with jax.threefry_partitionable(flag):
            outs.append(sim.run(alg, prob, sched, key=jax.random.key(4)).params)
    assert np.array_equal(outs[0], outs[1])


def test_tail_average_is_time_weighted_mean_of_the_model():
    """With log_every=1 and record_params the tail average can be recomputed by hand."""
    prob = sim.problems.random_quadratic(2, 2, noise=0.5, seed=0)
    sched = schedules.fixed_computation([1.0, 2.5], num_events=40)
    res = sim.run(algos.asgd(stepsize=0.1), prob, sched, key=jax.random.key(0), log_every=1,
                  record_params=True, average_from=0.3)
    t = sched.finish
    x_after = res.metrics["params"][1:]  # the model after each event
    t0, T = 0.3 * t[-1], t[-1]
    hold = np.clip(np.minimum(np.r_[t[1:], T], T) - np.maximum(t, t0), 0, None)
    expected = (hold[:, None] * x_after).sum(0) / hold.sum()
    assert rel_err(res.tail_average, expected) < 1e-12
    assert res.tail_window == (t0, T)


def test_sweep_runs_one_after_another_gives_the_batched_numbers():


    prob = sim.problems.random_quadratic(4, 3, seed=2, noise=0.5)
    sched = schedules.fixed_computation([1.0, 1.5, 2.0, 3.0], num_events=120)
    keys = jax.random.split(jax.random.key(5), 3)
    hp = {"stepsize": np.array([0.05, 0.1])}
    a = sim.sweep(algos.asgd(stepsize=0.1), prob, sched, keys=keys, hparams=hp, log_every=30)
    b = sim.sweep(algos.asgd(stepsize=0.1), prob, sched, keys=keys, hparams=hp, log_every=30, runs="map")
    np.testing.assert_allclose(b.metrics["loss"], a.metrics["loss"], rtol=1e-12)
    np.testing.assert_allclose(b.params, a.params, rtol=1e-12)
    assert b.params.shape == (2, 3, 3)
    with pytest.raises(ValueError, match="runs must be 'vmap' or 'map'"):
        sim.sweep(algos.asgd(stepsize=0.1), prob, sched, keys=keys, hparams=hp, runs="pmap")


@pytest.mark.parametrize("events,log_every", [(100, 10), (103, 10), (7, 10), (1, 1), (50, 1)])
def test_one_event_per_block_plan_is_the_schedule_in_chunks(events, log_every):
    """The plan the CPU uses (block size 1, laid out without walking the events): chunk c holds
    events c·L … min((c+1)·L, E) − 1 in order, one per block, the rest padding; built here by plain
    loops."""
    from delaylab.sim.blocks import plan_blocks

    sched = schedules.fixed_computation([1.0, 2.0, 3.0], num_events=events)
    chunks = [list(range(c, min(c + log_every, events))) for c in range(0, events, log_every)]
    K = max(len(c) for c in chunks)
    want = np.full((len(chunks), K, 1), -1)
    for c, evs in enumerate(chunks):
        for k, e in enumerate(evs):
            want[c, k, 0] = e
    for size in ("auto", 1):  # "auto" on CPU (no per-block overhead) is size 1
        plan = plan_blocks(sched, log_every=log_every, block_size=size)
        np.testing.assert_array_equal(plan.events, want)
        np.testing.assert_array_equal(plan.chunk_end, [evs[-1] for evs in chunks])
        assert plan.block_size == 1 and plan.mean_fill == 1.0 and plan.events.dtype == np.int32
    with pytest.raises(ValueError, match="block_size must be 'auto' or a positive integer"):
        plan_blocks(sched, log_every=log_every, block_size=0)
