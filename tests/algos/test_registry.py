"""Every registered algorithm through the same checks (in the manner of optax's alias tests).

For each entry of ``tests.algos.methods.METHODS``: (a) rebuilding it with new hyperparameter values,
by calling its factory again or by ``with_hparams``, reuses the compiled program, and the new
values change the run; (b) its hyperparameters sweep in one ``sim.sweep``; (c) it runs in float32
and float64, to the same numbers up to float32 rounding; (d) its degenerate case equals the plainer
method it reduces to; (e) an out-of-domain value is refused with a ValueError naming the argument,
before anything compiles. A new entry of the registry is covered without a new test.

The setting is small and noise-free (so that float32 and float64 runs, and runs on schedules of
different kinds, draw the same gradients): four workers with job durations 1, 2, 3, 5 on a
diagonal quadratic (AdaHessian's Hutchinson estimate is then exact whatever the probes), or on a
small MLP for the methods that act per layer.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from delaylab import sim
from delaylab.sim import engine, schedules
from tests.algos.methods import METHODS, SETTING_TAUS


def _compiles() -> int:
    return engine.compilations()


@functools.cache
def _problem(workers: int, network: bool, dtype):
    if network:
        from delaylab.sim.data import digits
        from delaylab.sim.models import mlp_classifier

        ds = digits()
        return mlp_classifier(ds.x_train[:160], ds.y_train[:160], num_workers=workers, split="iid", hidden=8,
                              batch_size=4, dtype=dtype)
    return sim.problems.random_quadratic(workers, 3, diagonal=True, seed=1, noise=0.0, dtype=dtype)


@functools.cache
def _schedule(kind: str, workers: int, equal_speeds: bool):
    taus = np.ones(workers) if equal_speeds else np.asarray(SETTING_TAUS[:workers])
    timing = schedules.FixedTiming(taus)
    if kind == "async":
        return schedules.asynchronous(timing, num_events=40)
    if kind == "barrier":  # as many updates as the asynchronous schedule's with one worker
        return schedules.barrier(timing, num_rounds=40 // workers)
    if kind == "hierarchical":
        return schedules.hierarchical(timing, num_steps=40 // workers,
                                      levels={2: 2, 4: 4} if workers == 4 else {1: workers}, warmup=2 if workers == 4 else 0)
    if kind == "ssp":
        return schedules.stale_synchronous(timing, num_jobs=40, groups=[0] * workers, bound=1)
    if kind == "time_bounded":
        return schedules.time_bounded_rounds(timing, num_rounds=8, poll=2.0)
    raise AssertionError(kind)


def _run(alg, kind, *, workers=4, equal_speeds=False, network=False, dtype=jnp.float64):
    return sim.run(alg, _problem(workers, network, dtype), _schedule(kind, workers, equal_speeds),
                   key=jax.random.key(0), log_every=10)


def _final(res) -> np.ndarray:
    return np.concatenate([np.ravel(np.asarray(v, np.float64)) for v in jax.tree.leaves(res.params)])


def _rel(a, b) -> float:
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300))


NAMES = sorted(METHODS)


@pytest.mark.parametrize("name", NAMES)
def test_new_hyperparameter_values_reuse_the_compiled_program_and_sweep(name):
    m = METHODS[name]
    alg = m.build()
    assert set(m.vary) <= set(alg.hparams), f"{name}: vary names {sorted(set(m.vary) - set(alg.hparams))}, " \
                                            f"which are not hyperparameters (they would recompile)"
    first = _final(_run(alg, m.schedule, network=m.network))
    before = _compiles()
    rebuilt = _final(_run(m.build(**m.vary), m.schedule, network=m.network))  # (a) the factory again
    changed = _final(_run(alg.with_hparams(**m.vary), m.schedule, network=m.network))  # (a) with_hparams
    assert _compiles() == before, f"{name}: new hyperparameter values compiled a new program"
    np.testing.assert_array_equal(rebuilt, changed)
    assert not np.array_equal(first, rebuilt), f"{name}: the new values {m.vary} changed nothing"
    assert np.all(np.isfinite(first)) and np.all(np.isfinite(rebuilt))

    # (b), (c): the old and new values as one float32 sweep, against the float64 runs
    sweep = {k: np.stack([np.asarray(alg.hparams[k]), np.asarray(m.vary[k])]) for k in m.vary}
    res = sim.sweep(alg, _problem(4, m.network, jnp.float32), _schedule(m.schedule, 4, False),
                    keys=jax.random.key(0)[None], hparams=sweep, log_every=10)
    leaves = jax.tree.leaves(res.params)
    assert all(v.dtype == jnp.float32 for v in leaves)
    for h, want in ((0, first), (1, rebuilt)):
        got = np.concatenate([np.ravel(np.asarray(v[h, 0], np.float64)) for v in leaves])
        assert _rel(got, want) < 1e-4, (name, h, _rel(got, want))


@pytest.mark.parametrize("name", [n for n in NAMES if METHODS[n].reduces_to is not None])
def test_degenerate_case_equals_the_plainer_method(name):
    m = METHODS[name]
    r = m.reduces_to
    to = METHODS[r.to]
    workers = r.workers or 4
    setting = dict(workers=workers, equal_speeds=r.equal_speeds, network=m.network)
    mine = _final(_run(m.build(**r.overrides), m.schedule, **setting))
    plain = _final(_run(to.factory(**r.to_kwargs), to.schedule, **setting))
    assert _rel(mine, plain) <= r.rtol, (name, r.to, _rel(mine, plain))


@pytest.mark.parametrize("name,argument,value", [(n, a, v) for n in NAMES for a, v in METHODS[n].bad])
def test_an_out_of_domain_value_is_refused_before_compiling(name, argument, value):
    m = METHODS[name]
    before = _compiles()
    with pytest.raises(ValueError, match=argument):
        _run(m.build(**{argument: value}), m.schedule, network=m.network)
    alg = m.build()
    if argument in alg.hparams:  # the same value given as a hyperparameter override
        with pytest.raises(ValueError, match=argument):
            _run(alg.with_hparams(**{argument: value}), m.schedule, network=m.network)
    assert _compiles() == before


def test_register_and_unregister_an_algorithm_entry():
    """delaylab.registry.register adds an entry with its source; the same entry again is a no-op,
    another entry under a taken name a ValueError naming it; unregister removes it."""
    import dataclasses

    from delaylab import registry

    entry = dataclasses.replace(registry.ALGORITHMS["asgd"], name="asgd_plugin_copy", summary="a copy")
    assert "asgd_plugin_copy" not in registry.ALGORITHMS
    try:
        registry.register(entry, source="tests/plugin.py")
        registry.register(entry, source="tests/plugin.py")
        assert registry.algorithm("asgd_plugin_copy") is entry
        assert registry.source("asgd_plugin_copy") == "tests/plugin.py" and registry.source("asgd") is None
        with pytest.raises(ValueError, match="'asgd_plugin_copy' is already registered \\(by tests/plugin.py\\)"):
            registry.register(dataclasses.replace(entry, summary="another"), source="other.py")
        with pytest.raises(ValueError, match="'asgd' is already registered"):
            registry.register(dataclasses.replace(entry, name="asgd"))
    finally:
        registry.unregister("asgd_plugin_copy")
    assert "asgd_plugin_copy" not in registry.ALGORITHMS and "asgd_plugin_copy" not in registry.SOURCES
    with pytest.raises(ValueError, match="unknown algorithm 'asgd_plugin_copy'"):
        registry.unregister("asgd_plugin_copy")
