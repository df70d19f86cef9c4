"""The catalogue of claims the figures judge, as data, and the one way a figure turns measurements
into a verdict on one of them (:func:`verdict`).

Each :class:`Claim` says where it comes from (paper, figure or theorem), what it says, its kind
(:data:`delaylab.claims.KINDS`: superiority, non-inferiority with a margin, equivalence with a
margin, ordering, trend), when the source states it, its comparison family (what the headline's
conjunction runs over, and the size of the family-wise correction), which details of our set-up
are reconstructions, and whether it compares tuned methods (then :func:`delaylab.claims.step_robust`
decides, from the tuned steps, a common step and the tuned steps' neighbours).

A figure computes; :func:`verdict` looks the claim up and applies its kind's test
(:func:`delaylab.claims.judge`), so the same claim gets the same test in every figure that judges
it. Its rows carry the claim's id and kind; ``python -m delaylab.paper_figures.table --check``
refuses a row whose id is not here or whose kind is not the catalogue's, and writes the verdict
table of docs/findings.md with the catalogue's words, sources and reconstructions.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping, Optional, Sequence

import numpy as np

from delaylab import claims as C


@dataclasses.dataclass(frozen=True)
class Claim:
    id: str
    source: str  # the paper and where in it (figure, theorem, section), or "delaylab" for our own questions
    words: str  # what the claim says, in our words
    kind: str  # one of delaylab.claims.KINDS
    when: str  # the time, horizon or limit at which the source states it
    family: str  # what the comparisons of one verdict run over
    margin: str = ""  # how the margin is set (non-inferiority and equivalence)
    reconstructions: tuple = ()  # details of our set-up that the source leaves open
    tuned: bool = False  # between methods at tuned steps: robustness to the step decides too
    family_size: int = 1  # separate verdicts of one family: each "holds" at level 1 − 0.05/family_size
    common_step: bool = True  # tuned claims: whether the arms' steps share a scale (then a common step is a reading)

    def __post_init__(self):
        if self.kind not in C.KINDS:
            raise ValueError(f"claim {self.id}: kind must be one of {C.KINDS}; got {self.kind!r}")
        if self.kind in (C.NONINFERIORITY, C.EQUIVALENCE) and not self.margin:
            raise ValueError(f"claim {self.id}: a {self.kind} claim states its margin")
        if int(self.family_size) < 1:
            raise ValueError(f"claim {self.id}: family_size must be >= 1; got {self.family_size!r}")


_MAHRAN = "Mahran, Maranjyan, Richtárik, Rescaled ASGD (2026)"
_DEAHES = "DEAHES-O paper (docs/theory.md §9)"
# The DEAHES claims between tuned methods take no common-step reading: η is tuned per optimiser
# family, so arms of one family already share their step (the tuned reading is a common step), and
# the SGD and AdaHessian families' steps share no scale (AdaHessian's η scales a preconditioned
# direction); their step settings are the tuned η and each family's grid neighbours.
_DEAHES_RECON = ("the dynamic weight map (dead zone a0, cap 0.5) and its calibration of a0 (on a tuning seed)",
                 "the oracle EAHES-OM: what it does after a loss (full reset, master side only, or a reset only where "
                 "the returning worker's parameters are stale)",
                 "the steps: η tuned per optimiser family on tuning seeds, beside the paper's η = 0.01 for every "
                 "optimiser")
_SURVEY = "straggler-mitigation survey behind docs/theory.md §10"

CLAIMS: dict = {c.id: c for c in (
    Claim("vanilla-frequency-weights", f"{_MAHRAN}, §2", "vanilla ASGD minimises the frequency-weighted objective "
          "(implicit weights ∝ 1/τ_i)", C.EQUIVALENCE, "its fixed point (γ → 0)", "τ profiles",
          margin="absolute weight tolerance"),
    Claim("rescaled-uniform-weights", f"{_MAHRAN}, §2", "Rescaled ASGD minimises the true, equal-weighted objective "
          "(weights 1/n)", C.EQUIVALENCE, "its fixed point (γ → 0)", "τ profiles",
          margin="absolute weight tolerance"),
    Claim("fig-a-limits", f"{_MAHRAN}, poster Fig. A", "vanilla ASGD settles at the frequency-weighted minimiser, "
          "Rescaled ASGD at the true one", C.EQUIVALENCE, "the end of the run", "the two methods",
          margin="tolerance on x", reconstructions=("the poster's n, τ, b and γ",)),
    Claim("inverse-tau-removes-bias", f"{_MAHRAN}, poster (printed rule γ_i ∝ 1/τ_i)", "the rule γ_i ∝ 1/τ_i removes "
          "the bias (settles nearer x* than vanilla)", C.SUPERIORITY, "the end of the run", "the one rule",
          reconstructions=("the poster's n, τ, b and γ",)),
    Claim("noise-floor-formula", "docs/theory.md §5 (small-step noise floor)", "the noise floor is V σ²/(4Γ) at "
          "small steps, vanilla and Rescaled", C.EQUIVALENCE, "γ → 0", "σ and γ ≤ 0.004, both rules",
          margin="±5% on the ratio to the formula (log scale)"),
    Claim("rescaled-floor-ratio", "docs/theory.md §5", "Rescaled's floor is τ_A/τ_H times vanilla's at equal mean "
          "step", C.EQUIVALENCE, "γ → 0", "σ and γ ≤ 0.004", margin="±5% on the ratio (log scale)"),
    Claim("rescaled-malenia-bounded", f"{_MAHRAN}, stated complexity (docs/theory.md §8.1)", "T_Rescaled/T_Malenia "
          "stays bounded as ε → 0", C.TREND, "ε → 0", "speed spreads of one regime",
          tuned=True, common_step=False),
    Claim("fig-b-ranking", f"{_MAHRAN}, poster Fig. B", "Rescaled below Ringleader below Malenia in training loss",
          C.ORDERING, "the end of the figure's horizon", "the three methods' consecutive pairs",
          reconstructions=("the data (Fashion-MNIST in MNIST format), model, n = 100 and Dirichlet 0.1 split",
                           "the timing model and the figure's time axis"), tuned=True, common_step=False),
    Claim("rescaled-slower-homogeneous", f"{_MAHRAN}, the price of rescaling (noise floor τ_A/τ_H)",
          "on homogeneous data Rescaled ASGD is slower than vanilla ASGD", C.SUPERIORITY, "time to a target ε",
          "targets ε", tuned=True),
    Claim("frequency-bias-networks", f"{_MAHRAN}, §2, carried to networks", "vanilla ASGD settles toward the "
          "frequency-weighted objective Σ p_i F_i on networks", C.SUPERIORITY, "the tail of training",
          "models and splits"),
    Claim("adahessian-beats-sgd", f"{_DEAHES}, Figs. 4-5", "AdaHessian methods (EAHES, EAHES-O, EAHES-OM, DEAHES-O) "
          "beat the SGD methods (EASGD, EAMSGD)", C.SUPERIORITY, "the end of training", "4 × 2 pairs in every setting",
          reconstructions=_DEAHES_RECON, tuned=True, common_step=False),
    Claim("overlap-helps", f"{_DEAHES}, Figs. 4-5", "overlap helps: EAHES-O below EAHES", C.SUPERIORITY,
          "the end of training", "settings (P, τ)", reconstructions=_DEAHES_RECON, tuned=True, common_step=False),
    Claim("oracle-best", f"{_DEAHES}, Figs. 4-5", "the oracle EAHES-OM is the best of the six", C.SUPERIORITY,
          "the end of training", "the oracle against each other method, in every setting (a verdict per oracle reading)",
          reconstructions=_DEAHES_RECON, tuned=True, common_step=False),
    Claim("deahes-beats-baselines", f"{_DEAHES}, Figs. 4-5", "DEAHES-O beats EASGD, EAMSGD, EAHES and EAHES-O",
          C.SUPERIORITY, "the end of training", "4 pairs in every setting", reconstructions=_DEAHES_RECON,
          tuned=True, common_step=False),
    Claim("deahes-close-to-oracle", f"{_DEAHES}, Figs. 4-5", "DEAHES-O comes close to the oracle: no worse than it "
          "by more than the margin", C.NONINFERIORITY, "the end of training", "settings (a verdict per oracle reading)",
          margin="2% of the oracle's loss", reconstructions=_DEAHES_RECON, tuned=True, common_step=False),
    Claim("deahes-equals-eahes-o-clean", f"{_DEAHES}, §9.5 (without failures the weights stay at 1)",
          "without failures DEAHES-O equals EAHES-O", C.EQUIVALENCE, "the end of training", "the one setting",
          margin="2% of EAHES-O's loss", reconstructions=_DEAHES_RECON),
    Claim("slow-workers-harder-shards", f"delaylab, from {_SURVEY}", "with durations independent of the data, slow "
          "workers end with harder shards under vanilla ASGD (ρ > 0)", C.SUPERIORITY, "the end of training",
          "timing models"),
    Claim("staleness-weighting-divergence", f"delaylab, from {_SURVEY}", "staleness weighting lowers the slow "
          "workers' representation divergence beyond what its smaller steps explain", C.SUPERIORITY,
          "matched progress", "layers"),
    Claim("fast-workers-specialise", f"delaylab, from {_SURVEY}", "fast workers become early-layer specialists when "
          "workers keep models of their own", C.SUPERIORITY, "the second half of training", "methods, splits and ratios R > 1"),
    Claim("heterogeneity-costs-accuracy", f"delaylab, from {_SURVEY}", "heterogeneity costs accuracy: "
          "acc(h = 2) < acc(h = 0)", C.SUPERIORITY, "the time budget", "6 schemes", tuned=True, family_size=6),
    Claim("intermediate-heterogeneity-optimal", f"delaylab, from {_SURVEY}", "an intermediate heterogeneity level "
          "is optimal: acc(h*) above acc(h = 0) and acc(h = 2)", C.SUPERIORITY, "the time budget", "6 schemes",
          tuned=True, family_size=6),
    Claim("async-beats-minibatch", "Mishchenko, Bach, Even, Woodworth (NeurIPS 2022), the experiment with one "
          "worker 100× slower", "asynchronous SGD reaches a lower F − F* than minibatch SGD in the same wall-clock time",
          C.SUPERIORITY, "the time budget", "one comparison", tuned=True, common_step=False,
          reconstructions=("the size: workers, rows, dimension, minibatch and job times (the authors: 40 workers, "
                           "10,000 × 400, minibatches of 256)",
                           "the data recipe (rows uniform / √d, targets from a random solution plus noise), the slow "
                           "worker made by injected sleeps, and the time budget at which the methods are compared",
                           "the steps: tuned in the simulator under a server model fitted to a calibration run, not "
                           "on real runs")),
    Claim("async-beats-minibatch-no-straggler", "delaylab, the control of Mishchenko, Bach, Even, Woodworth "
          "(NeurIPS 2022)'s experiment", "with every worker equally fast, asynchronous SGD reaches a lower F − F* than "
          "minibatch SGD in the same wall-clock time", C.SUPERIORITY, "the time budget", "one comparison", tuned=True,
          common_step=False,
          reconstructions=("the experiment's set-up with the slow worker made as fast as the others",
                           "the steps: tuned in the simulator under a server model fitted to a calibration run, not "
                           "on real runs")),
    Claim("mitigation-lowers-loss", f"{_SURVEY} (§10)", "the mitigation lowers the training loss at the time budget",
          C.SUPERIORITY, "the time budget", "3 mitigations × 2 splits", tuned=True, family_size=6),
)}


@dataclasses.dataclass(frozen=True)
class Verdict:
    """A claim's verdict: the word, its comparisons at the tuned (or only) setting, the reason
    when inconclusive for a reason beyond the intervals, and, for tuned claims, the word at every
    step setting."""

    claim: Claim
    verdict: str
    parts: list
    reason: str = ""
    steps: Optional[dict] = None  # label -> word, for claims between tuned methods
    readings: Optional[dict] = None  # label -> (word, parts) at every step setting (tuned included)

    def evidence(self, fmt: str = "+.4f", scale=None) -> str:
        """Each comparison with the interval that decided its word and that interval's level
        (``scale``: a function applied to the mean and the ends, e.g. exp for log ratios)."""
        f = scale or (lambda x: x)
        out = []
        for p in self.parts:
            iv, level = C.deciding(p)
            ends = f"{f(iv.mean):{fmt}}" if iv.half == 0 else (
                f"{f(iv.mean):{fmt}} [{f(iv.lo):{fmt}}, {f(iv.hi):{fmt}}] ({level:.1%})")
            out.append(f"{p.name}: {ends}")
        return "; ".join(out)

    def setting_lines(self, settings: Mapping, steps_text, fmt: str = "+.4f", scale=None,
                      indent: str = "    ") -> list:
        """One line per step setting the claim was judged at (:func:`delaylab.claims.step_settings`'s
        ``settings``; ``steps_text(cell -> step)`` says its steps): its word and each comparison's
        deciding interval with its level, a setting that repeats an earlier one marked as such."""
        if not self.readings:
            return []
        same = C.same_as(settings)
        out = []
        for label, (word, parts) in self.readings.items():
            key = "tuned" if label == "tuned steps" else label.replace("common step ", "common ", 1)
            ev = Verdict(self.claim, word, parts).evidence(fmt, scale)
            out.append(f"{indent}{label} ({steps_text(settings[key])}): {word}; {ev}"
                       + (f" (the same steps as {same[key]})" if key in same else ""))
        return out

    def row(self, words: str, evidence: str, conditions: str) -> dict:
        """The figure's verdict row: the catalogue's id and kind beside the figure's own words for
        the instance it judged, its evidence and its conditions."""
        ev = evidence + (f"; {self.reason}" if self.reason else "")
        if self.steps and not self.reason.startswith("depends on the step"):  # else the reason lists them
            ev += "; at other steps: " + ", ".join(f"{k} {v}" for k, v in self.steps.items())
        return {"id": self.claim.id, "kind": self.claim.kind, "claim": words, "verdict": self.verdict,
                "evidence": ev, "conditions": conditions}


def claim(claim_id: str) -> Claim:
    if claim_id not in CLAIMS:
        raise KeyError(f"no claim {claim_id!r} in the catalogue; it has {sorted(CLAIMS)}")
    return CLAIMS[claim_id]


def verdict(claim_id: str, parts: Sequence[tuple], *, margin: float = 0.0,
            steps: Optional[Mapping[str, Mapping[str, Sequence[tuple]]]] = None, gate: Sequence = (),
            seeds: int = 10, exact: bool = False, at_tuned_steps: Optional[bool] = None) -> Verdict:
    """The verdict on claim ``claim_id`` from its comparisons ``parts`` (each ``(name, d)``, d the
    paired differences A − B over seeds): the kind's test (:func:`delaylab.claims.judge`) at level
    1 − 0.05/family_size for "holds". ``gate``: brackets of the tuned steps (a verdict resting on a
    step at a grid's edge is inconclusive, :func:`delaylab.claims.gated`).

    For a claim between tuned methods, ``steps`` gives the same comparisons at other steps:
    ``{"common": {label: parts}, "neighbours": {label: parts}}``; the verdict is the tuned one only
    where every setting gives the same word and none decides within two half-widths on fewer
    than ``seeds`` seeds (:func:`delaylab.claims.step_robust`); without ``steps`` it is inconclusive.
    ``exact``: each d is one deterministic number (no seeds). ``at_tuned_steps=False``: this instance
    of a claim about tuned methods compares them at one fixed step given for all (a paper's stated
    step, untuned), so no other step setting is asked for, while the ten-seed rule still holds
    (:func:`delaylab.claims.thin`); None: the claim's own flag."""
    c = claim(claim_id)
    level = 1.0 - 0.05 / c.family_size
    tuned = _judge(c, parts, margin, level, exact)
    word, reason, words, readings = tuned[0], "", None, {"tuned steps": tuned}
    asks_steps = c.tuned if at_tuned_steps is None else at_tuned_steps
    if asks_steps and steps is None:
        if word != C.INCONCLUSIVE:
            word, reason = C.INCONCLUSIVE, "robustness to the step not measured (no other step setting was run)"
    elif asks_steps:
        common = steps.get("common", {}) if c.common_step else {}  # steps of no shared scale: no common reading
        at = C.AtSteps(tuned, {k: _judge(c, p, margin, level, exact) for k, p in common.items()},
                       {k: _judge(c, p, margin, level, exact) for k, p in steps.get("neighbours", {}).items()})
        word, reason = C.step_robust(at, seeds=seeds, common=c.common_step)
        words = {k: v for k, (v, _) in at.readings().items() if k != "tuned steps"}
        readings = at.readings()
        if reason.startswith("depends on the step") and not exact and tuned[0] != C.INCONCLUSIVE:
            given = {f"common step {k}": p for k, p in common.items()}
            given.update({f"neighbours {k}": p for k, p in steps.get("neighbours", {}).items()})
            single = _single_seeds(c, tuned[0], {k: given[k] for k, w in words.items() if w != tuned[0]},
                                   margin, level)
            if single:
                reason += "; " + single
    elif c.tuned and word != C.INCONCLUSIVE:
        # a claim about tuned methods judged at one fixed step: no other step is asked for, but a
        # verdict decided within two half-widths on fewer than `seeds` seeds is not read as decided
        near = C.thin(word, tuned[1], seeds=seeds)
        if near:
            word, reason = C.INCONCLUSIVE, C.thin_reason([("", p) for p in near], seeds)
    if gate:
        word, why = C.gated(word, list(gate))
        reason = "; ".join(x for x in (reason, why) if x)
    return Verdict(c, word, tuned[1], reason, words, readings)


def _single_seeds(c: Claim, word: str, settings: Mapping[str, Sequence[tuple]], margin: float, level: float) -> str:
    """Where a setting's word differs from the tuned steps' ``word`` (``settings``: label -> its
    comparisons), the reported seeds (positions in each d, which are the seeds 0, 1, … of
    :func:`delaylab.claims.disjoint_seeds`) without any one of which that setting would say
    ``word``: a disagreement that rests on one seed, said so that a reader can look at it."""
    out = []
    for label, parts in settings.items():
        n = min(len(np.atleast_1d(d)) for _, d in parts)
        if n < 3:
            continue
        alone = [j for j in range(n)
                 if _judge(c, [(name, np.delete(np.asarray(d), j)) for name, d in parts], margin, level, False)[0] == word]
        if alone:
            which = f"reported seed {alone[0]}" if len(alone) == 1 else \
                f"any one of reported seeds {', '.join(map(str, alone))}"
            out.append(f"{label} says {word} once {which} is left out")
    return "; ".join(out)


def unless_reference_worse(v: Verdict, behind: Sequence[tuple], ref: str, other: str) -> Verdict:
    """A non-inferiority of ``other`` to ``ref`` that holds says nothing of closeness to the best
    where ``ref`` is itself worse than ``other``: ``behind`` gives, per setting, (where, d) with d
    the paired (ref − other) over seeds relative to ref's loss; where some 95% interval lies above
    0, a ``v`` that holds, or whose every comparison holds (another rule, more seeds say, having
    made it inconclusive), is inconclusive set by the reconstruction: that reason first, the
    settings named, since no number of seeds would change it."""
    worse = [(where, iv) for where, d in behind for iv in (C.paired_interval(d),) if iv.lo > 0]
    held = v.verdict == C.HOLDS or (bool(v.parts) and all(p.verdict == C.HOLDS for p in v.parts))
    if not held or not worse:
        return v
    why = (f"set by the reconstruction: {ref} is itself worse than {other} at "
           + ", ".join(f"{where} (({ref} − {other}) relative to its loss {iv})" for where, iv in worse)
           + f", so {other} no worse than it says nothing of closeness to the best")
    return inconclusive_because(v, why)


def inconclusive_because(v: Verdict, why: str) -> Verdict:
    """``v`` made inconclusive whatever its word, ``why`` first among its reasons: for what a
    figure knows beyond the comparisons (a run shorter than where the paper states its claim, a
    reading not measured, a reference set by the reconstruction)."""
    return dataclasses.replace(v, verdict=C.INCONCLUSIVE, reason="; ".join(x for x in (why, v.reason) if x))


def _judge(c: Claim, parts, margin: float, level: float, exact: bool):
    return C.judge(c.kind, parts, margin, level=level, exact=exact)
