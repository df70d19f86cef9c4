"""The verdict words read off paired 95% intervals (delaylab.claims), against intervals
computed here from the t quantiles themselves."""

import math

import numpy as np
import pytest

from delaylab import claims as V


def test_paired_interval_is_the_student_t_interval():
    d = np.array([0.1, 0.3, 0.2, 0.6])
    iv = V.paired_interval(d)
    # t_{0.975, 3} = 3.182446305...
    assert iv.mean == pytest.approx(0.3)
    assert iv.half == pytest.approx(3.1824463052842638 * np.std(d, ddof=1) / 2, rel=1e-12)
    assert np.isnan(V.paired_interval([0.2]).half)


@pytest.mark.parametrize("d,want", [([-0.3, -0.2, -0.25], V.HOLDS), ([0.3, 0.2, 0.25], V.FAILS),
                                    ([-0.3, 0.2, 0.0], V.INCONCLUSIVE), ([-0.1], V.INCONCLUSIVE)])
def test_below(d, want):
    assert V.below(d)[0] == want


def test_equal_needs_the_whole_interval_inside_the_margin():
    assert V.equal([0.001, -0.002, 0.0005], margin=0.01)[0] == V.HOLDS
    # contains 0 but is wide: says nothing
    assert V.equal([0.3, -0.25, 0.1], margin=0.01)[0] == V.INCONCLUSIVE
    assert V.equal([0.2, 0.25, 0.22], margin=0.01)[0] == V.FAILS
    assert V.all_of([V.HOLDS, V.HOLDS]) == V.HOLDS
    assert V.all_of([V.HOLDS, V.INCONCLUSIVE]) == V.INCONCLUSIVE
    assert V.all_of([V.INCONCLUSIVE, V.FAILS]) == V.FAILS


def _synthetic_readings_data(oracle_loss):
    """deahes_readings' data for 4 seeds, built by hand: baselines at fixed losses, the oracle at
    ``oracle_loss``, every DEAHES-O reading 0.004 above the oracle (inside the 2% margin of 0.5);
    a jitter per seed shared by its runs, and a smaller one per run; curves that have flattened."""
    from delaylab.paper_figures import deahes_readings as R

    rng = np.random.default_rng(0)
    base = {"EASGD": 2.0, "EAMSGD": 1.9, "EAHES": 1.0, "EAHES-O": 0.9}
    seeds = []
    for _ in range(4):
        j = rng.normal(scale=0.002)  # shared by a seed's runs, plus each run's own jitter
        loss = {}
        for sem in R.SEMANTICS:
            for fm in R.FAILURE_MODELS:
                for m, v in base.items():
                    loss[(sem, fm, m)] = np.array([v + j + rng.normal(scale=0.0003)])
                for o in R.ORACLES:
                    loss[(sem, fm, f"EAHES-OM ({o})")] = np.array([oracle_loss + j + rng.normal(scale=0.0003)])
                loss[(sem, fm, "DEAHES-O")] = oracle_loss + 0.004 + j + rng.normal(scale=0.0003, size=len(R.READINGS))
        rounds = np.arange(1.0, 11.0)  # every run's loss curve flattened by its end (the short-run rule)
        curve = {k: np.asarray(v)[:, None] + 2.0 * np.exp(-rounds / 1.5) for k, v in loss.items()}
        seeds.append({"loss": loss, "curve": curve, "round": rounds, "clean_eahes_o": 0.9 + j,
                      "clean_deahes_o": np.array([0.9 + j + (0.3 if k == 0 else 0.0) for k in range(len(R.READINGS))]),
                      "clean_h1": np.array([0.3 if k == 0 else 0.1 for k in range(len(R.READINGS))]),
                      "clean_ramp": np.zeros(len(R.READINGS)),
                      "ramp": {(sem, fm): np.full(len(R.READINGS), 0.1) for sem in R.SEMANTICS for fm in R.FAILURE_MODELS},
                      "lost": {"iid 1/3": 0.33, "outages": 0.33}, "a0": 0.05, "a_mean": 0.05, "a_sd": 0.025})
    return {"preset": "test", "dataset": "none", "workers": 4, "period": 1, "rounds": 10, "seeds": seeds,
            "readings": list(R.READINGS), "oracles": list(R.ORACLES)}


def test_readings_verdicts_follow_the_paired_differences():
    from delaylab.paper_figures import deahes_readings as R

    good = _synthetic_readings_data(oracle_loss=0.5)  # the oracle best, DEAHES-O next to it
    got = R.claims(good, R.DEFAULT_READING, "full reset")
    assert {k: v.verdict for k, v in got.items()} == {
        "oracle-best": V.HOLDS, "deahes-close-to-oracle": V.HOLDS, "deahes-beats-baselines": V.HOLDS}
    # one verdict over the 2 semantics × 2 failure models: every setting's comparisons are its parts
    assert [len(got[k].parts) for k in ("oracle-best", "deahes-close-to-oracle", "deahes-beats-baselines")] == [20, 4, 16]
    # close to the oracle: (DEAHES-O − oracle) / the oracle's mean loss against the 2% margin
    p = got["deahes-close-to-oracle"].parts[0]
    assert p.kind == "noninferior" and p.margin == 0.02 and p.interval.mean == pytest.approx(0.004 / 0.5, abs=0.002)
    sane = R.sanity(good)
    assert sane["no dead zone, cap 1"][0].verdict == V.FAILS and not R.passes_sanity(sane["no dead zone, cap 1"])
    assert R.passes_sanity(sane[R.DEFAULT_READING])
    assert "Readings that reproduce every claim and pass the sanity check: dead zone a0" in R.findings(good)
    rows = R.verdicts(good)
    assert [(r["id"], r["kind"], r["verdict"]) for r in rows] == [
        ("deahes-equals-eahes-o-clean", "equivalence", V.HOLDS), ("deahes-beats-baselines", "superiority", V.HOLDS)] + [
        ("oracle-best", "superiority", V.HOLDS), ("deahes-close-to-oracle", "non-inferiority", V.HOLDS)] * 3
    # every oracle row says which oracle reading it judged, and that the oracle is a reconstruction
    for r, oracle in zip(rows[2:], [o for o in R.ORACLES for _ in range(2)]):
        assert f"oracle {oracle};" in r["claim"] and f"read as {oracle}" in r["conditions"]
        assert "our reconstruction" in r["conditions"]
    assert "discards the progress" in rows[2]["conditions"] and "never stale" in rows[6]["conditions"]
    bad = _synthetic_readings_data(oracle_loss=1.5)  # the oracle behind EAHES and EAHES-O
    got = R.claims(bad, R.DEFAULT_READING, "master side")
    assert got["oracle-best"].verdict == V.FAILS
    assert got["deahes-beats-baselines"].verdict == V.FAILS
    assert "pass the sanity check: none on this preset" in R.findings(bad)


def test_readings_close_to_the_oracle_is_non_inferiority():
    """DEAHES-O 0.2 below the oracle in every setting: each "close to the oracle" comparison (no
    worse by more than 2% of its loss) holds, where an equivalence test (|difference| within 2%)
    would fail, but the verdict is inconclusive, set by the reconstruction: non-inferiority to a
    reference that is itself worse says nothing of closeness to the best; the oracle is then not
    the best."""
    from delaylab.paper_figures import deahes_readings as R

    data = _synthetic_readings_data(oracle_loss=0.5)
    for s in data["seeds"]:
        for (sem, fm, m), v in s["loss"].items():
            if m == "DEAHES-O":
                s["loss"][(sem, fm, m)] = v - 0.204
    got = R.claims(data, R.DEFAULT_READING, "full reset")
    # every comparison holds; the verdict is set by the reconstruction, the oracle being the worse
    close = got["deahes-close-to-oracle"]
    assert [p.verdict for p in close.parts] == [V.HOLDS] * 4
    assert close.verdict == V.INCONCLUSIVE and "set by the reconstruction" in close.reason
    assert all(p.interval.mean == pytest.approx(-0.2 / 0.5, abs=0.01) for p in close.parts)
    assert V.equal(-0.4 + np.array([0.001, -0.001, 0.0]), 0.02)[0] == V.FAILS  # the equivalence reading's word
    assert got["oracle-best"].verdict == V.FAILS


def test_readings_one_setting_that_fails_at_95_percent_is_corrected_over_all_settings():
    """EAHES-O below the oracle by d = (0.1, 0.2, 0.3, 0.4) over the 4 seeds in one setting only: its
    95% interval lies above 0, but at the Bonferroni level over the claim's 20 comparisons it
    contains 0, so "the oracle is best" is inconclusive rather than "does not hold"."""
    from scipy import stats

    from delaylab.paper_figures import deahes_readings as R

    data = _synthetic_readings_data(oracle_loss=0.5)
    d = np.array([0.1, 0.2, 0.3, 0.4])
    for s, x in zip(data["seeds"], d):
        s["loss"][("stale", "outages", "EAHES-O")] = s["loss"][("stale", "outages", "EAHES-OM (full reset)")] - x
    se = d.std(ddof=1) / 2
    assert d.mean() - stats.t.ppf(0.975, 3) * se > 0 > d.mean() - stats.t.ppf(1 - 0.025 / 20, 3) * se
    got = R.claims(data, R.DEFAULT_READING, "full reset")["oracle-best"]
    assert got.verdict == V.INCONCLUSIVE
    (p,) = [p for p in got.parts if p.name == "stale, outages: EAHES-OM − EAHES-O"]
    assert p.verdict == V.INCONCLUSIVE and p.interval.lo > 0 and p.corrected.lo < 0


def _synthetic_deahes_data(oracle_gap):
    """deahes' data for 3 seeds, P ∈ {4, 8}, τ ∈ {1, 2}, at the paper's η: the SGD methods at 2.0, the
    AdaHessian ones at 1.0 with EAHES-O and DEAHES-O 0.05 below EAHES, the oracle (full reset)
    ``oracle_gap`` above DEAHES-O; a jitter per seed shared by its runs, and a smaller one per run."""
    rng = np.random.default_rng(1)
    level = {"EASGD": 2.0, "EAMSGD": 1.95, "EAHES": 1.0, "EAHES-O": 0.95, "DEAHES-O": 0.95}
    level["EAHES-OM"] = 0.95 + oracle_gap
    j = rng.normal(scale=0.002, size=(2, 3))  # [τ, seeds]
    runs = {}
    for P in (4, 8):
        for m, v in level.items():
            final = v + j + rng.normal(scale=0.0003, size=(2, 3))
            loss = final[..., None] + 0.5 * np.exp(-2.0 * np.arange(11.0))  # [τ, seeds, logs]: flattened by round 10
            run = {"loss": loss, "accuracy": np.full_like(loss, 0.5)}
            if m in ("EAHES-O", "DEAHES-O"):
                run.update(auc=np.full((2, 3), 0.9), positives=np.full((2, 3), 2 * P),
                           negatives=np.full((2, 3), 4 * P))
            runs[("paper", P, m)] = run
    return {"preset": "test", "dataset": "none", "train_size": 10, "test_size": 10, "rounds": 10, "seeds": 3,
            "semantics": "suppressed", "periods": [1, 2], "workers": [4, 8], "round": np.arange(11.0), "runs": runs,
            "failures": "iid", "resample": True, "sets": ["paper"], "eta": {"paper": {"SGD": 0.01, "AdaHessian": 0.01}},
            "a0": {("paper", 4): np.ones(2), ("paper", 8): np.ones(2)}, "oracles": ["full reset"], "brackets": {},
            "tune_seeds": 0}


def test_deahes_rows_come_from_the_catalogue():
    """Each of the five claims is one catalogue verdict over the 4 settings, with its id and kind;
    the oracle's rows say it is our full-reset reconstruction and, under suppressed failures, what
    the reset discards: 10 rounds of P workers, 6P delivered exchanges of which 2P follow a failure,
    so (10P − 6P) / 2P + 1 = 3 jobs per reset."""
    from delaylab.paper_figures import deahes

    # the oracle 0.01 below DEAHES-O (1.1% of its loss 0.94): the best, and DEAHES-O close to it;
    # DEAHES-O level with EAHES-O: not ahead of it
    rows = deahes.verdicts(_synthetic_deahes_data(oracle_gap=-0.01))
    assert [(r["id"], r["kind"], r["verdict"]) for r in rows] == [
        ("adahessian-beats-sgd", "superiority", V.HOLDS), ("overlap-helps", "superiority", V.HOLDS),
        ("oracle-best", "superiority", V.HOLDS), ("deahes-beats-baselines", "superiority", V.INCONCLUSIVE),
        ("deahes-close-to-oracle", "non-inferiority", V.HOLDS)]
    assert "32 comparisons" in rows[0]["evidence"] and "20 comparisons" in rows[2]["evidence"]
    for r in (rows[0], rows[2], rows[4]):
        assert "our reconstruction" in r["conditions"] and "full reset" in r["conditions"]
        assert "3.0–3.0 jobs" in r["conditions"] and "8.0 at P = 4, 16.0 at P = 8 resets per run" in r["conditions"]
    assert "our reconstruction" not in rows[1]["conditions"]
    # the oracle 0.05 behind DEAHES-O and EAHES-O: not the best; DEAHES-O is no worse than it, but
    # non-inferiority to a reference that is itself worse says nothing of closeness to the best
    rows = deahes.verdicts(_synthetic_deahes_data(oracle_gap=0.05))
    assert [r["verdict"] for r in rows][2:] == [V.FAILS, V.INCONCLUSIVE, V.INCONCLUSIVE]
    assert "set by the reconstruction: EAHES-OM is itself worse than DEAHES-O" in rows[4]["evidence"]


def test_deahes_tuned_rows_are_gated_by_the_brackets_and_name_their_steps():
    """The same runs as the tuned η set, beside the paper's: the rows come twice, each saying its
    steps; the AdaHessian family's best step at its grid's edge makes every tuned row that
    compares an AdaHessian method inconclusive, and leaves the paper's rows as they were."""
    from delaylab.paper_figures import deahes

    data = _synthetic_deahes_data(oracle_gap=-0.01)
    data["runs"].update({("tuned",) + k[1:]: v for k, v in data["runs"].items()})
    data["sets"] = ["tuned", "paper"]
    data["eta"]["tuned"] = {"SGD": 0.1, "AdaHessian": 0.3}
    data["a0"].update({("tuned", 4): np.ones(2), ("tuned", 8): np.ones(2)})
    interior = {"steps": [0.03, 0.1, 0.3], "scores": [2.0, 1.9, 2.1], "best": 0.1, "interior": True, "edge": "",
                "extended": 0}
    edge = {"steps": [0.1, 0.3, 1.0], "scores": [1.2, 1.1, 1.0], "best": 1.0, "interior": False, "edge": "upper",
            "extended": 3}
    data.update(brackets={"SGD": interior, "AdaHessian": edge}, tune_seeds=3, tune_workers=[4])
    rows = deahes.verdicts(data)
    assert [r["id"] for r in rows] == [r["id"] for r in deahes.verdicts(_synthetic_deahes_data(-0.01))] * 2
    tuned, paper = rows[:5], rows[5:]
    assert [r["verdict"] for r in tuned] == [V.INCONCLUSIVE] * 5  # every claim compares an AdaHessian method
    assert all("grid's edge" in r["evidence"] for r in tuned)
    assert [r["verdict"] for r in paper] == [V.HOLDS, V.HOLDS, V.HOLDS, V.INCONCLUSIVE, V.HOLDS]
    assert all(r["claim"].endswith("at tuned η") for r in tuned) and all(r["claim"].endswith("at η = 0.01") for r in paper)
    assert "SGD family η = 0.1, AdaHessian family η = 0.3" in tuned[0]["conditions"]
    text = deahes.findings(data)
    assert "best η 1 scores 1.0000, the second best, η 0.3, 1.1000 (10.00% apart)" in text


# ---------------------------------------------------------------------------------------------
# the harness's other pieces: bracketing, coverage, ratios, seeds


def test_bracket_extends_past_an_edge_and_stops_at_an_interior_optimum():
    """score(γ) = (log γ − log γ*)²: with γ* = 0.004 the starting grid's best, 0.01, is at its lower
    edge; one step down (0.001, the grid's ratio 10) is worse, so 0.01 is interior; with γ* = 3e-4
    the walk goes down twice more."""
    calls = []

    def score(g, star=0.004):
        calls.append(g)
        return (np.log(g) - np.log(star)) ** 2

    b = V.bracket(score, [0.01, 0.1, 1.0])
    assert b.interior and b.edge == "" and b.best == pytest.approx(0.01) and b.extended == 1
    assert b.steps[0] == pytest.approx(0.001)
    assert len(calls) == len(set(calls)) == 4  # every step evaluated once
    assert "interior" in b.note()
    b = V.bracket(lambda g: score(g, 3e-4), [0.01, 0.1, 1.0])
    # |log(1e-4/3e-4)| = 1.10 < |log(1e-3/3e-4)| = 1.20: 1e-4 is best, 1e-5 brackets it
    assert b.interior and b.best == pytest.approx(1e-4, rel=1e-9) and b.extended == 3
    assert b.steps[0] == pytest.approx(1e-5, rel=1e-9)


def test_bracket_extends_past_an_edge_step_tied_with_the_best():
    """Scores 1.00 at 0.1, 0.99 at 0.2 (best), 1.3 at 0.4: interior without a tie tolerance; with
    2% the lower edge is tied with the best, so the bracket extends down until the lowest step is
    clear of it, and a tie it cannot clear by its limit leaves it at the edge."""
    table = {0.1: 1.0, 0.2: 0.99, 0.4: 1.3, 0.05: 1.2}
    b = V.bracket(lambda g: table[round(g, 6)], [0.1, 0.2, 0.4])
    assert b.interior and b.best == 0.2 and b.extended == 0
    b = V.bracket(lambda g: table[round(g, 6)], [0.1, 0.2, 0.4], tie=0.02)
    assert b.interior and b.best == 0.2 and b.extended == 1 and b.steps[0] == pytest.approx(0.05)
    # the tied steps it reports: 0.1 is within 2% of 0.99 (1.0 ≤ 1.0098), not within 1%
    assert b.tied(0.02) == [0.1, 0.2] and b.tied(0.01) == [0.2] and b.tied(0.5) == [0.05, 0.1, 0.2, 0.4]
    flat = V.bracket(lambda g: 1.0 - 0.001 * (g == 0.2), [0.1, 0.2, 0.4], tie=0.02, max_extend=2)
    assert not flat.interior and flat.edge == "lower" and flat.extended == 2
    with pytest.raises(ValueError, match="tie"):
        V.bracket(lambda g: g, [0.1, 0.2], tie=-1.0)


def test_bracket_optimum_inside_the_starting_grid_adds_nothing():
    b = V.bracket(lambda g: (g - 0.2) ** 2, [0.05, 0.1, 0.2, 0.4, 0.8])
    assert b.interior and b.best == 0.2 and b.extended == 0 and b.steps == (0.05, 0.1, 0.2, 0.4, 0.8)


def test_bracket_stops_at_its_limit_and_says_so():
    b = V.bracket(lambda g: -g, [1.0, 2.0, 4.0], max_extend=3)  # better and better upward: never interior
    assert not b.interior and b.edge == "upper" and b.extended == 3 and b.best == pytest.approx(32.0)
    assert "limit reached" in b.note()
    verdict, why = V.gated(V.HOLDS, [b])
    assert verdict == V.INCONCLUSIVE and "grid's edge" in why
    assert V.gated(V.FAILS, [V.bracket(lambda g: (g - 2.0) ** 2, [1.0, 2.0, 4.0])]) == (V.FAILS, "")


def test_bracket_treats_divergence_as_the_worst_score_and_steps_down():
    """Every step of the grid diverges (nan/inf) above 0.02: the bracket walks down to it."""
    b = V.bracket(lambda g: np.nan if g > 0.02 else (np.log(g) - np.log(0.004)) ** 2, [0.1, 0.2, 0.4], ratio=2.0,
                  max_extend=8)
    # 0.1 / 2⁵ = 0.003125 is nearest 0.004 in log; 0.0015625 brackets it
    assert b.interior and b.best == pytest.approx(0.003125) and b.extended == 6 and math.isinf(max(b.scores))


def test_bracket_screens_far_worse_steps_on_the_first_seed_and_picks_the_same_step():
    """Three tuning seeds whose scores are a bowl in log step plus a seed's offset; with a screen of
    25% a step whose first seed scores over 1.25 × the best's first seed is not run on seeds 2 and 3.
    The bracket picks the step the full bracket picks, runs fewer seeds, lists the screened steps
    with their first-seed scores, never calls one best, tied or the runner-up, and a diverging
    first seed (nan) is screened; a screen without first, or not above the tie, is refused."""
    offsets = (0.0, 0.03, -0.02)

    def seed_score(g, s):
        return np.nan if g > 3.0 else 1.0 + (np.log(g) - np.log(0.3)) ** 2 + offsets[s]

    calls = []

    def first(g):
        calls.append((g, 0))
        return seed_score(g, 0)

    def mean(g):
        calls.extend((g, s) for s in range(3))
        return float(np.mean([seed_score(g, s) for s in range(3)]))

    grid = [0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0]
    full = V.bracket(lambda g: float(np.mean([seed_score(g, s) for s in range(3)])), grid, refine=1, tie=0.02)
    b = V.bracket(mean, grid, refine=1, tie=0.02, first=first, screen=0.25)
    assert b.best == full.best and b.interior and b.steps == full.steps
    # first-seed scores 12.6, 6.30, 2.21, 1.00, 2.45, 6.30, nan: 0.01 is scored in full (nothing to
    # screen against), each of 0.03, 0.1, 0.3 beats the best before it; 1.0, 3.0 and 10.0 (nan) are
    # over 1.25 × 0.3's, and so are the refinement's midpoints √0.03 and √0.3 (1.30 and 1.36)
    assert b.screened == tuple(sorted((math.sqrt(0.03), math.sqrt(0.3), 1.0, 3.0, 10.0)))
    assert b.scores[b.steps.index(10.0)] == math.inf and b.scores[b.steps.index(1.0)] == pytest.approx(seed_score(1.0, 0))
    assert {g for g, s in calls if s > 0} == {g for g in b.steps if g not in b.screened}
    second, _ = b.resolution()
    assert second == 0.1  # the full bracket's runner-up, √0.03, was screened here
    assert "screened out" in b.note()
    assert V.Bracket.from_stored({"steps": b.steps, "scores": b.scores, "best": b.best, "interior": True, "edge": "",
                                  "extended": 0, "screened": b.screened}).screened == b.screened
    with pytest.raises(ValueError, match="screen"):
        V.bracket(mean, grid, screen=0.25)
    with pytest.raises(ValueError, match="screen"):
        V.bracket(mean, grid, first=first, screen=0.02, tie=0.02)


def test_a_screened_step_is_scored_in_full_once_the_best_moves_within_its_reach():
    """Steps in the order the bracket meets them (first seed, mean): 0.1 (1.0, 2.0) is the best
    at first, so 0.2 (1.3) is screened, 25% being 1.25; 0.4 (1.2, 1.5) and then 0.8 (1.44, 1.0)
    take over, and within 25% of 0.8's first seed 0.2 is scored in full (1.1) after all; 1.6
    (3.0) is screened for good. And nothing is screened while every fully scored step diverged:
    the bracket walks down as the full one does."""
    table = {0.1: (1.0, 2.0), 0.2: (1.3, 1.1), 0.4: (1.2, 1.5), 0.8: (1.44, 1.0), 1.6: (3.0, 4.0)}
    full_runs = []

    def mean(g):
        full_runs.append(g)
        return table[round(g, 6)][1]

    b = V.bracket(mean, [0.1, 0.2, 0.4, 0.8], first=lambda g: table[round(g, 6)][0], screen=0.25, max_extend=1)
    assert b.best == 0.8 and b.interior and b.screened == (1.6,)
    assert b.scores[b.steps.index(0.2)] == 1.1 and sorted(full_runs) == [0.1, 0.2, 0.4, 0.8]

    def diverging(g):  # the mean diverges above 0.02 (one seed does), the first seed never does
        return math.inf if g > 0.02 else (np.log(g) - np.log(0.01)) ** 2 + 1.0

    def first_seed(g):  # worse and worse downward: against a diverged best it would screen every step down
        return 1.0 + 0.05 / g

    full = V.bracket(diverging, [0.1, 0.3, 1.0], max_extend=8)
    screened = V.bracket(diverging, [0.1, 0.3, 1.0], max_extend=8, first=first_seed, screen=0.25)
    assert screened.best == full.best and screened.interior and full.interior


@pytest.mark.parametrize("bad", [[0.1], [0.1, 0.1], [-0.1, 0.2], [0.0, 1.0]])
def test_bracket_refuses_a_grid_it_cannot_extend(bad):
    with pytest.raises(ValueError, match="at least 2 distinct positive steps"):
        V.bracket(lambda g: g, bad)


def test_the_t_interval_covers_at_its_nominal_rate():
    """2,000 simulated experiments of 5 paired differences with known mean 0.3 (normal, sd 1): the
    95% t interval covers 0.3 in 95% of them, within 3 binomial sds (0.0146); the z interval
    (1.96, the error a bootstrap-like normal approximation makes at n = 5) covers only about 88%."""
    rng = np.random.default_rng(1)
    d = rng.normal(0.3, 1.0, size=(2000, 5))
    ivs = [V.paired_interval(x) for x in d]
    cover = np.mean([iv.lo <= 0.3 <= iv.hi for iv in ivs])
    assert abs(cover - 0.95) < 3 * np.sqrt(0.95 * 0.05 / 2000)
    z = np.mean(np.abs(d.mean(1) - 0.3) <= 1.96 * d.std(1, ddof=1) / np.sqrt(5))
    assert z < 0.91  # the test can tell the right quantile from the wrong one


def test_ratio_below_is_judged_on_log_ratios():
    a, b = np.array([1.0, 1.2, 0.9, 1.1]), np.array([2.0, 2.1, 1.9, 2.2])
    verdict, iv = V.ratio_below(a, b, bound=1.0)
    assert verdict == V.HOLDS and iv.mean == pytest.approx(np.mean(np.log(a / b)))
    assert V.ratio_below(a, b, bound=0.3)[0] == V.FAILS  # the ratios are about 0.5, above 0.3
    with pytest.raises(ValueError, match="positive"):
        V.ratio_below([1.0, -1.0], [1.0, 1.0])


def test_a_seed_resamples_the_split_the_timing_and_the_initial_model():
    from delaylab.sim.data import split_dirichlet
    from delaylab.sim.models import mlp_classifier
    from delaylab.sim.schedules.timing import RandomTiming

    sources = ("split", "timing", "init", "minibatches")
    s0, s1 = V.seed_sources(0, sources), V.seed_sources(1, sources)
    assert len(set(s0.values())) == len(sources)  # one seed's sources never share a stream
    assert all(s0[k] != s1[k] for k in sources)
    assert V.seed_sources(0, sources[:2]) == {k: s0[k] for k in sources[:2]}  # adding a source changes no other
    y = np.repeat(np.arange(4), 10)
    split = [split_dirichlet(y, 4, 0.5, seed=s["split"]) for s in (s0, s1)]
    assert not all(np.array_equal(a, b) for a, b in zip(split[0], split[1]))
    dur = [RandomTiming(np.arange(1.0, 4.0), seed=s["timing"]).durations(5) for s in (s0, s1)]
    assert not np.array_equal(dur[0], dur[1])
    X = np.random.default_rng(0).normal(size=(40, 6)).astype(np.float32)
    x0 = [mlp_classifier(X, y, num_workers=2, split="iid", hidden=4, seed=s["init"]).x0 for s in (s0, s1)]
    leaves = [np.concatenate([np.ravel(v) for v in __import__("jax").tree_util.tree_leaves(x)]) for x in x0]
    assert not np.array_equal(leaves[0], leaves[1])
    tune, report = V.disjoint_seeds(3, 5)
    assert report == [0, 1, 2, 3, 4] and not set(tune) & set(report)


def test_conjunction_corrects_does_not_hold_for_the_number_of_comparisons():
    """1,000 simulated claims of 20 comparisons between exactly equal methods (paired differences
    N(0, 1), 3 seeds): an uncorrected "any one fails" says "does not hold" in about
    1 − 0.975²⁰ = 40% of them; the conjunction's Bonferroni level keeps it at or under 5%
    (binomial 3 sds of slack)."""
    rng = np.random.default_rng(2)
    wrong_raw, wrong = 0, 0
    for _ in range(1000):
        ds = rng.normal(size=(20, 3))
        wrong_raw += any(V.below(d)[0] == V.FAILS for d in ds)
        wrong += V.conjunction([(f"c{i}", "below", d) for i, d in enumerate(ds)])[0] == V.FAILS
    assert wrong_raw / 1000 > 0.3
    assert wrong / 1000 <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / 1000)
    # a clear failure still fails, a clear success holds, and margins work
    v, parts = V.conjunction([("a", "below", [-1.0, -1.1, -0.9]), ("b", "below", [1.0, 1.02, 0.98])])
    assert v == V.FAILS and [p.verdict for p in parts] == [V.HOLDS, V.FAILS]
    assert V.conjunction([("a", "noninferior", [0.01, 0.012, 0.011], 0.05)])[0] == V.HOLDS
    assert V.conjunction([("a", "noninferior", [0.2, 0.21, 0.19], 0.05)])[0] == V.FAILS
    assert V.conjunction([("a", "equal", [0.001, -0.001, 0.0], 0.05)])[0] == V.HOLDS
    with pytest.raises(ValueError, match="kind"):
        V.conjunction([("a", "above", [1.0, 2.0])])


def test_bracket_refines_around_an_interior_optimum():
    """(log γ − log 0.0042)² on a grid of ratio 10: the bracket settles on 0.01 (interior); two
    rounds of refinement end within a factor 10^(1/8) = 1.33 of 0.0042 and stay interior."""
    score = lambda g: (np.log(g) - np.log(0.0042)) ** 2
    coarse = V.bracket(score, [0.01, 0.1, 1.0])
    fine = V.bracket(score, [0.01, 0.1, 1.0], refine=2)
    assert coarse.best == pytest.approx(0.01)
    assert fine.interior and abs(np.log(fine.best / 0.0042)) <= np.log(10) / 8 + 1e-12
    assert min(fine.steps) < fine.best < max(fine.steps)
    assert len(fine.steps) == len(coarse.steps) + 4


def test_window_mean_weights_log_points_by_the_time_they_span():
    # log points bunched near the end: the plain mean counts the bunch once per point, the time
    # average of the line through them is the line's value at the window's middle
    time = np.array([0.0, 90.0, 95.0, 99.0, 99.5, 100.0, 130.0])
    v = 2.0 * time  # a straight line: its time average over [a, b] is a + b
    assert V.window_mean(time, v, 100.0, 100.0) == pytest.approx(95.0 + 100.0)  # points 95 … 100
    assert V.window_mean(time, v, 100.0, 100.0, weight="points") == pytest.approx(2 * (95 + 99 + 99.5 + 100) / 4)
    # one point in the window: its value, either way; none: the last one before; nothing after t is read
    assert V.window_mean(time, v, 92.0, 20.0) == 180.0
    assert V.window_mean(time, v, 93.0, 20.0, weight="points") == 180.0
    v2 = np.where(time > 100.0, np.nan, v)  # a divergence after t does not reach the reading at t
    assert V.window_mean(time, v2, 100.0, 100.0) == pytest.approx(195.0)
    assert np.isnan(V.window_mean(time, np.where(time == 99.0, np.nan, v), 100.0, 100.0))
    # rows are read independently, each over its own times
    rows = V.window_mean(np.stack([time, time + 1.0]), np.stack([v, v]), 100.0, 100.0)
    assert rows[0] == pytest.approx(195.0)
    assert rows[1] == pytest.approx((5 * (180 + 190) / 2 + 4 * (190 + 198) / 2) / 9)  # points at 91, 96, 100
    assert V.reading({}) == "points" and V.reading({"window": "time"}) == "time"
    with pytest.raises(ValueError, match="weight must be one of"):
        V.window_mean(time, v, 100.0, 100.0, weight="events")


def test_first_crossing_interpolates_the_smoothed_curve():
    t = np.arange(10.0)
    v = np.array([9.0, 9.0, 9.0, 9.0, 9.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    # centred means over 5 points: ..., 9 (index 2), 7.4 (3), 5.8 (4), 4.2 (5), 2.6 (6), 1 (7), ...
    assert V.first_crossing(t, v, 5.0, 5) == pytest.approx(4.0 + (5.8 - 5.0) / (5.8 - 4.2))
    assert V.first_crossing(t, v, 0.5, 5) == np.inf
    assert V.first_crossing(t, np.full(10, 0.1), 1.0, 5) == 0.0  # the first point counts (no dead start)
    assert V.first_crossing(t, v, 5.0) == pytest.approx(4.5)  # unsmoothed: between 9 at 4 and 1 at 5
    diverged = np.array([9.0, 9.0, np.inf, np.nan, np.nan, np.nan, np.nan, np.nan, np.nan, np.nan])
    assert V.first_crossing(t, diverged, 5.0, 3) == np.inf
    with pytest.raises(ValueError, match="smooth must be a positive integer"):
        V.first_crossing(t, v, 1.0, 0)


def test_decisive_t_is_the_distance_at_which_a_word_stops_being_marginal():
    from scipy import stats

    assert V.decisive_t(3, 0.95) == pytest.approx(2 * stats.t.ppf(0.975, 2))  # 8.61
    assert V.decisive_t(1, 0.95) == float("inf")
    # three seeds of spread s = 1 (SE = 1/√3) around a mean a little inside and a little outside
    # decisive_t standard errors: marginal, then not
    base = np.array([-1.0, 0.0, 1.0])
    se = 1.0 / np.sqrt(3.0)
    for factor, marginal in ((0.95, True), (1.05, False)):
        d = -(factor * V.decisive_t(3, 0.95) * se) + base
        (verdict, parts) = V.conjunction([("a", "below", d, 0.0)])
        assert verdict == "holds" and bool(V.marginal(parts, seeds=10)) is marginal


def test_fall_share_is_the_last_fifths_part_of_the_whole_fall():
    rounds = np.arange(0.0, 101.0, 10.0)
    assert V.fall_share(rounds, 3.0 - 0.01 * rounds) == pytest.approx(0.2)  # a line: its last fifth, 20%
    assert V.fall_share(rounds, 1.0 + np.exp(-rounds / 10.0)) == pytest.approx(
        (np.exp(-8.0) - np.exp(-10.0)) / (1.0 - np.exp(-10.0)))
    assert V.still_falling(rounds, {"flat": 1.0 + np.exp(-rounds / 10.0), "line": 3.0 - 0.01 * rounds}) == (
        pytest.approx(0.2), "line")
    assert V.still_falling(rounds, {"flat": 1.0 + np.exp(-rounds / 10.0)}) is None
    with pytest.raises(ValueError, match="values for 11 logged rounds"):
        V.fall_share(rounds, np.ones(3))
    # coarse logs: the window starts at the last log at or before 0.8 × the end, never shorter than a fifth
    coarse = np.arange(3.0, 37.0, 3.0)  # 0.8 × 36 = 28.8: from round 27
    assert V.fall_share(coarse, 3.0 - 0.01 * coarse) == pytest.approx(9 / 33)
    with pytest.raises(ValueError, match="no log at or before the last fifth's start"):
        V.fall_share([30.0, 36.0], [2.0, 1.0])
    assert np.isnan(V.fall_share(rounds, 1.0 + 0.01 * rounds))  # a rising curve did not fall: not the rule's
    assert V.still_falling(rounds, {"rising": 1.0 + 0.01 * rounds}) is None


def test_readings_claims_are_inconclusive_where_a_curve_still_falls():
    """The data whose claims all hold, with one baseline's curve a straight line in one setting:
    every claim turns inconclusive with the short-run reason first; the sanity check stands."""
    from delaylab.paper_figures import deahes_readings as R

    data = _synthetic_readings_data(oracle_loss=0.5)
    for s in data["seeds"]:
        r = s["round"]
        s["curve"][("stale", "outages", "EASGD")] = s["loss"][("stale", "outages", "EASGD")][:, None] + 0.1 * (r[-1] - r)
    got = R.claims(data, R.DEFAULT_READING, "full reset")
    assert {k: v.verdict for k, v in got.items()} == dict.fromkeys(got, V.INCONCLUSIVE)
    assert all(v.reason.startswith("a check of the pipeline: the curves have not flattened") and "EASGD (stale, outages)"
               in v.reason for v in got.values())
    assert R.passes_sanity(R.sanity(data)[R.DEFAULT_READING])
    assert "none can, since every verdict is inconclusive as a check of the pipeline" in R.findings(data)
