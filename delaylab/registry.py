"""The one place that knows every named algorithm, scenario and figure.

An algorithm entry says how to build it from a step size and the workers' τ vector, and which
per-worker step it applies, from which theory predicts its implicit weights (q_i ∝ γ_i/τ_i).
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

import algos
import theory


@dataclasses.dataclass(frozen=True)
class AlgorithmEntry:
    name: str
    make: Callable[[float, np.ndarray], algos.Algorithm]  # (stepsize, taus) -> Algorithm
    per_worker_steps: Callable[[float, np.ndarray], np.ndarray]  # (stepsize, taus) -> γ_i
    summary: str

    def predicted_weights(self, stepsize: float, taus) -> np.ndarray:
        taus = np.asarray(taus, dtype=np.float64)
        return theory.implicit_weights(self.per_worker_steps(stepsize, taus), taus)


ALGORITHMS: dict[str, AlgorithmEntry] = {
    "asgd": AlgorithmEntry(
        "asgd",
        lambda gamma, taus: algos.asgd(stepsize=gamma),
        lambda gamma, taus: np.full(np.shape(taus), gamma),
        "vanilla asynchronous SGD, constant step (targets the frequency-weighted objective)",
    ),
    "rescaled_asgd": AlgorithmEntry(
        "rescaled_asgd",
        lambda gamma, taus: algos.rescaled_asgd(stepsize=gamma, taus=taus),
        theory.rescaled_stepsizes,
        "Rescaled ASGD, step γ τ_i/τ_H (targets the true objective)",
    ),
}


def algorithm(name: str) -> AlgorithmEntry:
    try:
        return ALGORITHMS[name]
    except KeyError:
        raise ValueError(f"unknown algorithm {name!r}; registered: {sorted(ALGORITHMS)}") from None
