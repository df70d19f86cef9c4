"""How long `delaylab figure deahes` (full preset: MNIST-format 28×28, 150 rounds, 3 seeds) takes on
this machine, from short runs of the full configuration.

    python -m benchmarks.deahes_full [--rounds 5 10] [--workers 4 8] [--data PATH]

Every part of the figure (for each P: the a0 calibration, which is the EAHES-O program on the
failure-free schedule, and the six methods) is one compiled sweep over τ ∈ {1, 2, 4} × seeds: a
compile plus a cost per communication round that is the same for every round (P jobs of τ local
steps each, and an evaluation of the master every ``log_rounds`` rounds). One seed's runs go one
after another (``runs="map"``), so that cost grows linearly in the seeds, and each part is timed at
the full preset's sizes with one seed and two round counts r1 < r2 (multiples of ``log_rounds``):

    seconds(150 rounds, 3 seeds) ≈ T(r1) + (150 · 3 − r1) · (T(r2) − T(r1)) / (r2 − r1)

Prints each part's compile-and-overhead, seconds per round, and the estimate, then the total.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time

import jax
import numpy as np

from delaylab import deahes


def _timed(alg, problem, schedule, hp, cfg, P) -> float:
    t = time.perf_counter()
    res = deahes.sweep(alg, problem, schedule, jax.random.split(jax.random.key(0), 1), hp, P, cfg)
    jax.block_until_ready(res.metrics["loss"])
    return time.perf_counter() - t


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, nargs=2, default=None, metavar=("R1", "R2"),
                    help="the two short runs' rounds (default: one and two evaluation periods of the preset)")
    ap.add_argument("--workers", type=int, nargs="+", default=list(deahes.WORKERS))
    ap.add_argument("--data", default=None, help="MNIST-format data (default: the usual places)")
    ap.add_argument("--preset", default="full", choices=[k for k, v in deahes.PRESETS.items() if v.data != "digits"])
    ap.add_argument("--parts", nargs="+", default=None, metavar="PART",
                    help="time only these parts (calibration and the method names; default: all)")
    ap.add_argument("--batching", choices=("vmap", "map"), default=None,
                    help="how a round's worker jobs run (default: the preset's)")
    args = ap.parse_args(argv)
    cfg = deahes.PRESETS[args.preset]
    if args.batching:
        cfg = dataclasses.replace(cfg, batching=args.batching)
    r1, r2 = args.rounds or (cfg.log_rounds, 2 * cfg.log_rounds)
    if not 0 < r1 < r2:
        ap.error(f"--rounds needs 0 < R1 < R2; got {r1} {r2}")
    if r1 % cfg.log_rounds or r2 % cfg.log_rounds:
        ap.error(f"--rounds must be multiples of the preset's evaluation period ({cfg.log_rounds} rounds), "
                 f"so that the short runs evaluate as often as the full one; got {r1} {r2}")
    jax.config.update("jax_enable_x64", True)  # as `delaylab figure` runs it
    name, Xtr, ytr, Xte, yte = deahes.dataset(cfg, args.data)
    full_rounds, seeds = cfg.rounds, cfg.seeds
    periods = np.asarray(cfg.periods, np.int32)
    print(f"deahes {cfg.name} preset ({cfg.batching}) on {name}: {len(ytr)} training / {len(yte)} test images, eval_size {cfg.eval_size}, "
          f"{full_rounds} rounds × {seeds} seeds; timed at {r1} and {r2} rounds, 1 seed; jax {jax.__version__}, "
          f"{jax.devices()[0].platform}", flush=True)
    total = 0.0
    for P in args.workers:
        problems = deahes.problems(P, cfg, Xtr, ytr, Xte, yte)
        algs = deahes.algorithms(trace=P * full_rounds, failure=cfg.semantics)
        parts = [("calibration",) + algs["EAHES-O"] + (False,)] + [(m,) + v + (True,) for m, v in algs.items()]
        for label, alg, split, failing in parts:
            if args.parts and label not in args.parts:
                continue
            hp = {"period": periods}
            if label == "DEAHES-O":
                hp["a0"] = np.ones(len(periods), np.float32)
            t = [_timed(alg, problems[split], deahes.schedules_for(P, cfg, r)[int(failing)], hp, cfg, P) for r in (r1, r2)]
            per_round = max(t[1] - t[0], 0.0) / (r2 - r1)
            est = t[0] + (full_rounds * seeds - r1) * per_round
            total += est
            print(f"  P={P} {label:11s} {r1} round(s) {t[0]:7.1f} s, {r2} rounds {t[1]:7.1f} s → "
                  f"{per_round:6.2f} s per round and seed → {est / 3600:5.2f} h for the full part", flush=True)
    print(f"estimated {cfg.name} preset ({'the parts timed' if args.parts else 'all parts'}) on this machine: {total / 3600:.1f} h ({total:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
