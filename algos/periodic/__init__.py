"""Periodic local-update methods on synchronous rounds: local SGD with an outer optimiser
(DiLoCo-style), PALSGD, EDiT / A-EDiT and FedShift (docs/theory.md §10.7–§10.10), one module each.

One barrier round is one communication round. Every worker starts it at the synchronised model
x̄, runs H local steps (its job) and sends the pseudo-gradient Δ_i = x̄ − y_i; the server combines
the delivered Δ_i into one Δ and takes an outer step, Nesterov SGD as in DiLoCo (torch's
``SGD(nesterov=True)``): m ← β m + Δ, x̄ ← x̄ − η (Δ + β m). With η = 1 and β = 0 the outer step
is plain averaging, x̄ ← mean_i y_i. Every worker then restarts from the new x̄. A round whose
results were all lost leaves x̄ and m unchanged. Run these on ``sim.schedules.barrier`` with job
durations worth H local steps (or H_i, for per-worker local steps).

The methods differ in the local steps and in how Δ is combined:

- :func:`local_sgd`: H steps of SGD (or AdamW); Δ = the mean over delivered workers.
- :func:`palsgd` (Naganuma et al. 2025, docs/theory.md §10.8, the authors' decoupled variant): each local step is,
  with probability p, a *pseudo-synchronisation* step y ← y − (γ/p) η_p (y − x̄), which needs no
  gradient, and otherwise an SGD step of size γ/(1 − p). The coin is ``shared`` by all workers
  (as the released code, which seeds every rank alike) or drawn ``per_worker``. The DDP warm
  start is not modelled (start the run from a warmed-up model instead).
- :func:`edit` (Cheng et al. 2025, docs/theory.md §10.9, the Atorch code): per layer ℓ, an EWMA anomaly detector
  on the norms n_i = ‖Δ_i^ℓ‖ nullifies outliers (Δ_i^ℓ ← 0, n_i ← n_i + 10⁶); weights
  w_i = softmax_i(−n_i / T) (``reducer="softmax"``) or 1 (``"uniform"``; a nullified worker then
  still counts in the divisor), optionally mixed with step counts, w_i ← (1 − r) w_i + r s_i/Σ_j s_j;
  Δ^ℓ = Σ_i w_i Δ_i^ℓ / Σ_i w_i, clipped to norm c per layer or over all layers; a layer whose
  workers were all nullified is not updated. A-EDiT's time trigger is :func:`a_edit_local_steps`.
- :func:`fedshift` (Seo et al. 2024, docs/theory.md §10.10): the listed workers upload their model quantised to
  b bits per tensor (uniform min–max, 2^b levels); the server averages the models and shifts
  every tensor k, w̄_k ← w̄_k − (I/K) mean(w̄_k), with I of the K delivered workers quantised.
"""

from algos.periodic.common import PeriodicState, RoundPoint
from algos.periodic.edit import Detector, a_edit_local_steps, edit
from algos.periodic.fedshift import fedshift, quantise_uniform
from algos.periodic.local_sgd import dpro_sm_like_local_steps, local_sgd
from algos.periodic.palsgd import palsgd

__all__ = ["Detector", "PeriodicState", "RoundPoint", "a_edit_local_steps", "dpro_sm_like_local_steps", "edit",
           "fedshift", "local_sgd", "palsgd", "quantise_uniform"]
