"""The server-side correction combinator (algos.server_correction) against plain loops of the
papers' algorithm boxes: DC-ASGD and DC-ASGD-a (Zheng et al. 2017) as notebook 04's plugin writes
them, and clipping carried to other families."""

import heapq
import importlib.util
import os

import jax
import numpy as np
import pytest

from delaylab import algos, sim
from delaylab.sim import engine, schedules
from tests.conftest import rel_err

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _plugin():
    spec = importlib.util.spec_from_file_location("dc_asgd_under_test", os.path.join(ROOT, "notebooks", "dc_asgd.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


DC = _plugin()


def _quad(n, d, seed):
    rng = np.random.default_rng(seed)
    M = rng.standard_normal((n, d, d))
    A = np.einsum("nij,nkj->nik", M, M) / d + 0.5 * np.eye(d)
    return A, rng.standard_normal((n, d))


def _dc_box(A, b, x0, durations, num_events, eta, lam, *, lost=(), adaptive=None):
    """DC-ASGD's parameter server, one arrival at a time from a heap of pending jobs: on g from
    worker m (computed at w_bak(m)), w ← w − η (g + λ g⊙g⊙(w − w_bak(m))), then w_bak(m) ← w and
    worker m starts again at w. DC-ASGD-a (``adaptive = (β, ε)``): first MS(m) ← β MS(m) + (1 − β)
    g⊙g, then λ = λ₀/√(MS(m) + ε). A lost result changes nothing; the worker restarts at w."""
    n, d = b.shape
    w = np.array(x0, dtype=np.float64)
    backup = [w.copy() for _ in range(n)]
    mean_square = [np.zeros(d) for _ in range(n)]
    heap = [(float(durations[i, 0]), i, 0) for i in range(n)]
    heapq.heapify(heap)
    for _ in range(num_events):
        t, m, k = heapq.heappop(heap)
        if (m, k) not in lost:
            g = A[m] @ (backup[m] - b[m])
            if adaptive is None:
                lam_t = lam
            else:
                beta, eps = adaptive
                mean_square[m] = beta * mean_square[m] + (1 - beta) * g * g
                lam_t = lam / np.sqrt(mean_square[m] + eps)
            w = w - eta * (g + lam_t * g * g * (w - backup[m]))
        backup[m] = w.copy()
        heapq.heappush(heap, (t + float(durations[m, k + 1]), m, k + 1))
    return w


def _failed_schedule(n, events):
    timing = schedules.RandomTiming(np.array([1.0, 1.7, 3.0, 5.0])[:n], noise="exponential", scale=1.0, seed=4)
    sched = schedules.with_failures(schedules.asynchronous(timing, num_events=events), probability=0.15, seed=2)
    job, seen = np.zeros(events, int), np.zeros(n, int)
    for e, w in enumerate(sched.worker):
        job[e], seen[w] = seen[w], seen[w] + 1
    lost = {(int(sched.worker[e]), int(job[e])) for e in np.flatnonzero(~sched.delivered)}
    return sched, timing.durations(events + 1), lost


@pytest.mark.parametrize("adaptive", [False, True])
def test_dc_asgd_equals_the_papers_box(adaptive):
    n, d, E = 4, 3, 800
    A, b = _quad(n, d, seed=1)
    x0 = np.linspace(-1.0, 2.0, d)
    sched, durations, lost = _failed_schedule(n, E)
    assert len(lost) > 50
    if adaptive:
        alg = DC.dc_asgd_a(0.03, 0.05, dc_decay=0.9, dc_eps=1e-7)
        ref = _dc_box(A, b, x0, durations, E, 0.03, 0.05, lost=lost, adaptive=(0.9, 1e-7))
    else:
        alg = DC.dc_asgd(0.03, 0.5)
        ref = _dc_box(A, b, x0, durations, E, 0.03, 0.5, lost=lost)
    res = sim.run(alg, sim.problems.quadratic(A, b, x0=x0), sched, key=jax.random.key(0))
    plain = _dc_box(A, b, x0, durations, E, 0.03, 0.0, lost=lost)
    assert rel_err(ref, plain) > 1e-4  # the correction moves the run: the comparison can fail
    assert rel_err(res.params, ref) < 1e-12


def test_zero_correction_is_the_wrapped_method_bit_for_bit():
    A, b = _quad(4, 3, seed=2)
    problem = sim.problems.quadratic(A, b, noise=0.3)
    sched = schedules.fixed_computation(np.array([1.0, 2.0, 3.0, 5.0]), num_events=500)
    key = jax.random.key(3)
    got = sim.run(DC.dc_asgd(0.05, 0.0), problem, sched, key=key)
    want = sim.run(algos.asgd(stepsize=0.05), problem, sched, key=key)
    np.testing.assert_array_equal(np.asarray(got.params), np.asarray(want.params))
    np.testing.assert_array_equal(got.worker_stats["stepsize"], want.worker_stats["stepsize"])


def test_a_sweep_over_lambda_and_steps_is_one_program():
    A, b = _quad(4, 3, seed=3)
    problem = sim.problems.quadratic(A, b, noise=0.2)
    sched = schedules.fixed_computation(np.array([1.0, 2.0, 3.0, 5.0]), num_events=300)
    keys = jax.random.split(jax.random.key(0), 3)
    grid = {"dc_lambda": np.array([0.0, 0.2, 0.5, 0.5]), "stepsize": np.array([0.02, 0.02, 0.02, 0.04])}
    res = sim.sweep(DC.dc_asgd(0.02, 0.1), problem, sched, keys=keys, hparams=grid)
    before = engine.compilations()
    sim.sweep(DC.dc_asgd(0.03, 0.7), problem, sched, keys=keys, hparams=grid)
    assert engine.compilations() == before  # new default values: no new program
    one = sim.run(DC.dc_asgd(0.04, 0.5), problem, sched, key=keys[1])
    assert rel_err(res.params[3, 1], one.params) < 1e-12


def _clip(g, c):
    norm = np.linalg.norm(g)
    return g * min(1.0, c / norm) if norm > 0 else g


def test_clipping_carries_to_a_round_method():
    """Minibatch SGD with every worker's gradient clipped before the round's mean, against a loop."""
    A, b = _quad(3, 2, seed=5)
    x0 = np.array([3.0, -2.0])
    sched = schedules.barrier(schedules.FixedTiming(np.array([1.0, 2.0, 4.0])), num_rounds=40)
    res = sim.run(algos.clipped(algos.minibatch_sgd(stepsize=0.1), threshold=0.7),
                  sim.problems.quadratic(A, b, x0=x0), sched, key=jax.random.key(0))
    x = x0.copy()
    for _ in range(40):
        x = x - 0.1 * np.mean([_clip(A[i] @ (x - b[i]), 0.7) for i in range(3)], axis=0)
    assert rel_err(res.params, x) < 1e-12
    unclipped = x0.copy()
    for _ in range(40):
        unclipped = unclipped - 0.1 * np.mean([A[i] @ (unclipped - b[i]) for i in range(3)], axis=0)
    assert rel_err(x, unclipped) > 1e-3  # the threshold is active


def test_clipped_asgd_is_the_combinator_on_asgd():
    A, b = _quad(4, 3, seed=6)
    problem = sim.problems.quadratic(A, b, noise=0.5, x0=np.full(3, 4.0))
    sched = schedules.fixed_computation(np.array([1.0, 2.0, 3.0, 5.0]), num_events=400)
    got = sim.run(algos.clipped(algos.asgd(stepsize=0.05), threshold=0.5), problem, sched, key=jax.random.key(1))
    want = sim.run(algos.clipped_asgd(stepsize=0.05, threshold=0.5), problem, sched, key=jax.random.key(1))
    np.testing.assert_array_equal(np.asarray(got.params), np.asarray(want.params))


def test_bad_corrections_are_refused_before_compiling():
    with pytest.raises(ValueError, match="already asgd's"):
        algos.server_correction(algos.asgd(stepsize=0.1), algos.Correction(DC.delay_compensation),
                                hparams={"stepsize": 0.2})
    with pytest.raises(TypeError, match="delaylab.algos.Correction"):
        algos.server_correction(algos.asgd(stepsize=0.1), DC.delay_compensation)
    with pytest.raises(ValueError, match="clipped_asgd: threshold must be positive"):
        algos.clipped(algos.asgd(stepsize=0.1), threshold=-1.0)


def _count(hparams, memory, message, start, now, event):
    return message, memory + 1


@pytest.mark.parametrize("kind", ["arrivals", "rounds"])
def test_a_correction_keeps_one_memory_per_worker(kind):
    """A correction that counts its calls: each worker's memory ends at its delivered arrivals,
    under failures (one arrival at a time) and in barrier rounds."""
    A, b = _quad(3, 2, seed=7)
    problem = sim.problems.quadratic(A, b)
    counting = algos.Correction(_count, init=lambda h, p: jax.numpy.zeros((), jax.numpy.int32), sees_start=False)
    if kind == "arrivals":
        sched = schedules.with_failures(schedules.fixed_computation(np.array([1.0, 2.0, 3.5]), num_events=300),
                                        probability=0.2, seed=3)
        alg = algos.server_correction(algos.asgd(stepsize=0.05), counting, name="counted")
    else:
        sched = schedules.barrier(schedules.FixedTiming(np.array([1.0, 2.0, 3.5])), num_rounds=25)
        alg = algos.server_correction(algos.minibatch_sgd(stepsize=0.05), counting, name="counted")
    res = sim.run(alg, problem, sched, key=jax.random.key(0))
    np.testing.assert_array_equal(np.asarray(res.state.memory), sched.arrivals_per_worker())
    assert int(np.sum(~sched.delivered)) > 0 or kind == "rounds"
