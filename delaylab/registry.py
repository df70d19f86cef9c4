"""The one place that knows every named algorithm, scenario and figure.

An algorithm entry says how to build it from a step size and a schedule, which step each
arrival of that schedule gets (from which theory predicts the implicit weights: q_i ∝ the step
mass worker i receives per unit time, specs/asgd.md §2.2), and, where one exists, the closed
form of those weights (q_i ∝ γ_i/τ_i for τ-only rules).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional

import numpy as np

import algos
import theory
from sim.schedules import Schedule


StepOf = Callable[[int, int], float]  # (worker, staleness) -> γ of that arrival


@dataclasses.dataclass(frozen=True)
class AlgorithmEntry:
    """Attributes:
    make: (γ, schedule) -> the algorithm (τ-aware rules read the schedule's mean durations).
    step: (γ, τ, n) -> the rule as a plain function of (worker, staleness), for theory.
    closed_form_steps: (γ, τ) -> γ_i for rules that depend on τ only, else None.
    """

    name: str
    make: Callable[[float, Schedule], algos.Algorithm]
    step: Optional[Callable[[float, np.ndarray, int], StepOf]]
    closed_form_steps: Optional[Callable[[float, np.ndarray], np.ndarray]]
    summary: str
    # For methods whose steps depend on their own server clock: (γ, schedule) -> γ per arrival.
    event_steps_fn: Optional[Callable[[float, Schedule], np.ndarray]] = None
    # For methods not described by per-arrival step mass (gradient tables): (γ, schedule) -> q.
    weights_fn: Optional[Callable[[float, Schedule], np.ndarray]] = None
    # Whether each arrival is exactly the affine map x' = x − γ_k A_i (y_i − b_i) of theory.orbit
    # (false for methods with momentum, local steps, tables or buffers).
    exact_arrival_map: bool = True
    # Where the method settles given its weights q, if not at x_q = argmin Σ q_i F_i:
    # (problem, q) -> point. ``limit_needs_no_noise``: that prediction holds for σ = 0 only.
    limit_fn: Optional[Callable] = None
    limit_needs_no_noise: bool = False

    @property
    def has_cycle_map(self) -> bool:
        return self.step is not None and self.exact_arrival_map

    def event_steps(self, stepsize: float, schedule: Schedule) -> np.ndarray:
        """γ of every arrival of ``schedule`` (computed on the host, without the engine)."""
        if self.event_steps_fn is not None:
            return self.event_steps_fn(stepsize, schedule)
        rule = self.step(stepsize, schedule.mean_durations, schedule.num_workers)
        return np.array([rule(int(w), int(d)) for w, d in zip(schedule.worker, schedule.staleness)])

    def predicted_weights(self, stepsize: float, schedule: Schedule, *, from_time: float = 0.0) -> np.ndarray:
        """q_i ∝ step mass of worker i's delivered arrivals finishing at or after ``from_time``."""
        if self.weights_fn is not None:
            return self.weights_fn(stepsize, schedule)
        steps = self.event_steps(stepsize, schedule)
        use = schedule.delivered & (schedule.finish >= from_time)
        mass = np.bincount(schedule.worker[use], weights=steps[use], minlength=schedule.num_workers)
        return mass / mass.sum()

    def limit(self, problem, weights: np.ndarray) -> np.ndarray:
        """The predicted limit point for step-mass weights ``weights``."""
        if self.limit_fn is not None:
            return self.limit_fn(problem, weights)
        return problem.weighted_minimiser(weights)

    def closed_form_weights(self, stepsize: float, taus) -> Optional[np.ndarray]:
        if self.closed_form_steps is None:
            return None
        taus = np.asarray(taus, dtype=np.float64)
        return theory.implicit_weights(self.closed_form_steps(stepsize, taus), taus)


def _per_worker(rule: Callable[[float, np.ndarray], np.ndarray]):
    def step(gamma: float, taus: np.ndarray, n: int) -> StepOf:
        g = rule(gamma, taus)
        return lambda worker, staleness: float(g[worker])

    return step


def _constant(gamma, taus):
    return np.full(np.shape(taus), float(gamma))


def _inverse_tau(gamma, taus):
    return gamma * theory.harmonic_mean(taus) / np.asarray(taus)


def _delay_adaptive(gamma: float, taus, n: int) -> StepOf:
    return lambda worker, staleness: gamma * n / max(n, staleness)


def _staleness_aware(gamma: float, taus, n: int) -> StepOf:
    return lambda worker, staleness: gamma / max(1, staleness)


RINGMASTER_THRESHOLD = 4  # R for the registered Ringmaster: discards some stragglers' gradients
FEDBUFF_BUFFER = 2


def _ringmaster_steps(gamma: float, schedule: Schedule) -> np.ndarray:
    """Replays Ringmaster's server clock on the schedule: which arrivals it discards."""
    version, handed = 0, np.zeros(schedule.num_workers, dtype=np.int64)
    out = np.zeros(schedule.num_events)
    for e, (w, ok) in enumerate(zip(schedule.worker, schedule.delivered)):
        if ok and version - handed[w] < RINGMASTER_THRESHOLD:
            out[e] = gamma
            version += 1
        handed[w] = version
    return out


def _fedbuff_steps(gamma: float, schedule: Schedule) -> np.ndarray:
    """Replays FedBuff's clock: arrival e contributes η_ℓ (1+δ)^(−1/2) η_g/K, δ in server updates."""
    version, count, handed = 0, 0, np.zeros(schedule.num_workers, dtype=np.int64)
    out = np.zeros(schedule.num_events)
    for e, (w, ok) in enumerate(zip(schedule.worker, schedule.delivered)):
        if ok:
            out[e] = gamma * (1.0 + version - handed[w]) ** -0.5  # η_ℓ s(δ) η_g / K with η_g = K
            count += 1
            if count == FEDBUFF_BUFFER:
                version, count = version + 1, 0
        handed[w] = version
    return out


def _rennala_steps(gamma: float, schedule: Schedule) -> np.ndarray:
    """Replays Rennala's rounds (batch n): a gradient counts, with mass γn/n = γ, only if its job
    started from the current round's point."""
    n = schedule.num_workers
    rnd, count, job_round = 0, 0, np.zeros(n, dtype=np.int64)
    out = np.zeros(schedule.num_events)
    for e, (w, ok) in enumerate(zip(schedule.worker, schedule.delivered)):
        if ok and job_round[w] == rnd:
            out[e] = gamma
            count += 1
            if count == n:
                rnd, count = rnd + 1, 0
        job_round[w] = rnd
    return out


CLIP_THRESHOLD = 1.0  # c for the registered clipped ASGD: active at the limit in most scenarios


def _clipped_limit(problem, weights):
    x0 = problem.minimiser if problem.minimiser is not None else np.asarray(problem.x0, dtype=np.float64)
    return theory.clipped_fixed_point(problem.derivatives, weights, CLIP_THRESHOLD, x0)


def _uniform(gamma: float, schedule: Schedule) -> np.ndarray:
    return np.full(schedule.num_workers, 1.0 / schedule.num_workers)


ALGORITHMS: dict[str, AlgorithmEntry] = {
    e.name: e
    for e in (
        AlgorithmEntry("asgd", lambda g, s: algos.asgd(stepsize=g), _per_worker(_constant), _constant,
                       "vanilla asynchronous SGD, constant step (targets the frequency-weighted objective)"),
        AlgorithmEntry("rescaled_asgd", lambda g, s: algos.rescaled_asgd(stepsize=g, taus=s.mean_durations),
                       _per_worker(theory.rescaled_stepsizes), theory.rescaled_stepsizes,
                       "Rescaled ASGD, step γ τ_i/τ_H (targets the true objective)"),
        AlgorithmEntry("inverse_tau_asgd", lambda g, s: algos.inverse_tau_asgd(stepsize=g, taus=s.mean_durations),
                       _per_worker(_inverse_tau), _inverse_tau,
                       "ASGD with step γ τ_H/τ_i, the poster's printed exponent (weights ∝ 1/τ_i²)"),
        AlgorithmEntry("delay_adaptive_asgd",
                       lambda g, s: algos.delay_adaptive_asgd(stepsize=g, num_workers=s.num_workers),
                       _delay_adaptive, None, "delay-adaptive ASGD, step γ n/max(n, δ) (Mishchenko et al.)"),
        AlgorithmEntry("staleness_aware_asgd", lambda g, s: algos.staleness_aware_asgd(stepsize=g),
                       _staleness_aware, None, "staleness-aware ASGD, step γ/max(1, δ) (Zhang et al.)"),
        AlgorithmEntry("clipped_asgd", lambda g, s: algos.clipped_asgd(stepsize=g, threshold=CLIP_THRESHOLD),
                       _per_worker(_constant), _constant,
                       f"clipped ASGD, c = {CLIP_THRESHOLD:g}: settles where Σ q_i clip_c(∇F_i) = 0 (σ = 0)",
                       exact_arrival_map=False, limit_fn=_clipped_limit, limit_needs_no_noise=True),
        AlgorithmEntry("ringmaster_asgd",
                       lambda g, s: algos.ringmaster_asgd(stepsize=g, threshold=RINGMASTER_THRESHOLD),
                       None, None, f"Ringmaster ASGD, R = {RINGMASTER_THRESHOLD}: gradients R or more updates old are discarded",
                       event_steps_fn=_ringmaster_steps),
        AlgorithmEntry("fedbuff_asgd",
                       lambda g, s: algos.fedbuff_asgd(local_stepsize=g, server_stepsize=FEDBUFF_BUFFER,
                                                       buffer_size=FEDBUFF_BUFFER),
                       None, None, f"FedBuff-style buffered ASGD, K = {FEDBUFF_BUFFER}, s(δ) = (1+δ)^(−1/2), η_g = K",
                       event_steps_fn=_fedbuff_steps),
        AlgorithmEntry("ia2sgd", lambda g, s: algos.ia2sgd(stepsize=g), None, None,
                       "IA²SGD: steps along the mean of every worker's latest gradient (unbiased)",
                       weights_fn=_uniform),
        # Round methods take one step per round: γ·n keeps the step mass per gradient near γ.
        AlgorithmEntry("rennala_sgd",
                       lambda g, s: algos.rennala_sgd(stepsize=g * s.num_workers, batch=s.num_workers), None, None,
                       "Rennala SGD, batch n, step γn: weights follow who delivers fresh gradients (biased)",
                       event_steps_fn=_rennala_steps),
        AlgorithmEntry("malenia_sgd",
                       lambda g, s: algos.malenia_sgd(stepsize=g * s.num_workers, batch=s.num_workers), None, None,
                       "Malenia SGD, S = n, step γn: (1/n) Σ g_i/B_i is unbiased", weights_fn=_uniform),
        AlgorithmEntry("ringleader_asgd", lambda g, s: algos.ringleader_asgd(stepsize=g), None, None,
                       "Ringleader ASGD: n table updates per round (unbiased)", weights_fn=_uniform),
        # H = 2 local steps, β = 0.5, N = 2: per arrival about η·η_ℓ·H/(1 − β) = γ of step mass, the
        # same for every worker, so to first order it targets vanilla's frequency-weighted objective.
        AlgorithmEntry("async_local_sgd",
                       lambda g, s: algos.async_local_sgd(stepsize=1.0, local_stepsize=g * 0.5 / 2, local_steps=2,
                                                          momentum=0.5, delay=2),
                       _per_worker(_constant), None,
                       "async local SGD (H = 2) with Delayed Nesterov (β = 0.5, N = 2): frequency-weighted to first order",
                       exact_arrival_map=False),
    )
}


def algorithm(name: str) -> AlgorithmEntry:
    try:
        return ALGORITHMS[name]
    except KeyError:
        raise ValueError(f"unknown algorithm {name!r}; registered: {sorted(ALGORITHMS)}") from None
