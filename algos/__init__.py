"""Algorithms as pure functions (see :mod:`algos.base` for the protocol)."""

from algos.asgd import ASGDState, asgd, asgd_with_step_rule, constant_step, rescaled_asgd, rescaled_step
from algos.base import Algorithm, Event, gradient_work
from algos.sync import minibatch_sgd

__all__ = [
    "Algorithm",
    "ASGDState",
    "Event",
    "asgd",
    "asgd_with_step_rule",
    "constant_step",
    "gradient_work",
    "minibatch_sgd",
    "rescaled_asgd",
    "rescaled_step",
]
