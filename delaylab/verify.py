"""`delaylab verify`: run the scenarios once, then compare what they measured with a theory.

Measurement and prediction are kept apart. :func:`measure` runs the simulations; :func:`check`
turns one set of measurements into checks under a :class:`theory.Theory` (default
:data:`theory.PAPER`). So `--mutants` (:mod:`delaylab.mutants`) can ask, from the same runs,
whether each of a list of plausible wrong theories fails some check.

Per scenario and registered algorithm:

* **fixed point**: x̄, the server model averaged over the second half of simulated time, against
  theory's prediction for the run. Its γ → 0 part is x_q, the limit for the method's implicit
  weights q (specs/asgd.md §2.2). q is a closed form of τ where the theory has one (every τ-only
  rule; delay-dependent rules under fixed computation, whose staleness follows from τ: over a
  hyperperiod where that is short, over the averaging window's arrivals generated from τ
  otherwise; the table methods' uniform weights); else it is read off the realised schedule and
  the row says "schedule-based". Where every arrival is an exact affine map, theory also predicts
  the finite-step offset δ_γ (:func:`_finite_step`) and the check is two-sided,
  ‖x̄ − (x_q + δ_γ)‖ against what that computation leaves out; for the methods theory has no
  finite-step model of, ‖x̄ − x_q‖ against the cap, 2% of the vanilla bias ‖x_p − x*‖. No
  tolerance exceeds the cap (plus, with noisy gradients, the Monte Carlo term).
* **weight of the slowest worker**, measured step-mass share against the closed form, tolerance
  from the arrivals a finite run can count differently (its ends and the first staleness).

With random durations the τ-only rules' weights take the realised arrival rates, so those rows
are schedule-based too: over a finite window the renewal counts move x_q by more than a fixed-
point tolerance (0.6% of the bias in ``exponential``).

Plus the ``cycle-map`` scenario: at a finite step, σ = 0 and integer τ, every exact per-arrival
rule's orbit average against the periodic orbit of the composed affine maps, built by theory from
the rule's equation (not from ``algos``), to 1e-8. And the ``noise-floor`` scenario (R3): the
σ-induced stationary gap of vanilla and Rescaled ASGD against V σ²/(4Γ), and their ratio against
τ_A/τ_H (10%: the small-step formula ignores staleness).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import sys
import time
from typing import Iterable, Optional

import jax
import numpy as np

import sim
import theory
import theory.model
from delaylab import scenarios as scenario_lib
from delaylab.registry import ALGORITHMS, AlgorithmEntry
from theory import orbit as orbit_lib

AVERAGE_FROM = 0.5  # the measured fixed point averages the second half of simulated time
FIXED_POINT_CAP = 0.02  # fraction of the vanilla bias ‖x_p − x*‖ no model-based tolerance exceeds unnoticed
MC_STANDARD_ERRORS = 6.0  # the Monte Carlo part of a tolerance, in standard errors (8 batch means: a t₇ quantile)
MC_BATCHES = 8  # batch means of the tail average (each batch spans several correlation times)
REPLAY_PASSES = 12  # at most, for the replays at γ/2, γ/4, γ/8 to settle
MAX_PERIOD_EVENTS = 5000  # periodic schedules with longer hyperperiods are replayed instead
SYNTHETIC_SHIFT = 0.02  # the synthetic method of --mutants settles at x* + 0.02 (x_p − x*)


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


@dataclasses.dataclass
class ScenarioOutcome:
    name: str
    checks: list
    seconds: float
    bias: float
    schedule: dict  # the schedule's summary
    metrics: dict  # algorithm name -> that run's metrics (per log point)


# --- measurement ------------------------------------------------------------------------------------


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


def measure_scenario(sc: scenario_lib.Scenario, *, seed: int = 0, algorithms=None) -> Measured:
    started = time.perf_counter()
    problem, schedule = sc.problem(), sc.schedule()
    entries = ALGORITHMS if algorithms is None else algorithms
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
        gamma = dict(sc.step_overrides).get(name, sc.stepsize)
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
    return Measured(sc.name, sc.description, "scenario", sc.stepsize, problem, schedule, runs,
                    time.perf_counter() - started, used)


ORBIT_TOLERANCE = 1e-8  # absolute, on ‖x̄ − x_orbit‖ with x of order 1 (float64)
ORBIT_SCENARIO = "cycle-map"
ORBIT_TAUS = (1.0, 2.0, 3.0, 5.0, 8.0)


def _orbit_problem():
    return sim.problems.random_quadratic(5, 3, condition=3.0, spread=2.0, seed=5)


def measure_orbit(*, stepsize: float = 0.02, seed: int = 0, algorithms=None) -> Measured:
    """Every exact per-arrival rule at a finite step, run for whole hyperperiods (H = 120), long
    enough for ρ(M)^periods < 1e-12 under the published theory, averaged over its second half.
    n = 5, d = 3, τ = (1, 2, 3, 5, 8), σ = 0."""
    started = time.perf_counter()
    taus = np.array(ORBIT_TAUS)
    problem = _orbit_problem()
    A, b = problem.curvature
    runs, used, schedule = {}, {}, None
    for name, entry in (ALGORITHMS if algorithms is None else algorithms).items():
        if not entry.has_cycle_map:
            continue
        orbit = theory.PAPER.periodic_orbit(A, b, taus, entry.rule, stepsize)
        burn_in = max(2, int(np.ceil(-12 * np.log(10) / np.log(max(orbit.spectral_radius, 1e-300)))) + 1)
        schedule = sim.schedules.fixed_computation(taus, num_events=2 * burn_in * orbit.events_per_period)
        res = sim.run(entry.make(stepsize, schedule), problem, schedule, key=jax.random.key(seed), average_from=0.5)
        runs[name] = Run(np.asarray(res.tail_average, dtype=np.float64), None, None, 0.0, res.metrics)
        used[name] = entry
    return Measured(ORBIT_SCENARIO, "finite-step orbit vs the exact cycle map, n=5, τ=(1,2,3,5,8), σ=0", "orbit",
                    stepsize, problem, schedule, runs, time.perf_counter() - started, used)


NOISE_SCENARIO = "noise-floor"
NOISE_TOLERANCE = 0.10  # relative: the small-step formula ignores staleness (spec §2.3)
NOISE_BASIS = f"{NOISE_TOLERANCE:.0%}: the small-step formula ignores staleness"
NOISE_TAUS = (1.0, 2.0, 3.0, 5.0)


def measure_noise_floor(*, stepsize: float = 0.003, seed: int = 0, num_events: int = 300_000) -> Measured:
    """R3: runs of vanilla and Rescaled with σ = 1 and with σ = 0 (same schedule), their server
    models logged every 7 events. n = 4, d = 5, τ = (1, 2, 3, 5). (The tests use fewer events.)"""
    started = time.perf_counter()
    taus = np.array(NOISE_TAUS)
    noisy = sim.problems.random_quadratic(4, 5, condition=3.0, spread=1.0, noise=1.0, seed=3)
    exact = sim.problems.random_quadratic(4, 5, condition=3.0, spread=1.0, noise=0.0, seed=3)
    schedule = sim.schedules.fixed_computation(taus, num_events=num_events)
    runs, used = {}, {}
    for name in ("asgd", "rescaled_asgd"):
        entry = ALGORITHMS[name]
        trajectories = []
        for problem in (noisy, exact):
            res = sim.run(entry.make(stepsize, schedule), problem, schedule, key=jax.random.key(seed), log_every=7,
                          record_params=True)
            tail = res.metrics["time"] > 0.2 * res.metrics["time"][-1]
            trajectories.append(np.asarray(res.metrics["params"][tail], dtype=np.float64))
        runs[name] = Run(None, None, None, 0.0, {k: v for k, v in res.metrics.items() if k != "params"}, trajectories)
        used[name] = entry
    return Measured(NOISE_SCENARIO, "noise floors of vanilla and Rescaled vs the small-step formula, σ=1", "noise",
                    stepsize, noisy, schedule, runs, time.perf_counter() - started, used)


# --- prediction ---------------------------------------------------------------------------------------


class _Memo:
    """Finite-step offsets already computed, keyed by what determines them (the steps each
    arrival gets), so that checking many theories against one measurement recomputes only what
    a theory changes."""

    def __init__(self):
        self.store = {}

    def get(self, key, compute):
        if key not in self.store:
            self.store[key] = compute()
        return self.store[key]


def _digest(*arrays) -> str:
    h = hashlib.sha1()
    for a in arrays:
        h.update(np.ascontiguousarray(np.asarray(a, dtype=np.float64)).tobytes())
    return h.hexdigest()


def _fixed_computation(schedule) -> bool:
    """Whether every job lasts exactly its worker's τ_i and arrives (so the staleness of each
    arrival, and with it a delay-dependent rule's steps, follows from τ alone when τ is integer)."""
    dur = schedule.finish - schedule.start
    return bool(np.all(schedule.delivered)
                and np.allclose(dur, schedule.mean_durations[schedule.worker], rtol=0, atol=1e-9))


def _periodic_taus(schedule) -> Optional[np.ndarray]:
    """τ under fixed computation with integer τ whose hyperperiod has at most MAX_PERIOD_EVENTS
    arrivals (the cycle map is then cheap); else None."""
    taus = schedule.mean_durations
    if not (_fixed_computation(schedule) and np.all(taus == np.round(taus))):
        return None
    ints = [int(v) for v in taus]
    H = math.lcm(*ints)  # Python integers: no overflow
    return taus if sum(H // v for v in ints) <= MAX_PERIOD_EVENTS else None


def _linearised(problem, x):
    """(A_i, b_i) of the quadratic that matches each F_i to second order at x."""
    G, H = problem.derivatives(np.asarray(x, dtype=np.float64))
    b = np.stack([x - np.linalg.solve(H[i], G[i]) for i in range(G.shape[0])])
    return H, b


@dataclasses.dataclass(frozen=True)
class Tolerance:
    value: float
    basis: str


@dataclasses.dataclass(frozen=True)
class FiniteStep:
    """Theory's prediction of a finite-step run's average beyond its γ → 0 limit x_q.

    offset: the O(γ) offset vector δ_γ (None: theory has no finite-step model of the method);
    tolerance: what the offset's computation leaves out, or the cap where there is no model."""

    offset: Optional[np.ndarray]
    tolerance: Tolerance


def _sensitivity(A, b, q, x) -> np.ndarray:
    """‖∂x_q/∂q_i‖ = ‖(Σ_j q_j A_j)^{-1} A_i (b_i − x)‖ at x (q normalised; first order)."""
    A = np.asarray(A, dtype=np.float64)
    dense = A if A.ndim == 3 else np.stack([np.diag(a) for a in A])
    q = np.asarray(q, dtype=np.float64) / np.sum(q)
    Aq = np.einsum("i,ijk->jk", q, dense)
    pulls = np.einsum("ijk,ik->ij", dense, np.asarray(b, dtype=np.float64) - x)
    return np.linalg.norm(np.linalg.solve(Aq, pulls.T).T, axis=1)


def _share(value: float, bias: float) -> str:
    return f"{value / bias:.2%} of the bias" if bias > 0 else "the bias is 0"


def _finite_step(m: Measured, entry: AlgorithmEntry, th: theory.Theory, x_q, q, bias: float, run: Run,
                 memo: _Memo) -> FiniteStep:
    """The O(γ) offset of this run's average from x_q and the tolerance of x̄ − x_q − δ_γ.

    Where every arrival is an exact affine map of the (possibly linearised) quadratic, theory
    computes the finite-step average at γ, γ/2 and γ/4, from the exact periodic orbit when the
    schedule is periodic and by replaying the run's event list otherwise, and extrapolates to
    γ → 0 (Richardson): δ_γ is the average at γ less that limit, the limit being the model's own,
    never x_q, so a wrong x_q cannot absorb its error. The check is then two-sided,
    ‖x̄ − x_q − δ_γ‖ against what the extrapolation leaves out: its uncertainty (twice), the
    averaging window's partial period or ends, the transient, and, with noisy gradients,
    MC_STANDARD_ERRORS batch-means standard errors of x̄. Elsewhere the tolerance is the cap."""
    cap = FIXED_POINT_CAP * bias
    problem, schedule, gamma = m.problem, m.schedule, run.stepsize
    taus = schedule.mean_durations
    floor = 1e-9 * max(1.0, float(np.linalg.norm(x_q)))
    mc = MC_STANDARD_ERRORS * run.standard_error
    mc_note = f" + {MC_STANDARD_ERRORS:g} SE of the tail average {mc:.1g}" if mc else ""
    if not entry.has_finite_step_model:
        return FiniteStep(None, Tolerance(cap + mc, f"{FIXED_POINT_CAP:.0%} of the bias (cap): theory has no "
                                                    f"finite-step model of this method{mc_note}"))
    periodic = _periodic_taus(schedule) if entry.rule is not None else None
    t0, T = AVERAGE_FROM * schedule.end_time, schedule.end_time
    try:
        if problem.curvature is not None:
            A, b = problem.curvature
            where = ""
        else:  # first order in γ, the offset is that of the problem linearised at the limit
            A, b = _linearised(problem, x_q)
            where = " of the problem linearised at x_q"
        if periodic is not None:
            _, period_workers, _ = orbit_lib.hyperperiod_arrays(periodic)
            period_staleness = th.period_staleness(period_workers, periodic)

            def orbit_at(scale):
                steps = th.event_steps(entry.rule, gamma * scale, periodic, period_workers, period_staleness)
                key = ("orbit", m.name, id(th.compose), _digest(steps, A, b))
                return memo.get(key, lambda: th.periodic_orbit(A, b, periodic, entry.rule, gamma * scale))

            orbits = [orbit_at(s) for s in (1.0, 0.5, 0.25)]
            est = orbit_lib.richardson([o.average for o in orbits])
            o = orbits[0]
            window = 2 * o.amplitude * o.period / (T - t0)
            transient = o.spectral_radius ** int(t0 // o.period) * (
                float(np.linalg.norm(np.asarray(problem.x0, dtype=np.float64) - o.start)) + o.amplitude)
            value = 2 * est.uncertainty + window + transient + mc + floor
            basis = (f"δ_γ ({est.offset:.2g}, {_share(est.offset, bias)}) from the exact periodic orbit{where} at"
                     f" γ, γ/2, γ/4; tolerance: 2 × Richardson uncertainty {est.uncertainty:.1g} + partial period "
                     f"{window:.1g} + transient {transient:.1g}{mc_note}")
            offset = o.average - est.limit
        else:
            if entry.rule is not None:
                staleness = th.run_staleness(schedule.worker, schedule.finish)
                base = th.event_steps(entry.rule, gamma, taus, schedule.worker, staleness)
            else:  # the method's own clock decides which arrivals apply (each applied one is the affine map)
                base = entry.event_steps(gamma, schedule)
            steps = np.stack([s * base for s in (1.0, 0.5, 0.25, 0.125)])

            def replay():
                first, state = orbit_lib.replayed_averages(A, b, problem.x0, schedule.finish, schedule.worker,
                                                           schedule.end_time, steps, average_from=AVERAGE_FROM)
                # Smaller steps mix more slowly: replay them over the events again, from where they
                # ended, until their averages settle (to 1% of the γ-to-γ/2 difference).
                start, previous, change = (state[0][1:], state[1][1:]), first[1:], np.inf
                settle = max(0.01 * float(np.linalg.norm(first[0] - first[1])),
                             1e-12 * (1.0 + float(np.linalg.norm(first[0]))))
                for _ in range(REPLAY_PASSES):
                    again, end = orbit_lib.replayed_averages(A, b, None, schedule.finish, schedule.worker,
                                                             schedule.end_time, steps[1:], average_from=AVERAGE_FROM,
                                                             start=start)
                    change = float(np.max(np.linalg.norm(again - previous, axis=1)))
                    start, previous = end, again
                    if change <= settle:
                        break
                est = orbit_lib.richardson([first[0], again[0], again[1]])
                # Along an aperiodic or random event list the averages need not be smooth in γ to
                # all orders: the uncertainty is also the disagreement with the extrapolation one
                # halving further down (γ/2, γ/4, γ/8), and what the last pass still changed.
                lower = orbit_lib.richardson([again[0], again[1], again[2]])
                spread = float(np.linalg.norm(est.limit - lower.limit))
                return first[0], dataclasses.replace(est, uncertainty=max(est.uncertainty, spread, change))

            average, est = memo.get(("replay", m.name, _digest(steps, A, b)), replay)
            offset = average - est.limit
            # The window holds a whole number of neither periods nor arrivals: q, the step mass of
            # the window's arrivals, can differ from the shares the dynamics settle on by about
            # one arrival of each worker at each end. Bounded to first order with the model's own
            # window shares q̂ (not the q under test): Σ_i 2 (largest step_i/mass_i) q̂_i ‖∂x/∂q_i‖.
            window = schedule.delivered & (schedule.finish >= t0)
            mass = np.bincount(schedule.worker[window], weights=base[window], minlength=taus.size)
            largest = np.zeros(taus.size)
            np.maximum.at(largest, schedule.worker[window], base[window])
            own = mass / mass.sum()
            relative = np.where(mass > 0, 2 * largest / np.where(mass > 0, mass, 1.0), 0.0)
            ends = float(np.sum(relative * own * _sensitivity(A, b, own, est.limit)))
            value = 2 * est.uncertainty + ends + mc + floor
            basis = (f"δ_γ ({est.offset:.2g}, {_share(est.offset, bias)}) of the exact dynamics{where} replayed "
                     f"along the run's events at γ, γ/2, γ/4 (γ/8); tolerance: 2 × Richardson uncertainty "
                     f"{est.uncertainty:.1g} + window ends {ends:.1g}{mc_note}")
    except (ValueError, np.linalg.LinAlgError) as err:  # e.g. a (wrong) theory whose orbit does not contract
        return FiniteStep(None, Tolerance(float("nan"), f"the theory's finite-step model failed: {err}"))
    if value - mc > cap:  # the model cannot say more than the cap: check x_q against the cap instead
        return FiniteStep(None, Tolerance(cap + mc, f"{FIXED_POINT_CAP:.0%} of the bias (cap): theory's finite-step "
                                                    f"model did not converge ({basis}){mc_note}"))
    return FiniteStep(offset, Tolerance(value, basis))


def _weight_tolerance(m: Measured, entry: AlgorithmEntry, th: theory.Theory, q: np.ndarray, worker: int,
                      run: Run, basis: str) -> Tolerance:
    """How far a finite run's step-mass share can sit from the closed form: each worker's count
    of arrivals can differ from T/τ_i by its last, unfinished job, and (delay-dependent rules) its
    arrivals in the first 2τ_max, before the staleness settles, each charged the largest step an
    arrival can get; relative to the total step mass theory predicts for the run. A prediction that
    counts the run's own arrivals (schedule-based, or generated from τ) differs by float rounding."""
    if basis != "closed form":  # the prediction counts the run's arrivals (or generates them from τ)
        steps = entry.event_steps(run.stepsize, m.schedule) if entry.rule is None else None
        largest = np.full(q.size, run.stepsize) if steps is None else np.array(
            [steps[m.schedule.worker == i].max(initial=0.0) for i in range(q.size)])
        if entry.rule is not None and theory.model.is_tau_only(entry.rule):
            largest = th.tau_steps(entry.rule, run.stepsize, m.schedule.mean_durations)
        c = 2 * largest  # one arrival of each worker at each end of the run
        total = float(run.mass.sum()) if basis == "schedule-based" else float(np.sum(
            np.prod(th.window_steps(entry.rule, run.stepsize, m.schedule.mean_durations, 0.0, m.schedule.end_time),
                    axis=0)))
        value = float((c[worker] + q[worker] * c.sum()) / max(total - c.sum(), 1e-300))
        return Tolerance(value, f"an arrival of each worker at each end ({value / q[worker]:.2%} of the prediction)")
    schedule = m.schedule
    taus = schedule.mean_durations
    T = schedule.end_time
    tau_only = theory.model.is_tau_only(entry.rule)
    # the largest step one arrival of each worker can get under the rule
    gamma_max = th.tau_steps(entry.rule, run.stepsize, taus) if tau_only else np.full(taus.size, run.stepsize)
    slack = np.ones(taus.size)
    if not tau_only:
        slack += 2 * taus.max() / taus + 1
    total = float(np.sum(T / taus * th.mean_steps(entry.rule, run.stepsize, taus)))
    c = slack * gamma_max
    value = float((c[worker] + q[worker] * c.sum()) / max(total - c.sum(), 1e-300))
    return Tolerance(value, f"arrivals a finite run counts differently ({value / q[worker]:.2%} of the prediction)")


def _mean_durations(schedule, start: float, end: float) -> np.ndarray:
    """Each worker's mean job duration over the jobs that finish in [start, end]."""
    inside = schedule.delivered & (schedule.finish >= start) & (schedule.finish <= end)
    dur = (schedule.finish - schedule.start)[inside]
    w = schedule.worker[inside]
    n = schedule.num_workers
    return np.bincount(w, weights=dur, minlength=n) / np.maximum(np.bincount(w, minlength=n), 1)


def _closed_form_q(entry: AlgorithmEntry, th: theory.Theory, gamma: float, schedule,
                   window: tuple[float, float]) -> tuple[Optional[np.ndarray], str]:
    """(q, how it was obtained): "closed form" where theory gives q from τ alone for this schedule,
    "generated from τ" for delay-dependent rules under fixed computation whose period is too long
    (the window's arrivals generated from τ), "schedule-based" where it must be read off the
    realised schedule (random durations; methods with their own server clock), with q None for
    the caller to read."""
    taus = schedule.mean_durations
    if entry.rule is not None:
        if not _fixed_computation(schedule):
            if theory.model.is_tau_only(entry.rule):
                # the rule's steps use the nominal τ_i; the arrival rates are the realised ones
                rates = _mean_durations(schedule, *window)
                return th.implicit_weights(th.tau_steps(entry.rule, gamma, taus), rates), "schedule-based"
            return None, "schedule-based"  # random durations: the staleness is not a function of τ
        if theory.model.is_tau_only(entry.rule) or _periodic_taus(schedule) is not None:
            return th.closed_form_weights(entry.rule, gamma, taus), "closed form"
        return th.window_weights(entry.rule, gamma, taus, *window), "generated from τ"
    if entry.weights_fn is not None:  # the table methods: unbiased, q uniform
        return np.full(len(taus), 1.0 / len(taus)), "closed form"
    return None, "schedule-based"


def _bias(m: Measured, th: theory.Theory) -> tuple[float, np.ndarray, np.ndarray]:
    x_star = np.asarray(m.problem.minimiser, dtype=np.float64)
    x_p = th.limit(m.problem, th.frequency_weights(m.schedule.mean_durations))
    return float(np.linalg.norm(x_p - x_star)), x_p, x_star


def _safe(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except (ValueError, RuntimeError, np.linalg.LinAlgError):
        return None


def check_scenario(m: Measured, th: theory.Theory = theory.PAPER, memo: Optional[_Memo] = None,
                   synthetic: Optional[dict] = None) -> list:
    """The checks of one scenario's runs under theory ``th``. ``synthetic``, if given, receives
    per scenario whether a method settling at x* + 0.02 (x_p − x*) fails Rescaled ASGD's fixed-point
    check, and the numbers that decide it."""
    memo = memo or _Memo()
    taus = m.schedule.mean_durations
    bias, x_p, x_star = _bias(m, th)
    slowest = int(np.argmax(taus))
    checks = []
    for name, run in m.runs.items():
        entry = m.entries[name]
        T = m.schedule.end_time
        q, basis = _closed_form_q(entry, th, run.stepsize, m.schedule, (AVERAGE_FROM * T, T))
        if q is None:
            q = run.schedule_weights
        x_q = _safe(th.limit, m.problem, q, clip=entry.clip)
        x_q = np.full_like(x_star, np.nan) if x_q is None else x_q
        note = ""
        if entry.clip is not None:
            G, _ = m.problem.derivatives(x_q) if np.all(np.isfinite(x_q)) else (np.full((taus.size, 1), np.inf), None)
            active = [i for i in range(taus.size) if np.linalg.norm(G[i]) > entry.clip]
            if not active:
                continue  # no gradient clipped at the limit: the same prediction as vanilla's row
            note = f"; clipping active for workers {active}"
        fs = _finite_step(m, entry, th, x_q, q, bias, run, memo)
        predicted = x_q if fs.offset is None else x_q + fs.offset
        what = "x_q" if fs.offset is None else "x_q + δ_γ"
        quantity = f"fixed point ‖x̄ − ({what})‖" + (" (schedule-based q)" if basis == "schedule-based" else "")
        checks.append(theory.Check(m.name, name, quantity, 0.0, float(np.linalg.norm(run.point - predicted)),
                                   fs.tolerance.value, fs.tolerance.basis + note,
                                   schedule_based=basis == "schedule-based"))
        if synthetic is not None and name == "rescaled_asgd":
            fake = run.point + SYNTHETIC_SHIFT * (x_p - x_star)
            error = float(np.linalg.norm(fake - predicted))
            synthetic[m.name] = {"error": error, "tolerance": fs.tolerance.value, "caught": not error <= fs.tolerance.value,
                                 "shift": SYNTHETIC_SHIFT * bias, "own_error": float(np.linalg.norm(run.point - predicted))}
        if entry.rule is not None and entry.closed_form and entry.clip is None and run.mass is not None:
            closed, row_basis = _closed_form_q(entry, th, run.stepsize, m.schedule, (0.0, T))
            if closed is None:
                closed = entry.predicted_weights(run.stepsize, m.schedule)
            wt = _weight_tolerance(m, entry, th, closed, slowest, run, row_basis)
            q_hat = run.mass / run.mass.sum()
            checks.append(theory.Check(
                m.name, name, f"weight q of slowest worker ({slowest})" + ("" if row_basis == "closed form" else f" ({row_basis})"),
                float(closed[slowest]), float(q_hat[slowest]), wt.value, wt.basis,
                schedule_based=row_basis == "schedule-based"))
    return checks


def check_orbit(m: Measured, th: theory.Theory = theory.PAPER, memo=None, synthetic=None) -> list:
    A, b = m.problem.curvature
    taus = np.array(ORBIT_TAUS)
    checks = []
    for name, run in m.runs.items():
        orbit = _safe(th.periodic_orbit, A, b, taus, m.entries[name].rule, m.stepsize)
        predicted = np.full(3, np.nan) if orbit is None else orbit.average
        checks.append(theory.Check(ORBIT_SCENARIO, name, "orbit average ‖x̄ − x_orbit‖ (cycle map)", 0.0,
                                   float(np.linalg.norm(run.point - predicted)), ORBIT_TOLERANCE,
                                   "absolute: float64 rounding over the run"))
    return checks


def check_noise_floor(m: Measured, th: theory.Theory = theory.PAPER, memo=None, synthetic=None) -> list:
    A, b = m.problem.curvature
    taus = np.array(NOISE_TAUS)
    checks, measured = [], {}
    for name, run in m.runs.items():
        steps = th.tau_steps(m.entries[name].rule, m.stepsize, taus)
        q = th.implicit_weights(steps, taus)
        noisy, exact = (float(theory.quadratic_gaps(A, b, q, xs).mean()) for xs in run.trajectories)
        measured[name] = noisy - exact
        predicted = th.noise_floor(A, b, taus, steps, 1.0)
        checks.append(theory.Check(NOISE_SCENARIO, name, "noise floor E F_q − F_q(x_q), σ-induced", predicted,
                                   measured[name], NOISE_TOLERANCE * predicted, NOISE_BASIS))
    ratio = th.floor_ratio(taus)
    checks.append(theory.Check(NOISE_SCENARIO, "rescaled_asgd", "floor ratio Rescaled / vanilla (τ_A/τ_H)", ratio,
                               measured["rescaled_asgd"] / measured["asgd"], NOISE_TOLERANCE * ratio, NOISE_BASIS))
    return checks


_CHECKERS = {"scenario": check_scenario, "orbit": check_orbit, "noise": check_noise_floor}


def check(measured: list, th: theory.Theory = theory.PAPER, memo: Optional[_Memo] = None,
          synthetic: Optional[dict] = None) -> list:
    """Every check of the measurements under theory ``th``."""
    memo = memo or _Memo()
    return [c for m in measured for c in _CHECKERS[m.kind](m, th, memo, synthetic)]


# --- the command ------------------------------------------------------------------------------------


def verify_scenario(sc: scenario_lib.Scenario, *, seed: int = 0, algorithms=None) -> ScenarioOutcome:
    """The checks of one scenario for every entry of ``algorithms`` (default: the registry's;
    a notebook passes its own :class:`delaylab.registry.AlgorithmEntry` to check a new method)."""
    m = measure_scenario(sc, seed=seed, algorithms=algorithms)
    return _outcome(m, check_scenario(m))


def verify_orbit(*, stepsize: float = 0.02, seed: int = 0, algorithms=None) -> ScenarioOutcome:
    m = measure_orbit(stepsize=stepsize, seed=seed, algorithms=algorithms)
    return _outcome(m, check_orbit(m))


def verify_noise_floor(*, stepsize: float = 0.003, seed: int = 0) -> ScenarioOutcome:
    m = measure_noise_floor(stepsize=stepsize, seed=seed)
    return _outcome(m, check_noise_floor(m))


def _outcome(m: Measured, checks: list) -> ScenarioOutcome:
    bias = _bias(m, theory.PAPER)[0] if m.kind == "scenario" else float("nan")
    return ScenarioOutcome(m.name, checks, m.seconds, bias, m.schedule.summary(),
                           {k: r.metrics for k, r in m.runs.items()})


def measure(names: Iterable[str] | None = None, *, progress=None) -> list:
    """Run the scenarios (all, or those named)."""
    wanted = list(names or [])
    extra = (ORBIT_SCENARIO, NOISE_SCENARIO)
    chosen = scenario_lib.SCENARIOS if not wanted else [scenario_lib.scenario(n) for n in wanted if n not in extra]
    jobs = [(sc.name, sc.description, lambda sc=sc: measure_scenario(sc)) for sc in chosen]
    if not wanted or ORBIT_SCENARIO in wanted:
        jobs.append((ORBIT_SCENARIO, "finite-step orbit vs the exact cycle map, n=5, τ=(1,2,3,5,8), σ=0", measure_orbit))
    if not wanted or NOISE_SCENARIO in wanted:
        jobs.append((NOISE_SCENARIO, "noise floors of vanilla and Rescaled vs the small-step formula, σ=1",
                     measure_noise_floor))
    out = []
    for k, (name, description, job) in enumerate(jobs, start=1):
        if progress:
            progress(f"[{k}/{len(jobs)}] {name}: {description}")
        out.append(job())
        if progress:
            progress(f"        {len(out[-1].runs)} runs ({out[-1].seconds:.1f} s)")
    return out


def verify(names: Iterable[str] | None = None, *, progress=None) -> list[ScenarioOutcome]:
    measured = measure(names, progress=progress)
    memo = _Memo()
    return [_outcome(m, _CHECKERS[m.kind](m, theory.PAPER, memo, None)) for m in measured]


def _progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def run_verify(out_dir: str | None, *, as_json: bool, names=None, figure=None, quiet: bool = False,
               mutants: bool = False, mutant_list=None) -> int:
    """The `delaylab verify` command. Returns the exit status: 0 iff every check passes (and,
    with ``mutants``, every mutant theory fails some check).

    ``figure``: ``figure(out_dir) -> path``, called once the checks are written (the command line
    passes the bias toy's figure; this module draws nothing itself, since figures sit above it).
    ``mutant_list``: the :class:`delaylab.mutants.Mutant` to try (default: ``delaylab.mutants.MUTANTS``)."""
    jax.config.update("jax_enable_x64", True)  # theory checks run in float64 (DESIGN.md, Numbers)
    from sim import store

    measured = measure(names, progress=None if quiet else _progress)
    memo = _Memo()
    synthetic: dict = {}
    outcomes = [_outcome(m, _CHECKERS[m.kind](m, theory.PAPER, memo, synthetic)) for m in measured]
    checks = [c for o in outcomes for c in o.checks]
    rows = [c.as_dict() for c in checks]
    report = None
    if mutants:
        from delaylab import mutants as mutant_lib

        report = mutant_lib.score(measured, checks, list(mutant_lib.MUTANTS if mutant_list is None else mutant_list),
                                  memo=memo,
                                  progress=None if quiet else _progress)
    if out_dir:
        store.open_run_folder(out_dir, {"command": "verify", "scenarios": [o.name for o in outcomes],
                                        "fixed_point_cap": FIXED_POINT_CAP, "mutants": mutants})
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
        from sim import store

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
