"""The claims harness: how a figure turns runs into a verdict on a paper's claim.

Three pieces, used by every figure that states a verdict (and by a notebook the same way):
**seeds that resample every random source** (:func:`seed_sources`, :func:`disjoint_seeds`);
**steps that bracket the optimum** (:func:`bracket`; a verdict that depends on a step at an edge
is :data:`INCONCLUSIVE`, :func:`gated`); and **verdicts from paired differences over seeds**.

A claim "A is below B" is judged on d_s = A_s − B_s over seeds s (a seed gives both runs the same
random draws, so the difference cancels what they share): a 95% Student-t interval of mean(d) (t,
not a bootstrap: with 3–10 seeds the bootstrap's percentile interval is too narrow; the t interval
covers at its nominal rate for normal differences, which ``tests/delaylab/test_claims.py`` checks
by simulation). The claim holds when the whole interval lies below 0, does not hold when it lies
above 0, and is inconclusive otherwise (:func:`below`). One test per kind of claim (:func:`judge`);
between tuned methods, the word must agree across step settings (:func:`step_robust`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import zlib
from typing import Callable, Mapping, NamedTuple, Optional, Sequence

import numpy as np

HOLDS, FAILS, INCONCLUSIVE = "holds", "does not hold", "inconclusive"
VERDICTS = (HOLDS, FAILS, INCONCLUSIVE)


# --------------------------------------------------------------------------------------------
# intervals and verdicts


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


@functools.lru_cache(maxsize=256)
def _t_quantile(q: float, df: int) -> float:
    from scipy import stats

    return float(stats.t.ppf(q, df))  # scipy's ppf costs about 0.1 ms a call: cached


def paired_interval(d: Sequence[float], level: float = 0.95) -> Interval:
    """The mean of the paired differences ``d`` and the half-width of its Student-t interval."""
    d = np.asarray(d, np.float64).ravel()
    n = d.size
    if n < 2:
        return Interval(float(d.mean()) if n else float("nan"), float("nan"), n)
    half = float(_t_quantile(0.5 + level / 2, n - 1) * d.std(ddof=1) / np.sqrt(n))
    return Interval(float(d.mean()), half, n)


def _verdict(kind: str, iv: Interval, wide: Interval, margin: float = 0.0) -> str:
    """One comparison's word: it holds when its 95% interval ``iv`` lies on the claim's side, does
    not hold when ``wide`` (the same interval, or a wider one at a corrected level) lies wholly on
    the other side, and is inconclusive otherwise or with fewer than 2 seeds."""
    if kind == "below":  # mean(d) < 0
        ok, bad = iv.hi < 0, wide.lo > 0
    elif kind == "noninferior":  # mean(d) ≤ margin
        ok, bad = iv.hi < margin, wide.lo > margin
    elif kind == "equal":  # |mean(d)| ≤ margin
        ok, bad = (-margin <= iv.lo and iv.hi <= margin), (wide.lo > margin or wide.hi < -margin)
    else:
        raise ValueError(f"comparison kind must be 'below', 'noninferior' or 'equal'; got {kind!r}")
    if not np.isfinite(iv.half):
        return INCONCLUSIVE
    return HOLDS if ok else FAILS if bad else INCONCLUSIVE


def below(d: Sequence[float]) -> tuple[str, Interval]:
    """The claim "mean(d) < 0" (A below B, with d = A − B)."""
    iv = paired_interval(d)
    return _verdict("below", iv, iv), iv


def ratio_below(a: Sequence[float], b: Sequence[float], bound: float = 1.0) -> tuple[str, Interval]:
    """The claim "A/B < bound", judged on the paired log ratios log(A_s/B_s) − log(bound); the
    interval returned is of the mean log ratio (exp of its ends bounds the geometric-mean ratio)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if np.any(a <= 0) or np.any(b <= 0):
        raise ValueError("ratio_below needs positive quantities")
    verdict, iv = below(np.log(a / b) - math.log(bound))
    return verdict, Interval(iv.mean + math.log(bound), iv.half, iv.n)


def equal(d: Sequence[float], margin: float) -> tuple[str, Interval]:
    """The claim "|mean(d)| ≤ margin" (A equals B within an equivalence margin δ stated with the
    claim), by its 95% interval: it holds when the whole interval lies inside [−δ, δ], does not hold
    when the whole interval lies outside it, and is inconclusive otherwise (an interval that merely
    contains 0 says nothing)."""
    iv = paired_interval(d)
    return _verdict("equal", iv, iv, margin), iv


def noninferior(d: Sequence[float], margin: float) -> tuple[str, Interval]:
    """The claim "mean(d) ≤ margin" (A no worse than B by more than ``margin``, d = A − B): holds
    when the whole interval lies below the margin, does not hold when it lies wholly above."""
    iv = paired_interval(d)
    return _verdict("noninferior", iv, iv, margin), iv


class Part(NamedTuple):
    """One comparison inside a conjunction: its 95% interval, the wider interval at the
    corrected level that decides "does not hold", and its verdict."""

    name: str
    interval: Interval
    corrected: Interval
    verdict: str
    margin: float = 0.0  # the bound the comparison is judged against (0 for "below")
    kind: str = "below"  # "below", "noninferior" or "equal"
    level: float = 0.95  # the confidence of ``interval`` (which decides "holds")
    corrected_level: float = 0.95  # the confidence of ``corrected`` (which decides "does not hold")


def conjunction(parts: Sequence[tuple], level: float = 0.95) -> tuple[str, list]:
    """A claim made of k comparisons that must all hold, each ``(name, kind, d)`` or
    ``(name, kind, d, margin)`` with kind "below" (mean(d) < 0), "noninferior" (mean(d) ≤ margin)
    or "equal" (|mean(d)| ≤ margin).

    It holds when every comparison holds at the 95% level (an intersection-union test: no
    correction is needed for "all hold"). It does not hold when some comparison fails at the
    Bonferroni level 1 − 0.05/k: "any one fails" is a union of k tests, and without the correction
    k equal methods would be declared different far more often than 5% of the time. Otherwise it
    is inconclusive. Returns the verdict and each comparison's :class:`Part`."""
    k = max(1, len(parts))
    strict = 1.0 - (1.0 - level) / k
    out = []
    for part in parts:
        name, kind, d = part[:3]
        margin = float(part[3]) if len(part) > 3 else 0.0
        iv, wide = paired_interval(d, level), paired_interval(d, strict)
        out.append(Part(name, iv, wide, _verdict(kind, iv, wide, margin), margin, kind, level, strict))
    return all_of([p.verdict for p in out]), out


def all_of(verdicts: Sequence[str]) -> str:
    """A conjunction: holds if every part holds, does not hold if any part does not, else
    inconclusive."""
    if any(v == FAILS for v in verdicts):
        return FAILS
    return HOLDS if all(v == HOLDS for v in verdicts) else INCONCLUSIVE


# --------------------------------------------------------------------------------------------
# kinds of claim: one test each


SUPERIORITY, NONINFERIORITY, EQUIVALENCE, ORDERING, TREND = (
    "superiority", "non-inferiority", "equivalence", "ordering", "trend")
KINDS = (SUPERIORITY, NONINFERIORITY, EQUIVALENCE, ORDERING, TREND)
_PART_KIND = {SUPERIORITY: "below", NONINFERIORITY: "noninferior", EQUIVALENCE: "equal", ORDERING: "below",
              TREND: "below"}


def judge(kind: str, parts: Sequence[tuple], margin: float = 0.0, *, level: float = 0.95,
          exact: bool = False) -> tuple[str, list]:
    """A claim of ``kind`` over its comparison family ``parts`` (each ``(name, d)``, d the paired
    differences over seeds, A − B): one :func:`conjunction` whose every comparison is of the
    kind's test. superiority: each A below its B (mean(d) < 0); non-inferiority: each A no worse
    than its B by more than ``margin`` (mean(d) ≤ margin); equivalence: each |mean(d)| ≤ ``margin``;
    ordering: A₁ < A₂ < … given as the consecutive differences; trend: each per-seed slope minus
    the bound below 0. The same kind always gives the same test, whichever figure asks.

    ``level``: the confidence of the intervals that decide "holds" (below 0.95 for one verdict of a
    family judged separately). ``exact``: each d is one deterministic number (a run without
    randomness): its interval has zero width."""
    if kind not in KINDS:
        raise ValueError(f"claim kind must be one of {KINDS}; got {kind!r}")
    if kind in (NONINFERIORITY, EQUIVALENCE) and not margin > 0:
        raise ValueError(f"a {kind} claim needs a margin > 0; got {margin!r}")
    if not parts:
        raise ValueError("a claim needs at least one comparison")
    if exact:
        out = []
        for name, d in parts:
            iv = Interval(float(d), 0.0, 1)
            out.append(Part(name, iv, iv, _verdict(_PART_KIND[kind], iv, iv, margin), margin, _PART_KIND[kind], 1.0, 1.0))
        return all_of([p.verdict for p in out]), out
    return conjunction([(name, _PART_KIND[kind], d, margin) for name, d in parts], level=level)


def marginal(parts: Sequence[Part], *, seeds: int = 10) -> list:
    """The comparisons that decide a verdict from fewer than ``seeds`` seeds while their mean lies
    within two half-widths of the bound they are judged against (the deciding interval's near end
    within one half-width of it; for a comparison that fails, the corrected interval that decided
    it): a verdict resting on such a comparison is read as inconclusive until it has ``seeds``
    seeds."""
    out = []
    for p in parts:
        if p.verdict == INCONCLUSIVE or p.interval.n >= seeds:
            continue
        iv = p.corrected if p.verdict == FAILS else p.interval
        bounds = (-p.margin, p.margin) if p.kind == "equal" else (p.margin,)
        if min(abs(iv.mean - b) for b in bounds) < 2 * iv.half:
            out.append(p)
    return out


def decisive_t(n: int, level: float) -> float:
    """How many standard errors from its bound a comparison's mean over ``n`` seeds must lie for
    a word decided by an interval at ``level`` not to be :func:`marginal`: two half-widths, 2 ·
    t_{(1 + level)/2, n − 1}. With few seeds and a corrected level this is large (3 seeds, a
    level of 1 − 0.05/48: about 62), which is what makes a failure out of reach there."""
    if n < 2:
        return math.inf
    return 2.0 * _t_quantile(0.5 + level / 2, n - 1)


def thin(verdict: str, parts: Sequence[Part], *, seeds: int = 10) -> list:
    """The :func:`marginal` comparisons a verdict rests on: for "holds", any marginal one (every
    comparison must hold); for "does not hold", the failing ones when every failing comparison is
    marginal (one decisive failure decides it); none for "inconclusive"."""
    if verdict == HOLDS:
        return marginal(parts, seeds=seeds)
    if verdict == FAILS:
        failing = [p for p in parts if p.verdict == FAILS]
        near = marginal(failing, seeds=seeds)
        return near if len(near) == len(failing) else []
    return []


def thin_reason(near: Sequence[tuple], seeds: int) -> str:
    """Why a verdict resting on :func:`thin` comparisons is inconclusive: ``near`` holds (setting
    label, or "" for the only setting, comparison) pairs."""
    return (f"decided within two half-widths on fewer than {seeds} seeds: "
            + "; ".join(f"{k + ': ' if k else ''}{p.name} {p.corrected if p.verdict == FAILS else p.interval}"
                        for k, p in near))


def deciding(p: Part) -> tuple:
    """(the interval that decided ``p``'s word, its confidence level): the corrected interval for
    a comparison that does not hold, else the interval "holds" is read from."""
    return (p.corrected, p.corrected_level) if p.verdict == FAILS else (p.interval, p.level)


@dataclasses.dataclass(frozen=True)
class AtSteps:
    """A claim between tuned methods, judged at three settings of their steps: ``tuned`` (each arm
    at its own tuned step), ``common`` (both arms at one step, each common step a label) and
    ``neighbours`` (each arm one grid step below, and one above, its tuned step). Each value is
    a (verdict, parts) pair from :func:`judge`."""

    tuned: tuple
    common: dict
    neighbours: dict

    def readings(self) -> dict:
        return {"tuned steps": self.tuned, **{f"common step {k}": v for k, v in self.common.items()},
                **{f"neighbours {k}": v for k, v in self.neighbours.items()}}


def step_robust(at: AtSteps, *, seeds: int = 10, common: bool = True) -> tuple[str, str]:
    """The verdict of a claim between tuned methods, with the reason when it is inconclusive:
    "holds" or "does not hold" only where the tuned steps, the common step (where the claim has
    one: ``common``) and every pair of neighbours give that same word (else it depends on the
    step), where those settings were measured at all, and where no setting's word rests on
    :func:`marginal` comparisons (:func:`thin`). Inconclusive at the tuned steps, it is
    inconclusive, and where another setting decided a word the reason says the word depends on
    the step, with every setting's."""
    verdict, _ = at.tuned
    if verdict == INCONCLUSIVE:
        words = {k: v for k, (v, _) in at.readings().items()}
        if any(v != INCONCLUSIVE for v in words.values()):
            return INCONCLUSIVE, "depends on the step: " + "; ".join(f"{k}: {v}" for k, v in words.items())
        return INCONCLUSIVE, ""
    if (common and not at.common) or not at.neighbours:
        return INCONCLUSIVE, ("robustness to the step not measured ("
                              + ("no step evaluated in every arm's bracket" if common and not at.common
                                 else "no grid neighbours") + ")")
    words = {k: v for k, (v, _) in at.readings().items()}
    if len(set(words.values())) > 1:
        return INCONCLUSIVE, "depends on the step: " + "; ".join(f"{k}: {v}" for k, v in words.items())
    near = [(k, p) for k, (v, parts) in at.readings().items() for p in thin(v, parts, seeds=seeds)]
    if near:
        return INCONCLUSIVE, thin_reason(near, seeds)
    return verdict, ""


def needs_seeds(readings: dict, *, seeds: int = 10) -> bool:
    """Whether any setting's decided comparison is :func:`marginal` (``readings``: label ->
    (verdict, parts)): then the claim is measured again on ``seeds`` seeds."""
    return any(marginal(parts, seeds=seeds) for _, parts in readings.values())


def step_settings(brackets: dict, *, common: bool = True, along: bool = False) -> dict:
    """The step settings a claim between tuned cells is judged at (:func:`step_robust`):
    label -> {cell: step}. "tuned": each cell at its own best step. "common γ = g" (with
    ``common``): every cell at one step g, the step every cell's bracket evaluated whose summed
    relative excess over each cell's best tuning score is least (chosen on the tuning seeds, and
    inside every cell's tried range; none when no step was evaluated by all). "neighbours −" /
    "+": each cell one step of its refined grid below / above its best (left out when a cell has
    none there: a step at an edge, which :func:`gated` makes inconclusive anyway). With ``along``,
    also "along γ = g" for every step all brackets evaluated within the cells' neighbours' span
    (descriptive readings along the step range, not part of the verdict)."""
    out = {"tuned": {k: b.best for k, b in brackets.items()}}
    # a screened step's score is its first tuning seed's alone: not comparable, so not a candidate
    scores = {k: {g: v for g, v in zip(b.steps, b.scores) if g not in b.screened} for k, b in brackets.items()}
    shared = sorted(set.intersection(*(set(g for g, v in sc.items() if math.isfinite(v)) for sc in scores.values())))
    if common and shared:
        def excess(g):
            return sum((scores[k][g] - scores[k][b.best]) / abs(scores[k][b.best] or 1.0) for k, b in brackets.items())

        g = min(shared, key=lambda x: (excess(x), x))
        out[f"common γ = {g:.4g}"] = {k: g for k in brackets}
    for side, i in (("−", 0), ("+", 1)):
        nb = {k: b.neighbours()[i] for k, b in brackets.items()}
        if all(g is not None for g in nb.values()):
            out[f"neighbours {side}"] = nb
    if along:
        span = [g for b in brackets.values() for g in (*b.neighbours(), b.best) if g is not None]
        for g in shared:
            if min(span) <= g <= max(span):
                out[f"along γ = {g:.4g}"] = {k: g for k in brackets}
    return out


def same_as(settings: dict) -> dict:
    """label -> the earlier label with the same steps for every cell (a setting that repeats
    another is one measurement, not a second agreement)."""
    out, seen = {}, {}
    for label, at in settings.items():
        key = tuple(sorted((str(k), float(g)) for k, g in at.items()))
        if key in seen:
            out[label] = seen[key]
        else:
            seen[key] = label
    return out


def split_settings(values: dict) -> tuple:
    """(tuned, {"common": ..., "neighbours": ...}) of :func:`paper_figures._hetero.at_settings`' output, for
    ``paper_figures.catalogue.verdict``'s ``steps`` once each is turned into parts."""
    common = {k[len("common "):]: v for k, v in values.items() if k.startswith("common ")}
    nbrs = {k[len("neighbours "):]: v for k, v in values.items() if k.startswith("neighbours ")}
    return values["tuned"], {"common": common, "neighbours": nbrs}


# --------------------------------------------------------------------------------------------
# reading runs: values at a time, times to a target


WINDOWS = ("time", "points")  # window_mean's readings; "time" for every run computed now


def window_mean(time: np.ndarray, v: np.ndarray, t: float, horizon: float, *, weight: str = "time") -> np.ndarray:
    """``v`` [..., logs] averaged over the log points in (t − horizon/10, t] of ``time`` [..., logs]:
    a run read at time t, steadied over the last tenth of the horizon (a run's last log point is at
    its last event, which may fall a little short of t: the window is closed at the run's end when
    that comes first; a window holding no log point takes the last one before it). A figure's
    tuning score and its verdicts read runs through this one function.

    ``weight="time"``: the time average of the piecewise-linear curve through the window's log
    points (the trapezoid rule from the first to the last of them), so that points bunched in time
    count for the time they span, not once each; a window of one point takes its value. Nothing
    after t is read. ``"points"``: the plain mean of the window's log points, the reading of
    outputs computed before the time weighting (they record no ``window``; see :func:`reading`)."""
    if weight not in WINDOWS:
        raise ValueError(f"weight must be one of {WINDOWS}; got {weight!r}")
    time, v = np.broadcast_arrays(np.asarray(time, np.float64), np.asarray(v, np.float64))
    end = np.minimum(t, time[..., -1:])
    at_or_before = time <= end + 1e-9
    last = np.arange(time.shape[-1]) == np.sum(at_or_before, axis=-1, keepdims=True) - 1
    w = ((time > end - horizon / 10) & at_or_before) | last  # never empty; one contiguous run of points
    plain = np.sum(np.where(w, v, 0.0), axis=-1) / np.sum(w, axis=-1)
    if weight == "points":
        return plain
    pair = w[..., 1:] & w[..., :-1]  # the segments between two of the window's points
    dt = np.where(pair, np.diff(time, axis=-1), 0.0)
    with np.errstate(invalid="ignore"):  # a non-finite value outside the window meets dt = 0 there
        area = np.sum(np.where(pair, dt * (v[..., 1:] + v[..., :-1]) / 2.0, 0.0), axis=-1)
    span = np.sum(dt, axis=-1)
    return np.where(span > 0, area / np.where(span > 0, span, 1.0), plain)


def reading(data: Mapping) -> str:
    """The window reading (:func:`window_mean`) an output was computed with: its ``window`` entry,
    or "points" for an output stored before the entry existed."""
    return str(data.get("window", "points"))


def window_words(data: Mapping, what: str, lo: float, hi: float) -> str:
    """How an output read ``what`` over the window (lo, hi], in words (:func:`reading`)."""
    if reading(data) == "time":
        return f"{what} averaged over time in ({lo:g}, {hi:g}] (trapezoid rule through the log points there)"
    return f"{what} averaged over the log points in ({lo:g}, {hi:g}], unweighted by time"


def first_crossing(t: Sequence[float], v: Sequence[float], eps: float, smooth: int = 1) -> float:
    """The first time the centred mean of ``v`` over ``smooth`` log points (fewer at the ends, so
    the first points count) is ≤ ``eps``, linearly interpolated between log points so that the
    time is not quantised to them; inf if never. NaN or inf (a diverged run) never counts as
    below ``eps``."""
    t, v = np.asarray(t, np.float64), np.asarray(v, np.float64)
    if t.shape != v.shape or t.ndim != 1:
        raise ValueError(f"t and v must be 1-D of one length; got {t.shape} and {v.shape}")
    if int(smooth) != smooth or smooth < 1:
        raise ValueError(f"smooth must be a positive integer; got {smooth!r}")
    k = int(smooth) // 2
    i = np.arange(v.size)
    lo, hi = np.maximum(i - k, 0), np.minimum(i + k + 1, v.size)
    with np.errstate(over="ignore", invalid="ignore"):  # after a divergence: inf or NaN windows,
        c = np.concatenate([[0.0], np.cumsum(v)])  # which are never ≤ eps
        s = (c[hi] - c[lo]) / (hi - lo)
    below = np.flatnonzero(s <= eps)
    if below.size == 0:
        return math.inf
    j = int(below[0])
    if j == 0:
        return float(t[0])
    f = (s[j - 1] - eps) / (s[j - 1] - s[j])  # s[j-1] > eps ≥ s[j]
    return float(t[j - 1] + f * (t[j] - t[j - 1]))


# --------------------------------------------------------------------------------------------
# steps that bracket the optimum


@dataclasses.dataclass(frozen=True)
class Bracket:
    """Every step evaluated (ascending) with its score, the best, and whether it is interior."""

    steps: tuple
    scores: tuple
    best: float
    interior: bool
    edge: str  # "" when interior, else "lower" or "upper": the side where the limit was reached
    extended: int  # steps added beyond the starting grid
    screened: tuple = ()  # steps scored on the first tuning seed alone (worse by the screen: bracket)

    def tied(self, tie: float) -> list:
        """The steps (unscreened) whose tuning scores are within ``tie`` × |best's score| of the best's:
        the test :func:`bracket` applies at the grid's edges."""
        return _tied(self.steps, self.scores, self.screened, self.best, tie)

    def neighbours(self) -> tuple:
        """(lower, upper): the evaluated steps next to the best (after refinement, the refined
        grid's), None past an edge."""
        i = self.steps.index(self.best)
        return (self.steps[i - 1] if i > 0 else None, self.steps[i + 1] if i + 1 < len(self.steps) else None)

    def resolution(self) -> tuple:
        """(second-best step, its score relative to the best's, (s₂ − s₁)/|s₁|): how far apart the
        tuning seeds put the best step and the runner-up (nan with one finite score)."""
        order = sorted((i for i in range(len(self.steps)) if self.steps[i] not in self.screened),
                       key=lambda i: (self.scores[i], self.steps[i]))
        if len(order) < 2 or not math.isfinite(self.scores[order[1]]):
            return (float("nan"), float("nan"))
        s1, s2 = self.scores[order[0]], self.scores[order[1]]
        return (self.steps[order[1]], (s2 - s1) / abs(s1) if s1 else float("inf"))

    def note(self) -> str:
        """One line for a figure's text."""
        if self.interior:
            second, rel = self.resolution()
            return (f"best step {self.best:.4g}, interior to {self.steps[0]:.4g}–{self.steps[-1]:.4g}"
                    + (f" ({self.extended} step(s) added past the starting grid's edge)" if self.extended else "")
                    + (f" ({len(self.screened)} step(s) screened out on the first tuning seed)" if self.screened else "")
                    + (f"; runner-up {second:.4g} scores {rel:+.1%} worse" if math.isfinite(rel) else ""))
        return (f"best step {self.best:.4g} at the grid's {self.edge} edge after {self.extended} extension(s) "
                "(limit reached)")

    @classmethod
    def from_stored(cls, d, *, best: str = "best") -> "Bracket":
        """The bracket a figure stored in its data (steps, scores, interior, edge; the chosen step
        under the key ``best``; ``extended`` where it was kept, else 0), for :func:`gated`."""
        return cls(tuple(d["steps"]), tuple(d["scores"]), float(d[best]), bool(d["interior"]), str(d["edge"]),
                   int(d.get("extended", 0)), tuple(float(g) for g in d.get("screened", ())))


def bracket(score: Callable[[float], float], grid: Sequence[float], *, max_extend: int = 4,
            ratio: float | None = None, refine: int = 0, tie: float = 0.0,
            first: Callable[[float], float] | None = None, screen: float = 0.0) -> Bracket:
    """Evaluate ``score`` (lower is better; nan counts as inf) on ``grid`` and extend it
    geometrically past an edge while the best step is there. A diverged run should score ``inf``.
    The result says whether the best step is interior; a verdict that depends on a step at an edge
    is inconclusive (:func:`gated`).

    ``ratio`` is the extension factor (default: the grid's own, the geometric mean of its
    consecutive ratios); at most ``max_extend`` steps are added on each side. Once the best is
    interior, ``refine`` rounds each evaluate the geometric midpoints between the best and its two
    neighbours (halving the spacing in log step: a grid of ratio r ends at r^(2^-refine)) and keep
    the best, so that a coarse grid does not decide by itself where the optimum sits. Ties go to
    the smaller step. Each step is evaluated once.

    ``tie`` (relative, ≥ 0): a step whose score is within ``tie`` × |best| of the best counts as
    tied with it, and the bracket is interior only when no tied step sits at an edge (else it
    extends on that side, as for the best). Where scores are noisy (a few tuning seeds of a
    chaotic training run), a best step that beats an edge step by less than the noise is not an
    interior optimum.

    ``screen`` (relative, > ``tie``; 0: off) with ``first`` (the score on the first tuning seed
    alone, a run ``score`` then reuses): a step whose first-seed score is worse than the best
    step's first-seed score by more than ``screen`` × its magnitude is not scored on the other
    seeds (successive halving's first rung, where the gap is far beyond the seeds' noise). Such a
    step is never the best nor tied; it counts as worse than the best, so it bounds a bracket like
    any other; ``Bracket.screened`` lists it, with its first-seed score. Whenever the best
    changes, a screened step within the screen of the new best's first seed is scored in full
    after all. Nothing is screened until a step is fully scored and finite (nor against a best
    whose first seed scores 0)."""
    g = sorted(float(s) for s in grid)
    if len(g) < 2 or g[0] <= 0 or len(set(g)) != len(g):
        raise ValueError(f"bracket needs at least 2 distinct positive steps; got {list(grid)!r}")
    r = float(ratio) if ratio is not None else (g[-1] / g[0]) ** (1.0 / (len(g) - 1))
    if not r > 1.0:
        raise ValueError(f"bracket's ratio must be > 1; got {r!r}")
    if max_extend < 0:
        raise ValueError(f"max_extend must be >= 0; got {max_extend!r}")
    if not (math.isfinite(tie) and tie >= 0):
        raise ValueError(f"tie must be a finite number >= 0; got {tie!r}")
    if not (math.isfinite(screen) and screen >= 0):
        raise ValueError(f"screen must be a finite number >= 0; got {screen!r}")
    if screen > 0 and (first is None or screen <= tie):
        raise ValueError(f"screen needs first (the first tuning seed's score) and must exceed tie ({tie!r}); "
                         f"got screen={screen!r}, first={'given' if first is not None else 'None'}")
    seen: dict = {}
    firsts: dict = {}  # first-seed scores (screening)
    screened: set = set()

    def finite_or_inf(v) -> float:
        v = float(v)
        return v if math.isfinite(v) else math.inf

    def best_of(steps):
        return min((s for s in steps if s not in screened), key=lambda s: (seen[s], s))

    def far(f: float, b: float) -> bool:
        """Whether first-seed score ``f`` is beyond the screen of the (fully scored) step ``b``."""
        ref = firsts[b]
        return math.isfinite(seen[b]) and math.isfinite(ref) and ref != 0 and f > ref + screen * abs(ref)

    def at(s: float) -> float:
        if s in seen:
            return seen[s]
        if screen > 0 and len(screened) < len(seen):
            f = firsts[s] = finite_or_inf(first(s))
            if far(f, best_of(seen)):
                screened.add(s)
                seen[s] = f
                return f
        seen[s] = finite_or_inf(score(s))
        if screen > 0 and s not in firsts:
            firsts[s] = finite_or_inf(first(s))
        return seen[s]

    def recheck() -> None:
        """Score in full every screened step no longer beyond the screen of the best (the best
        may have changed since it was screened), until none is."""
        while True:
            near = [s for s in sorted(screened) if not far(firsts[s], best_of(seen))]
            if not near:
                return
            for s in near:
                screened.discard(s)
                seen[s] = finite_or_inf(score(s))

    for s in g:
        at(s)
    added = {"lower": 0, "upper": 0}
    while True:
        recheck()
        steps = sorted(seen)
        best = best_of(steps)
        tied = _tied(steps, [seen[s] for s in steps], screened, best, tie)
        if math.isinf(seen[best]):  # everything diverged so far: only smaller steps can help
            edge = "lower"
        elif steps[0] in tied and len(steps) > 1:
            edge = "lower"
        elif steps[-1] in tied:
            edge = "upper"
        else:
            for _ in range(int(refine)):
                steps = sorted(seen)
                i = steps.index(best)
                for nb in (steps[i - 1], steps[i + 1]):
                    at(math.sqrt(best * nb))
                recheck()
                best = best_of(seen)
            steps = sorted(seen)
            return Bracket(tuple(steps), tuple(seen[s] for s in steps), best, True, "", sum(added.values()),
                           tuple(sorted(screened)))
        if added[edge] >= max_extend:
            return Bracket(tuple(steps), tuple(seen[s] for s in steps), best, False, edge, sum(added.values()),
                           tuple(sorted(screened)))
        at(steps[0] / r if edge == "lower" else steps[-1] * r)
        added[edge] += 1


def _tied(steps, scores, screened, best, tie: float) -> list:
    """The steps of ``steps`` (scores ``scores``), screened ones left out, within ``tie`` × |best's
    score| of the best step's score."""
    ref = scores[list(steps).index(best)]
    return [g for g, sc in zip(steps, scores) if g not in screened and sc <= ref + tie * abs(ref)]


def gated(verdict: str, brackets: Sequence[Bracket]) -> tuple[str, str]:
    """A verdict that depends on tuned steps: inconclusive, with the reason, when any of them is
    at a grid's edge; else the verdict unchanged (and an empty reason)."""
    edges = [b for b in brackets if not b.interior]
    if edges:
        return INCONCLUSIVE, "best step at the grid's edge (limit reached): " + "; ".join(b.note() for b in edges)
    return verdict, ""


# --------------------------------------------------------------------------------------------
# seeds


def seed_sources(seed: int, sources: Sequence[str]) -> dict:
    """name -> an independent 32-bit seed for each random source of one seed.

    Each named source of randomness a figure has (data split, timing draws, initial model,
    minibatches, failures, ...) gets its seed from NumPy's ``SeedSequence`` keyed on (seed, crc32
    of the name): changing the seed changes every source, two sources of one seed never share a
    stream, and adding a source does not change the others."""
    if int(seed) < 0:
        raise ValueError(f"seed must be >= 0; got {seed!r}")
    if len(set(sources)) != len(sources):
        raise ValueError(f"source names must be distinct; got {list(sources)!r}")
    out = {}
    for name in sources:
        ss = np.random.SeedSequence([int(seed), zlib.crc32(name.encode())])
        out[name] = int(ss.generate_state(1, np.uint32)[0])
    return out


# The short-run rule of docs/findings.md: a claim the source states where the curves have flattened
# is judged early by a run whose mean curve still falls, over its last fifth, by more than this
# share of its whole fall: such a run is a check of the pipeline, its verdicts inconclusive.
FLAT = 0.05


def fall_share(rounds: Sequence[float], curve: Sequence[float]) -> float:
    """The share of a curve's whole fall (first logged value to last) that its last fifth holds: a
    share, not a value relative to the final one, which grows without bound as a flattened curve
    nears 0. The last fifth starts at the last log at or before 0.8 × the last round, so that with
    coarse logs the window is at least a fifth (never less). NaN where the
    curve did not fall (its last value at or above its first: a rising run is not one still
    falling; a figure reports divergence on its own)."""
    r, c = np.asarray(rounds, np.float64), np.asarray(curve, np.float64)
    if r.ndim != 1 or r.size < 2:
        raise ValueError(f"a curve needs at least 2 logged rounds; got {r.size}")
    if c.shape != r.shape:
        raise ValueError(f"a curve has {c.shape} values for {r.size} logged rounds")
    i = int(np.searchsorted(r, 0.8 * r[-1], side="right")) - 1
    if i < 0:
        raise ValueError(f"logged rounds {r[0]:g}..{r[-1]:g} have no log at or before the last fifth's start "
                         f"({0.8 * r[-1]:g}): log from earlier on")
    if not c[0] > c[-1]:
        return float("nan")
    return float((c[i] - c[-1]) / (c[0] - c[-1]))


def still_falling(rounds: Sequence[float], curves: Mapping) -> Optional[tuple]:
    """(share, key) of the largest :func:`fall_share` among ``curves`` (key -> a mean curve logged
    at ``rounds``) where it exceeds ``FLAT``; None where every curve has flattened."""
    worst = None
    for key, curve in curves.items():
        fall = fall_share(rounds, curve)
        if np.isfinite(fall) and (worst is None or fall > worst[0]):
            worst = (fall, key)
    return worst if worst is not None and worst[0] > FLAT else None


def still_falling_reason(what: str, share: float) -> str:
    """The short-run rule's reason, for a verdict's text: the curve ``what`` still fell by
    ``share`` of its whole fall over the last fifth (:func:`still_falling`)."""
    return (f"a check of the pipeline: the curves have not flattened (over the last fifth of the rounds the mean "
            f"training loss of {what} still fell by {share:.1%} of its whole fall, more than {FLAT:.0%}), and the "
            "paper states its claims where they have")


def disjoint_seeds(tune: int, report: int, *, offset: int = 10_000) -> tuple[list, list]:
    """(tuning seeds, reported seeds): ``report`` seeds 0, 1, … and ``tune`` seeds from
    ``offset`` on, so that no step is chosen on a seed it is reported on."""
    if tune < 0 or report < 0 or report > offset:
        raise ValueError(f"need 0 <= tune, 0 <= report <= offset; got {tune}, {report}, {offset}")
    return [offset + i for i in range(tune)], list(range(report))
