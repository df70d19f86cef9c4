"""What telemetry costs: run time with and without it, in one process.

    python -m benchmarks.telemetry            # three workloads, best of 5 alternated calls each
    python -m benchmarks.telemetry --quick    # one workload

Workloads: an MLP (pixels→128→10) on the MNIST-format data ``sim.data.load_mnist_format`` finds
(Fashion-MNIST from Debian's package; scikit-learn's digits if none), n = 8 workers (τ_i spread
over [1, 4]), the first 8000 training images, batch 32, float32, with the default log schedule (100 log points):
  * ``hierarchical``: hierarchical SGD, groups of 4 every 4 steps, all 8 every 16 (workers hold
    their own models), 1000 local steps (8000 events);
  * ``asgd``: vanilla ASGD (workers hold stale copies of the server model), 8000 events;
  * ``asgd-spread``: the same with only :class:`sim.telemetry.WorkerSpread`.
Telemetry: :class:`sim.telemetry.Representations` on a fixed probe batch of 128 test images with
labels (linear CKA against the server model, the specialisation index, minibatch CKA over 4
batches, per-layer probe gradients) plus :class:`WorkerSpread`. Compilation is excluded (one
warm-up call first); each time is the best of 5 calls, the two variants alternated. The overhead is t_with / t_without − 1.
"""

from __future__ import annotations

import argparse
import platform
import time

import jax
import numpy as np

import algos
import sim
from sim import schedules
from sim import telemetry as T
from sim.models import MLP

N = 8
EVENTS = 8000
PROBES = 128
TRAIN = 8000
REPEATS = 5


def _both(a, b):
    def tel(data, server, points):
        return {**a(data, server, points), **b(data, server, points)}

    return tel


def _best_pair(without, with_) -> tuple[float, float]:
    """Best times of two calls, alternated (without, with, without, ...) so that a slow spell of
    the machine hits both alike."""
    without()  # compile both first
    with_()
    best = [np.inf, np.inf]
    for _ in range(REPEATS):
        for k, fn in enumerate((without, with_)):
            t0 = time.perf_counter()
            fn()
            best[k] = min(best[k], time.perf_counter() - t0)
    return best[0], best[1]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="the hierarchical workload only")
    args = ap.parse_args(argv)
    ds = sim.data.load_mnist_format()
    prob = sim.models.mlp_classifier(ds.x_train[:TRAIN], ds.y_train[:TRAIN], num_workers=N, split="iid", hidden=128,
                                     batch_size=32, dtype=np.float32)
    module = MLP(hidden=128, classes=10)
    probe_x = np.asarray(ds.x_test[:PROBES], np.float32)
    probe_y = np.asarray(ds.y_test[:PROBES])
    reps = T.Representations(module, probe_x, probe_y, minibatches=4)
    full = _both(reps, T.WorkerSpread())
    timing = schedules.FixedTiming(np.linspace(1.0, 4.0, N))
    levels = {4: 4, 16: 8}
    work = {
        "hierarchical": (algos.hierarchical_sgd(stepsize=0.1, levels=levels),
                         schedules.hierarchical(timing, num_steps=EVENTS // N, levels=levels), full),
        "asgd": (algos.asgd(stepsize=0.05), schedules.asynchronous(timing, num_events=EVENTS), full),
        "asgd-spread": (algos.asgd(stepsize=0.05), schedules.asynchronous(timing, num_events=EVENTS), T.WorkerSpread()),
    }
    if args.quick:
        work = {"hierarchical": work["hierarchical"]}
    print(f"# {platform.processor() or platform.machine()}, jax {jax.__version__}, {jax.devices()[0].platform}; "
          f"{ds.name}, n = {N}, {EVENTS} events, 100 log points, {PROBES} probes")
    print("| workload | without (s) | with (s) | overhead |")
    print("|---|---|---|---|")
    for name, (alg, sched, tel) in work.items():
        key = jax.random.key(0)
        base, withtel = _best_pair(lambda: jax.block_until_ready(sim.run(alg, prob, sched, key=key).params),
                                   lambda: jax.block_until_ready(sim.run(alg, prob, sched, key=key, telemetry=tel).params))
        print(f"| {name} | {base:.2f} | {withtel:.2f} | {100 * (withtel / base - 1):+.1f} % |", flush=True)


if __name__ == "__main__":
    main()
