"""The scenarios of `delaylab verify`: a problem, a schedule and a step size each.

Each is chosen so that vanilla ASGD's frequency-weighted fixed point x_p and the true optimum x*
are far apart compared with the tolerance, so a check can tell which of the two a method
reached, and each step is small enough that the O(γ) offset of the finite-step average, which
the fixed-point tolerances are computed from, stays within about 1% of that distance for every
method theory models (printed per row by `delaylab verify`), so a method left with 2% of the
bias is told apart. Runs last far longer than the transient (the initial error decays by e^-30
or more before the averaging window). Tests use other cases, so that verify and the suite check
different numbers.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from delaylab import sim
from delaylab.sim import schedules


@dataclasses.dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    problem: Callable[[], sim.problems.Problem]
    schedule: Callable[[], schedules.Schedule]
    stepsize: float
    # (algorithm, γ) pairs that run at another step than ``stepsize``, each with its reason below
    step_overrides: tuple = ()


def _spread_b(n: int, d: int, seed: int, scale: float = 2.0) -> np.ndarray:
    return scale * np.random.default_rng(seed).standard_normal((n, d))


def _taus(kind: str, n: int) -> np.ndarray:
    i = np.arange(1, n + 1, dtype=np.float64)
    return {"linear": i, "sqrt": np.sqrt(i), "square": i**2}[kind]


def toy_problem() -> sim.problems.Problem:
    """The 1-D toy of Fig. A: three unit-curvature workers with minimisers 1, −1, −2, x0 = 5."""
    return sim.problems.quadratic(np.ones((3, 1)), np.array([[1.0], [-1.0], [-2.0]]), x0=[5.0])


TOY_TAUS = np.array([1.0, 5.0, 10.0])


def _straggler_taus(n: int) -> np.ndarray:
    t = np.ones(n)
    t[-1] = 10.0
    return t


# Clipped ASGD moves each arrival by at most γc, and near its limit by γc/‖∇F_i‖ times the
# gradient: where every gradient there is long (straggler-10x, d100, exponential: all workers
# clipped), its effective step is several times smaller than the others', and at the scenario's γ
# it would not reach its limit within the run. So it runs at a larger step of its own
# (``step_overrides``): the common steps are small to keep the other methods' O(γ) offsets within
# their tolerances, and theory has no finite-step model of clipped ASGD (its tolerance is the 2%
# cap either way).
SCENARIOS: tuple[Scenario, ...] = (
    Scenario("toy-1d", "d=1, n=3, τ=(1,5,10), b=(1,−1,−2): the Fig. A toy",
             toy_problem, lambda: schedules.fixed_computation(TOY_TAUS, num_events=20000), 0.02),
    Scenario("tau-i", "τ_i=i, n=4, d=10, dense curvature",
             lambda: sim.problems.random_quadratic(4, 10, condition=4.0, spread=2.0, seed=101),
             lambda: schedules.fixed_computation(_taus("linear", 4), num_events=40000), 0.0015),
    Scenario("tau-sqrt-i", "τ_i=√i, n=8, d=5, diagonal curvature",
             lambda: sim.problems.random_quadratic(8, 5, diagonal=True, condition=4.0, spread=2.0, seed=102),
             lambda: schedules.fixed_computation(_taus("sqrt", 8), num_events=40000), 0.0025),
    Scenario("tau-i2", "τ_i=i², n=4, d=3, dense curvature",
             lambda: sim.problems.random_quadratic(4, 3, condition=3.0, spread=2.0, seed=103),
             lambda: schedules.fixed_computation(_taus("square", 4), num_events=40000), 0.004),
    Scenario("straggler-10x", "n=8, one worker 10× slower, d=20, diagonal curvature",
             lambda: sim.problems.random_quadratic(8, 20, diagonal=True, condition=4.0, spread=2.0, seed=104),
             lambda: schedules.fixed_computation(_straggler_taus(8), num_events=80000), 0.0006,
             step_overrides=(("clipped_asgd", 0.005),)),
    Scenario("exponential", "random durations τ_i=i + Exp(mean 1), n=4, d=10, dense; τ-rules use mean durations",
             lambda: sim.problems.random_quadratic(4, 10, condition=4.0, spread=2.0, seed=105),
             lambda: schedules.random_durations(_taus("linear", 4), num_events=40000, noise="exponential", seed=7), 0.003,
             step_overrides=(("clipped_asgd", 0.01),)),
    Scenario("d100", "τ_i=i, n=16, d=100, diagonal curvature",
             lambda: sim.problems.random_quadratic(16, 100, diagonal=True, condition=4.0, spread=2.0, seed=106),
             lambda: schedules.fixed_computation(_taus("linear", 16), num_events=80000), 0.0006,
             step_overrides=(("clipped_asgd", 0.005),)),
    Scenario("noisy", "gradient noise σ=1, τ=(1,2,3,5,8), n=5, d=3, dense",
             lambda: sim.problems.random_quadratic(5, 3, condition=3.0, spread=2.0, noise=1.0, seed=107),
             lambda: schedules.fixed_computation([1.0, 2.0, 3.0, 5.0, 8.0], num_events=80000), 0.003),
    Scenario("server", "τ_i=i, n=4, d=10, dense; each update through a FCFS server (exponential service, mean 0.5) "
             "and links of 0.1 up and 0.2 down: the workers' rates are the closed network's, not 1/τ_i",
             lambda: sim.problems.random_quadratic(4, 10, condition=4.0, spread=2.0, seed=109),
             lambda: schedules.served(schedules.FixedTiming(_taus("linear", 4)),
                                      schedules.Server(0.5, uplink=0.1, downlink=0.2, kind="exponential", seed=9),
                                      num_events=40000), 0.0015,
             step_overrides=(("clipped_asgd", 0.01),)),
    Scenario("logistic", "logistic regression, τ_i=i, n=4, 5 features + intercept, full local batches",
             lambda: sim.problems.synthetic_logistic(4, 80, 5, heterogeneity=1.5, l2=0.05, seed=108),
             lambda: schedules.fixed_computation(_taus("linear", 4), num_events=60000), 0.0125),
)


def scenario(name: str) -> Scenario:
    for s in SCENARIOS:
        if s.name == name:
            return s
    raise ValueError(f"unknown scenario {name!r}; known: {[s.name for s in SCENARIOS] + ['cycle-map', 'noise-floor']}")
