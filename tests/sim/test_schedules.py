import numpy as np
import pytest

from delaylab.sim import schedules
from delaylab.sim.reference import heap_asgd


def test_fixed_clock_is_k_tau():
    taus = np.array([1.0, 2.5, 0.75, 4.0])
    s = schedules.fixed_computation(taus, num_events=500)
    for i, tau in enumerate(taus):
        t = s.finish[s.worker == i]
        k = np.arange(1, t.size + 1)
        np.testing.assert_array_equal(t, k * tau)  # exact closed form, not approximately
        np.testing.assert_array_equal(s.start[s.worker == i], (k - 1) * tau)
    assert np.all(np.diff(s.finish) >= 0)
    # Counts: worker i has floor(T/τ_i) arrivals by the last event time T (up to the tie cut).
    T = s.end_time
    counts = s.arrivals_per_worker()
    assert np.all(np.abs(counts - np.floor(T / taus)) <= 1)


def test_ties_go_to_lower_worker_index():
    s = schedules.fixed_computation([2.0, 1.0, 2.0], num_events=8)
    # t=1: w1; t=2: w0, w1, w2 (tie, by index); t=3: w1; t=4: w0, w1, w2
    assert s.worker.tolist() == [1, 0, 1, 2, 1, 0, 1, 2]
    assert s.finish.tolist() == [1, 2, 2, 2, 3, 4, 4, 4]


def test_versions_and_staleness_by_hand():
    s = schedules.fixed_computation([1.0, 3.0], num_events=6)
    # events: t1 w0, t2 w0, t3 w0, t3 w1, t4 w0, t5 w0
    assert s.worker.tolist() == [0, 0, 0, 1, 0, 0]
    # w1's first job was dispatched at version 0 and arrives after 3 updates: staleness 3.
    # w0's job arriving at t=4 was dispatched at t=3 before w1's t=3 arrival (tie rule): staleness 1.
    assert s.version.tolist() == [0, 1, 2, 0, 3, 5]
    assert s.staleness.tolist() == [0, 0, 0, 3, 1, 0]


def test_event_order_matches_heap_simulation():
    timing = schedules.RandomTiming(np.array([1.0, 2.0, 3.0, 5.0]), noise="lognormal", scale=0.5, seed=3)
    s = schedules.asynchronous(timing, num_events=400)
    dur = timing.durations(400)
    A = np.ones((4, 1))
    _, trace = heap_asgd(A, np.zeros((4, 1)), np.zeros(1), dur, 400, lambda i, st: 0.0)
    assert [w for _, w in trace] == s.worker.tolist()
    np.testing.assert_array_equal([t for t, _ in trace], s.finish)


@pytest.mark.parametrize("noise", schedules.NOISE_KINDS)
def test_random_durations_have_stated_mean(noise):
    taus = np.array([1.0, 4.0])
    timing = schedules.RandomTiming(taus, noise=noise, scale=np.array([0.5, 2.0]), seed=1)
    d = timing.durations(40000)
    assert np.all(d >= taus[:, None])
    np.testing.assert_allclose(d.mean(axis=1), timing.mean_durations, rtol=0.02)


def test_random_schedule_is_reproducible_and_seeded():
    a = schedules.random_durations([1.0, 2.0], num_events=100, seed=5)
    b = schedules.random_durations([1.0, 2.0], num_events=100, seed=5)
    c = schedules.random_durations([1.0, 2.0], num_events=100, seed=6)
    assert a.digest() == b.digest() and a.digest() != c.digest()


def test_barrier_rounds():
    s = schedules.synchronous([1.0, 3.0, 2.0], num_rounds=3)
    assert s.worker.tolist() == [0, 2, 1] * 3
    np.testing.assert_array_equal(s.finish, [1, 2, 3, 4, 5, 6, 7, 8, 9])
    np.testing.assert_array_equal(s.start, [0, 0, 0, 3, 3, 3, 6, 6, 6])
    assert s.version.tolist() == [0, 0, 0, 3, 3, 3, 6, 6, 6]
    assert s.round.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]


def test_failures_by_interval_and_probability():
    s = schedules.fixed_computation([1.0, 2.0], num_events=30)
    f = schedules.with_failures(s, intervals=[(1, 3.0, 7.0)])
    lost = ~f.delivered
    assert set(zip(f.worker[lost].tolist(), f.finish[lost].tolist())) == {(1, 4.0), (1, 6.0)}
    # Versions count delivered arrivals only: worker 0's job dispatched at its t=6 arrival saw
    # w0's six arrivals and w1's at t=2 (w1's t=4 is lost; its t=6 comes after w0's by the tie rule).
    e = np.flatnonzero((f.worker == 0) & (f.finish == 7.0))[0]
    assert f.version[e] == 7
    assert s.version[e] == 8
    g = schedules.with_failures(s, probability=0.3, seed=0)
    big = schedules.with_failures(schedules.fixed_computation([1.0], num_events=20000), probability=0.3, seed=0)
    assert abs(np.mean(~big.delivered) - 0.3) < 0.015
    assert g.worker.tolist() == s.worker.tolist()


def test_trace_replay(tmp_path):
    path = tmp_path / "trace.csv"
    path.write_text("worker,duration\n0,1.0\n1,2.5\n0,1.5\n0,1.0\n1,1.0\n")
    s = schedules.from_trace(path)
    # w0 finishes at 1, 2.5, 3.5; w1 at 2.5, 3.5; cut = min(3.5, 3.5): all 5 events.
    assert s.worker.tolist() == [0, 0, 1, 0, 1]
    np.testing.assert_array_equal(s.finish, [1.0, 2.5, 2.5, 3.5, 3.5])
    assert schedules.from_trace(path, num_events=2).num_events == 2
    with pytest.raises(ValueError, match="exceeds what the trace supports"):
        schedules.from_trace(path, num_events=6)


# --- bad input: each error names the argument, the value and what is allowed ------------------


@pytest.mark.parametrize("taus", [[1.0, 0.0, 2.0], [1.0, -1.0], [1.0, np.inf], [np.nan]])
def test_bad_taus(taus):
    with pytest.raises(ValueError, match="taus must be positive and finite"):
        schedules.fixed_computation(taus, num_events=10)


@pytest.mark.parametrize("num_events", [0, -3, 2.5, None])
def test_zero_events(num_events):
    with pytest.raises(ValueError, match="num_events must be a positive integer"):
        schedules.fixed_computation([1.0], num_events=num_events)


@pytest.mark.parametrize("q", [-0.1, 1.0, 1.5, float("nan")])
def test_bad_failure_probability(q):
    s = schedules.fixed_computation([1.0], num_events=5)
    with pytest.raises(ValueError, match=r"failure probability must be in \[0, 1\)"):
        schedules.with_failures(s, probability=q)


def test_bad_noise_kind():
    with pytest.raises(ValueError, match="noise must be one of"):
        schedules.random_durations([1.0], num_events=5, noise="gamma")


def test_trace_missing_column(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("worker,time\n0,1.0\n")
    with pytest.raises(ValueError, match=r"lacks column\(s\) \['duration'\]"):
        schedules.from_trace(path)


def test_trace_negative_duration(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("worker,duration\n0,1.0\n0,-2\n")
    with pytest.raises(ValueError, match="line 3: duration must be finite and >= 0; got -2.0"):
        schedules.from_trace(path)


def test_trace_with_zero_durations_is_read(tmp_path):
    """An integer-tick trace records 0 for a job shorter than a tick: read, and replayed as
    TraceTiming replays it (the zero-length job arrives when it starts)."""
    path = tmp_path / "ticks.csv"
    path.write_text("worker,duration\n0,0\n1,2\n0,1\n1,0\n0,1\n")
    timing = schedules.read_trace(path)
    np.testing.assert_array_equal(timing.table[0], [0.0, 1.0, 1.0])
    s = schedules.from_trace(path)
    assert np.all(np.diff(s.finish) >= 0) and np.all(s.start <= s.finish)
    assert s.finish[0] == 0.0 and s.worker[0] == 0


@pytest.mark.parametrize("bad", [-1.0, np.nan, np.inf])
def test_trace_timing_refuses_negative_and_non_finite_durations(bad):
    with pytest.raises(ValueError, match=f"worker 1, job 2: duration must be finite and >= 0; got {bad}"):
        schedules.TraceTiming((np.array([1.0, 2.0]), np.array([1.0, 1.0, bad])))


def test_trace_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        schedules.from_trace(tmp_path / "nope.csv")


def test_backup_workers_close_each_round_at_the_nth_result():
    """Hand-computed: τ = (1, 4, 2, 3), N = 2 of 4. Each round closes at its second result, t + 2;
    workers 0 and 2 deliver, 1 and 3 are cancelled at the close."""
    timing = schedules.FixedTiming(np.array([1.0, 4.0, 2.0, 3.0]))
    s = schedules.backup_workers(timing, num_rounds=3, backups=2)
    np.testing.assert_array_equal(s.worker, [0, 2, 1, 3] * 3)
    np.testing.assert_array_equal(s.delivered, [True, True, False, False] * 3)
    np.testing.assert_array_equal(s.finish, [1, 2, 2, 2, 3, 4, 4, 4, 5, 6, 6, 6])
    np.testing.assert_array_equal(s.start, np.repeat([0.0, 2.0, 4.0], 4))
    np.testing.assert_array_equal(s.version, np.repeat([0, 2, 4], 4))
    np.testing.assert_array_equal(s.round, np.repeat([0, 1, 2], 4))
    assert s.policy == "barrier" and s.arrivals_per_worker().tolist() == [3, 0, 3, 0]


def test_backup_workers_with_none_is_the_barrier_and_bad_counts_are_refused():
    timing = schedules.RandomTiming(np.array([1.0, 2.0, 3.0]), noise="exponential", seed=4)
    a = schedules.backup_workers(timing, num_rounds=20, backups=0)
    b = schedules.barrier(timing, num_rounds=20)
    for name in ("worker", "start", "finish", "version", "delivered", "round"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    for bad in (3, -1, 1.5):
        with pytest.raises(ValueError, match=r"backups must be an integer in \[0, n\) = \[0, 3\)"):
            schedules.backup_workers(timing, num_rounds=2, backups=bad)


def test_slowdowns_and_stalls_by_hand():
    """Worker 0 (τ = 1) stalls over [2.5, 4): its third job does half its work, waits, ends at 4.5.
    Worker 1 (τ = 1) runs half as fast over [1, 3): its second job ends at 3."""
    base = schedules.FixedTiming(np.array([1.0, 1.0]))
    slow = schedules.SlowdownTiming(base, ((0, 2.5, 4.0, np.inf), (1, 1.0, 3.0, 2.0)))
    s = schedules.asynchronous(slow, num_events=8)
    f0, f1 = s.finish[s.worker == 0], s.finish[s.worker == 1]
    np.testing.assert_allclose(f0[:4], [1.0, 2.0, 4.5, 5.5])
    np.testing.assert_allclose(f1[:3], [1.0, 3.0, 4.0])
    np.testing.assert_allclose(s.start[s.worker == 0][:4], [0.0, 1.0, 2.0, 4.5])
    assert np.all(np.diff(s.finish) >= 0)
    # barrier rounds wait for the slower worker: round 1 ends at 3 (worker 1's slowdown), so round
    # 2 starts inside worker 0's stall and ends at 5; round 3 ends at 6
    b = schedules.barrier(slow, num_rounds=4)
    np.testing.assert_allclose(b.finish.reshape(4, 2).max(axis=1), [1.0, 3.0, 5.0, 6.0])
    np.testing.assert_allclose(b.finish[b.worker == 1], [1.0, 3.0, 4.0, 6.0])
    np.testing.assert_array_equal(slow.mean_durations, [1.0, 1.0])  # the nominal τ, untouched


def test_no_slowdown_leaves_the_schedule_unchanged_and_bad_intervals_are_refused():
    base = schedules.RandomTiming(np.array([1.0, 2.0, 3.0]), seed=3)
    for policy in (lambda t: schedules.asynchronous(t, num_events=60), lambda t: schedules.barrier(t, num_rounds=10)):
        a, b = policy(base), policy(schedules.SlowdownTiming(base, ()))
        for name in ("worker", "start", "finish", "version"):
            np.testing.assert_allclose(getattr(a, name), getattr(b, name), rtol=1e-15)
    with pytest.raises(ValueError, match="overlap"):
        schedules.SlowdownTiming(base, ((1, 0.0, 2.0, 2.0), (1, 1.0, 3.0, 2.0)))
    with pytest.raises(ValueError, match=r"slowdown worker must be an integer in \[0, 3\)"):
        schedules.SlowdownTiming(base, ((3, 0.0, 2.0, 2.0),))
    with pytest.raises(ValueError, match="factor must be > 0"):
        schedules.SlowdownTiming(base, ((0, 0.0, 2.0, 0.0),))
    with pytest.raises(ValueError, match="0 <= t0 < t1"):
        schedules.SlowdownTiming(base, ((0, 2.0, 1.0, 2.0),))


def test_hierarchical_schedule_by_hand():
    """n = 4, τ = (1, 1, 1, 3), pairs average every 2 steps, all 4 every 4 (the first call, step
    0, is a global average, as in PyTorch). Worker 3 holds back everyone at steps 0 and 4 and only
    its partner 2 at step 2."""
    s = schedules.hierarchical(schedules.FixedTiming(np.array([1.0, 1.0, 1.0, 3.0])), num_steps=5,
                               levels={2: 2, 4: 4})
    own = np.zeros((5, 4))
    begin = np.zeros((5, 4))
    for e in range(s.num_events):
        own[s.round[e], s.worker[e]] = s.compute_finish[e]
        begin[s.round[e], s.worker[e]] = s.start[e]
    np.testing.assert_allclose(own, [[1, 1, 1, 3], [4, 4, 4, 6], [5, 5, 5, 9], [6, 6, 10, 12], [7, 7, 11, 15]])
    np.testing.assert_allclose(begin[1:], [[3, 3, 3, 3], [4, 4, 4, 6], [5, 5, 9, 9], [6, 6, 10, 12]])
    np.testing.assert_allclose(s.finish.reshape(5, 4)[:, 0], own.max(axis=1))
    # with a warm-up of 2 steps, step 1 is global too
    w = schedules.hierarchical(schedules.FixedTiming(np.array([1.0, 1.0, 1.0, 3.0])), num_steps=3,
                               levels={2: 2, 4: 4}, warmup=2, comm_time=0.5)
    np.testing.assert_allclose(w.start[w.round == 2], 7.0)  # 3.5 + 3 (worker 3's step) + 0.5


def test_hierarchical_levels_are_checked():
    t = schedules.FixedTiming(np.ones(4))
    for bad, msg in (({2: 3, 4: 4}, "each dividing the next"), ({2: 2}, "hold all 4 workers"),
                     ({}, "at least one"), ({0: 4}, ">= 1"), ("x", "dict")):
        with pytest.raises(ValueError, match=msg):
            schedules.hierarchical(t, num_steps=3, levels=bad)


def _cost_revealing_problem(costs, batch):
    """A problem whose gradient is the total cost of the examples the job drew, put at the
    worker's coordinate: ASGD with step 1 then accumulates −Σ cost per worker."""
    import jax.numpy as jnp

    from delaylab.sim.problems import Problem, ProblemFns, worker_batch

    n = costs.shape[0]

    def value_and_grad(data, x, worker, key):
        c, _ = worker_batch(data, "X", "y", worker, key, batch)
        return jnp.sum(c), jnp.zeros_like(x).at[worker].set(jnp.sum(c))

    data = {"X": jnp.asarray(costs), "y": jnp.zeros(costs.shape)}
    return Problem("cost probe", n, ProblemFns(value_and_grad, lambda d, x: jnp.zeros(n)), data, jnp.zeros(n))


@pytest.mark.parametrize("dispatch", ["async", "barrier", "backup", "ssp"])
def test_example_cost_durations_are_the_cost_of_the_examples_the_run_draws(dispatch):
    import jax

    from delaylab import algos, sim

    rng = np.random.default_rng(0)
    costs = rng.integers(1, 50, size=(3, 37)).astype(float)  # e.g. sequence lengths
    key = jax.random.key(11)
    timing = schedules.ExampleCostTiming(costs, batch_size=4, key=key, time_per_cost=[0.01, 0.02, 0.05], overhead=0.1)
    np.testing.assert_allclose(timing.mean_durations, 0.1 + np.array([0.01, 0.02, 0.05]) * 4 * costs.mean(axis=1))
    if dispatch == "async":
        sched = schedules.asynchronous(timing, num_events=60)
    elif dispatch == "barrier":
        sched = schedules.barrier(timing, num_rounds=20)
    elif dispatch == "backup":
        sched = schedules.backup_workers(timing, num_rounds=20, backups=1)
    else:  # releases at the staleness bound are events but not jobs
        sched = schedules.stale_synchronous(timing, num_jobs=60, groups=[0, 0, 0], bound=1)
        assert sched.pull_only.any()
    assert sched.job_key is not None
    prob = _cost_revealing_problem(costs, 4)
    res = sim.run(algos.asgd(stepsize=1.0), prob, sched, key=key)
    # what each worker's delivered jobs cost, from the schedule's durations ...
    dur = sched.compute_finish - sched.start if sched.compute_finish is not None else sched.durations
    rate, over = np.array([0.01, 0.02, 0.05]), 0.1
    if dispatch == "backup":  # cancelled jobs end at the close, not at their own finish: use the table
        table = timing.durations(20)
        dur = table[sched.worker, sched.job_number]
    from_schedule = np.array([np.sum((dur[(sched.worker == i) & sched.delivered] - over) / rate[i]) for i in range(3)])
    # ... equals the cost of the examples the engine's jobs drew
    np.testing.assert_allclose(-res.params, from_schedule, rtol=1e-12)
    with pytest.raises(ValueError, match="run it with that key"):
        sim.run(algos.asgd(stepsize=1.0), prob, sched, key=jax.random.key(12))
    with pytest.raises(ValueError, match="one schedule per seed"):
        sim.sweep(algos.asgd(stepsize=1.0), prob, sched, keys=jax.random.split(key, 2))


def test_example_cost_timing_refuses_bad_input():
    import jax

    with pytest.raises(ValueError, match=r"costs must be \[n, m\]"):
        schedules.ExampleCostTiming(np.ones(5), batch_size=2, key=jax.random.key(0))
    with pytest.raises(ValueError, match="must be a PRNG key"):
        schedules.ExampleCostTiming(np.ones((2, 5)), batch_size=2, key=0)
    with pytest.raises(ValueError, match="mean duration must be > 0"):
        schedules.ExampleCostTiming(np.zeros((2, 5)), batch_size=2, key=jax.random.key(0))


def test_stale_synchronous_by_hand_and_without_a_bound_is_asynchronous():
    # one group, τ = (1, 3), bound 1: worker 0 reports at 1, 2 (then waits: 2 > 0 + 1), is released
    # when worker 1 reports at 3, reports at 4 (waits: 3 > 1 + 1), is released at 6, ...
    s = schedules.stale_synchronous(schedules.FixedTiming(np.array([1.0, 3.0])), num_jobs=6, groups=[0, 0], bound=1)
    np.testing.assert_array_equal(s.worker, [0, 0, 1, 0, 0, 1, 0, 0])
    np.testing.assert_allclose(s.finish, [1, 2, 3, 3, 4, 6, 6, 7])
    np.testing.assert_allclose(s.start, [0, 1, 0, 2, 3, 3, 4, 6])
    np.testing.assert_array_equal(s.pull_only, [0, 0, 0, 1, 0, 0, 1, 0])
    np.testing.assert_array_equal(s.delivered, ~s.pull_only)
    np.testing.assert_array_equal(s.job_number, [0, 1, 0, 2, 2, 1, 3, 3])  # a release is not a job
    # the job after a release starts at the release: it saw the report that released it
    assert s.version[4] == 3 and s.staleness[4] == 0
    free = schedules.stale_synchronous(schedules.FixedTiming(np.array([1.0, 3.0, 2.0])), num_jobs=20,
                                       groups=[0, 0, 1], bound=None)
    ref = schedules.fixed_computation([1.0, 3.0, 2.0], num_events=20)
    np.testing.assert_array_equal(free.worker, ref.worker)
    np.testing.assert_allclose(free.finish, ref.finish)
    assert not free.pull_only.any()
    # separate groups do not wait for each other: the fast group never waits for worker 1
    two = schedules.stale_synchronous(schedules.FixedTiming(np.array([1.0, 5.0, 1.0, 1.0])), num_jobs=12,
                                      groups=[0, 0, 1, 1], bound=1)
    assert two.pull_only[two.worker == 0].any() and not two.pull_only[two.worker >= 2].any()
    with pytest.raises(ValueError, match="bound must be an integer >= 0 or None"):
        schedules.stale_synchronous(schedules.FixedTiming(np.ones(2)), num_jobs=3, groups=[0, 0], bound=-1)


def test_outages_lose_the_hand_computed_jobs():
    """Given blocks, the lost arrivals by (worker, finish time), computed by hand: worker 0 (one
    job per time unit) loses its jobs 5..11, finishing at 6..12; worker 1 (two units per job) its
    jobs 3..8, finishing at 8, 10, ..., 18; worker 1's block past its last job loses nothing more."""
    s = schedules.fixed_computation([1.0, 2.0], num_events=90)  # worker 0: 60 jobs to t = 60; worker 1: 30
    out = schedules.with_outages(s, blocks=[(0, 5, 12), (1, 3, 9), (1, 40, 45)])
    lost = {(int(w), float(t)) for w, t, d in zip(out.worker, out.finish, out.delivered) if not d}
    assert lost == {(0, float(t)) for t in range(6, 13)} | {(1, float(t)) for t in range(8, 19, 2)}
    np.testing.assert_array_equal(out.finish, s.finish)  # the timing is unchanged
    np.testing.assert_array_equal(out.worker, s.worker)


def test_drawn_outages_are_separate_blocks_covering_the_fraction():
    s = schedules.fixed_computation([1.0, 1.0, 1.5, 3.0], num_events=400)
    jobs = np.bincount(s.worker, minlength=4)
    blocks = schedules.outage_blocks(jobs, fraction=1 / 3, lengths=(5, 20), seed=3)
    assert blocks == schedules.outage_blocks(jobs, fraction=1 / 3, lengths=(5, 20), seed=3)  # the seed fixes them
    assert blocks != schedules.outage_blocks(jobs, fraction=1 / 3, lengths=(5, 20), seed=4)
    out = schedules.with_outages(s, fraction=1 / 3, lengths=(5, 20), seed=3)
    for w in range(4):
        mine = sorted((a, b) for i, a, b in blocks if i == w)
        assert all(5 <= b - a <= 20 for a, b in mine)
        assert all(b1 < a2 for (_, b1), (a2, _) in zip(mine, mine[1:]))  # a delivered job between two outages
        assert sum(b - a for a, b in mine) == round(jobs[w] / 3)
        lost = ~out.delivered[out.worker == w]  # the worker's jobs in order: the blocks, exactly
        expect = np.zeros(jobs[w], bool)
        for a, b in mine:
            expect[a:b] = True
        np.testing.assert_array_equal(lost, expect)
    with pytest.raises(ValueError, match="outage fraction must be in"):
        schedules.outage_blocks(jobs, fraction=1.0)
    with pytest.raises(ValueError, match="outage lengths"):
        schedules.outage_blocks(jobs, lengths=(0, 3))
    with pytest.raises(ValueError, match="do not fit"):
        schedules.outage_blocks([30], fraction=0.9, lengths=(5, 5))


def test_head_is_the_run_stopped_after_k_events():
    """A run on a schedule's head is the full run's first k events, bit for bit (here GSP on a
    stale-synchronous schedule, whose release events make its length vary with the draws); a
    head of a round-based schedule must end a round."""
    import jax

    from delaylab import algos, sim

    taus = np.array([1.0, 1.0, 1.3, 2.0])
    groups = algos.groups_by_speed(taus, 2)
    full = schedules.stale_synchronous(schedules.RandomTiming(taus, noise="exponential", scale=0.2, seed=3),
                                       num_jobs=60, groups=groups, bound=1)
    assert full.pull_only.any()
    k = 40
    head = full.head(k)
    assert head.num_events == k and head.end_time == full.finish[k - 1]
    np.testing.assert_array_equal(head.pull_only, full.pull_only[:k])
    prob = sim.problems.random_quadratic(4, 3, seed=0, noise=0.1)
    alg = algos.gsp(stepsize=0.05, groups=groups, forward_every=2)
    key = jax.random.key(7)
    a = sim.run(alg, prob, full, key=key, log_every=20)
    b = sim.run(alg, prob, head, key=key, log_every=20)
    assert b.metrics["loss"].size == 3  # at events 0, 20 and 40
    np.testing.assert_array_equal(b.metrics["loss"], a.metrics["loss"][:3])
    barrier = schedules.barrier(schedules.FixedTiming(taus), num_rounds=3)
    assert barrier.head(8).num_events == 8  # two whole rounds of 4
    with pytest.raises(ValueError, match="cuts server round 1 in two"):
        barrier.head(6)
    with pytest.raises(ValueError, match="at most"):
        barrier.head(13)


def _every_worker_reference(dur: np.ndarray, rounds: int) -> list:
    """Malenia's "stop" rounds, plainly: every worker starts at the round's start; a heap of
    (finish, worker, start) pops arrivals, each worker restarting at once, until every worker has
    one; the jobs left in the heap are cancelled at that arrival, in worker order. Also returns
    how many cancelled jobs would have ended at the close itself (ties with the closer)."""
    import heapq

    n = dur.shape[0]
    used = [0] * n
    events, t, ties = [], 0.0, 0
    for _ in range(rounds):
        heap = []
        for i in range(n):
            heapq.heappush(heap, (t + dur[i, used[i]], i, t))
            used[i] += 1
        seen = set()
        while len(seen) < n:
            f, i, s = heapq.heappop(heap)
            events.append((i, s, f, False))
            seen.add(i)
            if len(seen) < n:
                heapq.heappush(heap, (f + dur[i, used[i]], i, f))
                used[i] += 1
        events += [(j, s, f, True) for _, j, s in sorted(heap, key=lambda e: e[1])]
        ties += sum(g == f for g, _, _ in heap)
        t = f
    return events, ties


@pytest.mark.parametrize("kind", ["random", "integer trace"])
def test_every_worker_rounds_match_a_heap_loop(kind):
    """Event for event against the plain loop over the same durations; the integer trace has
    ties, also at the closes."""
    if kind == "random":
        timing = schedules.RandomTiming(np.array([1.0, 1.5, 2.0, 4.0, 7.0]), noise="exponential", seed=9)
        dur = timing.durations(400)
    else:
        table = np.random.default_rng(1).integers(1, 6, size=(5, 400)).astype(float)
        timing, dur = schedules.TraceTiming(tuple(table)), table
    rounds = 30
    s = schedules.every_worker_rounds(timing, num_rounds=rounds)
    ref, ties = _every_worker_reference(dur, rounds)
    assert s.worker.tolist() == [e[0] for e in ref]
    np.testing.assert_array_equal(s.start, [e[1] for e in ref])
    np.testing.assert_array_equal(s.finish, [e[2] for e in ref])
    np.testing.assert_array_equal(s.pull_only, [e[3] for e in ref])
    np.testing.assert_array_equal(s.delivered, ~s.pull_only)
    assert s.policy == "async" and int(s.pull_only.sum()) == 4 * rounds  # n − 1 cancelled per round
    if kind == "integer trace":
        assert ties > 0  # jobs ending with the close, after the closer in worker order, were cancelled


def test_every_worker_rounds_by_hand():
    """Fixed τ = (1, 1.75, 2.25, 4.125): every round lasts τ_max = 4.125 (the slowest worker's one
    job); worker i delivers ⌊τ_max/τ_i⌋ = 4, 2, 1, 1 results and the jobs of workers 0, 1, 2 then in
    flight are cancelled at the close; versions count the delivered results."""
    s = schedules.every_worker_rounds(schedules.FixedTiming(np.array([1.0, 1.75, 2.25, 4.125])), num_rounds=3)
    one = [0, 1, 0, 2, 0, 1, 0, 3, 0, 1, 2]
    assert s.worker.tolist() == one * 3
    np.testing.assert_array_equal(s.finish[:11], [1, 1.75, 2, 2.25, 3, 3.5, 4, 4.125, 4.125, 4.125, 4.125])
    np.testing.assert_array_equal(s.start[:11], [0, 0, 1, 0, 2, 1.75, 3, 0, 4, 3.5, 2.25])
    np.testing.assert_array_equal(s.finish[11:22], s.finish[:11] + 4.125)
    np.testing.assert_array_equal(s.pull_only, ([False] * 8 + [True] * 3) * 3)
    assert s.end_time == 3 * 4.125
    assert s.version[:11].tolist() == [0, 0, 1, 0, 3, 2, 5, 0, 7, 6, 4]
    np.testing.assert_array_equal(s.version[11:22], s.version[:11] + 8)  # round 2 starts from the 8 delivered
    np.testing.assert_array_equal(s.arrivals_per_worker(), [12, 6, 3, 3])


def test_every_worker_rounds_refuse_durations_drawn_from_examples():
    import jax

    timing = schedules.ExampleCostTiming(np.ones((2, 8)), batch_size=2, key=jax.random.key(0))
    with pytest.raises(ValueError, match="cannot be cancelled consistently"):
        schedules.every_worker_rounds(timing, num_rounds=2)
    with pytest.raises(ValueError, match="num_rounds must be a positive integer"):
        schedules.every_worker_rounds(schedules.FixedTiming(np.ones(2)), num_rounds=0)
