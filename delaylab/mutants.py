"""Plausible wrong theories, for `delaylab verify --mutants`: can the checks see a wrong theory?

Each :class:`Mutant` replaces one formula of :data:`theory.PAPER` with a mistake someone could
make reading docs/theory.md §2–§5 and §14. :func:`score`
checks the same measurements under every mutant: a mutant is *caught* when at least one check
that passes under the published theory fails under it. A mutant nothing catches means the
checks cannot tell that theory from the published one, and verify exits non-zero.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np

from delaylab import theory, checking
from delaylab.theory import queueing
from delaylab.theory import weights as w


@dataclasses.dataclass(frozen=True)
class Mutant:
    name: str
    description: str
    theory: theory.Theory


def _normalised(v):
    v = np.asarray(v, dtype=np.float64)
    return v / v.sum()


def _unweighted_curvature(A, b, q):
    """x = (mean_i A_i)^{-1} Σ q_i A_i b_i: the weights left off the curvature."""
    A = np.asarray(A, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    q = _normalised(q)
    dense = A if A.ndim == 3 else np.stack([np.diag(a) for a in A])
    return np.linalg.solve(dense.mean(0), np.einsum("i,ijk,ik->j", q, dense, b))


def _mutant(name, description, **changes) -> Mutant:
    return Mutant(name, description, dataclasses.replace(theory.PAPER, name=name, description=description, **changes))


def _taus(t):
    return np.asarray(t, dtype=np.float64)


MUTANTS: tuple[Mutant, ...] = (
    _mutant("weights-1/tau2", "q_i ∝ γ_i/τ_i² (arrival rate counted twice)",
            implicit_weights=lambda g, t: _normalised(np.broadcast_to(g, _taus(t).shape) / _taus(t) ** 2)),
    _mutant("weights-per-job", "q_i ∝ γ_i (arrival rate left out: vanilla uniform, Rescaled ∝ τ_i)",
            implicit_weights=lambda g, t: _normalised(np.broadcast_to(np.asarray(g, np.float64), _taus(t).shape))),
    _mutant("rescaled-overcorrects", "Rescaled's step γ τ_i²/τ_H, so its weights ∝ τ_i", rescaling_power=2.0),
    _mutant("rescaled-by-arithmetic-mean", "Rescaled normalised by τ_A instead of τ_H (same weights, smaller steps)",
            rescaling_mean=w.arithmetic_mean),
    _mutant("weights-unnormalised", "q_i = γ_i/τ_i, not divided by their sum",
            implicit_weights=lambda g, t: np.broadcast_to(np.asarray(g, np.float64), _taus(t).shape) / _taus(t)),
    _mutant("fixed-point-unweighted-curvature", "x_q = (mean A_i)^{-1} Σ q_i A_i b_i",
            quadratic_fixed_point=_unweighted_curvature),
    _mutant("noise-floor-x2", "noise floor V σ²/(2Γ)", noise_scale=2.0),
    _mutant("noise-floor-half", "noise floor V σ²/(8Γ)", noise_scale=0.5),
    _mutant("floor-ratio-max-min", "Rescaled/vanilla floor ratio τ_max/τ_min instead of τ_A/τ_H",
            floor_ratio=lambda t: float(np.max(t) / np.min(t))),
    _mutant("staleness-in-time", "staleness counted in time since the model was handed, not in updates",
            staleness_in="time"),
    _mutant("orbit-wrong-order", "the period's affine maps composed first-to-last (M ← M M_k)",
            compose=lambda Mk, ck, M, c: (M @ Mk, M @ ck + c)),
    _mutant("clipping-ignored", "clipped ASGD settles at x_q, as if no gradient were clipped", clipping=False),
    _mutant("server-ignored", "behind a server that takes time, the workers' rates are still 1/τ_i",
            server_cycles=lambda server, t: _taus(t)),
    _mutant("server-links-ignored", "the server's queue counted, the links to and from it left out",
            server_cycles=lambda server, t: 1.0 / queueing.throughputs(_taus(t), server.service)),
)


@dataclasses.dataclass
class Report:
    caught_by: dict  # mutant name -> the checks it fails (that pass under the published theory)
    descriptions: dict

    @property
    def survivors(self) -> list:
        return [name for name, rows in self.caught_by.items() if not rows]

    @property
    def score(self) -> float:
        return (len(self.caught_by) - len(self.survivors)) / max(len(self.caught_by), 1)

    def as_dict(self) -> dict:
        return {"score": self.score, "survivors": self.survivors,
                "mutants": {name: {"description": self.descriptions[name], "caught_by": rows}
                            for name, rows in self.caught_by.items()}}

    def format(self, synthetic: Optional[dict] = None) -> str:
        lines = ["Mutants: the same runs checked under plausible wrong theories (caught: some passing check fails)"]
        width = max(len(n) for n in self.caught_by)
        for name, rows in self.caught_by.items():
            if rows:
                shown = "; ".join(rows[:3]) + (f"; … {len(rows) - 3} more" if len(rows) > 3 else "")
                lines.append(f"  {name.ljust(width)}  caught by {len(rows)} checks: {shown}")
            else:
                lines.append(f"  {name.ljust(width)}  SURVIVES: no check fails ({self.descriptions[name]})")
        if synthetic:
            caught = [s for s, v in synthetic.items() if v["caught"]]
            lines.append(f"Synthetic method settling at x* + 0.02 (x_p − x*) (Rescaled's runs, shifted): its fixed-point "
                         f"check fails in {len(caught)} of {len(synthetic)} scenarios")
            for s, v in synthetic.items():
                if not v["caught"]:
                    lines.append(f"  not told apart in {s}: error {v['error']:.3g} ≤ tolerance {v['tolerance']:.3g}"
                                 f" (shift {v['shift']:.3g}; the tolerance is {v['tolerance'] / v['shift']:.0%} of it)")
        caught = len(self.caught_by) - len(self.survivors)
        lines.append(f"mutation score: {caught}/{len(self.caught_by)} = {self.score:.2f}")
        return "\n".join(lines)


def score(measured: list, baseline: list, mutants: list, *, memo=None, progress=None) -> Report:
    """Check ``measured`` under every mutant; ``baseline`` are its checks under the published theory."""
    passing = {(c.scenario, c.algorithm, c.quantity) for c in baseline if c.passed}
    caught_by, descriptions = {}, {}
    for k, mutant in enumerate(mutants, start=1):
        if progress:
            progress(f"[mutant {k}/{len(mutants)}] {mutant.name}: {mutant.description}")
        checks = checking.check(measured, mutant.theory, memo)
        caught_by[mutant.name] = [f"{c.scenario}/{c.algorithm} {c.quantity}" for c in checks
                                  if not c.passed and (c.scenario, c.algorithm, c.quantity) in passing]
        descriptions[mutant.name] = mutant.description
    return Report(caught_by, descriptions)
