"""How many communication rounds a DEAHES run needs before its curves count as flattened, so that a
preset's verdicts are not a check of the pipeline (the short-run rule of docs/findings.md: over the
last fifth of the rounds the mean training loss falls by at most 5% of its whole fall).

    python -m benchmarks.deahes_flat [--preset medium] [--rounds 400] [--workers 4] [--periods 1 4] EASGD@0.1 EAHES-O@0.05

Runs each METHOD@η once (seed 0, the preset's failures, semantics and periods) for ``--rounds``
rounds, logged every ``log_rounds``, and prints, for every τ and every horizon T that is a multiple
of 100 up to ``--rounds``, the share of the fall the last fifth of [0, T] holds and the final loss
there: under i.i.d. losses a run of T rounds is the first T rounds of the long run (the loss draws
and the keys do not depend on the horizon), so one run gives every shorter horizon; presets with
outages, whose blocks do, are refused.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time

import numpy as np

from delaylab import claims, deahes


def shares(rounds: np.ndarray, curve: np.ndarray, horizons) -> list:
    """(T, share of the fall in the last fifth of [0, T] (:func:`delaylab.claims.fall_share`), loss
    at T) for each horizon T logged."""
    out = []
    for T in horizons:
        k = int(np.searchsorted(rounds, T, side="right"))
        if k >= 2 and rounds[k - 1] == T:
            out.append((int(T), claims.fall_share(rounds[:k], curve[:k]), float(curve[k - 1])))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", metavar="METHOD@η", help="e.g. EASGD@0.1 EAHES-O@0.05")
    ap.add_argument("--preset", default="medium", choices=sorted(deahes.PRESETS))
    ap.add_argument("--rounds", type=int, default=400)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--periods", type=int, nargs="+", default=None, help="the τ values (default: the preset's)")
    ap.add_argument("--data", default=None, help="an MNIST-format folder (default: the preset's search)")
    args = ap.parse_args(argv)
    runs = []
    for r in args.runs:
        m, _, eta = r.partition("@")
        allowed = [x for x in deahes.METHODS if x != "DEAHES-O"]  # DEAHES-O needs a0, calibrated by the figure
        if m not in allowed or not eta:
            ap.error(f"each run is METHOD@η with METHOD one of {', '.join(allowed)}; got {r!r}")
        runs.append((m, float(eta)))
    if args.rounds < 100:
        ap.error(f"--rounds must be at least 100; got {args.rounds}")
    if args.periods is not None and min(args.periods) < 1:
        ap.error(f"--periods must be positive; got {args.periods}")
    if deahes.PRESETS[args.preset].failures != "iid":
        ap.error(f"preset {args.preset!r} has outages, whose blocks depend on the number of rounds: a long run's "
                 "first T rounds are not a run of T rounds; use a preset with i.i.d. losses")
    cfg = dataclasses.replace(deahes.PRESETS[args.preset], rounds=args.rounds)
    if args.periods is not None:
        cfg = dataclasses.replace(cfg, periods=tuple(args.periods))
    P = args.workers
    _, Xtr, ytr, Xte, yte = deahes.dataset(cfg, args.data)
    algs = deahes.algorithms(trace=P * cfg.rounds, failure=cfg.semantics, oracles=("full reset",))
    probs = deahes.problems(P, cfg, Xtr, ytr, Xte, yte, seed=0)
    _, failing = deahes.schedules_for(P, cfg, seed=0)
    print(f"{args.preset}: P = {P}, τ ∈ {cfg.periods}, {cfg.failures} failures ({cfg.semantics}), seed 0; "
          f"share of the fall in the last fifth (the rule allows {claims.FLAT:.0%}), loss at T")
    for m, eta in runs:
        alg, split = algs[m]
        t = time.perf_counter()
        res = deahes.sweep(alg, probs[split], failing, deahes.keys(0), deahes.sweep_hparams(cfg.periods, eta), P, cfg)
        loss = np.asarray(res.metrics["loss"], np.float64)[:, 0]  # [τ, logs]
        rounds = np.asarray(res.metrics["events"], np.float64) / P
        for ti, tau in enumerate(cfg.periods):
            got = shares(rounds, loss[ti], range(100, args.rounds + 1, 100))
            print(f"  {m} η = {eta:g}, τ = {tau}: " + "; ".join(f"T = {T}: {s:.1%} (F {f:.3f})" for T, s, f in got))
        print(f"  ({m}: {time.perf_counter() - t:.0f} s for {args.rounds} rounds)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
