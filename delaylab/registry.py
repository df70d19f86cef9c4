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
    step: Callable[[float, np.ndarray, int], StepOf]
    closed_form_steps: Optional[Callable[[float, np.ndarray], np.ndarray]]
    summary: str

    def event_steps(self, stepsize: float, schedule: Schedule) -> np.ndarray:
        """γ of every arrival of ``schedule`` (computed on the host, without the engine)."""
        rule = self.step(stepsize, schedule.mean_durations, schedule.num_workers)
        return np.array([rule(int(w), int(d)) for w, d in zip(schedule.worker, schedule.staleness)])

    def predicted_weights(self, stepsize: float, schedule: Schedule, *, from_time: float = 0.0) -> np.ndarray:
        """q_i ∝ step mass of worker i's delivered arrivals finishing at or after ``from_time``."""
        steps = self.event_steps(stepsize, schedule)
        use = schedule.delivered & (schedule.finish >= from_time)
        mass = np.bincount(schedule.worker[use], weights=steps[use], minlength=schedule.num_workers)
        return mass / mass.sum()

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
    )
}


def algorithm(name: str) -> AlgorithmEntry:
    try:
        return ALGORITHMS[name]
    except KeyError:
        raise ValueError(f"unknown algorithm {name!r}; registered: {sorted(ALGORITHMS)}") from None
