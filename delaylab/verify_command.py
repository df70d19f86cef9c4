"""The `delaylab verify` command: measure, check, optionally try the mutant theories, then print
the table and write the checks, summary, run metrics and figure to the output folder."""

from __future__ import annotations

import os
import sys

import jax

from delaylab import theory, checking
from delaylab import mutants as mutant_lib
from delaylab.measure import measure
from delaylab.sim import store


def _progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def run_verify(out_dir: str | None, *, as_json: bool, names=None, figure=None, quiet: bool = False,
               mutants: bool = False, mutant_list=None, algorithms=None, step_scale: float = 1.0,
               only=None) -> int:
    """The `delaylab verify` command. Returns the exit status: 0 iff every check passes (and,
    with ``mutants``, every mutant theory fails some check).

    ``figure``: ``figure(out_dir) -> path``, called once the checks are written (the command line
    passes the bias toy's figure; this module draws nothing itself, since figures sit above it).
    ``mutant_list``: the :class:`delaylab.mutants.Mutant` to try (default: ``delaylab.mutants.MUTANTS``).
    ``algorithms``: entries checked beside the registered ones (see :func:`delaylab.measure.measure`).
    ``step_scale``: multiplies the scenarios' steps; ``only``: the algorithms to check (default: all;
    see :func:`delaylab.measure.measure`).

    The checks run in float64 (docs/theory.md), within this call only: the process-wide setting
    is left as it was."""
    with jax.enable_x64(True):
        return _run_verify(out_dir, as_json=as_json, names=names, figure=figure, quiet=quiet, mutants=mutants,
                           mutant_list=mutant_list, algorithms=algorithms, step_scale=step_scale, only=only)


def _run_verify(out_dir, *, as_json, names, figure, quiet, mutants, mutant_list, algorithms, step_scale, only) -> int:
    measured = measure(names, algorithms=algorithms, progress=None if quiet else _progress, step_scale=step_scale,
                       only=only)
    memo = checking.Memo()
    synthetic: dict = {}
    outcomes = checking.outcomes(measured, memo, synthetic)
    checks = [c for o in outcomes for c in o.checks]
    rows = [c.as_dict() for c in checks]
    report = None
    if mutants:
        report = mutant_lib.score(measured, checks, list(mutant_lib.MUTANTS if mutant_list is None else mutant_list),
                                  memo=memo,
                                  progress=None if quiet else _progress)
    if out_dir:
        store.open_run_folder(out_dir, {"command": "verify", "scenarios": [o.name for o in outcomes],
                                        "fixed_point_cap": checking.FIXED_POINT_CAP, "mutants": mutants,
                                        "step_scale": step_scale, "only": only})
        store.write_json(os.path.join(out_dir, "checks.json"), rows)
        store.write_csv(os.path.join(out_dir, "checks.csv"), rows)
        store.write_json(os.path.join(out_dir, "summary.json"), {
            "checks": len(checks), "passed": sum(c.passed for c in checks),
            "independent_checks": sum(c.counted for c in checks),
            "independent_passed": sum(c.passed for c in checks if c.counted),
            "schedule_based_checks": sum(c.schedule_based for c in checks),
            "synthetic_2_percent": synthetic,
            "mutants": None if report is None else report.as_dict(),
            "scenarios": {o.name: {"seconds": o.seconds, "vanilla_bias": o.bias, "schedule": o.schedule}
                          for o in outcomes}})
        runs_dir = os.path.join(out_dir, "runs")
        os.makedirs(runs_dir, exist_ok=True)
        for o in outcomes:
            for alg_name, mt in o.metrics.items():
                store.write_metrics(runs_dir, mt, name=f"{o.name}-{alg_name}")
        if figure is not None:
            fig_path = figure(out_dir)
            if not quiet:
                _progress(f"figure: {fig_path}")
    if as_json:
        print(store.dumps_json(rows if report is None else {"checks": rows, "mutants": report.as_dict()}))
    else:
        print(theory.format_table(checks))
        print("\n" + theory.summary_line(checks))
        if report is not None:
            print("\n" + report.format(synthetic))
        if out_dir:
            print(f"results written to {out_dir}/")
    ok = all(c.passed for c in checks)
    if report is not None:
        ok = ok and report.survivors == []
    return 0 if ok else 1
