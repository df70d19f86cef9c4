"""The theory registry: every algorithm `delaylab verify` checks and `delaylab run` can run.

An algorithm entry says how to build it from a step size and a schedule, which step each
arrival of that schedule gets (from which theory predicts the implicit weights: q_i ∝ the step
mass worker i receives per unit time, docs/theory.md), and, where one exists, the closed form
of those weights (q_i ∝ γ_i/τ_i for τ-only rules). :func:`register` adds an entry (a plugin's)
and records where it came from; :func:`unregister` removes it.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional

import numpy as np

from delaylab import algos, theory
from delaylab.sim.schedules import Schedule
from delaylab.theory.model import is_tau_only


StepOf = Callable[[int, int], float]  # (worker, staleness) -> γ of that arrival


@dataclasses.dataclass(frozen=True)
class AlgorithmEntry:
    """How to build a method, and what theory needs to predict where it settles.

    Attributes:
      name: the registry name (``delaylab run``'s ``algorithm``, the rows of ``delaylab verify``).
      make: ``(γ, schedule) -> algos.Algorithm``; τ-aware methods read ``schedule.mean_durations``.
      rule: the step rule theory models the method with, or None. One of the names of
        ``theory.model.RULES``: "constant" (γ), "rescaled" (γ τ_i/τ_H), "inverse_tau" (γ τ_H/τ_i),
        the τ-only rules; "delay_adaptive" (γ n/max(n, δ)) and "staleness_aware" (γ/max(1, δ)),
        functions of the staleness δ in server updates. Or a :class:`theory.StepRule` for a new
        method's rule. None: the method has no per-arrival step rule (its own clock decides its
        steps, ``event_steps_fn``, or its weights come from ``weights_fn``).
      summary: one line describing the method (printed by ``delaylab verify``).
      event_steps_fn: for methods whose steps depend on their own server clock (which arrivals
        count, a buffer's staleness): ``(γ, schedule) -> γ of every arrival`` (0 for a discarded
        gradient), replayed on the host from the schedule.
      weights_fn: for methods not described by per-arrival step mass (gradient tables):
        ``(γ, schedule) -> q``, the implicit weights directly.
      exact_arrival_map: whether every arrival is exactly the affine map x' = x − γ_k g of
        theory.orbit, the gradient g taken at the stale point the worker was handed, with γ_k
        from ``rule`` or ``event_steps_fn``. Then theory predicts the finite-step offset and the
        cycle map. It must be False for any method whose arrival does anything else: momentum,
        local steps, gradient tables, buffers, rounds, clipping, corrections to the gradient.
      closed_form: whether the rule's closed-form weights apply to the method's step mass (and
        its step-mass share is checked against them); False for methods whose steps the rule
        describes only to first order (local steps with momentum).
      clip: the per-gradient clipping threshold c, or None: the method settles where
        Σ q_i clip_c(∇F_i) = 0, a prediction for exact gradients only (E clip(g + ξ) ≠ clip(g)),
        so its fixed point is not checked where gradients are noisy.
    """

    name: str
    make: Callable[[float, Schedule], algos.Algorithm]
    rule: Optional[object]
    summary: str
    event_steps_fn: Optional[Callable[[float, Schedule], np.ndarray]] = None
    weights_fn: Optional[Callable[[float, Schedule], np.ndarray]] = None
    exact_arrival_map: bool = True
    closed_form: bool = True
    clip: Optional[float] = None

    @property
    def limit_needs_no_noise(self) -> bool:
        return self.clip is not None

    @property
    def has_cycle_map(self) -> bool:
        return self.rule is not None and self.exact_arrival_map

    @property
    def has_finite_step_model(self) -> bool:
        """Whether theory models its finite-step dynamics: every arrival an exact affine map, with
        steps from a rule or from its own clock (``event_steps_fn``)."""
        return self.exact_arrival_map and (self.rule is not None or self.event_steps_fn is not None)

    def step(self, stepsize: float, taus, n: int) -> StepOf:
        """The rule as a plain function of (worker, staleness), from theory (for entries with a rule)."""
        return theory.PAPER.step_rule(self.rule, stepsize, taus, n)

    def closed_form_steps(self, stepsize: float, taus) -> Optional[np.ndarray]:
        """γ_i for rules that depend on τ only, else None."""
        if self.rule is None or not is_tau_only(self.rule):
            return None
        return theory.PAPER.tau_steps(self.rule, stepsize, taus)

    def event_steps(self, stepsize: float, schedule: Schedule) -> np.ndarray:
        """γ of every arrival of ``schedule`` (computed on the host, without the engine)."""
        if self.event_steps_fn is not None:
            return self.event_steps_fn(stepsize, schedule)
        return theory.PAPER.event_steps(self.rule, stepsize, schedule.mean_durations, schedule.worker,
                                        schedule.staleness)

    def predicted_weights(self, stepsize: float, schedule: Schedule, *, from_time: float = 0.0) -> np.ndarray:
        """q_i ∝ step mass of worker i's delivered arrivals finishing at or after ``from_time``,
        read off the realised schedule."""
        if self.weights_fn is not None:
            return self.weights_fn(stepsize, schedule)
        steps = self.event_steps(stepsize, schedule)
        use = schedule.delivered & (schedule.finish >= from_time)
        mass = np.bincount(schedule.worker[use], weights=steps[use], minlength=schedule.num_workers)
        return mass / mass.sum()

    def limit(self, problem, weights: np.ndarray) -> np.ndarray:
        """The predicted limit point for step-mass weights ``weights``."""
        return theory.PAPER.limit(problem, weights, clip=self.clip)


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


def _uniform(gamma: float, schedule: Schedule) -> np.ndarray:
    return np.full(schedule.num_workers, 1.0 / schedule.num_workers)


ALGORITHMS: dict[str, AlgorithmEntry] = {
    e.name: e
    for e in (
        AlgorithmEntry("asgd", lambda g, s: algos.asgd(stepsize=g), "constant",
                       "vanilla asynchronous SGD, constant step (targets the frequency-weighted objective)"),
        AlgorithmEntry("rescaled_asgd", lambda g, s: algos.rescaled_asgd(stepsize=g, taus=s.mean_durations),
                       "rescaled", "Rescaled ASGD, step γ τ_i/τ_H (targets the true objective)"),
        AlgorithmEntry("inverse_tau_asgd", lambda g, s: algos.inverse_tau_asgd(stepsize=g, taus=s.mean_durations),
                       "inverse_tau", "ASGD with step γ τ_H/τ_i, the poster's printed exponent (weights ∝ 1/τ_i²)"),
        AlgorithmEntry("delay_adaptive_asgd",
                       lambda g, s: algos.delay_adaptive_asgd(stepsize=g, num_workers=s.num_workers),
                       "delay_adaptive", "delay-adaptive ASGD, step γ n/max(n, δ) (Mishchenko et al.)"),
        AlgorithmEntry("staleness_aware_asgd", lambda g, s: algos.staleness_aware_asgd(stepsize=g),
                       "staleness_aware", "staleness-aware ASGD, step γ/max(1, δ) (Zhang et al.)"),
        AlgorithmEntry("clipped_asgd", lambda g, s: algos.clipped_asgd(stepsize=g, threshold=CLIP_THRESHOLD),
                       "constant",
                       f"clipped ASGD, c = {CLIP_THRESHOLD:g}: settles where Σ q_i clip_c(∇F_i) = 0 (σ = 0)",
                       exact_arrival_map=False, clip=CLIP_THRESHOLD),
        AlgorithmEntry("ringmaster_asgd",
                       lambda g, s: algos.ringmaster_asgd(stepsize=g, threshold=RINGMASTER_THRESHOLD),
                       None, f"Ringmaster ASGD, R = {RINGMASTER_THRESHOLD}: gradients R or more updates old are discarded",
                       event_steps_fn=_ringmaster_steps),
        AlgorithmEntry("fedbuff_asgd",
                       lambda g, s: algos.fedbuff_asgd(local_stepsize=g, server_stepsize=FEDBUFF_BUFFER,
                                                       buffer_size=FEDBUFF_BUFFER),
                       None, f"FedBuff-style buffered ASGD, K = {FEDBUFF_BUFFER}, s(δ) = (1+δ)^(−1/2), η_g = K",
                       event_steps_fn=_fedbuff_steps, exact_arrival_map=False),
        AlgorithmEntry("ia2sgd", lambda g, s: algos.ia2sgd(stepsize=g), None,
                       "IA²SGD: steps along the mean of every worker's latest gradient (unbiased)",
                       weights_fn=_uniform, exact_arrival_map=False),
        # Round methods take one step per round: γ·n keeps the step mass per gradient near γ.
        AlgorithmEntry("rennala_sgd",
                       lambda g, s: algos.rennala_sgd(stepsize=g * s.num_workers, batch=s.num_workers), None,
                       "Rennala SGD, batch n, step γn: weights follow who delivers fresh gradients (biased)",
                       event_steps_fn=_rennala_steps, exact_arrival_map=False),
        AlgorithmEntry("malenia_sgd",
                       lambda g, s: algos.malenia_sgd(stepsize=g * s.num_workers, batch=s.num_workers), None,
                       "Malenia SGD, S = n, step γn: (1/n) Σ g_i/B_i is unbiased", weights_fn=_uniform,
                       exact_arrival_map=False),
        AlgorithmEntry("ringleader_asgd", lambda g, s: algos.ringleader_asgd(stepsize=g), None,
                       "Ringleader ASGD: n table updates per round (unbiased)", weights_fn=_uniform,
                       exact_arrival_map=False),
        # H = 2 local steps, β = 0.5, N = 2: per arrival about η·η_ℓ·H/(1 − β) = γ of step mass, the
        # same for every worker, so to first order it targets vanilla's frequency-weighted objective.
        AlgorithmEntry("async_local_sgd",
                       lambda g, s: algos.async_local_sgd(stepsize=1.0, local_stepsize=g * 0.5 / 2, local_steps=2,
                                                          momentum=0.5, delay=2),
                       "constant",
                       "async local SGD (H = 2) with Delayed Nesterov (β = 0.5, N = 2): frequency-weighted to first order",
                       exact_arrival_map=False, closed_form=False),
    )
}


def algorithm(name: str) -> AlgorithmEntry:
    try:
        return ALGORITHMS[name]
    except KeyError:
        raise ValueError(f"unknown algorithm {name!r}; registered: {sorted(ALGORITHMS)}") from None


SOURCES: dict[str, str] = {}  # name -> where a registered entry came from (the plugin), for entries added by register


def register(entry: AlgorithmEntry, *, source: Optional[str] = None) -> AlgorithmEntry:
    """Add ``entry`` to :data:`ALGORITHMS` under its name, recording ``source`` (the plugin that
    registers it). Registering the same entry again does nothing; a name taken by another entry
    is a ValueError naming it and where the registered one came from."""
    if not isinstance(entry, AlgorithmEntry):
        raise TypeError(f"register: expected an AlgorithmEntry, got {type(entry).__name__}")
    held = ALGORITHMS.get(entry.name)
    if held is not None:
        if held == entry:
            return held
        where = SOURCES.get(entry.name, "delaylab.registry")
        raise ValueError(f"algorithm {entry.name!r} is already registered (by {where})"
                         + (f"; cannot register another from {source}" if source else ""))
    ALGORITHMS[entry.name] = entry
    if source is not None:
        SOURCES[entry.name] = source
    return entry


def unregister(name: str) -> None:
    """Remove a registered entry (and its source); a ValueError if no entry has that name."""
    if name not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {name!r}; registered: {sorted(ALGORITHMS)}")
    del ALGORITHMS[name]
    SOURCES.pop(name, None)


def source(name: str) -> Optional[str]:
    """Where a registered entry came from: the ``source`` given to :func:`register`, else None
    (the built-in entries)."""
    algorithm(name)
    return SOURCES.get(name)
