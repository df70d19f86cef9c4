"""The heterogeneity lab's experiments (paper_figures._hetero and its four figures): their set-up
pieces against hand values, and one experiment end to end on a tiny preset through the CLI."""

import dataclasses

import numpy as np
import pytest

from delaylab import cli
from paper_figures import _hetero as lab
from paper_figures import hetero_frontier, hetero_mitigation
from sim import schedules

pytestmark = pytest.mark.slow  # holds tests of 10 s or more: run first (tests/conftest.py)


def test_spread_taus_keep_total_compute_and_are_equal_at_h0():
    np.testing.assert_allclose(lab.spread_taus(0.0), np.ones(8))
    for h in (0.5, 2.0):
        t = lab.spread_taus(h)
        assert np.sum(1 / t) == pytest.approx(8.0, rel=1e-12)
        assert np.all(np.diff(t) > 0)
        assert t[-1] * t[0] == pytest.approx(np.prod(t) ** (2 / 8), rel=1e-12)  # symmetric quantiles


def test_until_gives_the_shortest_schedule_that_reaches_the_horizon():
    timing = schedules.FixedTiming(np.array([1.0, 3.0]))
    s = lab.until(lambda c: schedules.asynchronous(timing, num_events=c), 10.0, 2)
    assert s.end_time >= 10.0 and s.finish[-2] < 10.0
    b = lab.until(lambda c: schedules.barrier(timing, num_rounds=c), 10.0, 1)
    assert int(b.round.max()) + 1 == 4  # rounds end at 3, 6, 9, 12
    # SSP counts reports, not its release events: the last report is the first at or past 10
    ssp = lab.until(lambda c: schedules.stale_synchronous(timing, num_jobs=c, groups=[0, 0], bound=1), 10.0, 2)
    reports = ssp.finish[~ssp.pull_only]
    assert reports[-1] >= 10.0 and reports[-2] < 10.0 and ssp.pull_only.any()
    assert hetero_frontier._time_to(np.array([0.0, 1.0, 2.0]), np.array([0.1, 0.5, 0.9]), 0.5) == 1.0
    assert hetero_frontier._time_to(np.array([0.0, 1.0]), np.array([0.1, 0.2]), 0.5) == np.inf


def test_mitigation_experiment_end_to_end_on_a_tiny_preset(tmp_path, monkeypatch):
    """Through the CLI, on a tiny preset and two of the six configurations (each configuration
    compiles its own run; the real preset's runtime is in the README, not tested)."""
    import csv

    tiny = dataclasses.replace(lab.PRESETS["quick"], train=800, test=200, pool=4, hidden=16, seeds=2,
                               horizon=40.0, probes=32, logs=5)
    monkeypatch.setitem(lab.PRESETS, "quick", tiny)
    real = hetero_mitigation.mitigation_methods

    def three(horizon, seed=0):
        methods, H_i = real(horizon, seed)
        keep = ("ASGD", "synchronous + 2 backup workers")
        return {k: v for k, v in methods.items() if k in keep}, H_i

    monkeypatch.setattr(hetero_mitigation, "mitigation_methods", three)
    assert cli.main(["figure", "hetero-mitigation", "--quick", "--out", str(tmp_path)]) == 0
    text = (tmp_path / "hetero_mitigation.txt").read_text()
    with open(tmp_path / "hetero_mitigation.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 2 * 2  # two configurations, two seeds
    assert (tmp_path / "hetero_mitigation.png").stat().st_size > 10_000

    def col(method, name):
        return np.array([float(r[name]) for r in rows if r["method"] == method])

    # the six fast workers (τ = 1, exponential noise of mean 0.1) close every round without the stragglers
    assert 4.0 < col("synchronous + 2 backup workers", "throughput")[0] < 6.0
    assert np.all(np.abs(col("synchronous + 2 backup workers", "specialisation")) < 1e-6)  # one model for all
    assert np.all(col("ASGD", "specialisation") > 0.0)  # asynchronous workers hold stale copies
    assert np.all(col("ASGD", "final_loss") < np.log(10))  # below the untrained loss
    assert "ASGD |" in text and "synchronous + 2 backup workers |" in text
