import jax
import jax.numpy as jnp
import numpy as np
import pytest

from delaylab import algos, sim
from delaylab.sim import data, models, schedules

pytestmark = pytest.mark.slow  # holds tests of 10 s or more: run first (tests/conftest.py)


def test_mlp_oracle_and_objective_on_digits():
    ds = data.digits()
    prob = models.mlp_classifier(ds.x_train, ds.y_train, num_workers=8, split="dirichlet", alpha=0.5,
                                 hidden=16, batch_size=4, seed=0)
    assert prob.data["X"].shape[:2] == (8, len(ds.y_train) // 8)
    # F is the mean of full-shard cross-entropies; at init it is about log(10)
    f0 = prob.objective(prob.x0)
    assert abs(f0 - np.log(10)) < 0.3
    # a minibatch gradient is unbiased for the worker's full-shard gradient
    full = jax.grad(lambda p: prob.fns.local_objectives(prob.data, p)[3])(prob.x0)
    keys = jax.random.split(jax.random.key(0), 3000)
    g = jax.vmap(lambda k: prob.fns.value_and_grad(prob.data, prob.x0, 3, k)[1])(keys)
    mean = jax.tree.map(lambda a: a.mean(0), g)
    err = max(float(jnp.max(jnp.abs(a - b))) for a, b in zip(jax.tree.leaves(mean), jax.tree.leaves(full)))
    scale = max(float(jnp.max(jnp.abs(b))) for b in jax.tree.leaves(full))
    assert err < 0.1 * scale


def test_mlp_trains_and_block_engine_is_exact_on_pytrees():
    ds = data.digits()
    prob = models.mlp_classifier(ds.x_train, ds.y_train, num_workers=6, split="iid", hidden=16, batch_size=8)
    sched = schedules.random_durations(np.arange(1.0, 7.0), num_events=600, noise="halfnormal",
                                       scale=np.sqrt(np.arange(1.0, 7.0)), seed=0)
    alg = algos.rescaled_asgd(stepsize=0.05, taus=sched.mean_durations)
    a = sim.run(alg, prob, sched, key=jax.random.key(0), log_every=100)
    b = sim.run(alg, prob, sched, key=jax.random.key(0), log_every=100, block_size=6)
    assert a.metrics["loss"][-1] < 0.5 * a.metrics["loss"][0]
    for u, v in zip(jax.tree.leaves(a.params), jax.tree.leaves(b.params)):
        np.testing.assert_allclose(u, v, rtol=1e-10, atol=1e-12)


def test_cnn_problem_pooling_metrics_and_overlap_zero():
    import flax.linen as nn

    x = jnp.asarray(np.random.default_rng(0).normal(size=(2, 7, 6, 3)))
    np.testing.assert_array_equal(models.max_pool_2x2(x), nn.max_pool(x, (2, 2), strides=(2, 2), padding="SAME"))
    ds = data.digits()
    kw = dict(num_workers=4, batch_size=8, eval_size=300, channels=(4, 8), hidden=16, eval_chunk=128)
    prob = models.cnn_classifier(ds.x_train, ds.y_train, ds.x_test, ds.y_test, split="overlap", overlap=0.25, **kw)
    assert prob.data["X"].shape[:2] == (4, int(round(0.25 * len(ds.y_train))) + (len(ds.y_train) - 359) // 4)
    # the minibatch loss is the one whose gradient the oracle returns
    loss, grad = prob.fns.value_and_grad(prob.data, prob.x0, 2, jax.random.key(1))
    assert float(loss) == float(prob.fns.loss(prob.data, prob.x0, 2, jax.random.key(1)))
    g2 = jax.grad(lambda p: prob.fns.loss(prob.data, p, 2, jax.random.key(1)))(prob.x0)
    for a, b in zip(jax.tree.leaves(grad), jax.tree.leaves(g2)):
        np.testing.assert_array_equal(a, b)
    # test accuracy against a NumPy count of the arg-max predictions
    logits = np.asarray(models.CNN(10, (4, 8), 16).apply({"params": prob.x0}, jnp.asarray(ds.x_test)))
    acc = np.mean(logits.argmax(1) == ds.y_test)
    assert abs(float(prob.fns.metrics(prob.data, prob.x0)["test_accuracy"]) - acc) < 1e-12
    # F over the 300 stratified training examples, in chunks of 128 (zero-padded to 384), and the test
    # accuracy over 360 images (padded to 384), against
    # one pass over the examples themselves
    assert prob.data["X_eval"].shape[0] == 384 and not np.any(np.asarray(prob.data["X_eval"][300:]))
    ev = data.stratified_subset(ds.y_train, 300, seed=0)
    np.testing.assert_array_equal(prob.data["X_eval"][:300], ds.x_train[ev])
    direct = models._loss(models.CNN(10, (4, 8), 16), prob.x0, jnp.asarray(ds.x_train[ev]), jnp.asarray(ds.y_train[ev]))
    np.testing.assert_allclose(float(prob.fns.global_objective(prob.data, prob.x0)), float(direct), rtol=1e-12)
    # r = 0: the overlapping split is the disjoint one
    a = models.cnn_classifier(ds.x_train, ds.y_train, ds.x_test, ds.y_test, split="overlap", overlap=0.0, **kw)
    b = models.cnn_classifier(ds.x_train, ds.y_train, ds.x_test, ds.y_test, split="iid", **kw)
    for k in a.data:
        np.testing.assert_array_equal(a.data[k], b.data[k])

    with pytest.raises(ValueError, match="split must be 'iid', 'overlap' or \\[n, m\\] shard indices"):
        models.cnn_classifier(ds.x_train, ds.y_train, ds.x_test, ds.y_test, split="dirichlet", **kw)
    # shards given as indices (a speed-correlated split) are what the workers hold, and init_seed
    # draws the model apart from the split
    shards = data.split_by_group(ds.y_train, [range(5)] * 2 + [range(5, 10)] * 2, seed=1)
    c = models.cnn_classifier(ds.x_train, ds.y_train, ds.x_test, ds.y_test, split=shards, init_seed=7,
                              **{**kw, "num_workers": 4})
    np.testing.assert_array_equal(c.data["y"], ds.y_train[shards])
    assert np.all(np.asarray(c.data["y"][:2]) < 5) and np.all(np.asarray(c.data["y"][2:]) >= 5)
    d = models.cnn_classifier(ds.x_train, ds.y_train, ds.x_test, ds.y_test, split=shards, init_seed=8, eval_seed=5,
                              **{**kw, "num_workers": 4})
    assert not np.array_equal(c.x0["Dense_0"]["kernel"], d.x0["Dense_0"]["kernel"])
    # eval_seed draws the evaluation subset apart from the split's seed
    np.testing.assert_array_equal(d.data["X_eval"][:300], ds.x_train[data.stratified_subset(ds.y_train, 300, seed=5)])
    assert not np.array_equal(c.data["X_eval"], d.data["X_eval"])
    with pytest.raises(ValueError, match="shards must be \\[4, m\\] indices"):
        models.cnn_classifier(ds.x_train, ds.y_train, ds.x_test, ds.y_test, split=shards[:3], **{**kw, "num_workers": 4})


def test_conv_implementations_agree_with_flax():
    import flax.linen as nn

    rng = np.random.default_rng(4)
    for shape, cout in (((3, 4, 4, 5), 6), ((2, 9, 7, 2), 3)):
        x = jnp.asarray(rng.normal(size=shape))
        ref = nn.Conv(cout, (5, 5), padding="SAME")
        p = ref.init(jax.random.key(0), x)
        want = ref.apply(p, x)
        for impl in ("lax", "im2col", "auto", "native"):  # float64: "native" falls back to im2col
            got = models.Conv2D(cout, impl=impl).apply(p, x)
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
        gw = jax.grad(lambda q: jnp.sum(ref.apply(q, x) ** 2))(p)
        gi = jax.grad(lambda q: jnp.sum(models.Conv2D(cout, impl="im2col").apply(q, x) ** 2))(p)
        for a, b in zip(jax.tree.leaves(gw), jax.tree.leaves(gi)):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-10)
