"""`delaylab verify`: run the scenarios, compare measured fixed points and weights with theory.

For every scenario and every registered algorithm with a step rule:

* the theory's implicit weights q (q_i ∝ γ_i/τ_i, specs/asgd.md §2.2) and fixed point x_q
  (closed form for quadratics, Newton otherwise);
* the measured fixed point x̄: the server model averaged over simulated time on the second
  half of the run;
* checks: ‖x̄ − x_q‖ against 0, ‖x̄ − x*‖ against ‖x_q − x*‖, and, for rules whose weights have a
  closed form (q_i ∝ γ_i/τ_i), the measured step-mass share of the slowest worker against it.

Plus the ``cycle-map`` scenario: at a finite step, σ = 0 and integer τ, the measured orbit
average of every registered rule against the exact periodic orbit of the composed affine maps
(``theory.periodic_orbit``), to 1e-8. And the ``noise-floor`` scenario (R3): the σ-induced
stationary gap of vanilla and Rescaled ASGD against V σ²/(4Γ), and their ratio against τ_A/τ_H.

Tolerances. Fixed points: 10% of the vanilla bias ‖x_p − x*‖, the distance between the two
candidate limits, so a pass says which of the two the method settled at (the O(γ) orbit
offset and the noise of the tail average must both stay below it). Weights: 3% of the
predicted weight (finite-horizon counts are within one arrival of T/τ_i).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from typing import Iterable

import jax
import numpy as np

import sim
import theory
from delaylab import scenarios as scenario_lib
from delaylab.registry import ALGORITHMS

FIXED_POINT_TOLERANCE = 0.10  # fraction of the vanilla bias ‖x_p − x*‖
AVERAGE_FROM = 0.5  # the measured fixed point averages the second half of simulated time
WEIGHT_TOLERANCE = 0.03  # relative to the predicted weight
# how each tolerance was obtained, printed with its rows
FIXED_POINT_BASIS = f"{FIXED_POINT_TOLERANCE:.0%} of the vanilla bias ‖x_p − x*‖"
WEIGHT_BASIS = f"{WEIGHT_TOLERANCE:.0%} of the prediction: arrival counts"


@dataclasses.dataclass
class ScenarioOutcome:
    name: str
    checks: list
    seconds: float
    bias: float
    schedule: dict  # the schedule's summary
    metrics: dict  # algorithm name -> that run's metrics (per log point)


def verify_scenario(sc: scenario_lib.Scenario, *, seed: int = 0, algorithms=None) -> ScenarioOutcome:
    """The checks of one scenario for every entry of ``algorithms`` (default: the registry's;
    a notebook passes its own :class:`delaylab.registry.AlgorithmEntry` to check a new method)."""
    started = time.perf_counter()
    problem, schedule = sc.problem(), sc.schedule()
    taus = schedule.mean_durations
    x_star = np.asarray(problem.minimiser)
    x_p = problem.weighted_minimiser(theory.frequency_weights(taus))
    bias = float(np.linalg.norm(x_p - x_star))
    tol = FIXED_POINT_TOLERANCE * bias
    slowest = int(np.argmax(taus))
    checks = []
    metrics = {}
    noisy = float(np.max(np.asarray(problem.data.get("noise", 0.0)))) > 0 if isinstance(problem.data, dict) else False
    for name, entry in (ALGORITHMS if algorithms is None else algorithms).items():
        if noisy and entry.limit_needs_no_noise:
            continue  # its limit is predicted for exact gradients only (E clip(g + ξ) ≠ clip(g))
        res = sim.run(entry.make(sc.stepsize, schedule), problem, schedule, key=jax.random.key(seed),
                      average_from=AVERAGE_FROM)
        # Theory's weights: each worker's share of the step mass in the averaging window.
        q = entry.predicted_weights(sc.stepsize, schedule, from_time=res.tail_window[0])
        x_q = entry.limit(problem, q)
        if res.divergence is not None:
            measured_point = np.full_like(x_star, np.nan)
        else:
            measured_point = np.asarray(res.tail_average, dtype=np.float64)
        metrics[name] = res.metrics
        checks += [
            theory.Check(sc.name, name, "fixed point ‖x̄ − x_q‖", 0.0,
                         float(np.linalg.norm(measured_point - x_q)), tol, FIXED_POINT_BASIS),
            # |‖x̄ − x*‖ − ‖x_q − x*‖| ≤ ‖x̄ − x_q‖: implied by the row above, shown for the bias it reads
            theory.Check(sc.name, name, "distance to optimum ‖x̄ − x*‖", float(np.linalg.norm(x_q - x_star)),
                         float(np.linalg.norm(measured_point - x_star)), tol, FIXED_POINT_BASIS, independent=False),
        ]
        closed = entry.closed_form_weights(sc.stepsize, taus)
        if closed is not None:
            q_hat = theory.measured_weights(res.worker_stats["stepsize"])
            checks.append(theory.Check(sc.name, name, f"weight q of slowest worker ({slowest})", float(closed[slowest]),
                                       float(q_hat[slowest]), WEIGHT_TOLERANCE * float(closed[slowest]), WEIGHT_BASIS))
    return ScenarioOutcome(sc.name, checks, time.perf_counter() - started, bias, schedule.summary(), metrics)


ORBIT_TOLERANCE = 1e-8  # absolute, on ‖x̄ − x_orbit‖ with x of order 1 (float64)
ORBIT_SCENARIO = "cycle-map"


def verify_orbit(*, stepsize: float = 0.02, seed: int = 0, algorithms=None) -> ScenarioOutcome:
    """The measured orbit average at a finite step against the exact cycle map (spec §2.3), for
    every entry of ``algorithms`` (default: the registry's) that has one.

    n = 5, d = 3, τ = (1, 2, 3, 5, 8), σ = 0. The run lasts whole hyperperiods (H = 120) and is
    averaged over its second half; the burn-in is long enough for ρ(M)^periods < 1e-12.
    """
    started = time.perf_counter()
    taus = np.array([1.0, 2.0, 3.0, 5.0, 8.0])
    problem = sim.problems.random_quadratic(5, 3, condition=3.0, spread=2.0, seed=5)
    A, b = problem.curvature
    checks, metrics, summary = [], {}, {}
    for name, entry in (ALGORITHMS if algorithms is None else algorithms).items():
        if not entry.has_cycle_map:
            continue
        orbit = theory.periodic_orbit(A, b, taus, entry.step(stepsize, taus, len(taus)))
        burn_in = max(2, int(np.ceil(-12 * np.log(10) / np.log(max(orbit.spectral_radius, 1e-300)))) + 1)
        periods = 2 * burn_in
        schedule = sim.schedules.fixed_computation(taus, num_events=periods * orbit.events_per_period)
        res = sim.run(entry.make(stepsize, schedule), problem, schedule, key=jax.random.key(seed), average_from=0.5)
        metrics[name] = res.metrics
        summary = schedule.summary()
        checks.append(theory.Check(ORBIT_SCENARIO, name, "orbit average ‖x̄ − x_orbit‖ (cycle map)", 0.0,
                                   float(np.linalg.norm(np.asarray(res.tail_average) - orbit.average)), ORBIT_TOLERANCE,
                                   "absolute: float64 rounding over the run"))
    return ScenarioOutcome(ORBIT_SCENARIO, checks, time.perf_counter() - started, float("nan"), summary, metrics)


NOISE_SCENARIO = "noise-floor"
NOISE_TOLERANCE = 0.10  # relative: the small-step formula ignores staleness (spec §2.3)
NOISE_BASIS = f"{NOISE_TOLERANCE:.0%}: the small-step formula ignores staleness"


def verify_noise_floor(*, stepsize: float = 0.003, seed: int = 0) -> ScenarioOutcome:
    """R3: the noise-induced stationary gap E F_q(x) − F_q(x_q) against V σ²/(4Γ) (spec §2.3).

    n = 4, d = 5, τ = (1, 2, 3, 5), σ = 1. The finite-step orbit adds a deterministic O(γ²) gap of
    its own, so the measured quantity is the gap with noise minus the gap of the same run with
    σ = 0 (same schedule). Also: Rescaled's floor over vanilla's, predicted τ_A/τ_H.
    """
    started = time.perf_counter()
    taus = np.array([1.0, 2.0, 3.0, 5.0])
    noisy = sim.problems.random_quadratic(4, 5, condition=3.0, spread=1.0, noise=1.0, seed=3)
    exact = sim.problems.random_quadratic(4, 5, condition=3.0, spread=1.0, noise=0.0, seed=3)
    A, b = noisy.curvature
    schedule = sim.schedules.fixed_computation(taus, num_events=300_000)
    checks, metrics, measured = [], {}, {}
    for name in ("asgd", "rescaled_asgd"):
        entry = ALGORITHMS[name]
        steps = entry.closed_form_steps(stepsize, taus)
        q = theory.implicit_weights(steps, taus)
        gaps = []
        for problem in (noisy, exact):
            res = sim.run(entry.make(stepsize, schedule), problem, schedule, key=jax.random.key(seed), log_every=7,
                          record_params=True)
            tail = res.metrics["time"] > 0.2 * res.metrics["time"][-1]
            gaps.append(float(theory.quadratic_gaps(A, b, q, res.metrics["params"][tail]).mean()))
        metrics[name] = {k: v for k, v in res.metrics.items() if k != "params"}
        predicted = theory.noise_floor(A, b, taus, steps, 1.0).gap_weighted
        measured[name] = gaps[0] - gaps[1]
        checks.append(theory.Check(NOISE_SCENARIO, name, "noise floor E F_q − F_q(x_q), σ-induced", predicted,
                                   measured[name], NOISE_TOLERANCE * predicted, NOISE_BASIS))
    ratio = theory.arithmetic_mean(taus) / theory.harmonic_mean(taus)
    checks.append(theory.Check(NOISE_SCENARIO, "rescaled_asgd", "floor ratio Rescaled / vanilla (τ_A/τ_H)", ratio,
                               measured["rescaled_asgd"] / measured["asgd"], NOISE_TOLERANCE * ratio, NOISE_BASIS))
    return ScenarioOutcome(NOISE_SCENARIO, checks, time.perf_counter() - started, float("nan"), schedule.summary(), metrics)


def verify(names: Iterable[str] | None = None, *, progress=None) -> list[ScenarioOutcome]:
    wanted = list(names or [])
    extra = (ORBIT_SCENARIO, NOISE_SCENARIO)
    chosen = scenario_lib.SCENARIOS if not wanted else [scenario_lib.scenario(n) for n in wanted if n not in extra]
    runs = [(sc.name, sc.description, lambda sc=sc: verify_scenario(sc)) for sc in chosen]
    if not wanted or ORBIT_SCENARIO in wanted:
        runs.append((ORBIT_SCENARIO, "finite-step orbit vs the exact cycle map, n=5, τ=(1,2,3,5,8), σ=0", verify_orbit))
    if not wanted or NOISE_SCENARIO in wanted:
        runs.append((NOISE_SCENARIO, "noise floors of vanilla and Rescaled vs the small-step formula, σ=1", verify_noise_floor))
    outcomes = []
    for k, (name, description, job) in enumerate(runs, start=1):
        if progress:
            progress(f"[{k}/{len(runs)}] {name}: {description}")
        outcomes.append(job())
        if progress:
            ok = sum(c.passed for c in outcomes[-1].checks)
            progress(f"        {ok}/{len(outcomes[-1].checks)} checks pass ({outcomes[-1].seconds:.1f} s)")
    return outcomes


def _progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def run_verify(out_dir: str | None, *, as_json: bool, names=None, figure=None, quiet: bool = False) -> int:
    """The `delaylab verify` command. Returns the exit status (0 iff every check passes).

    ``figure``: ``figure(out_dir) -> path``, called once the checks are written (the command line
    passes the bias toy's figure; this module draws nothing itself, since figures sit above it)."""
    jax.config.update("jax_enable_x64", True)  # theory checks run in float64 (DESIGN.md, Numbers)
    from sim import store

    outcomes = verify(names, progress=None if quiet else _progress)
    checks = [c for o in outcomes for c in o.checks]
    rows = [c.as_dict() for c in checks]
    if out_dir:
        store.open_run_folder(out_dir, {"command": "verify", "scenarios": [o.name for o in outcomes],
                                        "fixed_point_tolerance": FIXED_POINT_TOLERANCE,
                                        "weight_tolerance": WEIGHT_TOLERANCE})
        store.write_json(os.path.join(out_dir, "checks.json"), rows)
        store.write_csv(os.path.join(out_dir, "checks.csv"), rows)
        store.write_json(os.path.join(out_dir, "summary.json"), {
            "checks": len(checks), "passed": sum(c.passed for c in checks),
            "independent_checks": sum(c.independent for c in checks),
            "independent_passed": sum(c.passed for c in checks if c.independent),
            "scenarios": {o.name: {"seconds": o.seconds, "vanilla_bias": o.bias, "schedule": o.schedule}
                          for o in outcomes}})
        runs_dir = os.path.join(out_dir, "runs")
        os.makedirs(runs_dir, exist_ok=True)
        for o in outcomes:
            for alg_name, m in o.metrics.items():
                store.write_metrics(runs_dir, m, name=f"{o.name}-{alg_name}")
        if figure is not None:
            fig_path = figure(out_dir)
            if not quiet:
                _progress(f"figure: {fig_path}")
    if as_json:
        import json

        print(json.dumps(rows, indent=2))
    else:
        print(theory.format_table(checks))
        print("\n" + theory.summary_line(checks))
        if out_dir:
            print(f"results written to {out_dir}/")
    return 0 if all(c.passed for c in checks) else 1
