"""Sweeps spread over devices: 8 emulated CPU devices (XLA's
``--xla_force_host_platform_device_count``, set in a subprocess of its own, since the flag must be
set before JAX starts) against one device of the same process."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.slow  # holds tests of 10 s or more: run first (tests/conftest.py)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SCRIPT = textwrap.dedent("""
    import json, os, tempfile
    import jax, numpy as np
    jax.config.update("jax_enable_x64", True)
    from delaylab import algos, sim
    from delaylab.sim import schedules
    from delaylab.sim.models import mlp_classifier

    def same(a, b):
        la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
        return len(la) == len(lb) and all(np.array_equal(np.asarray(x), np.asarray(y), equal_nan=True)
                                          for x, y in zip(la, lb))

    def fields(r):
        return (r.params, r.state, r.metrics, r.tail_average, r.worker_stats, r.diverged_at)

    out = {"devices": jax.device_count()}
    one, eight = jax.devices()[:1], jax.devices()

    # float32 MLP training: chaotic enough that a change in the last bit shows in the loss.
    rng = np.random.default_rng(0)
    x = rng.standard_normal((480, 16)).astype(np.float32)
    y = (x[:, :3].sum(1) > 0).astype(np.int32) + 2 * (x[:, 3] > 0.5)
    prob = mlp_classifier(x, y, num_workers=4, split="iid", hidden=16, batch_size=8, dtype=np.float32)
    sched = schedules.fixed_computation([1.0, 1.5, 2.0, 4.0], num_events=300)
    keys = jax.random.split(jax.random.key(0), 5)
    hp = {"stepsize": [0.1, 0.3, 0.5]}  # 3 x 5 = 15 runs: not a multiple of 8
    alg = algos.asgd(stepsize=0.1)
    # defaults: each device batches ceil(15 / 8) = 2 runs at a time, on one device or on eight
    a = sim.sweep(alg, prob, sched, keys=keys, hparams=hp, devices=one)
    b = sim.sweep(alg, prob, sched, keys=keys, hparams=hp, devices=eight)
    out["mlp_shape"] = list(np.shape(b.metrics["loss"]))
    out["mlp_default_bits"] = same(fields(a), fields(b))
    # a width given explicitly: the same on one device and on eight
    a4 = sim.sweep(alg, prob, sched, keys=keys, hparams=hp, devices=one, run_batch=4)
    b4 = sim.sweep(alg, prob, sched, keys=keys, hparams=hp, devices=eight, run_batch=4)
    out["mlp_pinned_bits"] = same(fields(a4), fields(b4))
    # ... and a different width changes the last bits (why the width is pinned at all)
    out["mlp_width_matters"] = not same(fields(a), fields(a4))
    # the padded runs were dropped, not mixed in: every run differs from the last one
    last = np.asarray(b.metrics["loss"])[-1, -1]
    out["mlp_runs_distinct"] = int(sum(np.array_equal(np.asarray(b.metrics["loss"])[h, s], last)
                                       for h in range(3) for s in range(5)))
    # one run of the sweep, alone in a sweep of its own batched 2 wide (with the padding copy)
    c = sim.sweep(alg, prob, sched, keys=keys[2:3], hparams={"stepsize": [0.3]}, devices=one, run_batch=2)
    out["mlp_single_run"] = bool(np.array_equal(np.asarray(c.metrics["loss"])[0, 0], np.asarray(b.metrics["loss"])[1, 2]))
    # runs one after another (runs="map"): no batch width at all, bit-identical by default
    a = sim.sweep(alg, prob, sched, keys=keys[:3], hparams=hp, devices=one, runs="map")
    b = sim.sweep(alg, prob, sched, keys=keys[:3], hparams=hp, devices=eight, runs="map")
    out["mlp_map_bits"] = same(fields(a), fields(b))

    # float64 quadratic: this machine's default (2 wide) against a one-device machine's (all 15 at
    # once): the same to rounding
    q = sim.problems.random_quadratic(4, 5, condition=4.0, spread=2.0, noise=0.5, seed=1)
    qs = schedules.fixed_computation([1.0, 2.0, 3.0, 4.0], num_events=800)
    qa = sim.sweep(algos.asgd(stepsize=0.02), q, qs, keys=keys, hparams={"stepsize": [0.01, 0.02, 0.03]}, devices=one,
                   run_batch=15)
    qb = sim.sweep(algos.asgd(stepsize=0.02), q, qs, keys=keys, hparams={"stepsize": [0.01, 0.02, 0.03]}, devices=eight)
    out["quad_default_rel"] = float(np.max(np.abs(qa.params - qb.params)) / np.max(np.abs(qa.params)))

    # a sweep in segments on 8 devices, stopped after 2 segments, resumed on 1 device: the same
    # bits as an uninterrupted run on 8
    class Stop(Exception):
        pass

    def stop(p):
        if p.segment == 2:
            raise Stop
    kw = dict(keys=keys, hparams=hp, segment=20)
    whole = sim.sweep(alg, prob, sched, devices=eight, **kw)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "c.npz")
        try:
            sim.sweep(alg, prob, sched, devices=eight, checkpoint=path, checkpoint_every=0, progress=stop, **kw)
        except Stop:
            pass
        resumed = sim.sweep(alg, prob, sched, devices=one, checkpoint=path, **kw)
    out["resume_across_device_counts"] = same(fields(whole), fields(resumed))
    print("RESULT " + json.dumps(out))
""")


def _child() -> dict:
    env = dict(os.environ, XLA_FLAGS=os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu",
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


def test_sweeps_over_eight_emulated_devices():
    """One test, not one per property: the child process (35 s of compiling) would otherwise run
    once per pytest-xdist worker that the module's tests are spread over (measured: twice)."""
    result = _child()
    assert result["devices"] == 8
    # 15 runs (3 step sizes x 5 seeds) over 8 devices: padded to 16, the copy dropped; bit-identical
    # to one device
    assert result["mlp_shape"] == [3, 5, 101]  # 300 events, a log point every 3
    assert result["mlp_default_bits"], "default batch width: 8 devices differ from 1"
    assert result["mlp_pinned_bits"], "run_batch=4: 8 devices differ from 1"
    assert result["mlp_width_matters"], "run_batch 2 and 4 gave the same bits: the width test cannot tell"
    assert result["mlp_runs_distinct"] == 1  # only the last run equals itself
    assert result["mlp_single_run"], "a run alone differs from the same run inside the sweep"
    assert result["mlp_map_bits"], "runs='map': 8 devices differ from 1"
    # other batch widths agree to rounding
    print(f"quadratic, float64, run_batch 2 (8 devices) against 15 (1 device): max relative difference "
          f"{result['quad_default_rel']:.2e} (tolerance 1e-12)")
    assert result["quad_default_rel"] < 1e-12
    assert result["resume_across_device_counts"], "a sweep resumed on 1 device differs from the uninterrupted one on 8"
