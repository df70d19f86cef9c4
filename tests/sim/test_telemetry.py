"""sim.telemetry against plain NumPy written from the formulas (docs/theory.md §11); float64
(tests/conftest.py enables x64)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from delaylab.sim import telemetry as T


def np_cka_features(x, y):  # Kornblith et al. (2019), feature-space form
    xc, yc = x - x.mean(0), y - y.mean(0)
    return np.linalg.norm(yc.T @ xc) ** 2 / (np.linalg.norm(xc.T @ xc) * np.linalg.norm(yc.T @ yc))


def np_cka_hsic(x, y):  # Gram form with the centring matrix H and HSIC₀
    m = x.shape[0]
    H = np.eye(m) - np.ones((m, m)) / m

    def hsic(K, L):
        return np.trace(K @ H @ L @ H) / (m - 1) ** 2

    K, L = x @ x.T, y @ y.T
    return hsic(K, L) / np.sqrt(hsic(K, K) * hsic(L, L))


def np_hsic1(K, L):  # the unbiased estimator of docs/theory.md §11.2, term by term
    m = K.shape[0]
    Kt, Lt = K.copy(), L.copy()
    np.fill_diagonal(Kt, 0.0)
    np.fill_diagonal(Lt, 0.0)
    one = np.ones(m)
    return (np.trace(Kt @ Lt) + (one @ Kt @ one) * (one @ Lt @ one) / ((m - 1) * (m - 2))
            - 2.0 / (m - 2) * (one @ Kt @ Lt @ one)) / (m * (m - 3))


def np_minibatch_cka(xs, ys):
    xy = np.mean([np_hsic1(x @ x.T, y @ y.T) for x, y in zip(xs, ys)])
    xx = np.mean([np_hsic1(x @ x.T, x @ x.T) for x in xs])
    yy = np.mean([np_hsic1(y @ y.T, y @ y.T) for y in ys])
    return xy / np.sqrt(xx * yy)


def test_linear_cka_equals_both_textbook_forms_and_has_the_stated_invariances():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 12))
    y = np.tanh(x @ rng.normal(size=(12, 30))) + 0.3 * rng.normal(size=(40, 30))
    got = float(T.linear_cka(jnp.asarray(x), jnp.asarray(y)))
    assert got == pytest.approx(np_cka_features(x, y), rel=1e-12)
    assert got == pytest.approx(np_cka_hsic(x, y), rel=1e-12)
    assert float(T.linear_cka(jnp.asarray(x), jnp.asarray(x))) == pytest.approx(1.0, rel=1e-12)
    Q, _ = np.linalg.qr(rng.normal(size=(12, 12)))
    assert float(T.linear_cka(jnp.asarray(3.7 * x @ Q + 5.0), jnp.asarray(y))) == pytest.approx(got, rel=1e-10)
    A = rng.normal(size=(12, 12)) + np.diag(np.linspace(0.1, 5, 12))  # invertible, not orthogonal
    assert abs(float(T.linear_cka(jnp.asarray(x @ A), jnp.asarray(y))) - got) > 1e-3
    with pytest.raises(ValueError, match="same number of probes"):
        T.linear_cka(jnp.zeros((5, 2)), jnp.zeros((6, 2)))


def test_cka_matrices_equal_pairwise_numpy():
    rng = np.random.default_rng(1)
    acts = rng.normal(size=(4, 24, 3, 2)) + rng.normal(size=(1, 24, 3, 2))  # shared part: CKA well above 0
    flat = acts.reshape(4, 24, -1)
    want = np.array([[np_cka_features(a, b) for b in flat] for a in flat])
    np.testing.assert_allclose(np.asarray(T.linear_cka_matrix(jnp.asarray(acts))), want, rtol=1e-12)
    batched = acts.reshape(4, 3, 8, 6)  # 3 batches of 8 probes
    want_mb = np.array([[np_minibatch_cka(a, b) for b in batched] for a in batched])
    np.testing.assert_allclose(np.asarray(T.minibatch_cka_matrix(jnp.asarray(batched))), want_mb, rtol=1e-10)
    np.testing.assert_allclose(float(T.minibatch_cka(jnp.asarray(batched[0]), jnp.asarray(batched[2]))),
                               want_mb[0, 2], rtol=1e-10)
    iu = np.triu_indices(4, 1)
    assert float(T.specialisation_index(jnp.asarray(want))) == pytest.approx(1 - want[iu].mean(), rel=1e-12)
    with pytest.raises(ValueError, match="at least 4 probes"):
        T.hsic_unbiased(jnp.eye(3), jnp.eye(3))


def test_minibatch_cka_is_unbiased_where_the_plain_estimate_is_not():
    """Independent probes: the population CKA of two independent representations is 0. The
    average of many single-batch linear-CKA values stays well above 0 (its bias at m = 16), while
    minibatch CKA over the same batches is near 0: the property it was designed for."""
    rng = np.random.default_rng(2)
    xs, ys = rng.normal(size=(200, 16, 8)), rng.normal(size=(200, 16, 8))
    plain = np.mean([np_cka_features(x, y) for x, y in zip(xs, ys)])
    mb = float(T.minibatch_cka(jnp.asarray(xs), jnp.asarray(ys)))
    assert plain > 0.2 and abs(mb) < 0.03, (plain, mb)


def test_per_layer_gradient_statistics_equal_numpy():
    rng = np.random.default_rng(3)
    n = 5
    tree = {"Dense_0": {"bias": rng.normal(size=(n, 4)), "kernel": rng.normal(size=(n, 3, 4))},
            "Dense_1": {"bias": rng.normal(size=(n, 2)), "kernel": rng.normal(size=(n, 4, 2))}}
    assert T.layer_names(jax.tree.map(lambda v: v[0], tree)) == ["Dense_0", "Dense_1"]
    mats = T.layer_matrices(jax.tree.map(jnp.asarray, tree))
    assert mats["Dense_0"].shape == (n, 16) and mats["Dense_1"].shape == (n, 10)
    for name in ("Dense_0", "Dense_1"):
        g = np.concatenate([tree[name]["bias"].reshape(n, -1), tree[name]["kernel"].reshape(n, -1)], axis=1)
        np.testing.assert_array_equal(np.asarray(mats[name]), g)
        gbar = g.mean(0)
        V = np.mean([np.sum((gi - gbar) ** 2) for gi in g])
        assert float(T.variance(mats[name])) == pytest.approx(V, rel=1e-12)
        assert float(T.signal_to_noise(mats[name])) == pytest.approx(np.sum(gbar ** 2) / V, rel=1e-12)
        assert float(T.diversity(mats[name])) == pytest.approx(
            sum(np.sum(gi ** 2) for gi in g) / np.sum(g.sum(0) ** 2), rel=1e-12)
        cos = np.array([[gi @ gj / np.linalg.norm(gi) / np.linalg.norm(gj) for gj in g] for gi in g])
        np.testing.assert_allclose(np.asarray(T.cosine_matrix(mats[name])), cos, rtol=1e-12)
        agg = g[:3].sum(0)
        np.testing.assert_allclose(np.asarray(T.alignment(mats[name], jnp.asarray(agg))),
                                   [gi @ agg / np.linalg.norm(gi) / np.linalg.norm(agg) for gi in g], rtol=1e-12)
        np.testing.assert_allclose(np.asarray(T.norms(mats[name])), [np.linalg.norm(gi) for gi in g], rtol=1e-12)
        assert float(T.consensus_distance(mats[name])) == pytest.approx(V, rel=1e-12)
        ref = rng.normal(size=g.shape[1])
        np.testing.assert_allclose(np.asarray(T.drift(mats[name], jnp.asarray(ref))),
                                   [np.linalg.norm(gi - ref) for gi in g], rtol=1e-12)
    stats = T.per_layer(T.variance, jax.tree.map(jnp.asarray, tree))
    assert set(stats) == {"Dense_0", "Dense_1"}
    # a zero update has no direction: cosines 0, not NaN
    z = jnp.asarray(np.vstack([np.zeros(3), np.ones(3)]))
    np.testing.assert_allclose(np.asarray(T.cosine_matrix(z)), [[0.0, 0.0], [0.0, 1.0]], rtol=1e-15, atol=0)
    assert float(T.alignment(z, jnp.zeros(3))[1]) == 0.0
    with pytest.raises(ValueError, match="leading worker axis"):
        T.layer_matrices({"a": jnp.zeros((3, 2)), "b": jnp.zeros((4, 2))})


def test_activations_of_a_flax_mlp_and_realised_shares():
    from delaylab.sim.models import MLP

    rng = np.random.default_rng(4)
    module = MLP(hidden=6, classes=3)
    x = jnp.asarray(rng.normal(size=(7, 2, 5)))
    params = module.init(jax.random.key(0), x)["params"]
    acts = T.activations(module, params, x)
    assert sorted(acts) == ["Dense_0", "Dense_1"]
    W, b = np.asarray(params["Dense_0"]["kernel"]), np.asarray(params["Dense_0"]["bias"])
    np.testing.assert_allclose(np.asarray(acts["Dense_0"]), np.asarray(x).reshape(7, -1) @ W + b, rtol=1e-12)
    q = T.realised_shares([0, 2, 2, 1, 2], [1.0, 0.5, 0.5, 2.0, 1.0], 4)
    np.testing.assert_allclose(q, [1 / 5, 2 / 5, 2 / 5, 0.0])
    with pytest.raises(ValueError, match=r"worker indices must lie in \[0, 4\)"):
        T.realised_shares([0, 4], [1.0, 1.0], 4)


def test_worker_spread_at_the_log_points_of_hierarchical_sgd():
    """Logged inside the compiled run, against a plain loop: zero consensus distance after every
    global average (steps divisible by 3), the loop's Ξ² and drift from the mean in between."""
    from delaylab import algos, sim
    from delaylab.sim import schedules
    from delaylab.sim.reference import quadratic_gradient

    prob = sim.problems.random_quadratic(4, 3, seed=1)
    A, b = prob.curvature
    levels, steps = {3: 4}, 9
    sched = schedules.hierarchical(schedules.FixedTiming(np.ones(4)), num_steps=steps, levels=levels)
    res = sim.run(algos.hierarchical_sgd(stepsize=0.1, levels=levels), prob, sched, key=jax.random.key(0),
                  log_every=4, telemetry=T.WorkerSpread())
    cons, drift = res.metrics["telemetry/consensus/params"], res.metrics["telemetry/drift/params"]
    assert cons.shape == (steps + 1,) and drift.shape == (steps + 1, 4)
    Y = np.zeros((4, 3))
    for k in range(steps):
        Y = np.stack([Y[i] - 0.1 * quadratic_gradient(A, b, i, Y[i]) for i in range(4)])
        if k % 3 == 0:
            Y[:] = Y.mean(axis=0)
        ybar = Y.mean(axis=0)
        assert cons[k + 1] == pytest.approx(np.mean(np.sum((Y - ybar) ** 2, axis=1)), rel=1e-12, abs=1e-30)
        np.testing.assert_allclose(drift[k + 1], np.linalg.norm(Y - ybar, axis=1), rtol=1e-12, atol=1e-15)
    assert cons[1] == 0.0 and cons[4] == 0.0 and cons[2] > 0.0
    with pytest.raises(TypeError, match="telemetry must be a function"):
        sim.run(algos.hierarchical_sgd(stepsize=0.1, levels=levels), prob, sched, key=jax.random.key(0), telemetry=3)


def _np_mlp_grads(p, X, y):
    """Mean softmax cross-entropy gradient of a one-hidden-layer ReLU MLP, by hand."""
    W1, b1, W2, b2 = (np.asarray(p["Dense_0"]["kernel"]), np.asarray(p["Dense_0"]["bias"]),
                      np.asarray(p["Dense_1"]["kernel"]), np.asarray(p["Dense_1"]["bias"]))
    X = X.reshape(X.shape[0], -1)
    pre = X @ W1 + b1
    h = np.maximum(pre, 0.0)
    z = h @ W2 + b2
    P = np.exp(z - z.max(1, keepdims=True))
    P /= P.sum(1, keepdims=True)
    d = (P - np.eye(z.shape[1])[y]) / X.shape[0]
    dh = (d @ W2.T) * (pre > 0)
    return {"Dense_0": np.concatenate([(X.T @ dh).ravel(), dh.sum(0)]),
            "Dense_1": np.concatenate([(h.T @ d).ravel(), d.sum(0)])}


def test_representations_at_the_log_points_equal_numpy():
    """On an MLP trained by hierarchical SGD (workers hold their own models): the logged CKA
    against the server model, the specialisation index, minibatch CKA and the per-layer gradient
    statistics at the last log point, against NumPy on the final worker models."""
    from delaylab import algos, sim
    from delaylab.sim import schedules
    from delaylab.sim.models import MLP

    rng = np.random.default_rng(0)
    images, labels = rng.normal(size=(240, 3, 3)), rng.integers(0, 3, 240)
    prob = sim.models.mlp_classifier(images, labels, num_workers=3, split="iid", hidden=5, batch_size=8)
    probe_x, probe_y = rng.normal(size=(16, 3, 3)), rng.integers(0, 3, 16)
    tel = T.Representations(MLP(hidden=5, classes=3), probe_x, probe_y, minibatches=2)
    sched = schedules.hierarchical(schedules.FixedTiming(np.array([1.0, 2.0, 3.0])), num_steps=10, levels={4: 3})
    res = sim.run(algos.hierarchical_sgd(stepsize=0.5, levels={4: 3}), prob, sched, key=jax.random.key(0),
                  log_every=3, telemetry=tel)
    Y = [jax.tree.map(lambda v: np.asarray(v[i]), res.state.workers) for i in range(3)]
    server = jax.tree.map(np.asarray, res.params)
    module = MLP(hidden=5, classes=3)
    X = probe_x.reshape(16, -1)
    for layer in ("Dense_0", "Dense_1"):
        acts = [np.asarray(T.activations(module, p, jnp.asarray(probe_x))[layer]) for p in Y]
        s = np.asarray(T.activations(module, server, jnp.asarray(probe_x))[layer])
        got = res.metrics[f"telemetry/cka/{layer}"][-1]
        np.testing.assert_allclose(got, [np_cka_features(a, s) for a in acts], rtol=1e-10)
        pairs = [np_cka_features(acts[i], acts[j]) for i in range(3) for j in range(i + 1, 3)]
        assert res.metrics[f"telemetry/specialisation/{layer}"][-1] == pytest.approx(1 - np.mean(pairs), rel=1e-10)
        mb = [np_minibatch_cka(a.reshape(2, 8, -1), s.reshape(2, 8, -1)) for a in acts]
        np.testing.assert_allclose(res.metrics[f"telemetry/cka_mb/{layer}"][-1], mb, rtol=1e-10)
        G = np.stack([_np_mlp_grads(p, X, probe_y)[layer] for p in Y])
        gs = _np_mlp_grads(server, X, probe_y)[layer]
        np.testing.assert_allclose(res.metrics[f"telemetry/grad_norm/{layer}"][-1], np.linalg.norm(G, axis=1), rtol=1e-10)
        cos = G @ gs / (np.linalg.norm(G, axis=1) * np.linalg.norm(gs))
        np.testing.assert_allclose(res.metrics[f"telemetry/grad_cos/{layer}"][-1], cos, rtol=1e-10)
        var = np.mean(np.sum((G - G.mean(0)) ** 2, axis=1))
        assert res.metrics[f"telemetry/grad_var/{layer}"][-1] == pytest.approx(var, rel=1e-10)
    assert res.metrics["telemetry/specialisation/Dense_0"][-1] > 0  # the workers did differ (10 % 4 != 0)
    with pytest.raises(ValueError, match="equal batches of >= 4"):
        T.Representations(module, probe_x, minibatches=5)


def test_shard_loss_matrix_equals_a_loop_over_workers_and_shards():
    """On ASGD over quadratics: entry (i, j) at the last log point is F_j at worker i's point."""
    from delaylab import algos, sim
    from delaylab.sim import schedules

    prob = sim.problems.random_quadratic(3, 2, seed=5)
    A, b = prob.curvature
    res = sim.run(algos.asgd(stepsize=0.1), prob, schedules.fixed_computation([1.0, 2.0, 3.0], num_events=17),
                  key=jax.random.key(0), telemetry=T.ShardLossMatrix(prob.fns.local_objectives), log_every=5,
                  record_params=True)
    # worker i's point: the server model right after its last arrival (ASGD hands it that)
    sched = schedules.fixed_computation([1.0, 2.0, 3.0], num_events=17)
    x = np.zeros(2)
    points = np.zeros((3, 2))
    for i in sched.worker:  # a gradient at the worker's point, then it is handed the new model
        x = x - 0.1 * A[i] @ (points[i] - b[i])
        points[i] = x
    L = np.array([[0.5 * (p - b[j]) @ A[j] @ (p - b[j]) for j in range(3)] for p in points])
    np.testing.assert_allclose(res.metrics["telemetry/shard_loss"][-1], L, rtol=1e-12)
    gap = (L.sum() - np.trace(L)) / 6 - np.trace(L) / 3
    assert res.metrics["telemetry/own_shard_gap"][-1] == pytest.approx(gap, rel=1e-12)


def test_worker_timing_by_hand():
    from delaylab.sim import schedules

    # async, τ = (1, 3), 4 events: worker 0 at 1, 2, 3; worker 1 at 3 (after 0's third)
    s = schedules.fixed_computation([1.0, 3.0], num_events=4)
    r = T.worker_timing(s)
    np.testing.assert_allclose(r["updates_per_time"], [1.0, 1 / 3])
    np.testing.assert_allclose(r["acceptance"], [1.0, 1.0])
    np.testing.assert_allclose(r["staleness_mean"], [0.0, 3.0])  # worker 1's job saw 0's three arrivals
    np.testing.assert_array_equal(r["staleness_hist"], [[3, 0, 0, 0], [0, 0, 0, 1]])
    np.testing.assert_allclose(r["compute_mean"], [1.0, 3.0])
    np.testing.assert_allclose(r["idle_fraction"], [0.0, 0.0])
    np.testing.assert_allclose(r["queue_delay_mean"], [0.0, 0.0])  # applied on arrival
    # backup workers: 3 workers, τ = (1, 2, 4), one backup: rounds close at 2; worker 2 never accepted
    b = schedules.backup_workers(schedules.FixedTiming(np.array([1.0, 2.0, 4.0])), num_rounds=3, backups=1)
    r = T.worker_timing(b)
    np.testing.assert_allclose(r["acceptance"], [1.0, 1.0, 0.0])
    np.testing.assert_allclose(r["idle_fraction"], [0.5, 0.0, 0.0])  # worker 0 waits 1 of every 2
    np.testing.assert_allclose(r["updates_per_time"], [0.5, 0.5, 0.0])
    np.testing.assert_allclose(r["queue_delay_mean"], [1.0, 0.0, np.nan])  # worker 0's waits for the close at 2
    # time-bounded rounds (poll 2; traced in tests/algos/test_fedstrag.py): a result waits for the next check
    f = schedules.time_bounded_rounds(schedules.FixedTiming(np.array([1.0, 3.0, 10.0])), num_rounds=6, poll=2.0)
    r = T.worker_timing(f)
    np.testing.assert_allclose(r["queue_delay_mean"], [1.0, 0.5, 0.0])  # worker 1: 1, 0, 1, 0


def test_worker_timing_leaves_out_the_releases_of_a_staleness_bound():
    from delaylab.sim import schedules

    s = schedules.stale_synchronous(schedules.FixedTiming(np.array([1.0, 3.0])), num_jobs=6, groups=[0, 0], bound=1)
    r = T.worker_timing(s)  # worker 0 computes 4 × 1 of 7 time units, waits the rest; worker 1 6 of 7
    np.testing.assert_allclose(r["acceptance"], [1.0, 1.0])
    np.testing.assert_allclose(r["compute_mean"], [1.0, 3.0])
    np.testing.assert_allclose(r["idle_fraction"], [3 / 7, 1 / 7])


def test_after_local_steps_runs_each_workers_own_job_from_its_point():
    """AfterLocalSteps against a plain loop written from the job's definition: H SGD steps from the
    worker's point on its own noisy quadratic, step k on fold_in(fold_in(key(seed), i), k). It reads
    the job and the hyperparameters from the run (sim.core.Workers), so runs with other values
    share its compiled program."""
    from delaylab import algos, sim
    from delaylab.algos import elastic as ea
    from delaylab.sim import engine, problems, schedules
    from delaylab.sim.core import Workers

    prob = problems.random_quadratic(3, 4, seed=2, noise=0.3)
    alg = algos.async_local_sgd(stepsize=0.5, local_stepsize=0.1, local_steps=3)
    rng = np.random.default_rng(0)
    points = jnp.asarray(rng.normal(size=(3, 4)))
    seen = {}

    def inner(data, server, workers):
        seen["models"] = workers.models
        return {}

    tel = T.AfterLocalSteps(inner, seed=7)
    # a value: built again, equal and hashed alike (runs share one compiled program)
    assert tel == T.AfterLocalSteps(inner, seed=7) and hash(tel) == hash(T.AfterLocalSteps(inner, seed=7))
    assert tel != T.AfterLocalSteps(inner, seed=8)
    server = points[0]
    hp = {k: jnp.asarray(v) for k, v in alg.hparams.items()}
    tel(prob.data, server, Workers(points, alg.worker, hp, prob.fns, prob.data))
    tag = np.asarray(np.float32(np.sum(np.asarray(server)))).view(np.uint32)  # the log point's draw
    for i in range(3):
        x = points[i]
        key = jax.random.fold_in(jax.random.fold_in(jax.random.key(7), tag), i)
        for k in range(3):
            _, g = prob.fns.value_and_grad(prob.data, x, i, jax.random.fold_in(key, k))
            x = x - 0.1 * g
        np.testing.assert_allclose(seen["models"][i], x, rtol=1e-12, atol=1e-14)
    # the other readings of a job's end: the message itself (FedAsync sends its end point), the
    # params of the worker state it returns (elastic averaging; under "stale" failures, of the end state)
    assert algos.fedasync(mixing=0.5, local_stepsize=0.1).worker.after_job(None, 3.0) == 3.0
    ws = ea.easgd().worker.start({"learning_rate": 0.1}, jnp.ones(2))
    assert ea.easgd().worker.after_job(None, ws) is ws.params
    assert ea.easgd(failure="stale").worker.after_job(None, (None, ws)) is ws.params

    # in a run: new hyperparameter values reuse the program, and change what it reports
    spread = T.AfterLocalSteps(T.WorkerSpread(), seed=7)
    sched = schedules.fixed_computation([1.0, 2.0, 3.0], num_events=12)
    first = sim.run(alg, prob, sched, key=jax.random.key(0), telemetry=spread, log_every=4)
    before = engine.compilations()
    other = sim.run(alg.with_hparams(local_stepsize=0.05), prob, sched, key=jax.random.key(0), telemetry=spread,
                    log_every=4)
    assert engine.compilations() == before
    assert not np.array_equal(first.metrics["telemetry/consensus/params"], other.metrics["telemetry/consensus/params"])
