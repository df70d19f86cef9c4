"""Per-event cost of the table methods against vanilla ASGD, in one process (R5's workload).

    python -m benchmarks.tables            # one run and a 6-run sweep, 1000 events each
    python -m benchmarks.tables --quick    # one run only, 400 events

Workload: the R5 MLP (784–128–10, batch 4) on n = 100 workers with random stand-in data (the
cost does not depend on the pixel values), fixed computation τ_i = i, float32. IA²SGD, Malenia
and Ringleader keep n model-sized rows on the server (40 MB here); vanilla ASGD keeps none. If
their per-event cost is within a small factor of vanilla's, the tables are updated in place
(algos/_rows.py); a full table copy per event shows up as a ratio above 10.

Each timing is the best of 2 calls after a compiling call. The last line printed is the worst
ratio (table method / vanilla) of the single runs, as ``<ratio>x``.
"""

from __future__ import annotations

import argparse
import time

import jax
import numpy as np

from delaylab import algos, sim
from delaylab.sim import schedules
from delaylab.sim.models import mlp_classifier

N = 100


def _methods():
    return {
        "vanilla ASGD": algos.asgd(stepsize=0.01),
        "IA²SGD": algos.ia2sgd(stepsize=0.01),
        "Malenia SGD": algos.malenia_sgd(stepsize=0.2, batch=N),
        "Ringleader ASGD": algos.ringleader_asgd(stepsize=0.005),
    }


def _time(fn) -> float:
    jax.block_until_ready(fn())
    best = np.inf
    for _ in range(2):
        t = time.perf_counter()
        jax.block_until_ready(fn())
        best = min(best, time.perf_counter() - t)
    return best


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    events = 400 if args.quick else 1000
    rng = np.random.default_rng(0)
    X = rng.random((N * 60, 784), dtype=np.float32)
    y = rng.integers(0, 10, N * 60)
    problem = mlp_classifier(X, y, num_workers=N, split="iid", batch_size=4, dtype=np.float32)
    schedule = schedules.fixed_computation(np.arange(1.0, N + 1), num_events=events)
    print(f"MLP 784-128-10, n = {N}, {events} events, {jax.default_backend()}, jax {jax.__version__}")
    single, swept = {}, {}
    for name, alg in _methods().items():
        single[name] = _time(lambda: sim.run(alg, problem, schedule, key=jax.random.key(1), log_every=events).params)
        line = f"{name:16s} one run: {1e3 * single[name] / events:6.2f} ms/event"
        if not args.quick:
            keys = jax.random.split(jax.random.key(1), 6)
            first = next(iter(alg.hparams))
            hp = {first: np.asarray([alg.hparams[first]])}
            swept[name] = _time(lambda: sim.sweep(alg, problem, schedule, keys=keys, hparams=hp,
                                                  log_every=events).params)
            line += f"; 6-run sweep: {6 * events / swept[name]:7.0f} run-events/s"
        print(line, flush=True)
    base = single["vanilla ASGD"]
    ratios = {k: v / base for k, v in single.items() if k != "vanilla ASGD"}
    for k, r in ratios.items():
        print(f"{k:16s} / vanilla, one run: {r:.2f}x")
    print(f"{max(ratios.values()):.2f}x")


if __name__ == "__main__":
    main()
