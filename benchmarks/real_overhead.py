"""What a real asynchronous update costs (Ray workers, :mod:`sim.real`) against a simulated one.

    python -m benchmarks.real_overhead           # 2000 updates per problem
    python -m benchmarks.real_overhead --quick   # 500

Vanilla ASGD with 4 workers and no injected sleeps, on a quadratic (d = 10) and on logistic
regression (8 features, minibatches of 16), float32. The real run's time per update is its wall
time (first dispatch to last application, compilation excluded: every actor compiles before the
clock starts) over the number of updates. The simulator's is the best of 3 calls of ``sim.run`` on
the replay of that run's trace (same events, same keys), after a warm-up call, over the same
number of events. Both in one process on this machine.
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time

import jax
import numpy as np


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    jax.config.update("jax_enable_x64", True)
    from delaylab import algos, sim
    from delaylab.sim import real, schedules

    events = 500 if args.quick else 2000
    problems = {
        "quadratic d=10": sim.problems.random_quadratic(4, 10, condition=4.0, spread=2.0, noise=0.5, seed=0,
                                                        dtype=np.float32),
        "logistic, 9 parameters, batch 16": sim.problems.synthetic_logistic(4, 128, 8, heterogeneity=1.0, l2=0.05,
                                                                            batch_size=16, seed=3, dtype=np.float32),
    }
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores, jax {jax.__version__}, "
          f"ray {__import__('ray').__version__}; {events} updates, 4 workers, no injected sleeps")
    print("| problem | real: µs per update | simulator: µs per event | real / simulator | replay equals the real run |")
    print("|---|---|---|---|---|")
    alg = algos.asgd(stepsize=0.02)
    with tempfile.TemporaryDirectory() as d:
        for name, problem in problems.items():
            res = real.run(alg, problem, num_events=events, key=jax.random.key(0))
            path = res.write_trace(os.path.join(d, "trace.csv"))
            sched = schedules.from_trace(path)
            key = real.replay_key(path)
            rep = sim.run(alg, problem, sched, key=key)  # compile
            best = np.inf
            for _ in range(3):
                t0 = time.perf_counter()
                jax.block_until_ready(sim.run(alg, problem, sched, key=key).params)
                best = min(best, time.perf_counter() - t0)
            real_us = 1e6 * res.wall_seconds / res.num_events
            sim_us = 1e6 * best / sched.num_events
            rel = float(np.linalg.norm(np.asarray(rep.params, np.float64) - res.params) / np.linalg.norm(res.params))
            same = "bit for bit" if np.array_equal(rep.params, res.params) else f"to {rel:.1e} relative"
            print(f"| {name} | {real_us:.0f} | {sim_us:.1f} | {real_us / sim_us:.0f}x | {same} |", flush=True)


if __name__ == "__main__":
    main()
