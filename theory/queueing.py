"""Update rates of asynchronous workers behind a server that takes time (docs/theory.md §14).

Each worker is one customer of a closed queueing network: its job and the links both ways (mean
Z_i, its "think time"), then a wait at the one first-come-first-served server, which applies the
update (mean S, the same for every worker). Worker i's throughput X_i (updates per unit time)
takes the place of 1/τ_i in the implicit weights of docs/theory.md §2: q_i ∝ γ_i X_i.

With exponential service the network has product form, whatever the think-time distributions,
and with one customer per worker its normalising constant is G = Σ_k k! S^k e_{n−k}(Z) (e_m the
elementary symmetric polynomials), so X_i = G_{−i}/G exactly (:func:`throughputs`; the derivation
is in docs/theory.md §14). With fixed service times the formula is an approximation, whose error
against the simulator is in benchmarks/RESULTS.md.
"""

from __future__ import annotations

import math

import numpy as np

from delaylab.theory.arguments import as_numbers


def _inputs(think, service) -> tuple[np.ndarray, float]:
    z = as_numbers(think, "think")
    if z.ndim != 1 or z.size == 0 or not np.all(np.isfinite(z)) or np.any(z <= 0):
        raise ValueError(f"think must be a non-empty vector of finite times > 0 (one per worker); got {z}")
    s = float(as_numbers(service, "service"))
    if not (math.isfinite(s) and s >= 0):
        raise ValueError(f"service must be a finite time >= 0; got {service!r}")
    return z, s


def _log_elementary(log_z: np.ndarray) -> np.ndarray:
    """log e_m(z) for m = 0..len(z), by e_m ← e_m + z_j e_{m−1} over j (all terms positive)."""
    le = np.full(log_z.size + 1, -np.inf)
    le[0] = 0.0
    for j, lz in enumerate(log_z):
        le[1:j + 2] = np.logaddexp(le[1:j + 2], lz + le[:j + 1])
    return le


def _log_g(log_z: np.ndarray, service: float) -> float:
    """log G = log Σ_k k! S^k e_{n−k}(z)."""
    n = log_z.size
    le = _log_elementary(log_z)
    k = np.arange(n + 1)
    if service == 0:
        return float(le[n])  # only k = 0: nobody waits
    terms = np.array([math.lgamma(j + 1) for j in k]) + k * math.log(service) + le[n - k]
    return float(np.logaddexp.reduce(terms))


def throughputs(think, service) -> np.ndarray:
    """X_i, updates per unit time of each worker: exact for exponential service of mean
    ``service`` at one FCFS server and think times of means ``think`` (each worker's mean job
    time plus its links both ways), of any distribution."""
    z, s = _inputs(think, service)
    log_z = np.log(z)
    g = _log_g(log_z, s)
    return np.array([math.exp(_log_g(np.delete(log_z, i), s) - g) for i in range(z.size)])


def utilisation(think, service) -> float:
    """The server's busy fraction, S Σ_i X_i."""
    _, s = _inputs(think, service)
    return float(s * np.sum(throughputs(think, service)))


def served_weights(stepsizes, think, service) -> np.ndarray:
    """q_i = γ_i X_i / Σ_j γ_j X_j: the implicit weights of per-worker steps γ_i when the
    workers' update rates are the network's throughputs (docs/theory.md §14)."""
    from delaylab.theory.weights import implicit_weights

    return implicit_weights(stepsizes, 1.0 / throughputs(think, service))
