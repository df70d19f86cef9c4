"""The bias-networks figure (paper_figures.bias_networks): its set-up pieces against hand values, its
verdict against made-up runs on both sides of the claim, and the figure end to end on a tiny preset
through the CLI."""

import csv
import dataclasses

import numpy as np
import pytest

from delaylab import claims, cli
from paper_figures import bias_networks as bn

pytestmark = pytest.mark.slow  # the end-to-end test compiles two programs (tests/conftest.py)


def test_frequency_weights_and_class_weights_by_hand():
    # p_i ∝ 1/(1.1 τ_i), τ = (1, 1, 2, 2, 4, 4, 8, 8): Σ 1/τ = 3.75
    np.testing.assert_allclose(bn.P, np.array([1, 1, 0.5, 0.5, 0.25, 0.25, 0.125, 0.125]) / 3.75, rtol=1e-12)
    labels = np.array([0, 0, 1, 1, 2, 2])
    idx = np.array([[0, 1, 2], [3, 4, 5]])  # shard 0: classes (0, 0, 1); shard 1: (1, 2, 2)
    # w(c) = Σ_i q_i m_ic/m with q = (3/4, 1/4)
    np.testing.assert_allclose(bn.class_weights(labels, idx, [3, 1]),
                               [0.75 * 2 / 3, 0.75 / 3 + 0.25 / 3, 0.25 * 2 / 3], rtol=1e-12)
    np.testing.assert_allclose(bn.class_weights(labels, idx, [1, 1]), [1 / 3, 1 / 3, 1 / 3], rtol=1e-12)


def test_shards_are_equal_and_the_speed_groups_hold_disjoint_classes():
    labels = np.repeat(np.arange(10), 60)
    fast_classes = set()
    for seed in range(4):
        src = claims.seed_sources(seed, bn.SOURCES)
        idx = bn.shards("speed-grouped", labels, 70, src)
        assert idx.shape == (8, 70) and len(np.unique(idx)) == idx.size
        fast, slow = set(labels[idx[:4]].ravel()), set(labels[idx[4:]].ravel())
        assert len(fast) == len(slow) == 5 and not fast & slow
        fast_classes.add(tuple(sorted(fast)))
        for split in ("dirichlet 0.1", "iid"):
            d = bn.shards(split, labels, 70, src)
            assert d.shape == (8, 70) and len(np.unique(d)) == d.size
    assert len(fast_classes) > 1  # the seed draws which classes the fast workers hold
    with pytest.raises(ValueError, match="split must be one of"):
        bn.shards("by label", labels, 10, src)
    with pytest.raises(ValueError, match="fewer than 100"):
        bn.shards("iid", labels[:400], 100, src)


def _cell(ratios: dict, placebo: np.ndarray, seeds: int = 5) -> dict:
    """A made-up cell whose runs have the given ‖∇F_p‖/‖∇F‖ per method and vanilla's placebo ratio."""
    rng = np.random.default_rng(0)
    cell = {}
    for m in bn.METHODS:
        runs = []
        for s in range(seeds):
            gF = 1.0 + rng.random()
            r = {"grad_p": ratios[m][s] * gF, "grad_F": gF, "grad_rev": ratios[m][s] * gF / placebo[s],
                 "local_loss": rng.random(8), "class_accuracy": rng.random(10), "F": 0.5}
            runs.append({"avg": r, "last": r, "w_p": rng.random(10) + 0.1, "w_u": np.full(10, 0.1), "diverged": False})
        cell[m] = {"step": 0.05, "runs": runs}
    return cell


def test_the_verdict_can_come_out_either_way():
    noise = np.array([1.0, 1.1, 0.9, 1.05, 0.95])
    toward_p = {"vanilla ASGD": 0.2 * noise, "Rescaled ASGD": 5.0 * noise, "IA²SGD": 4.0 * noise}
    a = bn.analyse(_cell(toward_p, 0.3 * noise))
    assert a["verdict"] == claims.HOLDS and a["table_verdict"] == claims.HOLDS
    # Rescaled also nearer F_p: the measure, not the method, would be speaking
    both = {**toward_p, "Rescaled ASGD": 0.3 * noise}
    assert bn.analyse(_cell(both, 0.3 * noise))["verdict"] == claims.FAILS
    # the placebo as stationary as F_p: any re-weighting would look stationary
    assert bn.analyse(_cell(toward_p, 3.0 * noise))["verdict"] == claims.FAILS
    # no preference either way: inconclusive, not "holds"
    flat = {m: noise * np.array([1.3, 0.8, 1.2, 0.9, 1.0]) for m in bn.METHODS}
    assert bn.analyse(_cell(flat, noise))["verdict"] == claims.INCONCLUSIVE
    # a tuned cell whose step sits at its grid's edge is inconclusive whatever its intervals say
    cell = _cell(toward_p, 0.3 * noise)
    for m in bn.METHODS:
        cell[m]["bracket"] = {"steps": [0.02, 0.05], "scores": [2.0, 1.0], "best": 0.05, "interior": False,
                              "edge": "upper", "extended": 1}
    assert bn._gate(cell, claims.HOLDS)[0] == claims.INCONCLUSIVE


def test_figure_end_to_end_on_a_tiny_preset(tmp_path, monkeypatch):
    tiny = dataclasses.replace(bn.PRESETS["test"], splits=("speed-grouped",), cnn_splits=(), seeds=2, events=300,
                               logs=4)
    monkeypatch.setitem(bn.PRESETS, "test", tiny)
    assert cli.main(["figure", "bias-networks", "--preset", "test", "--out", str(tmp_path)]) == 0
    text = (tmp_path / "bias_networks.txt").read_text()
    assert "VERDICT — vanilla ASGD converges toward the p-weighted objective on networks" in text
    assert "MLP, speed-grouped, steps tuned" in text and "placebo" in text
    with open(tmp_path / "bias_networks.csv") as fh:
        rows = list(csv.DictReader(fh))
    # (fixed + tuned) × 3 methods × 2 reported seeds × (tail average, final iterate)
    assert len(rows) == 2 * 3 * 2 * 2 and {r["seed"] for r in rows} == {"0", "1"}
    assert (tmp_path / "bias_networks.verdicts.json").exists()
    # a part is one run: the ratio in the CSV is what one_run gives for that seed directly
    run = bn.one_run(tiny, "MLP", "speed-grouped", "vanilla ASGD", tiny.step, 1, False)
    row = next(r for r in rows if r["mode"] == "fixed" and r["method"] == "vanilla ASGD" and r["seed"] == "1"
               and r["at"] == "avg")
    assert float(row["grad_p"]) == pytest.approx(run["avg"]["grad_p"], rel=1e-12)
    assert float(row["grad_F"]) == pytest.approx(run["avg"]["grad_F"], rel=1e-12)
