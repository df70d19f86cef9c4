import jax
import jax.numpy as jnp
import numpy as np

import algos
import sim
from sim import data, models, schedules


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
