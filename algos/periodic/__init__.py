"""Periodic local-update methods on synchronous rounds: local SGD with an outer optimiser
(DiLoCo-style), PALSGD, EDiT / A-EDiT and FedShift (docs/theory.md §10.7–§10.10), one module each.

One barrier round is one communication round. Every worker starts it at the synchronised model
x̄, runs H local steps (its job) and sends the pseudo-gradient Δ_i = x̄ − y_i; the server combines
the delivered Δ_i into one Δ and takes an outer step, Nesterov SGD as in DiLoCo (torch's
``SGD(nesterov=True)``): m ← β m + Δ, x̄ ← x̄ − η (Δ + β m); with η = 1 and β = 0 it is plain
averaging, x̄ ← mean_i y_i. A round whose results were all lost leaves x̄ and m unchanged. Run
these on ``sim.schedules.barrier`` with job durations worth H (or per-worker H_i) local steps.

The methods differ in the local steps and in how Δ is combined, each rule given in its function's
docstring: :func:`local_sgd` (SGD or AdamW; Δ the mean over delivered workers), :func:`palsgd`
(Naganuma et al. 2025: some local steps are pseudo-synchronisations), :func:`edit` (Cheng et al.
2025: per-layer anomaly elimination, weighting and clipping) and :func:`fedshift` (Seo et al.
2024: quantised uploads, shifted averages).
"""

from delaylab.algos.periodic.common import PeriodicState, RoundPoint
from delaylab.algos.periodic.edit import Detector, a_edit_local_steps, edit
from delaylab.algos.periodic.fedshift import fedshift, quantise_uniform
from delaylab.algos.periodic.local_sgd import dpro_sm_like_local_steps, local_sgd
from delaylab.algos.periodic.palsgd import palsgd

__all__ = ["Detector", "PeriodicState", "RoundPoint", "a_edit_local_steps", "dpro_sm_like_local_steps", "edit",
           "fedshift", "local_sgd", "palsgd", "quantise_uniform"]
