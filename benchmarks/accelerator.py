"""The accelerator check: what this code does on the device JAX finds, in at most ten minutes.

    make accelerator-check                     # or: python -m benchmarks.accelerator
    python -m benchmarks.accelerator --budget 300 --figure r4 --preset full

Three measurements, each printed as a ratio against a reference run in the same process:

1. the engine benchmark (``benchmarks.engine``, d = 100): the engine's sweep of 256 seeds against
   the plain NumPy heap simulator, and the engine against its own floor (the Gaussian draws and
   dense products alone);
2. the block engine against event-by-event on the logistic workload (``benchmarks.engine``);
3. one deciding preset at full size (default ``deahes --preset medium``): its ``--estimate`` and,
   where that fits the budget left, the run, with measured over predicted.

It runs wherever JAX runs (a CPU says so), so it can be tried before a device is lent.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time

import jax


def _say(msg: str) -> None:
    print(msg, flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=float, default=600.0, help="seconds in all (default 600)")
    ap.add_argument("--figure", default="deahes", help="the deciding figure (default deahes)")
    ap.add_argument("--preset", default="medium", help="its preset (default medium)")
    ap.add_argument("--out", default=None, help="where the figure writes (default: a temporary folder)")
    args = ap.parse_args(argv)
    if args.budget <= 0:
        ap.error(f"--budget must be positive seconds; got {args.budget}")
    from delaylab import cli

    preset = ["--preset", args.preset]
    cli._parser().parse_args(["figure", args.figure, *preset])  # an unknown figure is refused before anything runs
    t0 = time.monotonic()

    def left() -> float:
        return args.budget - (time.monotonic() - t0)

    dev = jax.devices()[0]
    _say(f"device: {jax.default_backend()} ({dev.device_kind}, {jax.device_count()} device(s)); host "
         f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; jax {jax.__version__}")
    if jax.default_backend() == "cpu":
        _say("no accelerator found: these are the CPU's numbers (a dry run of the check)")

    from benchmarks import engine

    r = engine.bench_sweep(100, "quadratic")
    _say(f"1. engine, quadratic d=100, {engine.SEEDS} seeds x {r['events']} events: {r['jax_events_per_s']:.3g} ev/s, "
         f"NumPy heap reference {r['ref_events_per_s']:.3g} ev/s: {r['ratio']:.1f}x")
    floor = engine.bench_floor(100)
    _say(f"   floor (draws and products alone) {floor['max_events_per_s']:.3g} ev/s: the engine runs at "
         f"{floor['of_floor']:.2f} of it (timed alternating with them)")
    if left() > 60:
        for b in engine.bench_blocks():
            _say(f"2. block engine, logistic d={b['d']}, {b['events']} events, {b['batching']}: {b['block_s']:.3f} s "
                 f"(block size {b['block_size']}), event-by-event {b['event_s']:.3f} s: {b['speedup']:.2f}x")
    else:
        _say("2. block engine: skipped, the budget is spent")
    if left() < 60:
        _say(f"3. {args.figure} --preset {args.preset}: skipped, the budget is spent")
        return 0
    out = args.out or tempfile.mkdtemp(prefix="delaylab-accelerator-")
    # through the command line (benchmarks sit beside the figures, not above them): the estimate
    # first, then the run where the estimate fits the budget left
    if cli.main(["figure", args.figure, *preset, "--estimate", "--out", out]) != 0:
        _say(f"3. {args.figure} --preset {args.preset}: the estimate failed (its message is above)")
        return 1
    with open(os.path.join(out, ".parts", f"{args.figure}_{args.preset}", "estimate.json")) as fh:
        e = json.load(fh)
    _say(f"3. {args.figure} --preset {args.preset}: predicted {e['predicted']:.0f} s ({e['parts']} parts, "
         f"{e['runs']} simulated runs; compilation included), calibration {e['calibration']:.0f} s")
    if e["predicted"] > left():
        _say(f"   not run: the prediction exceeds the {left():.0f} s left of the budget")
        return 0
    t = time.monotonic()
    if cli.main(["figure", args.figure, *preset, "--out", out]) != 0:
        return 1
    took = time.monotonic() - t
    _say(f"   ran in {took:.0f} s: measured / predicted = {took / e['predicted']:.2f}; outputs in {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
