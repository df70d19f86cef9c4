"""What telemetry costs: run time with and without it, in one process.

    python -m benchmarks.telemetry                          # three workloads, 5 alternated pairs each
    python -m benchmarks.telemetry --only asgd --repeats 9  # one workload, more pairs

Workloads: an MLP (pixels→128→10) on the MNIST-format data ``sim.data.load_mnist_format`` finds
(Fashion-MNIST from Debian's package; scikit-learn's digits if none), n = 8 workers (τ_i spread
over [1, 4]), the first 8000 training images, batch 32, float32, the default log schedule (100
log points): ``hierarchical`` (hierarchical SGD, groups of 4 every 4 steps, all 8 every 16, workers
holding their own models; 1000 local steps, 8000 events), ``asgd`` (vanilla ASGD, workers holding
stale copies of the server model; 8000 events) and ``asgd-spread`` (the same with only
:class:`sim.telemetry.WorkerSpread`). Telemetry: :class:`sim.telemetry.Representations` on a fixed
probe batch of 128 labelled test images (linear CKA against the server model, the specialisation
index, minibatch CKA over 4 batches, per-layer probe gradients) plus :class:`WorkerSpread`.
Compilation is excluded; two overheads are printed (:func:`_paired_times`).
"""

from __future__ import annotations

import argparse
import platform
import time

import jax
import numpy as np

from delaylab import algos, sim
from delaylab.sim import schedules
from delaylab.sim import telemetry as T
from delaylab.sim.models import MLP

N = 8
EVENTS = 8000
PROBES = 128
TRAIN = 8000
REPEATS = 5


def _both(a, b):
    def tel(data, server, points):
        return {**a(data, server, points), **b(data, server, points)}

    return tel


def _paired_times(without, with_, repeats: int) -> np.ndarray:
    """Times of ``repeats`` pairs of calls, ``[repeats, 2]`` (without, with), alternated within
    each pair so that a slow spell of the machine hits both alike. Both are compiled first. Two
    overheads are printed from them: best/best (the best time of each variant) and the median over
    the pairs of t_with / t_without − 1, with its range, which shows how noisy the machine was."""
    without()
    with_()
    times = np.empty((repeats, 2))
    for r in range(repeats):
        for k, fn in enumerate((without, with_)):
            t0 = time.perf_counter()
            fn()
            times[r, k] = time.perf_counter() - t0
    return times


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="the hierarchical workload only")
    ap.add_argument("--only", choices=("hierarchical", "asgd", "asgd-spread"), help="one workload")
    ap.add_argument("--repeats", type=int, default=REPEATS, help="pairs of calls per workload")
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
    if args.quick or args.only:
        work = {args.only or "hierarchical": work[args.only or "hierarchical"]}
    print(f"# {platform.processor() or platform.machine()}, jax {jax.__version__}, {jax.devices()[0].platform}; "
          f"{ds.name}, n = {N}, {EVENTS} events, 100 log points, {PROBES} probes")
    print(f"# best of {args.repeats} alternated pairs; the median is over the per-pair ratios with/without")
    print("| workload | without, best (s) | with, best (s) | overhead, best/best | overhead, median of pairs (min … max) |")
    print("|---|---|---|---|---|")
    for name, (alg, sched, tel) in work.items():
        key = jax.random.key(0)
        t = _paired_times(lambda: jax.block_until_ready(sim.run(alg, prob, sched, key=key).params),
                          lambda: jax.block_until_ready(sim.run(alg, prob, sched, key=key, telemetry=tel).params),
                          args.repeats)
        base, withtel = t.min(axis=0)
        ratio = 100 * (t[:, 1] / t[:, 0] - 1)
        print(f"| {name} | {base:.2f} | {withtel:.2f} | {100 * (withtel / base - 1):+.1f} % | "
              f"{np.median(ratio):+.1f} % ({ratio.min():+.1f} … {ratio.max():+.1f} %) |", flush=True)

if __name__ == "__main__":
    main()
