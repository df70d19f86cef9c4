"""Asynchronous dispatch through a server that takes time (sim.schedules.served) against a plain
discrete-event loop written here, and the throughputs theory gives for it (theory.queueing)
against an exact mean value analysis written here and against long simulated runs."""

import heapq
import itertools

import numpy as np
import pytest

from delaylab.sim import schedules as S
from delaylab.theory import queueing as Q


def _event_loop(durations, up, down, service, num_events):
    """The closed network event by event: a heap of (time, kind, worker) where kind orders the
    happenings of one instant (a model reaching a worker, then an update reaching the server, then
    the server finishing); the server takes the earliest-arrived waiting update (ties: lower
    worker), one at a time. ``up``, ``down``: one link time per worker, or per worker and job.
    Returns per application: (worker, job start, compute end, applied, service start)."""
    n = len(durations)
    heap, seq = [], itertools.count()
    job = [0] * n
    started = [0.0] * n
    computed = [0.0] * n
    link = lambda v, i: v[i] if np.ndim(v) == 1 else v[i][job[i]]  # noqa: E731 (one per worker, or per job)
    for i in range(n):
        computed[i] = durations[i][0]
        heapq.heappush(heap, (computed[i] + link(up, i), 1, i, next(seq)))
    queue = []  # (arrival, worker) waiting at the server
    busy_until, out, e = None, [], 0
    while len(out) < num_events:
        t, kind, i, _ = heapq.heappop(heap)
        if kind == 0:  # the new model reached worker i: it starts its next job
            job[i] += 1
            started[i] = t
            computed[i] = t + durations[i][job[i]]
            heapq.heappush(heap, (computed[i] + link(up, i), 1, i, next(seq)))
            continue
        if kind == 1:  # worker i's update reached the server
            queue.append((t, i))
        else:  # the server applied worker i's update
            out.append((i, started[i], computed[i], t, began))
            heapq.heappush(heap, (t + link(down, i), 0, i, next(seq)))
            busy_until = None
        if busy_until is None and queue and e < len(service):  # (no service past the last needed)
            queue.sort()
            a, j = queue.pop(0)
            began = max(a, t)
            busy_until = began + service[e]
            e += 1
            heapq.heappush(heap, (busy_until, 2, j, next(seq)))
    return [np.array(c) for c in zip(*out)]


@pytest.mark.parametrize("case", ["ties", "random", "exponential service"])
def test_served_schedule_is_the_event_loop_event_for_event(case):
    if case == "ties":  # integer times: updates reach the server together, and the server idles
        timing, server = S.FixedTiming([2.0, 2.0, 3.0, 1.0]), S.Server(1.0, uplink=[1.0, 1.0, 0.0, 2.0], downlink=1.0)
    elif case == "random":
        timing = S.RandomTiming([1.0, 2.0, 4.0], noise="lognormal", scale=0.5, seed=3)
        server = S.Server(0.4, uplink=0.05, downlink=[0.1, 0.0, 0.3], kind="lognormal", shape=0.5, seed=4)
    else:
        timing, server = S.RandomTiming([0.5, 1.0, 2.0, 8.0], seed=1), S.Server(0.3, kind="exponential", seed=2)
    num_events = 400
    sched = S.served(timing, server, num_events=num_events)
    up, down = server.links(timing.num_workers)
    w, start, compute, applied, _ = _event_loop(timing.durations(num_events), up, down,
                                             server.service_times(num_events), num_events)
    np.testing.assert_array_equal(sched.worker, w)
    np.testing.assert_array_equal(sched.start, start)
    np.testing.assert_array_equal(sched.compute_finish, compute)
    np.testing.assert_array_equal(sched.finish, applied)
    assert np.all(np.diff(sched.finish) >= 0) and sched.policy == "async"
    # each job starts from the model the server produced from the worker's previous update
    for i in range(timing.num_workers):
        ev = np.flatnonzero(sched.worker == i)
        np.testing.assert_array_equal(sched.version[ev[1:]], ev[:-1] + 1)
    if case == "ties":
        assert np.any(np.diff(sched.finish) == server.service)  # the server worked back to back
        assert len(set(np.round(compute + up[w], 9))) < num_events  # some arrivals coincided


def test_a_server_that_takes_no_time_is_asynchronous_dispatch():
    taus = [1.0, 2.0, 3.0, 5.0]  # integer times: k·τ_i and the running sums agree exactly
    a = S.fixed_computation(taus, num_events=300)
    b = S.served(S.FixedTiming(taus), S.Server(0.0), num_events=300)
    for f in ("worker", "start", "finish", "version"):
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f))


def test_bad_servers_are_refused_naming_the_argument():
    with pytest.raises(ValueError, match="service must be a finite time >= 0"):
        S.Server(-1.0)
    with pytest.raises(ValueError, match="uplink must be a finite time >= 0"):
        S.Server(1.0, uplink=[0.1, -0.2])
    with pytest.raises(ValueError, match="kind must be one of"):
        S.Server(1.0, kind="gamma")
    with pytest.raises(ValueError, match="downlink has 2 entries for 3 workers"):
        S.served(S.FixedTiming([1.0, 2.0, 3.0]), S.Server(1.0, downlink=[0.1, 0.2]), num_events=10)
    with pytest.raises(TypeError, match="sim.schedules.Server"):
        S.served(S.FixedTiming([1.0]), 0.5, num_events=10)
    with pytest.raises(ValueError, match="think must be"):
        Q.throughputs([1.0, 0.0], 0.5)


def _mva(think, service):
    """Exact multi-class MVA over the 2^n subsets of workers (one customer each): an update of
    worker i finds the mean queue of the network without it (arrival theorem)."""
    n = len(think)
    q = {0: 0.0}
    for mask in range(1, 1 << n):
        members = [i for i in range(n) if mask >> i & 1]
        r = {i: service * (1.0 + q[mask ^ (1 << i)]) for i in members}
        q[mask] = sum(r[i] / (think[i] + r[i]) for i in members)
    full = (1 << n) - 1
    return np.array([1.0 / (think[i] + service * (1.0 + q[full ^ (1 << i)])) for i in range(n)])


def test_throughputs_equal_exact_mean_value_analysis_and_the_limits():
    rng = np.random.default_rng(0)
    for n in (1, 2, 5, 9):
        z, s = rng.uniform(0.5, 8.0, n), float(rng.uniform(0.05, 2.0))
        np.testing.assert_allclose(Q.throughputs(z, s), _mva(z, s), rtol=1e-12)
    np.testing.assert_allclose(Q.throughputs([3.0], 0.5), [1 / 3.5], rtol=1e-15)  # one worker: a plain cycle
    np.testing.assert_allclose(Q.throughputs([1.0, 2.0, 4.0], 0.0), [1.0, 0.5, 0.25], rtol=1e-15)  # 1/τ_i
    # a saturated server (think times 0.01–0.1 against a service time of 1, 50 workers): busy all
    # the time, it serves the workers equally often, to within their think times' share of a cycle
    x = Q.throughputs(np.linspace(0.01, 0.1, 50), 1.0)
    assert Q.utilisation(np.linspace(0.01, 0.1, 50), 1.0) == pytest.approx(1.0, abs=1e-9)
    np.testing.assert_allclose(x, 1.0 / 50, rtol=0.1 / 50)
    # 400 workers: no overflow of k! S^k
    assert np.all(np.isfinite(Q.throughputs(np.linspace(1.0, 8.0, 400), 0.02)))
    q = Q.served_weights(1.0, [1.0, 2.0], 0.5)
    np.testing.assert_allclose(q, Q.throughputs([1.0, 2.0], 0.5) / Q.throughputs([1.0, 2.0], 0.5).sum())


def test_simulated_update_rates_match_theory_under_exponential_service():
    """Fixed job times, fixed links, exponential service: product form, so the formula is exact
    and the simulated rates differ from it by sampling error alone (tolerance: 4 standard errors
    of the rate over 40 batches of the run)."""
    taus, up, down, s = np.array([1.0, 2.0, 4.0, 8.0]), 0.1, 0.2, 0.5
    sched = S.served(S.FixedTiming(taus), S.Server(s, uplink=up, downlink=down, kind="exponential", seed=7),
                     num_events=200_000)
    predicted = Q.throughputs(taus + up + down, s)
    batches = np.array_split(np.arange(sched.num_events), 40)
    rates = np.array([np.bincount(sched.worker[b], minlength=4) / (sched.finish[b[-1]] - sched.finish[b[0]])
                      for b in batches])
    measured, se = rates.mean(0), rates.std(0, ddof=1) / np.sqrt(len(batches))
    for i in range(4):
        print(f"worker {i}: predicted {predicted[i]:.5f}, measured {measured[i]:.5f}, tolerance {4 * se[i]:.5f}")
    assert np.all(np.abs(measured - predicted) <= 4 * se)
    # and far from fixed computation's 1/τ_i: the server's time is what moved them
    assert np.all(np.abs(measured - 1 / taus) > 20 * se)


def test_a_fitted_server_model_recovers_the_one_that_made_the_trace():
    """A trace of the form a real run writes (worker, job start and end, service start and end),
    made by the event loop above from a known model whose links vary from update to update
    (exponential around their means) and whose server is busy about half the time: the fit reads
    back the links' means, the job times' means and the service times' mean and log-spread within
    4 standard errors, and its model, simulated, gives the trace's shares of the updates."""
    taus, scale = np.array([1.0, 2.0, 3.0]), np.array([0.5, 0.2, 1.0])
    timing = S.RandomTiming(taus, noise="exponential", scale=scale, seed=5)
    server = S.Server(0.4, kind="lognormal", shape=0.4, seed=6)
    up_mean, down_mean = np.array([0.05, 0.1, 0.2]), np.array([0.02, 0.04, 0.01])
    N = 8000
    rng = np.random.default_rng(7)
    up, down = (m[:, None] * rng.exponential(1.0, (3, N)) for m in (up_mean, down_mean))
    w, start, compute, applied, began = _event_loop(timing.durations(N), up, down, server.service_times(N), N)
    got = S.fit({"worker": w, "start": start, "finish": compute, "applied": began, "served": applied})
    fu, fd = got.server.links(3)
    for i in range(3):
        jobs = np.flatnonzero(w == i).size
        assert abs(fu[i] - up_mean[i]) <= 4 * up_mean[i] / np.sqrt(0.2 * jobs), (i, fu[i])  # ≥ a fifth reached an idle server
        assert abs(fd[i] - down_mean[i]) <= 4 * down_mean[i] / np.sqrt(jobs), (i, fd[i])
        d = (compute - start)[w == i]
        assert abs(got.job_mean[i] - (taus[i] + scale[i])) <= 4 * d.std(ddof=1) / np.sqrt(d.size)
        assert taus[i] <= got.timing.taus[i] <= taus[i] + 0.01 * scale[i]  # the shortest job, just above τ_i
    s = applied - began
    assert abs(got.server.service - 0.4) <= 4 * s.std(ddof=1) / np.sqrt(N)
    assert got.server.kind == "lognormal" and abs(got.server.shape - 0.4) <= 4 * 0.4 / np.sqrt(2 * N)
    np.testing.assert_allclose(got.think(), got.job_mean + fu + fd)
    # a fit that took every update's transit as its uplink (waits included) would be too slow
    assert np.all(fu < np.array([np.mean((began - compute)[w == i]) for i in range(3)]))
    shares = np.bincount(w, minlength=3) / N
    sim = got.schedule(N)
    print("shares: trace", np.round(shares, 4), "fitted model", np.round(sim.arrivals_per_worker() / N, 4))
    np.testing.assert_allclose(sim.arrivals_per_worker() / N, shares, atol=0.01)
    with pytest.raises(ValueError, match="lacks \\['served'\\]"):
        S.fit({"worker": w, "start": start, "finish": compute, "applied": began})


def test_time_varying_speeds_go_through_the_server_too():
    """Under time-varying speeds (a stall of worker 1, worker 2 three times slower for a while) a
    server that takes no time gives asynchronous dispatch's events, whose jobs run back to back;
    with a server that takes time, each job's end is where its work is done from its own start."""
    timing = S.SlowdownTiming(S.FixedTiming([1.0, 2.0, 3.0]), ((1, 2.5, 6.5, np.inf), (2, 4.0, 10.0, 3.0)))
    a = S.asynchronous(timing, num_events=60)
    b = S.served(timing, S.Server(0.0), num_events=60)
    np.testing.assert_array_equal(a.worker, b.worker)
    np.testing.assert_allclose(b.finish, a.finish, rtol=1e-12)
    c = S.served(timing, S.Server(0.25, downlink=0.5), num_events=60)
    for e in range(60):
        i, s = int(c.worker[e]), float(c.start[e])
        work = timing.base.taus[i]
        assert float(timing.work_at(i, c.compute_finish[e]) - timing.work_at(i, s)) == pytest.approx(work, rel=1e-12)
    stalled = (c.worker == 1) & (c.start < 6.5) & (c.compute_finish > 2.5)
    assert stalled.any() and np.all(c.compute_finish[stalled] >= 6.5)  # worker 1's job that met the stall ends after it


def _rounds_loop(durations, up, down, service, num_rounds):
    """Barrier rounds through a server, happening by happening: a heap of (time, kind, worker)
    (a model reaching a worker, then a result reaching the server); the server starts the round's
    application when its n-th result is in. Returns per result, in order of arrival: (worker, job
    start, compute end, the round's model time)."""
    n = len(durations)
    heap, seq, out = [], itertools.count(), []
    for i in range(n):
        heapq.heappush(heap, (0.0, 0, i, next(seq)))
    r, started, computed, arrived = 0, {}, {}, []
    while r < num_rounds:
        t, kind, i, _ = heapq.heappop(heap)
        if kind == 0:  # the round's model reached worker i
            started[i], computed[i] = t, t + durations[i][r]
            heapq.heappush(heap, (computed[i] + up[i], 1, i, next(seq)))
            continue
        arrived.append(i)  # heap order: arrival time, then the lower worker
        if len(arrived) == n:
            done = t + service[r]
            out += [(j, started[j], computed[j], done) for j in arrived]
            for j in range(n):
                heapq.heappush(heap, (done + down[j], 0, j, next(seq)))
            r, arrived = r + 1, []
    return [np.array(c) for c in zip(*out)]


@pytest.mark.parametrize("case", ["ties", "random"])
def test_served_rounds_are_the_event_loop_event_for_event(case):
    if case == "ties":  # integer times: results reach the server together
        timing, server = S.FixedTiming([2.0, 2.0, 3.0, 1.0]), S.Server(1.0, uplink=[1.0, 1.0, 0.0, 2.0], downlink=1.0)
    else:
        timing = S.RandomTiming([1.0, 2.0, 4.0], noise="exponential", scale=0.5, seed=3)
        server = S.Server(0.3, uplink=[0.1, 0.2, 0.05], downlink=[0.2, 0.0, 0.1], kind="lognormal", shape=0.5, seed=4)
    R = 30
    sched = S.served_rounds(timing, server, num_rounds=R)
    up, down = server.links(timing.num_workers)
    w, s, c, f = _rounds_loop(timing.durations(R), up, down, server.service_times(R), R)
    np.testing.assert_array_equal(sched.worker, w)
    np.testing.assert_allclose(sched.start, s, rtol=1e-13)
    np.testing.assert_allclose(sched.compute_finish, c, rtol=1e-13)
    np.testing.assert_allclose(sched.finish, f, rtol=1e-13)
    assert sched.policy == "barrier" and sched.round_end.sum() == R and sched.server is server
    if case == "ties":  # round 0: worker 2 (3 + 0) and worker 3 (1 + 2) arrive at 3 with workers 0, 1 (2 + 1)
        assert sched.worker[:4].tolist() == [0, 1, 2, 3] and sched.finish[0] == 4.0 and sched.start[4] == 5.0


def test_rounds_through_a_server_that_takes_no_time_are_barrier_rounds():
    timing = S.RandomTiming([1.0, 2.0, 3.0], noise="exponential", scale=1.0, seed=1)
    a, b = S.served_rounds(timing, S.Server(0.0), num_rounds=20), S.barrier(timing, num_rounds=20)
    np.testing.assert_array_equal(a.worker, b.worker)
    np.testing.assert_allclose(a.finish[a.round_end], b.finish[b.round_end], rtol=1e-12)
    np.testing.assert_array_equal(a.version, b.version)
