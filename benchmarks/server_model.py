"""How well the closed network's rates (theory.queueing, docs/theory.md §14) predict the update
shares of the simulated server, and how far fixed computation's 1/τ_i is from them.

    python -m benchmarks.server_model [--events 200000] [--seeds 5]

For n ∈ {4, 8, 16} workers with job times spread 8× (τ_i from 1 to 8, evenly in log), links of
5% of the fastest job each way, and a server whose mean service time is 1%, 10% or 50% of the
fastest job (its share of a cycle from small to large), fixed or exponential: each worker's
share of the updates in simulated schedules (``sim.schedules.served``, ``--seeds`` schedules of
``--events`` events; exponential service resamples per seed, fixed service is deterministic) against
X_i/Σ X_j and against (1/τ_i)/Σ(1/τ_j). Prints the largest absolute error of each over the
workers, the mean over seeds with its 95% half-width, and the server's utilisation. Then, on
random heterogeneous quadratics (n = 8, d = 10, 20 instances), how much of vanilla ASGD's bias
‖x_q − x*‖ the server's time removes, and how much it gives Rescaled ASGD, whose steps γ_i ∝ τ_i
were set for rates 1/τ_i (docs/theory.md §14): the closed form's weights, as the service time grows.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from delaylab import claims
from delaylab.sim import schedules as S
from delaylab.theory import queueing, weights


def shares(n: int, service: float, kind: str, events: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    taus = np.geomspace(1.0, 8.0, n)
    link = 0.05
    sched = S.served(S.FixedTiming(taus), S.Server(service, uplink=link, downlink=link, kind=kind, seed=seed),
                     num_events=events)
    half = sched.finish >= 0.5 * sched.end_time  # past the start, when every worker began together
    got = np.bincount(sched.worker[half], minlength=n) / np.sum(half)
    x = queueing.throughputs(taus + 2 * link, service)
    return got, x / x.sum()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--seeds", type=int, default=5)
    args = ap.parse_args(argv)
    print("| n | service / fastest job | service | utilisation | max error, closed form | max error, 1/τ_i |")
    print("|---:|---:|---|---:|---:|---:|")
    for n in (4, 8, 16):
        taus = np.geomspace(1.0, 8.0, n)
        for service in (0.01, 0.1, 0.5):
            for kind in ("fixed", "exponential"):
                seeds = range(args.seeds if kind == "exponential" else 1)
                model, fixed = [], []
                for seed in seeds:
                    got, predicted = shares(n, service, kind, args.events, seed)
                    model.append(np.max(np.abs(got - predicted)))
                    fixed.append(np.max(np.abs(got - weights.frequency_weights(taus))))
                util = queueing.utilisation(taus + 0.1, service)

                def show(v):
                    v = np.asarray(v)
                    return f"{v[0]:.4f}" if v.size == 1 else str(claims.paired_interval(v))

                print(f"| {n} | {service:g} | {kind} | {util:.2f} | {show(model)} | {show(fixed)} |", flush=True)
    print()
    biases(n=8, instances=20)
    return 0


def biases(n: int, instances: int) -> None:
    """Vanilla's and Rescaled's bias under the server's closed-form weights, relative to vanilla's
    under fixed computation, per service time (mean and range over instances)."""
    from delaylab.sim import problems
    from delaylab.theory.fixed_point import quadratic_fixed_point as limit

    taus = np.geomspace(1.0, 8.0, n)
    link = 0.05
    print("| service / fastest job | utilisation | vanilla's bias / fixed computation's | Rescaled's bias / vanilla's "
          "under fixed computation |")
    print("|---:|---:|---:|---:|")
    for service in (0.0, 0.01, 0.1, 0.3, 1.0):
        x = queueing.throughputs(taus + 2 * link, service)
        rows = []
        for seed in range(instances):
            prob = problems.random_quadratic(n, 10, condition=4.0, spread=2.0, seed=seed)
            A, b = prob.curvature
            star = np.asarray(prob.minimiser, np.float64)
            fixed = np.linalg.norm(limit(A, b, weights.frequency_weights(taus)) - star)
            vanilla = np.linalg.norm(limit(A, b, x / x.sum()) - star)
            rescaled = np.linalg.norm(limit(A, b, taus * x / np.sum(taus * x)) - star)
            rows.append((vanilla / fixed, rescaled / fixed))
        r = np.asarray(rows)
        util = queueing.utilisation(taus + 2 * link, service) if service > 0 else 0.0
        print(f"| {service:g} | {util:.2f} | {r[:, 0].mean():.3f} ({r[:, 0].min():.3f}–{r[:, 0].max():.3f}) | "
              f"{r[:, 1].mean():.3f} ({r[:, 1].min():.3f}–{r[:, 1].max():.3f}) |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
