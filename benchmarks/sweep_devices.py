"""Sweep throughput on 1 and on 8 devices, in one process.

    python -m benchmarks.sweep_devices            # 8 emulated CPU devices (re-executes itself)
    python -m benchmarks.sweep_devices --quick

On a CPU-only machine the 8 devices are emulated (``--xla_force_host_platform_device_count=8``,
which this script sets before JAX starts): they share the machine's cores, so the ratio measures
how well a sweep spread over devices uses the cores, not what 8 accelerators would give. On a
machine with accelerators the real devices are used. Each workload is timed as the best of
``--repeats`` calls after one warm-up call (compilation excluded), alternating the two variants.
Throughput is runs × events per second. The first column is one device batching all runs at once
(``run_batch`` = runs: what a one-device machine does by default); the last is one device of the D
with the default ``run_batch`` (runs/D at a time, as each of the D devices), which gives the
D-device sweep's bits: what that costs on one device.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smaller workloads")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--devices", type=int, default=8, help="emulated CPU devices when there is no accelerator")
    args = ap.parse_args(argv)
    if "--xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", "") and "jax" not in sys.modules:
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                                   f" --xla_force_host_platform_device_count={args.devices}").strip()
    import jax
    import numpy as np

    jax.config.update("jax_enable_x64", True)
    from delaylab import algos, sim
    from delaylab.sim import schedules
    from delaylab.sim.models import mlp_classifier

    devices = jax.devices()
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores, jax {jax.__version__}, "
          f"{len(devices)} {devices[0].platform} devices"
          + (" (emulated: they share the cores)" if devices[0].platform == "cpu" else ""))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2000, 32)).astype(np.float32)
    y = (x[:, :4].sum(1) > 0).astype(np.int32) + 2 * (x[:, 4] > 0)
    events = 2000 if args.quick else 10000
    work = {
        "quadratic d=20, n=8, float64, 256 runs": (
            algos.asgd(stepsize=0.01), sim.problems.random_quadratic(8, 20, condition=4.0, spread=2.0, noise=0.5, seed=0),
            schedules.fixed_computation(np.linspace(1, 4, 8), num_events=events), 16, 16),
        "MLP 32→64→4, n=8, float32, 64 runs": (
            algos.asgd(stepsize=0.05),
            mlp_classifier(x, y, num_workers=8, split="iid", hidden=64, batch_size=16, dtype=np.float32),
            schedules.fixed_computation(np.linspace(1, 4, 8), num_events=events // 5), 8, 8),
    }
    print(f"| workload | 1 device, all runs at once (s) | {len(devices)} devices (s) | speed-up "
          f"| runs × events / s, {len(devices)} devices | 1 device, runs/{len(devices)} at a time (s) |")
    print("|---|---|---|---|---|---|")
    for name, (alg, prob, sched, H, S) in work.items():
        keys = jax.random.split(jax.random.key(0), S)
        hp = {next(iter(alg.hparams)): np.geomspace(0.5, 1.0, H) * float(alg.hparams[next(iter(alg.hparams))])}

        def call(devs, run_batch=None):
            r = sim.sweep(alg, prob, sched, keys=keys, hparams=hp, devices=devs, run_batch=run_batch)
            return jax.block_until_ready(r.params)

        # 1 device batching all runs at once (what a one-device machine does by default); all D
        # devices (default: each batches runs/D); 1 device of these D with the default, which
        # batches runs/D at a time like each of the D and so gives the D-device sweep's bits
        variants = ((devices[:1], H * S), (devices, None), (devices[:1], None))
        for v in variants:
            call(*v)  # compile
        best = [np.inf] * len(variants)
        for _ in range(args.repeats):
            for k, v in enumerate(variants):
                t0 = time.perf_counter()
                call(*v)
                best[k] = min(best[k], time.perf_counter() - t0)
        rate = H * S * sched.num_events / best[1]
        print(f"| {name} | {best[0]:.2f} | {best[1]:.2f} | {best[0] / best[1]:.2f}x | {rate:.3g} | "
              f"{best[2]:.2f} ({best[2] / best[0]:.2f}x the first column) |", flush=True)


if __name__ == "__main__":
    main()
