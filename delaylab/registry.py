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
from theory.model import is_tau_only


StepOf = Callable[[int, int], float]  # (worker, staleness) -> γ of that arrival


@dataclasses.dataclass(frozen=True)
class AlgorithmEntry:
    """Attributes:
    make: (γ, schedule) -> the algorithm (τ-aware rules read the schedule's mean durations).
    rule: the step rule theory models it with: a name of ``theory.model.RULES``, a
      :class:`theory.StepRule` (a new method's rule), or None.
    closed_form: whether the rule's closed-form weights apply to the method's step mass (False
      for methods whose steps the rule describes only to first order).
    """

    name: str
    make: Callable[[float, Schedule], algos.Algorithm]
    rule: Optional[object]
    summary: str
    # For methods whose steps depend on their own server clock: (γ, schedule) -> γ per arrival.
    event_steps_fn: Optional[Callable[[float, Schedule], np.ndarray]] = None
    # For methods not described by per-arrival step mass (gradient tables): (γ, schedule) -> q.
    weights_fn: Optional[Callable[[float, Schedule], np.ndarray]] = None
    # Whether each arrival is exactly the affine map x' = x − γ_k A_i (y_i − b_i), y_i' = x' of
    # theory.orbit, with γ_k from ``rule`` or ``event_steps_fn`` (γ_k = 0 for a discarded
    # gradient); false for methods with momentum, local steps, tables, buffers, rounds or clipping.
    exact_arrival_map: bool = True
    closed_form: bool = True
    # Per-gradient clipping threshold: the method settles where Σ q_i clip_c(∇F_i) = 0, a
    # prediction that holds for exact gradients only (E clip(g + ξ) ≠ clip(g)).
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


# --- every algorithm the project implements, with a small setting it runs in --------------------
#
# tests/algos/test_registry.py runs every entry through the same checks (in the manner of optax's
# alias tests): rebuilding it with new hyperparameter values reuses the compiled program, its
# hyperparameters sweep in one sim.sweep, it runs in float32 and float64, its degenerate case
# equals the plainer method it reduces to, and an out-of-domain value is refused, naming the
# argument, before anything compiles. An algorithm added here is covered without a new test.

SETTING_TAUS = (1.0, 2.0, 3.0, 5.0)  # the four workers' job durations of every setting below
SCHEDULE_KINDS = ("async", "barrier", "hierarchical", "ssp", "time_bounded")


@dataclasses.dataclass(frozen=True)
class Reduction:
    """A degenerate case: the method built with ``overrides`` of its arguments equals method
    ``to`` built with ``to_kwargs``, on the same setting with ``workers`` workers (None: the
    method's own four) and, if ``equal_speeds``, all job durations 1. ``rtol``: the relative
    difference allowed between the two final models (0: bit for bit)."""

    overrides: dict
    to: str
    to_kwargs: dict
    workers: Optional[int] = None
    equal_speeds: bool = False
    rtol: float = 1e-12


@dataclasses.dataclass(frozen=True)
class Method:
    """A registered algorithm.

    Attributes:
      name: the registry name.
      factory: the public constructor (``algos.*``).
      kwargs: a valid construction for the setting (four workers with job durations ``SETTING_TAUS``).
      vary: other values of some of its hyperparameters (factory arguments that are also entries
        of ``Algorithm.hparams``): rebuilding with them must not compile again.
      bad: ``(argument, value)`` pairs outside the argument's domain.
      schedule: the dispatch the method runs on, one of ``SCHEDULE_KINDS``.
      network: True for methods that act per layer (EDiT): run on a small MLP, not a quadratic.
      reduces_to: its degenerate case, where one exists.
    """

    name: str
    factory: Callable[..., algos.Algorithm]
    kwargs: dict
    vary: dict
    bad: tuple
    schedule: str = "async"
    network: bool = False
    reduces_to: Optional[Reduction] = None

    def build(self, **overrides) -> algos.Algorithm:
        return self.factory(**{**self.kwargs, **overrides})


def _methods() -> dict:
    from algos import elastic as ea

    taus = np.asarray(SETTING_TAUS)
    sgd1 = dict(to="minibatch_sgd", workers=1)  # one worker: plain SGD (a barrier round of one)
    entries = [
        Method("asgd", algos.asgd, dict(stepsize=0.05), dict(stepsize=0.08), (("stepsize", -0.1),),
               reduces_to=Reduction({}, **sgd1, to_kwargs=dict(stepsize=0.05))),
        Method("rescaled_asgd", algos.rescaled_asgd, dict(stepsize=0.05, taus=taus), dict(stepsize=0.08),
               (("stepsize", np.nan), ("taus", [1.0, 0.0, 2.0, 3.0])),
               reduces_to=Reduction(dict(taus=np.ones(4)), "asgd", dict(stepsize=0.05), equal_speeds=True)),
        Method("inverse_tau_asgd", algos.inverse_tau_asgd, dict(stepsize=0.05, taus=taus), dict(stepsize=0.08),
               (("taus", [1.0, -1.0, 2.0, 3.0]),),
               reduces_to=Reduction(dict(taus=np.ones(4)), "asgd", dict(stepsize=0.05), equal_speeds=True)),
        Method("delay_adaptive_asgd", algos.delay_adaptive_asgd, dict(stepsize=0.05, num_workers=4), dict(stepsize=0.08),
               (("num_workers", 0),),
               # equal speeds: every delay is n − 1 < n, so every step is γ
               reduces_to=Reduction({}, "asgd", dict(stepsize=0.05), equal_speeds=True)),
        Method("staleness_aware_asgd", algos.staleness_aware_asgd, dict(stepsize=0.05), dict(stepsize=0.08),
               (("stepsize", -1.0),), reduces_to=Reduction({}, "asgd", dict(stepsize=0.05), workers=1)),
        Method("clipped_asgd", algos.clipped_asgd, dict(stepsize=0.05, threshold=1.0), dict(stepsize=0.08, threshold=0.5),
               (("threshold", 0.0),), reduces_to=Reduction(dict(threshold=1e30), "asgd", dict(stepsize=0.05))),
        Method("staleness_weighted_asgd", algos.staleness_weighted_asgd, dict(stepsize=0.05, staleness="hinge"),
               dict(stepsize=0.08, a=0.3), (("a", -1.0), ("staleness", "linear")),
               reduces_to=Reduction(dict(staleness="constant"), "asgd", dict(stepsize=0.05))),
        Method("rennala_sgd", algos.rennala_sgd, dict(stepsize=0.05, batch=3), dict(stepsize=0.08), (("batch", 0),),
               reduces_to=Reduction(dict(batch=1), **sgd1, to_kwargs=dict(stepsize=0.05))),
        Method("malenia_sgd", algos.malenia_sgd, dict(stepsize=0.05, batch=6), dict(stepsize=0.08), (("batch", 1.5),),
               reduces_to=Reduction(dict(batch=1), **sgd1, to_kwargs=dict(stepsize=0.05))),
        Method("ringleader_asgd", algos.ringleader_asgd, dict(stepsize=0.05), dict(stepsize=0.08), (("stepsize", -0.05),),
               reduces_to=Reduction({}, **sgd1, to_kwargs=dict(stepsize=0.05))),
        Method("ringmaster_asgd", algos.ringmaster_asgd, dict(stepsize=0.05, threshold=4), dict(stepsize=0.08),
               (("threshold", 0),), reduces_to=Reduction(dict(threshold=10**6), "asgd", dict(stepsize=0.05))),
        Method("ia2sgd", algos.ia2sgd, dict(stepsize=0.05), dict(stepsize=0.08), (("stepsize", np.inf),),
               reduces_to=Reduction({}, **sgd1, to_kwargs=dict(stepsize=0.05))),
        Method("fedbuff_asgd", algos.fedbuff_asgd, dict(local_stepsize=0.05, buffer_size=2),
               dict(local_stepsize=0.08, server_stepsize=0.5), (("buffer_size", 0), ("staleness_exponent", -1.0)),
               reduces_to=Reduction(dict(buffer_size=1, staleness_exponent=0.0), "asgd", dict(stepsize=0.05))),
        Method("fedasync", algos.fedasync, dict(mixing=0.6, local_stepsize=0.05, local_steps=2, prox=0.1),
               dict(mixing=0.4, local_stepsize=0.08), (("mixing", 0.0), ("staleness", "none")),
               reduces_to=Reduction(dict(mixing=1.0, local_steps=1, prox=0.0), **sgd1, to_kwargs=dict(stepsize=0.05))),
        Method("async_local_sgd", algos.async_local_sgd,
               dict(stepsize=0.7, local_stepsize=0.05, local_steps=3, momentum=0.5, delay=2),
               dict(stepsize=0.5, local_stepsize=0.08, momentum=0.3), (("momentum", 1.0), ("delay", 0)),
               reduces_to=Reduction(dict(stepsize=1.0, local_steps=1, momentum=0.0, delay=1), "asgd",
                                    dict(stepsize=0.05))),
        Method("wbsp", algos.wbsp, dict(stepsize=0.05, slowest=3), dict(stepsize=0.08), (("slowest", -1),),
               reduces_to=Reduction(dict(slowest=0), **sgd1, to_kwargs=dict(stepsize=0.05))),
        Method("gsp", algos.gsp, dict(stepsize=0.2, groups=[0, 0, 1, 1], forward_every=2), dict(stepsize=0.3),
               (("forward_every", 0), ("groups", [0, 0, 2, 2])),
               # one group: vanilla ASGD with step γ/n
               reduces_to=Reduction(dict(groups=[0, 0, 0, 0]), "asgd", dict(stepsize=0.05))),
        Method("minibatch_sgd", algos.minibatch_sgd, dict(stepsize=0.1), dict(stepsize=0.15), (("stepsize", -0.1),),
               schedule="barrier"),
        Method("local_sgd", algos.local_sgd, dict(stepsize=0.7, local_stepsize=0.05, local_steps=[3, 2, 2, 1], momentum=0.5),
               dict(stepsize=0.5, local_stepsize=0.08, momentum=0.3), (("momentum", 1.2), ("local_steps", 0)),
               schedule="barrier",
               reduces_to=Reduction(dict(stepsize=1.0, local_steps=1, momentum=0.0), "minibatch_sgd", dict(stepsize=0.05))),
        Method("local_sgd_adamw", lambda **kw: algos.local_sgd(inner="adamw", **kw),
               dict(local_stepsize=0.05, local_steps=2, weight_decay=0.01), dict(local_stepsize=0.08, b2=0.99),
               (("weight_decay", -0.1), ("b1", 1.0)), schedule="barrier"),
        Method("palsgd", algos.palsgd, dict(stepsize=0.8, local_stepsize=0.05, local_steps=4, probability=0.3),
               dict(probability=0.2, pull=0.5), (("probability", 1.0), ("coin", "sometimes")), schedule="barrier",
               reduces_to=Reduction(dict(probability=0.0), "local_sgd", dict(stepsize=0.8, local_stepsize=0.05,
                                                                             local_steps=4), rtol=1e-13)),
        Method("edit", algos.edit, dict(stepsize=0.8, local_stepsize=0.05, local_steps=3, momentum=0.3,
                                        detector_warmup=2, clip=1.0, step_weight=0.3),
               dict(stepsize=0.5, temperature=2.0, clip=0.5), (("ewma", 1.5), ("reducer", "median")),
               schedule="barrier", network=True,
               reduces_to=Reduction(dict(reducer="uniform", threshold=np.inf, clip=None, step_weight=0.0), "local_sgd",
                                    dict(stepsize=0.8, local_stepsize=0.05, local_steps=3, momentum=0.3), rtol=1e-6)),
        Method("fedshift", algos.fedshift, dict(local_stepsize=0.05, local_steps=2, quantised=[False, False, True, True]),
               dict(local_stepsize=0.08), (("bits", 0), ("quantised", [0, 1, 0, 1])), schedule="barrier",
               reduces_to=Reduction(dict(quantised=[False] * 4), "local_sgd", dict(local_stepsize=0.05, local_steps=2))),
        Method("hierarchical_sgd", algos.hierarchical_sgd, dict(stepsize=0.1, levels={2: 2, 4: 4}, warmup=2),
               dict(stepsize=0.15), (("levels", {2: 3, 4: 4}), ("warmup", -1)), schedule="hierarchical",
               # averaging all n after every step: synchronous minibatch SGD
               reduces_to=Reduction(dict(levels={1: 4}, warmup=0), "minibatch_sgd", dict(stepsize=0.1))),
        Method("fedstrag", algos.fedstrag, dict(local_stepsize=0.05, history=8, local_steps=2),
               dict(local_stepsize=0.08, local_steps=3), (("history", 0), ("weighting", "linear")),
               schedule="time_bounded"),
        Method("easgd", ea.easgd, dict(learning_rate=0.05, alpha=0.2, period=2), dict(learning_rate=0.08, alpha=0.1),
               (("alpha", 0.5), ("period", 0)),
               reduces_to=Reduction(dict(), "eamsgd", dict(learning_rate=0.05, alpha=0.2, period=2, momentum=0.0))),
        Method("eamsgd", ea.eamsgd, dict(learning_rate=0.05, momentum=0.5, alpha=0.2, period=2),
               dict(learning_rate=0.08, momentum=0.3), (("momentum", 1.0), ("alpha", 0.0))),
        Method("eahes", ea.eahes, dict(learning_rate=0.05, alpha=0.2, period=2), dict(learning_rate=0.08, period=3),
               (("learning_rate", -0.01), ("b2", 1.0))),
        Method("eahes_om", ea.eahes_om, dict(learning_rate=0.05, alpha=0.2, period=2), dict(learning_rate=0.08),
               (("alpha", 0.7),),
               # without failures the oracle never fires: EAHES
               reduces_to=Reduction({}, "eahes", dict(learning_rate=0.05, alpha=0.2, period=2))),
        Method("deahes_o", ea.deahes_o, dict(learning_rate=0.05, alpha=0.2, period=2, a0=0.3),
               dict(learning_rate=0.08, a0=0.5, a_start=-0.2, h1_cap=0.5),
               (("a0", 0.0), ("history", 1), ("a_start", 0.1), ("h1_cap", 0.1), ("h1_cap", 1.5)),
               # an unreachable ramp (a0 → ∞) leaves (h1, h2) = (α, α): EAHES
               reduces_to=Reduction(dict(a0=1e300), "eahes", dict(learning_rate=0.05, alpha=0.2, period=2))),
        Method("sync_easgd", ea.sync_easgd, dict(learning_rate=0.05, alpha=0.2, period=2), dict(learning_rate=0.08),
               (("alpha", 0.3),), schedule="barrier"),  # n·α = 1.2 ≥ 1 with four workers
    ]
    return {m.name: m for m in entries}


METHODS: dict[str, Method] = _methods()
