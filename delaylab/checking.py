"""The checking half of `delaylab verify`: measurements against a :class:`theory.Theory`.

:func:`check` turns the runs of :mod:`delaylab.measure` into :class:`theory.Check` rows under a
theory (default :data:`theory.PAPER`), so the same runs can be checked under wrong theories
(:mod:`delaylab.mutants`). Per scenario and algorithm: the fixed point x̄ (second half of the run)
against x_q, the limit for the method's implicit weights q (docs/theory.md), q in closed form of
τ where theory has one, else read off the realised schedule ("schedule-based"); where every
arrival is an exact affine map, plus the finite-step offset δ_γ (:func:`_finite_step`), two-sided;
elsewhere against the cap, 2% of the vanilla bias ‖x_p − x*‖, which no tolerance exceeds (plus,
with noisy gradients, the Monte Carlo term). The slowest worker's step-mass share against the
closed form. The cycle map: each exact rule's orbit average against theory's periodic orbit, to
1e-8. The noise floor: the σ-induced gap against V σ²/(4Γ), and Rescaled/vanilla against τ_A/τ_H.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from typing import Optional

import numpy as np

from delaylab import theory
import delaylab.theory.model
from delaylab.measure import AVERAGE_FROM, NOISE_SCENARIO, NOISE_TAUS, ORBIT_SCENARIO, ORBIT_TAUS, Measured, Run
from delaylab.registry import AlgorithmEntry
from delaylab.theory import orbit as orbit_lib

FIXED_POINT_CAP = 0.02  # fraction of the vanilla bias ‖x_p − x*‖ no model-based tolerance exceeds unnoticed
SERVED = "closed form, server"  # the basis of a prediction from the server's closed network (docs/theory.md §14)
SHARE_BATCHES = 20  # batch means of the workers' shares of the step mass, behind a server that takes time
MC_STANDARD_ERRORS = 6.0  # the Monte Carlo part of a tolerance, in standard errors (8 batch means: a t₇ quantile)
REPLAY_PASSES = 12  # at most, for the replays at γ/2, γ/4, γ/8 to settle
MAX_PERIOD_EVENTS = 5000  # periodic schedules with longer hyperperiods are replayed instead
SYNTHETIC_SHIFT = 0.02  # the synthetic method of --mutants settles at x* + 0.02 (x_p − x*)
ORBIT_TOLERANCE = 1e-8  # absolute, on ‖x̄ − x_orbit‖ with x of order 1 (float64)
NOISE_TOLERANCE = 0.10  # relative: the small-step formula ignores staleness (docs/theory.md)
NOISE_BASIS = f"{NOISE_TOLERANCE:.0%}: the small-step formula ignores staleness"


@dataclasses.dataclass
class ScenarioOutcome:
    """One scenario's checks under the published theory, with what the command writes beside them."""

    name: str
    checks: list
    seconds: float
    bias: float
    schedule: dict  # the schedule's summary
    metrics: dict  # algorithm name -> that run's metrics (per log point)



class Memo:
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


def _share_errors(schedule, base: np.ndarray, start: float) -> np.ndarray:
    """Per worker, the standard error of its share of the step mass ``base`` (per event) over the
    events applied in [start, end], by batch means over SHARE_BATCHES equal spans of time: behind
    a server with random service times the shares are random, and theory's are their long-run
    values."""
    n = schedule.num_workers
    edges = np.linspace(start, schedule.end_time, SHARE_BATCHES + 1)
    shares = []
    for lo, hi in zip(edges[:-1], edges[1:]):
        inside = schedule.delivered & (schedule.finish > lo) & (schedule.finish <= hi)
        mass = np.bincount(schedule.worker[inside], weights=base[inside], minlength=n)
        shares.append(mass / max(mass.sum(), 1e-300))
    return np.std(shares, axis=0, ddof=1) / np.sqrt(SHARE_BATCHES)


def _share(value: float, bias: float) -> str:
    return f"{value / bias:.2%} of the bias" if bias > 0 else "the bias is 0"


def _finite_step(m: Measured, entry: AlgorithmEntry, th: theory.Theory, x_q, q, bias: float, run: Run,
                 memo: Memo) -> FiniteStep:
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
    if basis == SERVED:  # the long-run rates of the server's network against one finite run
        schedule = m.schedule
        steps = th.tau_steps(entry.rule, run.stepsize, schedule.mean_durations)
        c = 2 * steps  # one arrival of each worker at each end of the run
        ends = float((c[worker] + q[worker] * c.sum()) / max(float(run.mass.sum()) - c.sum(), 1e-300))
        se = float(_share_errors(schedule, steps[schedule.worker], 0.0)[worker])
        return Tolerance(ends + MC_STANDARD_ERRORS * se,
                         f"an arrival of each worker at each end {ends:.1g} + {MC_STANDARD_ERRORS:g} SE of the run's "
                         f"share {MC_STANDARD_ERRORS * se:.1g} ({SHARE_BATCHES} batch means)")
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
    if entry.rule is not None and schedule.server is not None:
        if theory.model.is_tau_only(entry.rule):  # the rates of the closed network (§14), not 1/τ_i
            return th.implicit_weights(th.tau_steps(entry.rule, gamma, taus), th.server_cycles(schedule.server, taus)), \
                SERVED
        return None, "schedule-based"  # a delay-dependent rule: theory has no staleness law under queueing
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


def check_scenario(m: Measured, th: theory.Theory = theory.PAPER, memo: Optional[Memo] = None,
                   synthetic: Optional[dict] = None) -> list:
    """The checks of one scenario's runs under theory ``th``. ``synthetic``, if given, receives
    per scenario whether a method settling at x* + 0.02 (x_p − x*) fails Rescaled ASGD's fixed-point
    check, and the numbers that decide it."""
    memo = memo or Memo()
    taus = m.schedule.mean_durations
    bias, x_p, x_star = _bias(m, th)
    slowest = int(np.argmax(taus))
    checks = []
    for name, run in m.runs.items():
        entry = m.entries[name]
        T = m.schedule.end_time
        q, basis = _closed_form_q(entry, th, run.stepsize, m.schedule, (AVERAGE_FROM * T, T))
        if q is None or basis == SERVED:
            # behind a server with random service times a run's shares scatter around theory's
            # long-run q by more than the fixed point's tolerance: the fixed point is checked at
            # the run's own shares, and the weight row checks those against the closed form
            q, basis = run.schedule_weights, "schedule-based"
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
            q_hat = run.mass / run.mass.sum()
            # behind a server every worker's rate is the network's (none follows from its own τ
            # alone), so every worker's weight is checked; elsewhere the slowest worker's
            for i in (range(taus.size) if row_basis == SERVED else (slowest,)):
                wt = _weight_tolerance(m, entry, th, closed, i, run, row_basis)
                who = f"worker {i}" if row_basis == SERVED else f"slowest worker ({i})"
                checks.append(theory.Check(
                    m.name, name, f"weight q of {who}" + ("" if row_basis == "closed form" else f" ({row_basis})"),
                    float(closed[i]), float(q_hat[i]), wt.value, wt.basis, schedule_based=row_basis == "schedule-based"))
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
    if not {"asgd", "rescaled_asgd"} <= set(measured):
        return checks
    ratio = th.floor_ratio(taus)
    checks.append(theory.Check(NOISE_SCENARIO, "rescaled_asgd", "floor ratio Rescaled / vanilla (τ_A/τ_H)", ratio,
                               measured["rescaled_asgd"] / measured["asgd"], NOISE_TOLERANCE * ratio, NOISE_BASIS))
    return checks


_CHECKERS = {"scenario": check_scenario, "orbit": check_orbit, "noise": check_noise_floor}


def check(measured: list, th: theory.Theory = theory.PAPER, memo: Optional[Memo] = None,
          synthetic: Optional[dict] = None) -> list:
    """Every check of the measurements under theory ``th``."""
    memo = memo or Memo()
    return [c for m in measured for c in _CHECKERS[m.kind](m, th, memo, synthetic)]


def outcome(m: Measured, checks: list) -> ScenarioOutcome:
    """``checks`` of ``m`` with the scenario's time, vanilla bias, schedule summary and run metrics."""
    bias = _bias(m, theory.PAPER)[0] if m.kind == "scenario" else float("nan")
    return ScenarioOutcome(m.name, checks, m.seconds, bias, m.schedule.summary(),
                           {k: r.metrics for k, r in m.runs.items()})


def outcomes(measured: list, memo: Optional[Memo] = None, synthetic: Optional[dict] = None) -> list:
    """Each measurement's :class:`ScenarioOutcome` under the published theory (``synthetic``: see
    :func:`check_scenario`)."""
    memo = memo or Memo()
    return [outcome(m, _CHECKERS[m.kind](m, theory.PAPER, memo, synthetic)) for m in measured]
