"""Periodic local-update methods (algos.periodic: local SGD, PALSGD, EDiT, FedShift) against
plain NumPy loops, hand values and their degenerate cases."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from delaylab import algos, sim
from delaylab.algos import periodic
from delaylab.sim import schedules
from delaylab.sim.problems import Problem, ProblemFns
from delaylab.sim.reference import quadratic_gradient
from tests.conftest import rel_err


def _nesterov(x, m, delta, lr, beta):
    m = beta * m + delta
    return x - lr * (delta + beta * m), m


def _loop_local(A, b, sched, *, H, lr, outer_lr, beta, x0=None):
    """Synchronous local SGD with an outer Nesterov step, round by round (H: one per worker)."""
    n, dim = b.shape
    x = np.zeros(dim) if x0 is None else x0.copy()
    m = np.zeros(dim)
    for r in np.unique(sched.round):
        ev = np.flatnonzero(sched.round == r)
        deltas = []
        for e in ev:
            i = sched.worker[e]
            y = x.copy()
            for _ in range(H[i]):
                y = y - lr * quadratic_gradient(A, b, i, y)
            if sched.delivered[e]:
                deltas.append(x - y)
        if deltas:
            x, m = _nesterov(x, m, np.mean(deltas, axis=0), outer_lr, beta)
    return x


def test_local_sgd_equals_a_loop_with_per_worker_steps_and_failures():
    prob = sim.problems.random_quadratic(3, 3, seed=2)
    A, b = prob.curvature
    H = np.array([4, 2, 1], np.int32)
    sched = schedules.with_failures(schedules.barrier(schedules.FixedTiming(H * np.array([1.0, 2.0, 4.0])),
                                                      num_rounds=12), probability=0.2, seed=3)
    alg = algos.local_sgd(stepsize=0.7, local_stepsize=0.05, local_steps=H, momentum=0.8)
    res = sim.run(alg, prob, sched, key=jax.random.key(0))
    assert rel_err(res.params, _loop_local(A, b, sched, H=H, lr=0.05, outer_lr=0.7, beta=0.8)) < 1e-12


def test_local_sgd_with_one_step_and_plain_averaging_is_minibatch_sgd():
    prob = sim.problems.random_quadratic(4, 3, seed=1)  # noiseless: the two draw minibatches differently
    sched = schedules.synchronous([1.0, 2.0, 3.0, 4.0], num_rounds=15)
    loc = sim.run(algos.local_sgd(local_stepsize=0.1), prob, sched, key=jax.random.key(3))
    mb = sim.run(algos.minibatch_sgd(stepsize=0.1), prob, sched, key=jax.random.key(3))
    assert rel_err(loc.params, mb.params) < 1e-13


def test_palsgd_without_pseudo_steps_is_local_sgd():
    prob = sim.problems.random_quadratic(3, 4, seed=2, noise=0.5)
    sched = schedules.synchronous([1.0, 2.0, 3.0], num_rounds=8)
    kw = dict(stepsize=0.6, local_stepsize=0.05, local_steps=3, momentum=0.5)
    p0 = sim.run(algos.palsgd(probability=0.0, **kw), prob, sched, key=jax.random.key(1))
    loc = sim.run(algos.local_sgd(**kw), prob, sched, key=jax.random.key(1))
    assert rel_err(p0.params, loc.params) < 1e-14  # same draws; XLA may fuse the two loops differently


def test_palsgd_with_a_shared_coin_equals_a_loop():
    prob = sim.problems.random_quadratic(3, 3, seed=4)
    A, b = prob.curvature
    H, p, lr, pull, rounds = 5, 0.3, 0.05, 0.8, 10
    sched = schedules.synchronous([1.0, 1.5, 3.0], num_rounds=rounds)
    alg = algos.palsgd(stepsize=0.9, momentum=0.3, local_stepsize=lr, local_steps=H, probability=p, pull=pull,
                       coin_seed=7)
    res = sim.run(alg, prob, sched, key=jax.random.key(0))
    x, m = np.zeros(3), np.zeros(3)
    pseudo_total = 0
    for r in range(rounds):
        ck = jax.random.fold_in(jax.random.key(7), r)
        coins = [float(jax.random.uniform(jax.random.fold_in(ck, k))) < p for k in range(H)]
        pseudo_total += sum(coins)
        deltas = []
        for i in range(3):
            y = x.copy()
            for k in range(H):
                y = y - (lr * pull / p) * (y - x) if coins[k] else y - lr / (1 - p) * quadratic_gradient(A, b, i, y)
            deltas.append(x - y)
        x, m = _nesterov(x, m, np.mean(deltas, axis=0), 0.9, 0.3)
    assert 0 < pseudo_total < H * rounds  # both kinds of step occur
    assert rel_err(res.params, x) < 1e-12
    np.testing.assert_array_equal(res.worker_stats["pseudo_steps"], [pseudo_total] * 3)


def test_palsgd_per_worker_coins_differ_between_workers_and_have_rate_p():
    prob = sim.problems.random_quadratic(4, 2, seed=4)
    sched = schedules.synchronous([1.0] * 4, num_rounds=50)
    res = sim.run(algos.palsgd(local_stepsize=0.01, local_steps=20, probability=0.25, coin="per_worker"), prob,
                  sched, key=jax.random.key(0))
    counts = np.asarray(res.worker_stats["pseudo_steps"])
    assert len(set(counts.tolist())) > 1
    # 1000 coins per worker, p = 0.25: the binomial's sd is 13.7; allow 4 sd
    assert np.all(np.abs(counts - 250) < 4 * np.sqrt(1000 * 0.25 * 0.75)), counts
    with pytest.raises(ValueError, match=r"probability p must be in \[0, 1\)"):
        algos.palsgd(local_stepsize=0.1, probability=1.0)
    with pytest.raises(ValueError, match="coin must be one of"):
        algos.palsgd(local_stepsize=0.1, coin="each")


# --- EDiT -------------------------------------------------------------------------------------

def _two_layer_quadratic(A, b):
    """Diagonal quadratics on 4 coordinates, held as two layers {"u": x[:2], "v": x[2:]}."""
    def split(x):
        return jnp.concatenate([x["u"], x["v"]])

    def value_and_grad(data, params, worker, key):
        r = split(params) - data["b"][worker]
        g = data["A"][worker] * r
        return 0.5 * jnp.dot(r, g), {"u": g[:2], "v": g[2:]}

    def local(data, params):
        r = split(params)[None, :] - data["b"]
        return 0.5 * jnp.sum(data["A"] * r * r, axis=1)

    data = {"A": jnp.asarray(A), "b": jnp.asarray(b)}
    return Problem("two-layer quadratic", A.shape[0], ProblemFns(value_and_grad, local), data,
                   {"u": jnp.zeros(2), "v": jnp.zeros(2)})


class _Ewma:
    """The anomaly detector of docs/theory.md §10.9, written out plainly."""

    def __init__(self, alpha, warmup, theta):
        self.alpha, self.warmup, self.theta = alpha, warmup, theta
        self.mean = self.m2 = 0.0
        self.count = 0
        self.window = []

    def z(self, v):
        std = np.sqrt(self.m2) if self.count >= 2 else 0.0
        return 0.0 if std == 0 or self.count < self.warmup else (v - self.mean) / std

    def outlier(self, v):
        if self.count < self.warmup:
            return False
        return self.z(v) > self.theta * max(1.0, np.std(self.window[-self.warmup:], ddof=1))

    def update(self, v):
        self.count += 1
        d = v - self.mean
        self.mean += self.alpha * d
        self.m2 = (1 - self.alpha) * (self.m2 + self.alpha * d * (v - self.mean))
        self.window.append(self.z(v))


def _loop_edit(A, b, sched, *, H, lr, outer_lr, beta, T, theta, alpha, warmup, clip, r_step, inliers=False,
               global_clip=False):
    layers = [slice(0, 2), slice(2, 4)]
    det = [_Ewma(alpha, warmup, theta) for _ in layers]
    x, m = np.zeros(4), np.zeros(4)
    outliers = 0
    for r in np.unique(sched.round):
        ev = [e for e in np.flatnonzero(sched.round == r) if sched.delivered[e]]
        ev.sort(key=lambda e: sched.worker[e])
        if not ev:
            continue
        D = []
        for e in ev:
            i = sched.worker[e]
            y = x.copy()
            for _ in range(H[i]):
                y = y - lr * A[i] * (y - b[i])
            D.append(x - y)
        D = np.array(D)
        steps = np.array([H[sched.worker[e]] for e in ev], float)
        agg = np.zeros(4)
        alive = []
        for li, sl in enumerate(layers):
            Dl = D[:, sl].copy()
            norms = np.linalg.norm(Dl, axis=1)
            out = np.zeros(len(ev), bool)
            for j, v in enumerate(norms):
                out[j] = det[li].outlier(v)
                if not (inliers and out[j]):
                    det[li].update(v)
            outliers += out.sum()
            Dl[out] = 0.0
            ne = norms + 1e6 * out
            w = np.exp(-(ne - ne.min()) / T)
            w = w / w.sum()
            w = (1 - r_step) * w + r_step * steps / steps.sum()
            a = (w[:, None] * Dl).sum(0) / w.sum()
            nrm = np.linalg.norm(a)
            if nrm > clip and not global_clip:
                a = a * clip / nrm
            agg[sl] = a
            alive.append(not out.all())
        if global_clip and np.linalg.norm(agg) > clip:
            agg = agg * clip / np.linalg.norm(agg)
        m_new = beta * m + agg
        x_new = x - outer_lr * (agg + beta * m_new)
        for li, sl in enumerate(layers):
            if alive[li]:
                x[sl], m[sl] = x_new[sl], m_new[sl]
    return x, outliers


@pytest.mark.parametrize("update,scope", [("all", "layer"), ("inliers", "global")])
def test_edit_equals_a_loop_with_detection_softmax_weights_and_clipping(update, scope):
    rng = np.random.default_rng(0)
    n = 4
    A = rng.uniform(1.0, 3.0, (n, 4))
    b = rng.standard_normal((n, 4))
    b[3] *= 6.0  # a worker whose pseudo-gradients are far larger: the detector's outlier
    prob = _two_layer_quadratic(A, b)
    H = np.array([3, 3, 2, 1], np.int32)
    sched = schedules.with_failures(schedules.barrier(schedules.FixedTiming(H.astype(float)), num_rounds=30),
                                    probability=0.1, seed=5)
    kw = dict(stepsize=0.7, momentum=0.6, local_stepsize=0.05, local_steps=H, temperature=0.5, threshold=1.0,
              ewma=0.2, detector_warmup=4, clip=0.3, step_weight=0.25, detector_update=update, clip_scope=scope)
    res = sim.run(algos.edit(**kw), prob, sched, key=jax.random.key(0))
    x, outliers = _loop_edit(A, b, sched, H=H, lr=0.05, outer_lr=0.7, beta=0.6, T=0.5, theta=1.0, alpha=0.2,
                             warmup=4, clip=0.3, r_step=0.25, inliers=update == "inliers", global_clip=scope == "global")
    got = np.concatenate([res.params["u"], res.params["v"]])
    assert outliers > 0  # the detector did flag something, so that branch is compared too
    assert float(np.sum(res.worker_stats["outlier_layers"])) == outliers
    assert rel_err(got, x) < 1e-12


def test_edit_without_detection_weighting_or_clipping_is_local_sgd():
    prob = sim.problems.random_quadratic(3, 3, seed=8, noise=0.2)
    sched = schedules.synchronous([1.0, 2.0, 3.0], num_rounds=10)
    kw = dict(stepsize=0.8, momentum=0.4, local_stepsize=0.05, local_steps=2)
    e = sim.run(algos.edit(reducer="uniform", threshold=np.inf, **kw), prob, sched, key=jax.random.key(2))
    loc = sim.run(algos.local_sgd(**kw), prob, sched, key=jax.random.key(2))
    assert rel_err(e.params, loc.params) < 1e-13
    with pytest.raises(ValueError, match="weight_decay applies to inner='adamw' only"):
        algos.local_sgd(local_stepsize=0.1, weight_decay=0.01)
    with pytest.raises(ValueError, match=r"b2 must be in \[0, 1\)"):
        algos.edit(local_stepsize=0.1, inner="adamw", b2=1.0)
    with pytest.raises(ValueError, match="detector_warmup must be >= 2"):
        algos.edit(local_stepsize=0.1, detector_warmup=1)
    with pytest.raises(ValueError, match="reducer must be one of"):
        algos.edit(local_stepsize=0.1, reducer="gta")


def test_a_edit_local_steps_by_hand():
    np.testing.assert_array_equal(algos.a_edit_local_steps([1.0, 2.0, 3.0], 5.0), [5, 3, 2])
    # 19 steps in one window, 28 in three windows (ceil(10/τ) = 10, 5, 4 -> 19 < 20; ceil(15/τ) = 15, 8, 5)
    np.testing.assert_array_equal(algos.a_edit_local_steps([1.0, 2.0, 3.0], 5.0, min_total_steps=20), [15, 8, 5])
    np.testing.assert_array_equal(algos.a_edit_local_steps([1.0, 2.5], 5.0), [5, 2])  # a boundary exactly at the window
    with pytest.raises(ValueError, match="window must be positive"):
        algos.a_edit_local_steps([1.0], 0.0)


def test_dpro_sm_like_local_steps_by_hand_and_equal_speeds_give_local_sgd():
    # EWMA with smoothing 0.5 of [2, 4] is 3; of [1, 1] is 1: H_i = round(4 · 1/3) = 1 and 4
    obs = np.array([[2.0, 4.0], [1.0, 1.0]])
    np.testing.assert_array_equal(algos.dpro_sm_like_local_steps(obs, 4, smoothing=0.5), [1, 4])
    np.testing.assert_array_equal(algos.dpro_sm_like_local_steps(np.array([[8.0], [1.0]]), 4), [1, 4])
    np.testing.assert_array_equal(algos.dpro_sm_like_local_steps(np.full((3, 5), 2.0), 6), [6, 6, 6])
    with pytest.raises(ValueError, match="positive step times"):
        algos.dpro_sm_like_local_steps(np.array([[1.0, -1.0]]), 4)


# --- FedShift ---------------------------------------------------------------------------------

def test_uniform_quantiser_by_hand():
    x = jnp.array([0.0, 0.1, 0.5, 1.0])
    np.testing.assert_allclose(periodic.quantise_uniform(x, 2), [0.0, 0.0, 2 / 3, 1.0])
    np.testing.assert_allclose(periodic.quantise_uniform(x * 2 - 1, 1), [-1.0, -1.0, -1.0, 1.0])  # 0 rounds to even
    np.testing.assert_array_equal(periodic.quantise_uniform(jnp.full(3, 0.7), 4), jnp.full(3, 0.7))


def test_fedshift_equals_a_loop_and_is_fedavg_without_quantised_workers():
    prob = sim.problems.random_quadratic(4, 5, seed=9)
    A, b = prob.curvature
    q = np.array([False, True, False, True])
    sched = schedules.with_failures(schedules.synchronous([1.0, 3.0, 1.0, 3.0], num_rounds=12), probability=0.15,
                                    seed=2)
    res = sim.run(algos.fedshift(local_stepsize=0.05, local_steps=3, quantised=q, bits=3), prob, sched,
                  key=jax.random.key(0))

    def quant(v, bits):
        lo, hi = v.min(), v.max()
        return lo + np.round((v - lo) / (hi - lo) * (2 ** bits - 1)) * (hi - lo) / (2 ** bits - 1)

    x = np.zeros(5)
    for r in range(12):
        ev = [e for e in np.flatnonzero(sched.round == r) if sched.delivered[e]]
        if not ev:
            continue
        models = []
        for e in ev:
            i = sched.worker[e]
            y = x.copy()
            for _ in range(3):
                y = y - 0.05 * quadratic_gradient(A, b, i, y)
            models.append(quant(y, 3) if q[i] else y)
        w = np.mean(models, axis=0)
        x = w - sum(q[sched.worker[e]] for e in ev) / len(ev) * w.mean()
    assert rel_err(res.params, x) < 1e-12
    none = sim.run(algos.fedshift(local_stepsize=0.05, local_steps=3, quantised=np.zeros(4, bool)), prob, sched,
                   key=jax.random.key(0))
    avg = sim.run(algos.local_sgd(local_stepsize=0.05, local_steps=3), prob, sched, key=jax.random.key(0))
    assert rel_err(none.params, avg.params) < 1e-13
    with pytest.raises(ValueError, match="quantised must be one bool per worker"):
        sim.run(algos.fedshift(local_stepsize=0.05, quantised=np.zeros(3, bool)), prob, sched, key=jax.random.key(0))
