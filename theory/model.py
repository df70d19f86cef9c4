"""The theory `delaylab verify` checks, as one value: every prediction it makes, as functions.

A :class:`Theory` holds the formulas of docs/theory.md §2–§5 that turn a step rule, the workers' job
durations τ and a problem into predictions: the implicit weights q_i ∝ (step mass per unit time)
(§2), the limit x_q (§3), the exact finite-step orbit (§4), the noise floor and its ratio
(§5). :data:`PAPER` is the theory as published. ``delaylab verify --mutants`` replaces single
formulas with plausible wrong ones (``dataclasses.replace``) and asks whether some check fails
under each, which is how one learns that the checks can see a wrong theory at all.

The step rules are written here from the papers' update equations, as functions of the worker,
its steady-state staleness and τ, so that what verify predicts never calls the algorithms' code
(``algos``); the simulation is the measurement, this is the prediction.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional

import numpy as np

from delaylab.theory import fixed_point as _fp
from delaylab.theory import noise as _noise
from delaylab.theory import orbit as _orbit
from delaylab.theory import queueing as _queueing
from delaylab.theory import weights as _w

StepOf = Callable[[int, int], float]  # (worker, staleness) -> γ of that arrival

# The step rules theory knows (docs/theory.md §6): name -> what the step of an arrival depends on.
TAU_ONLY_RULES = ("constant", "rescaled", "inverse_tau")
DELAY_RULES = ("delay_adaptive", "staleness_aware")
RULES = TAU_ONLY_RULES + DELAY_RULES


@dataclasses.dataclass(frozen=True)
class StepRule:
    """A step rule theory does not know by name (a notebook's new method): exactly one of
      tau_steps: (γ, τ) -> γ_i, a step per worker that depends on τ only;
      delay_step: (γ, n, δ) -> γ, vectorised over an array of staleness values δ.
    Pass it wherever a rule name goes (``AlgorithmEntry(rule=...)``)."""

    name: str
    tau_steps: Optional[Callable] = None
    delay_step: Optional[Callable] = None

    def __post_init__(self):
        if (self.tau_steps is None) == (self.delay_step is None):
            raise ValueError(f"StepRule {self.name!r}: give exactly one of tau_steps and delay_step")


def is_tau_only(rule) -> bool:
    """Whether the rule's steps depend on τ alone (a closed form for any schedule's means)."""
    return rule in TAU_ONLY_RULES or (isinstance(rule, StepRule) and rule.tau_steps is not None)


_MEAN_STEPS: dict = {}  # (rule, γ, τ, staleness unit) -> mean step of each worker's arrivals over a period


def _unit_weights(stepsizes, taus):
    return _w.implicit_weights(stepsizes, taus)


def _server_cycles(server, taus) -> np.ndarray:
    """Each worker's mean time between its updates behind ``server`` (docs/theory.md §14):
    1/X_i of the closed network whose think times are τ_i plus the links both ways."""
    up, down = server.links(len(taus))
    return 1.0 / _queueing.throughputs(np.asarray(taus, np.float64) + up + down, server.service)


@dataclasses.dataclass(frozen=True)
class Theory:
    """Attributes (each a formula of docs/theory.md; the defaults are the published ones):
      implicit_weights: (γ_i, τ) -> q, q_i ∝ γ_i/τ_i (§2).
      rescaling_mean: τ -> the mean Rescaled ASGD divides by, τ_H (§6.2).
      rescaling_power: Rescaled's step is γ (τ_i)^power / mean (1: the published rule).
      quadratic_fixed_point: (A, b, q) -> x_q = (Σ q_i A_i)^{-1} Σ q_i A_i b_i (§3).
      clipping: whether the limit of clipped ASGD balances the clipped gradients (§3, §6.7).
      noise_scale: the constant of the noise floor V σ²/(4Γ), relative to the published one.
      floor_ratio: τ -> the predicted ratio of Rescaled's floor to vanilla's, τ_A/τ_H (R3).
      staleness_in: "updates" (the published definition) or "time".
      compose: folds an arrival's affine map into the period's map (see theory.orbit).
      server_cycles: (server, τ) -> each worker's mean time between updates when they go through
        a server that takes time (§14): 1/X_i, in place of τ_i in the weights.
    """

    name: str = "paper"
    description: str = "the theory as published (docs/theory.md §2–§5)"
    implicit_weights: Callable = _unit_weights
    rescaling_mean: Callable = _w.harmonic_mean
    rescaling_power: float = 1.0
    quadratic_fixed_point: Callable = _fp.quadratic_fixed_point
    clipping: bool = True
    noise_scale: float = 1.0
    floor_ratio: Callable = lambda taus: _w.arithmetic_mean(taus) / _w.harmonic_mean(taus)  # noqa: E731
    staleness_in: str = "updates"
    compose: Optional[Callable] = None
    server_cycles: Callable = _server_cycles

    # --- the step rules -------------------------------------------------------------------------

    def tau_steps(self, rule, gamma: float, taus) -> np.ndarray:
        """γ_i of a rule whose step depends on τ only."""
        t = np.asarray(taus, dtype=np.float64)
        if isinstance(rule, StepRule) and rule.tau_steps is not None:
            return np.broadcast_to(np.asarray(rule.tau_steps(gamma, t), dtype=np.float64), t.shape)
        if rule == "constant":
            return np.full(t.shape, float(gamma))
        if rule == "rescaled":  # γ τ_i / τ_H
            return gamma * t**self.rescaling_power / self.rescaling_mean(t)
        if rule == "inverse_tau":  # γ τ_H / τ_i
            return gamma * _w.harmonic_mean(t) / t
        raise ValueError(f"{rule!r} is not a τ-only rule; those are {TAU_ONLY_RULES}")

    def step_rule(self, rule, gamma: float, taus, n: int) -> StepOf:
        """The rule as a function of (worker, staleness)."""
        if isinstance(rule, StepRule) and rule.delay_step is not None:
            return lambda worker, staleness: float(rule.delay_step(gamma, n, np.float64(staleness)))
        if is_tau_only(rule):
            g = self.tau_steps(rule, gamma, taus)
            return lambda worker, staleness: float(g[worker])
        if rule == "delay_adaptive":  # γ n / max(n, δ) (Mishchenko et al.)
            return lambda worker, staleness: gamma * n / max(n, staleness)
        if rule == "staleness_aware":  # γ / max(1, δ) (Zhang et al.)
            return lambda worker, staleness: gamma / max(1, staleness)
        raise ValueError(f"unknown step rule {rule!r}; known: {RULES}")

    def event_steps(self, rule, gamma: float, taus, workers, staleness) -> np.ndarray:
        """γ of each arrival, given its worker and staleness (arrays)."""
        workers = np.asarray(workers, dtype=np.int64)
        s = np.asarray(staleness, dtype=np.float64)
        n = len(taus)
        if isinstance(rule, StepRule) and rule.delay_step is not None:
            return np.broadcast_to(np.asarray(rule.delay_step(gamma, n, s), dtype=np.float64), s.shape)
        if is_tau_only(rule):
            return self.tau_steps(rule, gamma, taus)[workers]
        if rule == "delay_adaptive":
            return gamma * n / np.maximum(n, s)
        if rule == "staleness_aware":
            return gamma / np.maximum(1.0, s)
        raise ValueError(f"unknown step rule {rule!r}; known: {RULES}")

    # --- staleness --------------------------------------------------------------------------------

    def period_staleness(self, workers, taus) -> np.ndarray:
        """Steady-state staleness of one hyperperiod's arrivals under fixed computation."""
        if self.staleness_in == "updates":
            return _orbit.cyclic_staleness(workers)
        return np.asarray(taus, dtype=np.float64)[np.asarray(workers)]  # time since the model was handed

    def run_staleness(self, workers, finish) -> np.ndarray:
        """Staleness of each arrival of an event list in which every worker is handed the initial
        model at time 0 and a new one at each of its arrivals."""
        if self.staleness_in == "updates":
            return _orbit.arrival_staleness(workers)
        workers = np.asarray(workers, dtype=np.int64)
        finish = np.asarray(finish, dtype=np.float64)
        last = np.zeros(int(workers.max()) + 1)
        out = np.empty(finish.size)
        for k, (i, t) in enumerate(zip(workers, finish)):
            out[k], last[i] = t - last[i], t
        return out

    # --- weights and limits -----------------------------------------------------------------------

    def mean_steps(self, rule, gamma: float, taus) -> Optional[np.ndarray]:
        """The mean step of each worker's arrivals in the long run under fixed computation: γ_i for
        τ-only rules; for delay-dependent rules (integer τ, so the arrivals repeat every
        H = lcm τ_i) the mean over one period of its arrivals' steps. None where τ alone does not
        determine the staleness (non-integer τ)."""
        t = np.asarray(taus, dtype=np.float64)
        if is_tau_only(rule):
            return self.tau_steps(rule, gamma, t)
        if np.any(t != np.round(t)):
            return None
        key = (rule, float(gamma), tuple(t), self.staleness_in)
        if key not in _MEAN_STEPS:  # one period can hold millions of arrivals (τ = 1..16): computed once
            _, workers, _ = _orbit.hyperperiod_arrays(t)
            steps = self.event_steps(rule, gamma, t, workers, self.period_staleness(workers, t))
            _MEAN_STEPS[key] = np.bincount(workers, weights=steps, minlength=t.size) / np.bincount(workers, minlength=t.size)
        return _MEAN_STEPS[key]

    def closed_form_weights(self, rule, gamma: float, taus) -> Optional[np.ndarray]:
        """q from τ alone, q_i ∝ (mean step of worker i's arrivals)/τ_i (:meth:`mean_steps`): for
        τ-only rules q ∝ γ_i/τ_i; for delay-dependent rules under fixed computation the mean is
        over one hyperperiod's steady staleness. None where τ alone does not fix the staleness."""
        mean = self.mean_steps(rule, gamma, taus)
        return None if mean is None else self.implicit_weights(mean, np.asarray(taus, dtype=np.float64))

    def window_steps(self, rule, gamma: float, taus, start: float, end: float) -> tuple[np.ndarray, np.ndarray]:
        """(mean step, number) of each worker's arrivals in the time window [start, end] of a run
        under fixed computation that begins at 0 with every worker handed the initial model, from
        τ alone: the arrivals k τ_i (ties to the lower worker index) and their staleness from the
        start. For schedules whose period is too long for a window to average over, or that have
        none (irrational τ)."""
        t = np.asarray(taus, dtype=np.float64)
        times, workers = _orbit.arrivals(t, end)
        steps = self.event_steps(rule, gamma, t, workers, self.run_staleness(workers, times))
        inside = times >= start
        counts = np.bincount(workers[inside], minlength=t.size).astype(np.float64)
        return np.bincount(workers[inside], weights=steps[inside], minlength=t.size) / np.maximum(counts, 1), counts

    def window_weights(self, rule, gamma: float, taus, start: float, end: float) -> np.ndarray:
        """q over the window [start, end] (:meth:`window_steps`): mean steps over the window's
        arrival intervals (end − start)/count_i."""
        mean, counts = self.window_steps(rule, gamma, taus, start, end)
        return self.implicit_weights(mean, (end - start) / np.maximum(counts, 1))

    def frequency_weights(self, taus) -> np.ndarray:
        """Vanilla ASGD's weights p."""
        return self.implicit_weights(np.ones(len(taus)), taus)

    def limit(self, problem, weights, *, clip: Optional[float] = None) -> np.ndarray:
        """Where a method with step-mass weights q settles on ``problem`` (a sim Problem, read
        through its float64 attributes only): x_q, or the root of Σ q_i clip_c(∇F_i) with ``clip``."""
        if clip is not None and self.clipping:
            x0 = problem.minimiser if problem.minimiser is not None else np.asarray(problem.x0, dtype=np.float64)
            return _fp.clipped_fixed_point(problem.derivatives, weights, clip, x0)
        if problem.curvature is not None:
            A, b = problem.curvature
            return self.quadratic_fixed_point(A, b, weights)
        x0 = problem.minimiser if problem.minimiser is not None else np.asarray(problem.x0, dtype=np.float64)
        return _fp.weighted_minimiser(problem.derivatives, weights, x0)

    # --- the finite-step orbit and the noise floor -------------------------------------------------

    def periodic_orbit(self, A, b, taus, rule, gamma: float) -> _orbit.Orbit:
        return _orbit.periodic_orbit(A, b, taus, self.step_rule(rule, gamma, taus, len(taus)),
                                     staleness=self.period_staleness, compose=self.compose)

    def noise_floor(self, A, b, taus, steps, sigma2: float) -> float:
        """E F_q − F_q(x_q) ≈ V σ²/(4Γ) (docs/theory.md §5)."""
        return self.noise_scale * _noise.noise_floor(A, b, taus, steps, sigma2).gap_weighted


PAPER = Theory()
