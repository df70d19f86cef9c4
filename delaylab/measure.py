"""The measuring half of `delaylab verify`: run each scenario's simulations once.

:func:`measure` runs the scenarios (or those named) for every registered algorithm and any extra
entries; each scenario kind has its own function: :func:`measure_scenario` (fixed point and
weights), :func:`measure_orbit` (the cycle map at a finite step, σ = 0, integer τ) and
:func:`measure_noise_floor` (the σ-induced floors of vanilla and Rescaled ASGD). What the runs
are compared with lives in :mod:`delaylab.checking` (the published theory is read here only for
the cycle map's run length).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Iterable, Mapping, Optional

import jax
import numpy as np

from delaylab import sim, theory
import delaylab.theory.model
from delaylab import scenarios as scenario_lib
from delaylab.registry import ALGORITHMS, AlgorithmEntry

AVERAGE_FROM = 0.5  # the measured fixed point averages the second half of simulated time
MC_BATCHES = 8  # batch means of the tail average (each batch spans several correlation times)


@dataclasses.dataclass
class Run:
    """What the checks read from one simulated run."""

    point: np.ndarray  # the tail average x̄ (NaN if the run diverged)
    mass: np.ndarray  # step mass each worker received over the whole run
    schedule_weights: np.ndarray  # q read off the realised schedule (window), for schedule-based rows
    standard_error: float  # ‖SE‖ of x̄ from batch means (0 for exact gradients)
    metrics: dict
    trajectories: Optional[list] = None  # noise-floor runs: the logged models (σ = 1, σ = 0)
    stepsize: Optional[float] = None  # γ the method ran with


@dataclasses.dataclass
class Measured:
    """A scenario's runs."""

    name: str
    description: str
    kind: str  # "scenario", "orbit" or "noise"
    stepsize: float
    problem: object
    schedule: object
    runs: dict
    seconds: float
    entries: dict  # the algorithm entries that ran
    extra: dict = dataclasses.field(default_factory=dict)



def _noisy(problem) -> bool:
    data = problem.data
    return isinstance(data, dict) and float(np.max(np.asarray(data.get("noise", 0.0)))) > 0


def _batch_standard_error(times, params, t0: float) -> float:
    """‖SE‖ of the time average of ``params`` over [t0, end] by batch means."""
    use = times > t0
    xs = np.asarray(params, dtype=np.float64)[use]
    batches = np.array_split(xs, MC_BATCHES)
    means = np.stack([b.mean(0) for b in batches])
    return float(np.sqrt(np.sum(means.var(0, ddof=1)) / MC_BATCHES))


def measure_scenario(sc: scenario_lib.Scenario, *, seed: int = 0, algorithms=None, step_scale: float = 1.0) -> Measured:
    """Every entry of ``algorithms`` (default: the registry's) on the scenario, once: the tail
    average, each worker's step mass and the schedule-based weights q. ``step_scale`` multiplies
    every step of the scenario (its own and its overrides), so that an O(γ) offset can be watched
    shrinking with γ; the tolerances follow the step each method ran at."""
    started = time.perf_counter()
    problem, schedule = sc.problem(), sc.schedule()
    entries = ALGORITHMS if algorithms is None else _as_entries(algorithms)
    noisy = _noisy(problem)
    # With gradient noise x̄ is a random variable: its standard error is measured by batch means
    # of the logged server models. (Random durations are not noise here: theory replays the
    # realised events, see _finite_step.)
    random = noisy
    runs, used = {}, {}
    for name, entry in entries.items():
        if noisy and entry.limit_needs_no_noise:
            continue  # its limit is predicted for exact gradients only (E clip(g + ξ) ≠ clip(g))
        log_every = max(1, schedule.num_events // 4000) if random else None
        gamma = step_scale * dict(sc.step_overrides).get(name, sc.stepsize)
        res = sim.run(entry.make(gamma, schedule), problem, schedule, key=jax.random.key(seed),
                      average_from=AVERAGE_FROM, record_params=random,
                      **({"log_every": log_every} if log_every else {}))
        point = (np.full(np.shape(problem.minimiser), np.nan) if res.divergence is not None
                 else np.asarray(res.tail_average, dtype=np.float64))
        se = 0.0
        metrics = res.metrics
        if random:
            se = _batch_standard_error(res.metrics["time"], res.metrics["params"], res.tail_window[0])
            metrics = {k: v for k, v in res.metrics.items() if k != "params"}
        mass = res.worker_stats.get("stepsize")  # recorded by algorithms that apply per-arrival steps
        runs[name] = Run(point, None if mass is None else np.asarray(mass, dtype=np.float64),
                         entry.predicted_weights(gamma, schedule, from_time=res.tail_window[0]), se, metrics,
                         stepsize=gamma)
        used[name] = entry
    return Measured(sc.name, sc.description, "scenario", step_scale * sc.stepsize, problem, schedule, runs,
                    time.perf_counter() - started, used)


ORBIT_SCENARIO = "cycle-map"
ORBIT_DESCRIPTION = "finite-step orbit vs the exact cycle map, n=5, τ=(1,2,3,5,8), σ=0"
ORBIT_TAUS = (1.0, 2.0, 3.0, 5.0, 8.0)


def _orbit_problem():
    return sim.problems.random_quadratic(5, 3, condition=3.0, spread=2.0, seed=5)


def measure_orbit(*, stepsize: float = 0.02, seed: int = 0, algorithms=None) -> Measured:
    """Every exact per-arrival rule of ``algorithms`` (default: the registry's) at a finite step, run for whole hyperperiods (H = 120), long
    enough for ρ(M)^periods < 1e-12 under the published theory, averaged over its second half.
    n = 5, d = 3, τ = (1, 2, 3, 5, 8), σ = 0."""
    started = time.perf_counter()
    taus = np.array(ORBIT_TAUS)
    problem = _orbit_problem()
    A, b = problem.curvature
    runs, used, schedule = {}, {}, None
    for name, entry in (ALGORITHMS if algorithms is None else _as_entries(algorithms)).items():
        if not entry.has_cycle_map:
            continue
        orbit = theory.PAPER.periodic_orbit(A, b, taus, entry.rule, stepsize)
        burn_in = max(2, int(np.ceil(-12 * np.log(10) / np.log(max(orbit.spectral_radius, 1e-300)))) + 1)
        schedule = sim.schedules.fixed_computation(taus, num_events=2 * burn_in * orbit.events_per_period)
        res = sim.run(entry.make(stepsize, schedule), problem, schedule, key=jax.random.key(seed), average_from=0.5)
        runs[name] = Run(np.asarray(res.tail_average, dtype=np.float64), None, None, 0.0, res.metrics)
        used[name] = entry
    return Measured(ORBIT_SCENARIO, ORBIT_DESCRIPTION, "orbit", stepsize, problem, schedule, runs,
                    time.perf_counter() - started, used)


NOISE_SCENARIO = "noise-floor"
NOISE_DESCRIPTION = "noise floors of vanilla and Rescaled vs the small-step formula, σ=1"
NOISE_PAIR = ("asgd", "rescaled_asgd")  # the floor ratio compares these two
NOISE_TAUS = (1.0, 2.0, 3.0, 5.0)


def noise_floor_covers(entry: AlgorithmEntry) -> bool:
    """Whether the small-step noise-floor formula describes the method: a rule of τ alone (so its
    steps are fixed per worker), every arrival the exact affine map, no clipping."""
    return (entry.rule is not None and theory.model.is_tau_only(entry.rule) and entry.exact_arrival_map
            and entry.clip is None)


def measure_noise_floor(*, stepsize: float = 0.003, seed: int = 0, num_events: int = 300_000,
                        algorithms=None) -> Measured:
    """R3: runs with σ = 1 and with σ = 0 (same schedule), their server models logged every 7
    events. n = 4, d = 5, τ = (1, 2, 3, 5). (The tests use fewer events.) ``algorithms``: the
    entries to run, of which those :func:`noise_floor_covers` run (default: vanilla and
    Rescaled ASGD, whose floor ratio is checked)."""
    started = time.perf_counter()
    taus = np.array(NOISE_TAUS)
    noisy = sim.problems.random_quadratic(4, 5, condition=3.0, spread=1.0, noise=1.0, seed=3)
    exact = sim.problems.random_quadratic(4, 5, condition=3.0, spread=1.0, noise=0.0, seed=3)
    schedule = sim.schedules.fixed_computation(taus, num_events=num_events)
    entries = ({name: ALGORITHMS[name] for name in NOISE_PAIR} if algorithms is None
               else {k: e for k, e in _as_entries(algorithms).items() if noise_floor_covers(e)})
    runs, used = {}, {}
    for name, entry in entries.items():
        trajectories = []
        for problem in (noisy, exact):
            res = sim.run(entry.make(stepsize, schedule), problem, schedule, key=jax.random.key(seed), log_every=7,
                          record_params=True)
            tail = res.metrics["time"] > 0.2 * res.metrics["time"][-1]
            trajectories.append(np.asarray(res.metrics["params"][tail], dtype=np.float64))
        runs[name] = Run(None, None, None, 0.0, {k: v for k, v in res.metrics.items() if k != "params"}, trajectories)
        used[name] = entry
    return Measured(NOISE_SCENARIO, NOISE_DESCRIPTION, "noise", stepsize, noisy, schedule, runs,
                    time.perf_counter() - started, used)


def _as_entries(algorithms) -> dict:
    """``algorithms`` as a dict name → entry: a dict as given, an iterable of entries by their names."""
    if isinstance(algorithms, Mapping):
        entries = dict(algorithms)
    else:
        entries = {}
        for entry in algorithms:
            if not isinstance(entry, AlgorithmEntry):
                raise TypeError(f"algorithms: expected delaylab.registry.AlgorithmEntry, got {type(entry).__name__}")
            if entry.name in entries and entries[entry.name] != entry:
                raise ValueError(f"algorithms: two different entries are named {entry.name!r}")
            entries[entry.name] = entry
    for name, entry in entries.items():
        if not isinstance(entry, AlgorithmEntry):
            raise TypeError(f"algorithms[{name!r}]: expected delaylab.registry.AlgorithmEntry, "
                            f"got {type(entry).__name__}")
    return entries


def with_registered(algorithms=None) -> tuple[dict, dict]:
    """(every entry to check, the extra ones): the registry's entries plus ``algorithms`` (an
    iterable of :class:`delaylab.registry.AlgorithmEntry` or a dict name → entry). An extra entry
    that is the registered one of its name adds nothing; any other name clash is a ValueError."""
    extra = {} if algorithms is None else _as_entries(algorithms)
    for name, entry in extra.items():
        if name in ALGORITHMS and ALGORITHMS[name] != entry:
            raise ValueError(f"algorithm {name!r} is already registered (delaylab.registry.ALGORITHMS); "
                             "give the extra entry another name")
    extra = {name: entry for name, entry in extra.items() if name not in ALGORITHMS}
    return {**ALGORITHMS, **extra}, extra


def measure(names: Iterable[str] | None = None, *, algorithms=None, progress=None, step_scale: float = 1.0,
            only: Iterable[str] | None = None) -> list:
    """Run the scenarios (all, or those named) for every registered algorithm and every entry of
    ``algorithms`` (see :func:`with_registered`), or only for the algorithms named in ``only``.
    ``progress``: called with a line per scenario. ``step_scale`` multiplies the steps of the
    quadratic and logistic scenarios (not the cycle map's or the noise floor's, whose checks are
    exact at their own steps)."""
    if not (isinstance(step_scale, (int, float)) and not isinstance(step_scale, bool) and 0 < step_scale <= 1e3):
        raise ValueError(f"step_scale must be a number in (0, 1000]; got {step_scale!r}")
    entries, extra = with_registered(algorithms)
    if only is not None:
        only = list(only)
        unknown = sorted(set(only) - set(entries))
        if unknown or not only:
            raise ValueError(f"unknown algorithm(s) {unknown or only}; registered: {sorted(entries)}")
        entries = {k: v for k, v in entries.items() if k in only}
        extra = {k: v for k, v in extra.items() if k in only}
    wanted = list(names or [])
    special = (ORBIT_SCENARIO, NOISE_SCENARIO)
    chosen = scenario_lib.SCENARIOS if not wanted else [scenario_lib.scenario(n) for n in wanted if n not in special]
    jobs = [(sc.name, sc.description, lambda sc=sc: measure_scenario(sc, algorithms=entries, step_scale=float(step_scale))) for sc in chosen]
    if not wanted or ORBIT_SCENARIO in wanted:
        jobs.append((ORBIT_SCENARIO, ORBIT_DESCRIPTION, lambda: measure_orbit(algorithms=entries)))
    pair = {name: ALGORITHMS[name] for name in NOISE_PAIR if only is None or name in only}
    if (not wanted or NOISE_SCENARIO in wanted) and (pair or extra):
        jobs.append((NOISE_SCENARIO, NOISE_DESCRIPTION, lambda: measure_noise_floor(algorithms={**pair, **extra})))
    out = []
    for k, (name, description, job) in enumerate(jobs, start=1):
        if progress:
            progress(f"[{k}/{len(jobs)}] {name}: {description}")
        out.append(job())
        if progress:
            progress(f"        {len(out[-1].runs)} runs ({out[-1].seconds:.1f} s)")
    return out
