"""Verdicts from paired differences over seeds: a 95% Student-t interval of the mean difference,
and the three words (holds / does not hold / inconclusive) read off it.

A claim "A is below B" is judged on d_s = A_s − B_s over seeds s (the same seed gives both runs
the same random draws, so the difference cancels what they share): it holds when the whole 95%
interval of mean(d) lies below 0, does not hold when the whole interval lies above 0, and is
inconclusive otherwise. A claim "A equals B" is judged by an equivalence margin δ stated with it:
it holds when the whole interval lies inside [−δ, δ], does not hold when the whole interval lies
outside it, and is inconclusive otherwise (an interval that merely contains 0 says nothing).
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np

HOLDS, FAILS, INCONCLUSIVE = "holds", "does not hold", "inconclusive"


class Interval(NamedTuple):
    mean: float
    half: float  # half-width of the 95% interval (nan with fewer than 2 seeds)
    n: int

    @property
    def lo(self) -> float:
        return self.mean - self.half

    @property
    def hi(self) -> float:
        return self.mean + self.half

    def __str__(self) -> str:
        return f"{self.mean:+.4f} ± {self.half:.4f}"


def paired_interval(d: Sequence[float], level: float = 0.95) -> Interval:
    """The mean of the paired differences ``d`` and the half-width of its Student-t interval."""
    from scipy import stats

    d = np.asarray(d, np.float64).ravel()
    n = d.size
    if n < 2:
        return Interval(float(d.mean()) if n else float("nan"), float("nan"), n)
    half = float(stats.t.ppf(0.5 + level / 2, n - 1) * d.std(ddof=1) / np.sqrt(n))
    return Interval(float(d.mean()), half, n)


def below(d: Sequence[float]) -> tuple[str, Interval]:
    """The claim "mean(d) < 0" (A below B, with d = A − B)."""
    iv = paired_interval(d)
    if not np.isfinite(iv.half):
        return INCONCLUSIVE, iv
    return (HOLDS if iv.hi < 0 else FAILS if iv.lo > 0 else INCONCLUSIVE), iv


def equal(d: Sequence[float], margin: float) -> tuple[str, Interval]:
    """The claim "|mean(d)| ≤ margin", by its 95% interval (module docstring)."""
    iv = paired_interval(d)
    if not np.isfinite(iv.half):
        return INCONCLUSIVE, iv
    if -margin <= iv.lo and iv.hi <= margin:
        return HOLDS, iv
    if iv.lo > margin or iv.hi < -margin:
        return FAILS, iv
    return INCONCLUSIVE, iv


def all_of(verdicts: Sequence[str]) -> str:
    """A conjunction: holds if every part holds, does not hold if any part does not, else
    inconclusive."""
    if any(v == FAILS for v in verdicts):
        return FAILS
    return HOLDS if all(v == HOLDS for v in verdicts) else INCONCLUSIVE
