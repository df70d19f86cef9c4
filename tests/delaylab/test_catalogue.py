"""The catalogue of claims and the verdict rules every figure shares (paper_figures.catalogue,
delaylab.claims.judge, step_robust, marginal), against intervals and words worked out by hand."""

import math

import numpy as np
import pytest

from delaylab import claims as C
from delaylab.paper_figures import catalogue, table

T4 = 2.7764451051977987  # t_{0.975, 4}


def test_each_kind_is_one_test():
    d = np.array([-0.30, -0.20, -0.25, -0.22, -0.28])  # mean −0.25, clearly below 0
    assert C.judge(C.SUPERIORITY, [("a", d)])[0] == C.HOLDS
    assert C.judge(C.SUPERIORITY, [("a", -d)])[0] == C.FAILS
    assert C.judge(C.ORDERING, [("a<b", d), ("b<c", d)])[0] == C.HOLDS
    assert C.judge(C.ORDERING, [("a<b", d), ("b<c", -d)])[0] == C.FAILS
    # non-inferiority: A may be worse than B by up to the margin
    assert C.judge(C.NONINFERIORITY, [("a", d + 0.3)], margin=0.2)[0] == C.HOLDS  # mean 0.05 < 0.2
    assert C.judge(C.NONINFERIORITY, [("a", d + 0.7)], margin=0.2)[0] == C.FAILS  # mean 0.45 > 0.2
    # equivalence: the whole interval within ±margin; better than B by more than the margin fails it
    assert C.judge(C.EQUIVALENCE, [("a", d + 0.25)], margin=0.1)[0] == C.HOLDS
    assert C.judge(C.EQUIVALENCE, [("a", d)], margin=0.1)[0] == C.FAILS
    with pytest.raises(ValueError, match="margin"):
        C.judge(C.EQUIVALENCE, [("a", d)])
    with pytest.raises(ValueError, match="kind"):
        C.judge("bigger", [("a", d)])


def test_exact_parts_have_zero_width_and_a_family_level_widens_holds():
    v, parts = C.judge(C.EQUIVALENCE, [("x", 0.02), ("y", -0.05)], margin=0.1, exact=True)
    assert v == C.HOLDS and parts[0].interval.half == 0.0 and parts[1].kind == "equal"
    assert C.judge(C.EQUIVALENCE, [("x", 0.2)], margin=0.1, exact=True)[0] == C.FAILS
    # a part whose 95% interval just excludes 0 holds alone, not in a family of 6 (level 1 − 0.05/6)
    d = np.array([-0.1, -0.2, -0.3, -0.4, -0.5])
    half95 = T4 * np.std(d, ddof=1) / math.sqrt(5)
    d = d - d.mean() - half95 - 1e-3  # its 95% interval's upper end at −1e-3
    assert C.judge(C.SUPERIORITY, [("a", d)])[0] == C.HOLDS
    assert C.judge(C.SUPERIORITY, [("a", d)], level=1 - 0.05 / 6)[0] == C.INCONCLUSIVE


def _at(word_tuned, others, n=10, mean=-1.0):
    """An AtSteps whose tuned parts hold (n seeds, far from 0) and whose other settings give ``others``."""
    d = mean + 0.01 * np.arange(n)
    tuned = C.judge(C.SUPERIORITY, [("a", d)])
    assert tuned[0] == word_tuned
    fake = lambda w: (w, [])  # noqa: E731
    return C.AtSteps(tuned, {"γ = 1": fake(others[0])}, {"−": fake(others[1]), "+": fake(others[2])})


def test_step_robust_needs_every_setting_to_agree():
    assert C.step_robust(_at(C.HOLDS, [C.HOLDS] * 3)) == (C.HOLDS, "")
    word, why = C.step_robust(_at(C.HOLDS, [C.HOLDS, C.FAILS, C.HOLDS]))
    assert word == C.INCONCLUSIVE and why.startswith("depends on the step") and "neighbours −: does not hold" in why
    word, why = C.step_robust(C.AtSteps(_at(C.HOLDS, [C.HOLDS] * 3).tuned, {}, {}))
    assert word == C.INCONCLUSIVE and "not measured" in why
    # inconclusive at the tuned steps: inconclusive, and where another setting decided a word the
    # reason says so, with every setting's word; where none did, no reason
    undecided = C.AtSteps((C.INCONCLUSIVE, []), {"γ = 1": (C.INCONCLUSIVE, [])},
                          {"−": (C.HOLDS, []), "+": (C.INCONCLUSIVE, [])})
    word, why = C.step_robust(undecided)
    assert word == C.INCONCLUSIVE and why == ("depends on the step: tuned steps: inconclusive; common step γ = 1: "
                                              "inconclusive; neighbours −: holds; neighbours +: inconclusive")
    nothing = C.AtSteps((C.INCONCLUSIVE, []), {"γ = 1": (C.INCONCLUSIVE, [])}, {"−": (C.INCONCLUSIVE, [])})
    assert C.step_robust(nothing) == (C.INCONCLUSIVE, "")


def test_a_verdict_within_two_half_widths_needs_ten_seeds():
    # 5 seeds, mean −0.1, half-width 0.06: decided (upper end −0.04), but |mean| < 2 half-widths
    d = np.array([-0.1 + x for x in (-0.05, 0.05, -0.03, 0.03, 0.0)])
    iv = C.paired_interval(d)
    assert iv.hi < 0 and abs(iv.mean) < 2 * iv.half
    at = C.AtSteps(C.judge(C.SUPERIORITY, [("a", d)]), {"g": (C.HOLDS, [])}, {"−": (C.HOLDS, [])})
    word, why = C.step_robust(at)
    assert word == C.INCONCLUSIVE and "fewer than 10 seeds" in why
    d10 = np.tile(d, 2)  # 10 seeds: the rule no longer applies
    at = C.AtSteps(C.judge(C.SUPERIORITY, [("a", d10)]), {"g": (C.HOLDS, [])}, {"−": (C.HOLDS, [])})
    assert C.step_robust(at) == (C.HOLDS, "")
    # far from the bound on 5 seeds: decided
    assert not C.marginal(C.judge(C.SUPERIORITY, [("a", d - 1.0)])[1])


def test_step_settings_and_bracket_neighbours():
    a = C.Bracket((0.1, 0.2, 0.4, 0.8), (3.0, 1.0, 2.0, 4.0), 0.2, True, "", 0)
    b = C.Bracket((0.05, 0.1, 0.2), (2.0, 1.0, 1.5), 0.1, True, "", 0)
    assert a.neighbours() == (0.1, 0.4) and a.resolution() == (0.4, 1.0)
    s = C.step_settings({"A": a, "B": b})
    assert s["tuned"] == {"A": 0.2, "B": 0.1}
    # both brackets evaluated 0.1 and 0.2; summed relative excess 2 + 0 at 0.1, 0 + 0.5 at 0.2
    assert [k for k in s if k.startswith("common")] == ["common γ = 0.2"] and s["common γ = 0.2"] == {"A": 0.2, "B": 0.2}
    assert s["neighbours −"] == {"A": 0.1, "B": 0.05} and s["neighbours +"] == {"A": 0.4, "B": 0.2}
    along = C.step_settings({"A": a, "B": b}, along=True)
    assert sorted(k for k in along if k.startswith("along")) == ["along γ = 0.1", "along γ = 0.2"]
    assert not any(k.startswith("common") for k in C.step_settings({"A": a, "B": b}, common=False))
    far = C.Bracket((1.0, 2.0, 4.0), (2.0, 1.0, 3.0), 2.0, True, "", 0)  # no step in common with a's bracket
    assert not any(k.startswith("common") for k in C.step_settings({"A": a, "F": far}))
    edge = C.Bracket((0.1, 0.2), (1.0, 2.0), 0.1, False, "lower", 0)
    assert "neighbours −" not in C.step_settings({"A": a, "E": edge})
    same = C.step_settings({"A": a, "A2": a})  # equal brackets: the common step is the tuned one
    assert C.same_as(same) == {"common γ = 0.2": "tuned"}


def test_the_ten_seed_rule_reads_every_setting_and_the_deciding_interval():
    far = np.array([-1.0, -1.1, -0.9, -1.05, -0.95])  # decided far from 0 on 5 seeds
    near = np.array([-0.1 + x for x in (-0.05, 0.05, -0.03, 0.03, 0.0)])  # decided, within two half-widths
    at = C.AtSteps(C.judge(C.SUPERIORITY, [("a", far)]), {"g": C.judge(C.SUPERIORITY, [("a", near)])},
                   {"−": C.judge(C.SUPERIORITY, [("a", far)])})
    word, why = C.step_robust(at)
    assert word == C.INCONCLUSIVE and "common step g: a" in why and C.needs_seeds(at.readings())
    # a failing part is read on its corrected interval: two parts, Bonferroni level 97.5%
    v, parts = C.judge(C.ORDERING, [("x", -far), ("y", -far)])
    assert v == C.FAILS and parts[0].corrected_level == pytest.approx(0.975)
    iv, level = C.deciding(parts[0])
    assert iv == parts[0].corrected and level == pytest.approx(0.975) and iv.half > parts[0].interval.half


def test_catalogue_verdict_applies_the_claims_kind_and_rules():
    d = -1.0 + 0.01 * np.arange(10)
    v = catalogue.verdict("rescaled-slower-homogeneous", [("x", d)])  # tuned claim, no other steps given
    assert v.verdict == C.INCONCLUSIVE and "not measured" in v.reason
    v = catalogue.verdict("rescaled-slower-homogeneous", [("x", d)],
                          steps={"common": {"γ = 1": [("x", d)]}, "neighbours": {"−": [("x", d)], "+": [("x", -d)]}})
    assert v.verdict == C.INCONCLUSIVE and v.steps == {"common step γ = 1": C.HOLDS, "neighbours −": C.HOLDS,
                                                       "neighbours +": C.FAILS}
    assert set(v.readings) == {"tuned steps", "common step γ = 1", "neighbours −", "neighbours +"}
    assert v.evidence().startswith("x: -0.9550 [") and "(95.0%)" in v.evidence()
    row = v.row("words", "evidence", "conditions")
    assert (row["id"], row["kind"], row["claim"]) == ("rescaled-slower-homogeneous", C.SUPERIORITY, "words")
    assert row["evidence"].startswith("evidence; depends on the step")
    assert "once" not in v.reason  # neighbours + fails on every seed: no one seed decides it
    # one seed decides a setting: without seed 3's outlier, neighbours + holds as the tuned steps do
    spike = d.copy()
    spike[3] = 12.0
    v = catalogue.verdict("rescaled-slower-homogeneous", [("x", d)],
                          steps={"common": {"γ = 1": [("x", d)]}, "neighbours": {"−": [("x", d)], "+": [("x", spike)]}})
    assert v.steps["neighbours +"] == C.INCONCLUSIVE
    assert v.reason.endswith("; neighbours + says holds once reported seed 3 is left out")
    v = catalogue.verdict("frequency-bias-networks", [("x", d)])  # not between tuned methods: the intervals decide
    assert v.verdict == C.HOLDS and v.steps is None
    # a claim between tuned methods judged where every method runs at one stated step (untuned)
    v = catalogue.verdict("overlap-helps", [("x", d)], at_tuned_steps=False)
    assert v.verdict == C.HOLDS and v.steps is None and not v.reason
    assert catalogue.verdict("overlap-helps", [("x", d)]).verdict == C.INCONCLUSIVE
    edge = C.Bracket((0.1, 0.2), (1.0, 2.0), 0.1, False, "lower", 0)
    assert catalogue.verdict("overlap-helps", [("x", d)], gate=[edge], at_tuned_steps=False).verdict == C.INCONCLUSIVE
    # a claim whose arms' steps share no scale needs no common step
    nb = {"neighbours": {"−": [("x", d)], "+": [("x", d)]}}
    assert catalogue.verdict("fig-b-ranking", [("x", d), ("y", d)],
                             steps={"neighbours": {k: [("x", d), ("y", d)] for k in ("−", "+")}}).verdict == C.HOLDS
    assert catalogue.verdict("rescaled-slower-homogeneous", [("x", d)], steps=nb).verdict == C.INCONCLUSIVE
    with pytest.raises(KeyError, match="no claim"):
        catalogue.verdict("no-such-claim", [("x", d)])


def test_every_catalogued_claim_is_well_formed():
    for cid, c in catalogue.CLAIMS.items():
        assert cid == c.id and c.kind in C.KINDS and c.source and c.words and c.when and c.family
        assert c.margin if c.kind in (C.NONINFERIORITY, C.EQUIVALENCE) else True
        assert c.family_size >= 1
    with pytest.raises(ValueError, match="margin"):
        catalogue.Claim("x", "s", "w", C.EQUIVALENCE, "t", "f")


def test_the_table_refuses_rows_the_catalogue_does_not_know():
    good = {"id": "overlap-helps", "kind": C.SUPERIORITY, "claim": "c", "verdict": C.HOLDS, "evidence": "e",
            "conditions": "k", "stem": "deahes", "figure": "deahes"}
    table.check_row(good, "here")
    with pytest.raises(ValueError, match="no catalogued claim"):
        table.check_row({**good, "id": "made-up"}, "here")
    with pytest.raises(ValueError, match="judged as"):
        table.check_row({**good, "kind": C.EQUIVALENCE}, "here")
    text = table.table([good])
    assert "`overlap-helps`" in text and "Reconstructed:" in text and "| `deahes` | c | **holds** |" in text


def test_r6_grid_error_is_the_parabolas_depth_between_the_neighbours():
    from delaylab.paper_figures import r6_homogeneous as r6

    # log score = (log γ − log 0.25)² + log 10, sampled at 0.1, 0.2, 0.4: the parabola is exact, its
    # minimum at 0.25 is log 10, the tuned step 0.2 scores (log 0.8)² above it
    steps = (0.1, 0.2, 0.4)
    scores = tuple(10.0 * math.exp(math.log(g / 0.25) ** 2) for g in steps)
    b = C.Bracket(steps, scores, 0.2, True, "", 0)
    assert r6.grid_error(b) == pytest.approx(math.log(0.8) ** 2, rel=1e-9)
    # a failing neighbour: the log score change to the finite one
    b = C.Bracket(steps, (math.inf, 10.0, 12.0), 0.2, True, "", 0)
    assert r6.grid_error(b) == pytest.approx(math.log(1.2))


def test_a_non_inferiority_to_a_worse_reference_is_set_by_the_reconstruction():
    """"close to the oracle" (DEAHES-O no worse than the oracle by the margin) says nothing where the
    oracle is itself significantly worse: whether the verdict held or only its comparisons did (the
    ten-seed rule having made it inconclusive), it is inconclusive for that reason, named first."""
    # DEAHES-O − oracle, relative: −0.025 ± 0.0248, below the 2% margin but within two half-widths
    # of it on 3 seeds (thin); the oracle − DEAHES-O is the same seen from the oracle: above 0
    near = np.array([-0.035, -0.025, -0.015])
    v = catalogue.verdict("deahes-close-to-oracle", [("x", near)], margin=0.02, at_tuned_steps=False)
    assert v.verdict == C.INCONCLUSIVE and all(p.verdict == C.HOLDS for p in v.parts)
    worse = [("P = 4", -near)]  # oracle − DEAHES-O: the oracle is worse
    w = catalogue.unless_reference_worse(v, worse, "EAHES-OM", "DEAHES-O")
    assert w.verdict == C.INCONCLUSIVE and w.reason.startswith("set by the reconstruction: EAHES-OM is itself worse")
    level = [("P = 4", np.array([0.02, -0.021, 0.001]))]  # not significantly worse: unchanged
    assert catalogue.unless_reference_worse(v, level, "EAHES-OM", "DEAHES-O") is v
    far = np.array([0.05, 0.06, 0.055])  # does not hold: unchanged whatever the reference
    f = catalogue.verdict("deahes-close-to-oracle", [("x", far)], margin=0.02, at_tuned_steps=False)
    assert catalogue.unless_reference_worse(f, worse, "EAHES-OM", "DEAHES-O") is f
