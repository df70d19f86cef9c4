"""The verdict words read off paired 95% intervals (paper_figures._verdicts), against intervals
computed here from the t quantiles themselves."""

import numpy as np
import pytest

from paper_figures import _verdicts as V


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
    a jitter per seed shared by its runs, and a smaller one per run."""
    from paper_figures import deahes_readings as R

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
        seeds.append({"loss": loss, "clean_eahes_o": 0.9 + j,
                      "clean_deahes_o": np.array([0.9 + j + (0.3 if k == 0 else 0.0) for k in range(len(R.READINGS))]),
                      "clean_h1": np.array([0.3 if k == 0 else 0.1 for k in range(len(R.READINGS))]),
                      "clean_ramp": np.zeros(len(R.READINGS)),
                      "ramp": {(sem, fm): np.full(len(R.READINGS), 0.1) for sem in R.SEMANTICS for fm in R.FAILURE_MODELS},
                      "lost": {"iid 1/3": 0.33, "outages": 0.33}, "a0": 0.05, "a_mean": 0.05, "a_sd": 0.025})
    return {"preset": "test", "dataset": "none", "workers": 4, "period": 1, "rounds": 10, "seeds": seeds,
            "readings": list(R.READINGS), "oracles": list(R.ORACLES)}


def test_readings_verdicts_follow_the_paired_differences():
    from paper_figures import deahes_readings as R

    good = _synthetic_readings_data(oracle_loss=0.5)  # the oracle best, DEAHES-O next to it
    got = R.claims(good, "suppressed", "outages", R.DEFAULT_READING, "full reset")
    assert [v for v, _ in got.values()] == [V.HOLDS] * 3
    sane = R.sanity(good)
    assert sane["no dead zone, cap 1"][0] == V.FAILS and sane[R.DEFAULT_READING][0] == V.HOLDS
    assert "Readings that reproduce every claim and pass the sanity check: dead zone a0" in R.findings(good)
    bad = _synthetic_readings_data(oracle_loss=1.5)  # the oracle behind EAHES and EAHES-O
    got = R.claims(bad, "stale", "iid 1/3", R.DEFAULT_READING, "master side")
    assert got["the oracle EAHES-OM is best"][0] == V.FAILS
    assert got["DEAHES-O ahead of EAHES-O, EAHES, EAMSGD, EASGD"][0] == V.FAILS
    assert "pass the sanity check: none on this preset" in R.findings(bad)
