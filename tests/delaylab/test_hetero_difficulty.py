"""hetero-difficulty (paper_figures.hetero_difficulty): durations independent of the images, against
hand values; the power statement; the figure end to end on a tiny preset."""

import csv
import dataclasses
import math

import jax
import numpy as np
import pytest
from scipy import stats as sps

from delaylab import claims, cli
from delaylab.paper_figures import hetero_difficulty as hd

pytestmark = pytest.mark.slow


def test_slowness_spans_the_spread_in_a_drawn_order():
    s = hd.slowness(32, 1)
    assert s.max() / s.min() == pytest.approx(hd.SPREAD, rel=1e-12)
    assert np.exp(np.mean(np.log(s))) == pytest.approx(1.0, rel=1e-12)
    assert not np.array_equal(s, hd.slowness(32, 2)) and np.allclose(np.sort(s), np.sort(hd.slowness(32, 2)))


def test_job_times_follow_the_drawn_costs_or_the_speed_blocks():
    p = dataclasses.replace(hd.PRESETS["quick"], workers=4, batch=3, events=200)
    src = claims.seed_sources(0, hd.SOURCES)
    key = jax.random.key(5)
    t = hd.timing_for("costs", p, src, 10, key)
    s = hd.slowness(4, src["speeds"])
    costs = np.random.default_rng(src["costs"]).lognormal(0.0, 0.5, size=(4, 10))
    d = t.durations(6)
    for i in range(4):  # s_i (0.2 + 0.8 · batch's mean cost / mean cost), from the examples the job draws
        drawn = t.drawn_indices(i, 6)
        np.testing.assert_allclose(d[i], s[i] * (0.2 + 0.8 * costs[i][drawn].mean(axis=1) / costs.mean()), rtol=1e-12)
    v = hd.timing_for("varying", p, src, 10, key)
    np.testing.assert_allclose(v.base.durations(3), np.repeat(s[:, None], 3, axis=1), rtol=1e-12)  # work s_i per job
    assert {f for _, _, _, f in v.intervals} <= {0.5, 2.0}
    assert all(t1 - t0 == hd.BLOCK for _, t0, t1, _ in v.intervals)
    with pytest.raises(ValueError, match="timing must be one of"):
        hd.timing_for("ink", p, src, 10, key)


def test_power_by_fisher_z():
    # n = 32, ρ = 0.5: z = atanh(0.5) / √(1.06/29) = 2.873; power = Φ(2.873 − 1.960) + Φ(−1.960 − 2.873)
    z = math.atanh(0.5) / math.sqrt(1.06 / 29)
    assert hd.power(32, 0.5) == pytest.approx(sps.norm.cdf(z - 1.959964) + sps.norm.cdf(-1.959964 - z), rel=1e-6)
    assert hd.power(32, 0.0) == pytest.approx(0.05, rel=1e-9)
    assert hd.power(8, 0.5) < hd.power(32, 0.5) < hd.power(64, 0.5)


def test_worker_verdict_reads_the_sign_of_rho():
    def data(rho_v, rho_r, varying=None):  # vanilla's ρ per seed under 'costs' (and 'varying', default the same)
        run = lambda r: {"diverged": False, "rho_worker": r, "rho_job": 0.0, "rho_job_pooled": 0.0, "rho_ink": 0.2}
        vanilla = {"costs": rho_v, "varying": rho_v if varying is None else varying}
        return {"runs": {(k, m): [run(x) for x in (vanilla[k] if m == "vanilla ASGD" else rho_r)]
                         for k in hd.TIMINGS for m in hd.METHODS}, "dataset": "made-up", "workers": 8, "preset": "test"}

    up, flat = np.array([0.5, 0.6, 0.55, 0.65]), np.array([0.05, -0.05, 0.0, 0.02])
    a = hd.analyse(data(up, flat))["costs"]
    assert a["worker_vanilla"][0] == claims.HOLDS and a["worker_vanilla"][1].mean == pytest.approx(0.575)
    assert a["worker_vs_rescaled"][0] == claims.HOLDS
    a = hd.analyse(data(-up, flat))["costs"]  # slow workers fitted better: the prediction fails
    assert a["worker_vanilla"][0] == claims.FAILS and a["worker_vanilla"][1].mean == pytest.approx(-0.575)
    assert hd.analyse(data(flat, flat))["costs"]["worker_vanilla"][0] == claims.INCONCLUSIVE
    # the row: one superiority part per timing (d = −ρ), holding only where both timings hold
    row, = hd.verdicts(data(up, flat))
    assert (row["id"], row["kind"], row["verdict"]) == ("slow-workers-harder-shards", "superiority", claims.HOLDS)
    assert "timing 'costs': ρ(mean job time, shard loss) +0.575" in row["evidence"] and "timing 'varying'" in row["evidence"]
    assert [p.name for p in hd.headline(data(up, flat)).parts] == ["timing 'costs'", "timing 'varying'"]
    assert hd.verdicts(data(up, flat, varying=flat))[0]["verdict"] == claims.INCONCLUSIVE
    assert hd.verdicts(data(up, flat, varying=-up))[0]["verdict"] == claims.FAILS


def test_figure_end_to_end_on_a_tiny_preset(tmp_path, monkeypatch):
    tiny = hd.Preset("test", train=600, test=200, pool=1, hidden=8, batch=4, workers=8, events=300, seeds=2, step=0.05)
    monkeypatch.setitem(hd.PRESETS, "test", tiny)
    assert cli.main(["figure", "hetero-difficulty", "--preset", "test", "--out", str(tmp_path)]) == 0
    text = (tmp_path / "hetero_difficulty.txt").read_text()
    assert "Timing 'costs'" in text and "Timing 'varying'" in text and "Power: one seed's worker-level test" in text
    with open(tmp_path / "hetero_difficulty.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 2 * 2 * 2  # timings × methods × seeds
    import json

    got = json.loads((tmp_path / "hetero_difficulty.verdicts.json").read_text())
    assert [(r["id"], r["kind"]) for r in got] == [("slow-workers-harder-shards", "superiority")]
    # the worker-level ρ in the CSV is Spearman's over the workers of that run, recomputed here
    run = hd.one_run(tiny, "costs", "vanilla ASGD", 1)
    assert run["rho_worker"] == pytest.approx(sps.spearmanr(run["mean_time"], run["shard_difficulty"])[0], abs=1e-12)
    row = next(r for r in rows if r["timing"] == "costs" and r["method"] == "vanilla ASGD" and r["seed"] == "1")
    assert float(row["rho_worker"]) == pytest.approx(run["rho_worker"], abs=1e-12)
