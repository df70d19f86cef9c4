"""`delaylab verify`: run the scenarios once, then compare what they measured with a theory.

The public face of three modules: :mod:`delaylab.measure` runs the simulations,
:mod:`delaylab.checking` turns one set of measurements into checks under a :class:`theory.Theory`
(default :data:`theory.PAPER`), and :mod:`delaylab.verify_command` is the command line's
`delaylab verify` (table, output folder, `--mutants`). Measurement and prediction are kept apart
so that `--mutants` (:mod:`delaylab.mutants`) can check the same runs under wrong theories.

Every function that runs algorithms takes ``algorithms``: :func:`verify`, :func:`measure` and
:func:`run_verify` check those entries beside the registered ones; :func:`verify_scenario` and
:func:`verify_orbit` check only the entries given (default: the registry's).
"""

from __future__ import annotations

from typing import Iterable

import jax

from delaylab import scenarios as scenario_lib
from delaylab.checking import (FIXED_POINT_CAP, NOISE_TOLERANCE, ORBIT_TOLERANCE, FiniteStep, Memo, ScenarioOutcome,
                               Tolerance, check, check_noise_floor, check_orbit, check_scenario, outcome, outcomes)
from delaylab.measure import (AVERAGE_FROM, NOISE_SCENARIO, NOISE_TAUS, ORBIT_SCENARIO, ORBIT_TAUS, Measured, Run,
                              measure, measure_noise_floor, measure_orbit, measure_scenario, with_registered)
from delaylab.verify_command import run_verify

__all__ = [
    "AVERAGE_FROM", "FIXED_POINT_CAP", "NOISE_SCENARIO", "NOISE_TAUS", "NOISE_TOLERANCE", "ORBIT_SCENARIO",
    "ORBIT_TAUS", "ORBIT_TOLERANCE", "FiniteStep", "Measured", "Memo", "Run", "ScenarioOutcome", "Tolerance",
    "check", "check_noise_floor", "check_orbit", "check_scenario", "measure", "measure_noise_floor",
    "measure_orbit", "measure_scenario", "outcome", "outcomes", "run_verify", "verify", "verify_noise_floor",
    "verify_orbit", "verify_scenario", "with_registered",
]


def verify(names: Iterable[str] | None = None, *, algorithms=None, progress=None,
           step_scale: float = 1.0, only=None) -> list[ScenarioOutcome]:
    """The scenarios (all, or those named) measured and checked under the published theory, for
    every registered algorithm and every entry of ``algorithms`` (an iterable of
    :class:`delaylab.registry.AlgorithmEntry` or a dict name → entry; a name the registry holds
    for another entry is a ValueError). ``progress``: called with a line per scenario.
    ``step_scale`` multiplies the scenarios' steps and ``only`` names the algorithms to check (see
    :func:`delaylab.measure.measure`). Runs in
    float64 within this call; the process-wide precision is left as it was."""
    with jax.enable_x64(True):
        return outcomes(measure(names, algorithms=algorithms, progress=progress, step_scale=step_scale,
                                        only=only))


def verify_scenario(sc: scenario_lib.Scenario, *, seed: int = 0, algorithms=None) -> ScenarioOutcome:
    """The checks of one scenario for every entry of ``algorithms`` (default: the registry's;
    a notebook passes its own :class:`delaylab.registry.AlgorithmEntry` to check a new method)."""
    m = measure_scenario(sc, seed=seed, algorithms=algorithms)
    return outcome(m, check_scenario(m))


def verify_orbit(*, stepsize: float = 0.02, seed: int = 0, algorithms=None) -> ScenarioOutcome:
    """The cycle-map checks for every exact per-arrival rule of ``algorithms`` (default: the registry's)."""
    m = measure_orbit(stepsize=stepsize, seed=seed, algorithms=algorithms)
    return outcome(m, check_orbit(m))


def verify_noise_floor(*, stepsize: float = 0.003, seed: int = 0, algorithms=None) -> ScenarioOutcome:
    """The noise-floor checks (default: vanilla and Rescaled ASGD, and their ratio)."""
    m = measure_noise_floor(stepsize=stepsize, seed=seed, algorithms=algorithms)
    return outcome(m, check_noise_floor(m))

