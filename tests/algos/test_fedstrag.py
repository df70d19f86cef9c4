"""FedStrag (algos.fedstrag) and its time-bounded rounds (sim.schedules.time_bounded_rounds)
against a plain tick-by-tick simulation of the protocol, a hand-traced schedule, and FedAvg."""

from collections import deque

import jax
import numpy as np
import pytest

from delaylab import algos, sim
from delaylab.sim import schedules
from delaylab.sim.reference import quadratic_gradient
from tests.conftest import rel_err


def _protocol(A, b, taus, *, poll, rounds, lr, H, weighting, lost=()):
    """FedStrag as the authors' server and client run it, advanced on a clock of integer ticks.

    Server: broadcast (x, tag r), r ← r + 1; every ``poll`` ticks, if a result is queued,
    aggregate all queued results with c_j = 1/(r − r_j + 1) (or 1) and broadcast again. Client:
    works through its broadcasts first in, first out, ``taus[i]`` ticks per job. A result whose
    (worker, arrival tick) is in ``lost`` still fills the queue (the timing is fixed) but adds
    nothing, as :func:`sim.schedules.with_failures` defines it.
    """
    n, d = b.shape
    x = np.zeros(d)
    r, last_broadcast = 0, 0
    models, fifo = [], [deque() for _ in range(n)]
    busy_until, job, queue = [None] * n, [None] * n, []

    def broadcast(t):
        nonlocal r, last_broadcast
        models.append(x.copy())
        for q in fifo:
            q.append(r)
        r, last_broadcast = r + 1, t

    def start_free_clients(t):
        for i in range(n):
            if busy_until[i] is None and fifo[i]:
                tag = fifo[i].popleft()
                z = models[tag].copy()
                for _ in range(H):
                    z = z - lr * quadratic_gradient(A, b, i, z)
                busy_until[i], job[i] = t + taus[i], (tag, z, (i, t + taus[i]) not in lost)

    broadcast(0)
    start_free_clients(0)
    t, done = 0, 0
    while done < rounds:
        t += 1
        for i in range(n):
            if busy_until[i] == t:
                queue.append(job[i])
                busy_until[i] = None
        start_free_clients(t)
        if (t - last_broadcast) % poll == 0 and queue:
            c = np.array([(1.0 / (r - tag + 1) if weighting == "fedstrag" else 1.0) * ok for tag, _, ok in queue])
            if c.sum() > 0:
                x = sum(ci * z for ci, (_, z, _) in zip(c, queue)) / c.sum()
            queue, done = [], done + 1
            if done < rounds:
                broadcast(t)
                start_free_clients(t)
    return x, t


def test_time_bounded_rounds_match_a_hand_trace():
    # Poll every 2 s; clients take 1, 3 and 10 s. Traced by hand: checks close the rounds at
    # 2, 4, 6, 8, 10, 12; client 1 falls a broadcast behind from its second job on.
    s = schedules.time_bounded_rounds(schedules.FixedTiming(np.array([1.0, 3.0, 10.0])), num_rounds=6, poll=2.0)
    table = np.c_[s.worker, s.start, s.finish, s.tag, s.round, s.pull_only, s.staleness, s.round_end]
    want = np.array([
        # worker, start, finish, tag, window, release, staleness, round end
        [0, 0, 1, 0, 1, 0, 0, 1],
        [0, 1, 2, 0, 2, 1, 0, 0],
        [0, 2, 3, 1, 2, 0, 0, 0],
        [1, 0, 3, 0, 2, 0, 2, 1],
        [0, 3, 4, 1, 3, 1, 0, 0],
        [0, 4, 5, 2, 3, 0, 0, 0],
        [1, 3, 6, 1, 3, 0, 3, 1],
        [0, 5, 6, 2, 4, 1, 0, 0],
        [0, 6, 7, 3, 4, 0, 0, 1],
        [0, 7, 8, 3, 5, 1, 0, 0],
        [0, 8, 9, 4, 5, 0, 0, 0],
        [1, 6, 9, 2, 5, 0, 4, 0],
        [2, 0, 10, 0, 5, 0, 8, 1],
        [0, 9, 10, 4, 6, 1, 0, 0],
        [0, 10, 11, 5, 6, 0, 0, 0],
        [1, 9, 12, 3, 6, 0, 5, 1],
    ])
    np.testing.assert_array_equal(table, want)
    assert algos.fedstrag_history(s) == 5  # client 2's first result (tag 0) closes round 5
    assert s.job_number.tolist() == [0, 1, 1, 0, 2, 2, 1, 3, 3, 4, 4, 2, 0, 5, 5, 3]


def test_time_bounded_rounds_refuse_bad_arguments():
    timing = schedules.FixedTiming(np.array([1.0, 2.0]))
    with pytest.raises(ValueError, match="poll must be a finite number of seconds > 0"):
        schedules.time_bounded_rounds(timing, num_rounds=3, poll=0.0)
    with pytest.raises(ValueError, match=r"min_results must be an integer in \[1, 2\]"):
        schedules.time_bounded_rounds(timing, num_rounds=3, min_results=3)


@pytest.mark.parametrize("weighting", ["fedstrag", "equal"])
def test_fedstrag_equals_the_protocol_run_tick_by_tick(weighting):
    prob = sim.problems.random_quadratic(4, 3, seed=5)
    A, b = prob.curvature
    taus, poll, rounds = [1, 2, 5, 9], 2, 14
    lost = {(1, 8), (3, 27)}
    sched = schedules.time_bounded_rounds(schedules.FixedTiming(np.array(taus, float)), num_rounds=rounds, poll=poll)
    sched = schedules.with_failures(sched, intervals=[(w, t, t + 0.5) for w, t in lost])
    assert (~sched.delivered & ~sched.pull_only).sum() == 2
    alg = algos.fedstrag(local_stepsize=0.05, local_steps=3, history=algos.fedstrag_history(sched), weighting=weighting)
    res = sim.run(alg, prob, sched, key=jax.random.key(0))
    ref, end = _protocol(A, b, taus, poll=poll, rounds=rounds, lr=0.05, H=3, weighting=weighting, lost=lost)
    assert sched.end_time == end
    assert algos.fedstrag_history(sched) >= 3  # the slow clients work from old broadcasts
    assert rel_err(res.params, ref) < 1e-12
    assert int(res.state.round) == rounds


def test_fedstrag_with_equal_speeds_is_fedavg():
    # Every client reports before the first check of each round, from the latest broadcast:
    # FedStrag's weights are then all equal and each round is one round of FedAvg.
    prob = sim.problems.random_quadratic(4, 3, seed=6)
    timed = schedules.time_bounded_rounds(schedules.FixedTiming(np.full(4, 3.0)), num_rounds=10, poll=4.0)
    fs = sim.run(algos.fedstrag(local_stepsize=0.1, local_steps=4, history=1), prob, timed, key=jax.random.key(0))
    avg = sim.run(algos.local_sgd(local_stepsize=0.1, local_steps=4), prob, schedules.synchronous(np.full(4, 3.0), num_rounds=10),
                  key=jax.random.key(0))
    assert rel_err(fs.params, avg.params) < 1e-13


def test_fedstrag_refuses_schedules_it_cannot_follow():
    prob = sim.problems.random_quadratic(3, 2, seed=1)
    sched = schedules.time_bounded_rounds(schedules.FixedTiming(np.array([1.0, 3.0, 10.0])), num_rounds=6, poll=2.0)
    with pytest.raises(ValueError, match=r"a client 5 broadcasts behind, but the server keeps 2; pass history="):
        sim.run(algos.fedstrag(local_stepsize=0.1, history=2), prob, sched, key=jax.random.key(0))
    with pytest.raises(ValueError, match="build it with (delaylab.)?sim.schedules.time_bounded_rounds"):
        sim.run(algos.fedstrag(local_stepsize=0.1, history=2), prob, schedules.fixed_computation([1.0, 2.0, 3.0], num_events=9),
                key=jax.random.key(0))
    with pytest.raises(ValueError, match="weighting must be one of"):
        algos.fedstrag(local_stepsize=0.1, history=2, weighting="fedavg")
    with pytest.raises(ValueError, match="history must be an integer >= 1"):
        algos.fedstrag(local_stepsize=0.1, history=0)
