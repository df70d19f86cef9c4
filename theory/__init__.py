"""Closed-form predictions and the checks that compare them with measurement.

Plain math over arrays: imports nothing of the project. Also home to the small helpers that both
``algos`` and ``sim`` need, since a helper two layers share lives in the lower one (docs/layout.md):
:mod:`theory.linalg` (reductions over a worker axis as contractions), :mod:`theory.layers` (the
layers of a parameter pytree) and :mod:`theory.hierarchy` (levels of hierarchical averaging).
"""

from delaylab.theory.checks import Check, format_table, summary_line
from delaylab.theory.complexity import (
    heterogeneous_lower_bound,
    homogeneous_lower_bound,
    minibatch_sgd_time,
    time_to_target,
    vanilla_asgd_homogeneous_time,
)
from delaylab.theory.fixed_point import clipped_fixed_point, quadratic_fixed_point, quadratic_gap, weighted_minimiser
from delaylab.theory.model import PAPER, StepRule, Theory
from delaylab.theory.noise import NoiseFloor, noise_floor, quadratic_gaps
from delaylab.theory.orbit import Orbit, hyperperiod_events, periodic_orbit
from delaylab.theory.weights import (
    arithmetic_mean,
    frequency_weights,
    harmonic_mean,
    implicit_weights,
    measured_weights,
    rescaled_stepsizes,
)

__all__ = [
    "Check",
    "PAPER",
    "StepRule",
    "Theory",
    "NoiseFloor",
    "noise_floor",
    "quadratic_gaps",
    "Orbit",
    "hyperperiod_events",
    "periodic_orbit",
    "arithmetic_mean",
    "format_table",
    "summary_line",
    "frequency_weights",
    "harmonic_mean",
    "heterogeneous_lower_bound",
    "homogeneous_lower_bound",
    "minibatch_sgd_time",
    "time_to_target",
    "vanilla_asgd_homogeneous_time",
    "implicit_weights",
    "measured_weights",
    "quadratic_fixed_point",
    "clipped_fixed_point",
    "quadratic_gap",
    "rescaled_stepsizes",
    "weighted_minimiser",
]
