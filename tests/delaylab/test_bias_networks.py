"""The bias-networks figure (paper_figures.bias_networks): its set-up pieces against hand values, its
verdict against made-up runs on both sides of the claim, and the figure end to end on a tiny preset
through the CLI."""

import csv
import dataclasses

import numpy as np
import pytest

from delaylab import claims, cli
from delaylab.paper_figures import bias_networks as bn

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


def _gram(toward: str, noise: float, rng) -> np.ndarray:
    """K = G Gᵀ for made-up worker gradients g_i = w_i v + noise: Σ p_i g_i = 0 up to the noise when
    ``toward`` is "p" (w_i = 1/(n p_i) − 1), Σ g_i = 0 when it is "F" (w_i = n p_i − 1), none when
    "none"."""
    n, d = bn.N, 20
    v = np.eye(d)[0]
    w = {"p": 1 / (n * bn.P) - 1, "F": n * bn.P - 1, "none": rng.normal(size=n)}[toward]
    G = w[:, None] * v[None] + noise * rng.normal(size=(n, d))
    return G @ G.T


def _cell(spec: dict, seeds: int = 5) -> dict:
    """A made-up cell: per method, the direction its runs settle toward and how noisily."""
    rng = np.random.default_rng(0)
    cell = {}
    for m, (toward, noise) in spec.items():
        runs = []
        for _ in range(seeds):
            r = {"gram": _gram(toward, noise, rng), "local_loss": rng.random(8), "class_accuracy": rng.random(10),
                 "F": 0.5}
            runs.append({"avg": r, "last": r, "w_p": rng.random(10) + 0.1, "w_u": np.full(10, 0.1),
                         "test_counts": np.full(10, 20), "diverged": False})
        cell[m] = {"step": 0.05, "runs": runs}
    return cell


def test_norms_and_quantile_from_the_gram_matrix():
    rng = np.random.default_rng(3)
    G = rng.normal(size=(bn.N, 7))
    K = G @ G.T
    q = rng.random(bn.N)
    np.testing.assert_allclose(bn.norm_of(K, q)[0], np.linalg.norm((q / q.sum()) @ G), rtol=1e-12)
    assert bn.PERMUTED.shape == (2520, bn.N) and len({tuple(r) for r in bn.PERMUTED}) == 2520
    x = bn.measures(_gram("p", 0.01, rng)[None])
    assert x["ratio"][0] < 0.1 and x["quantile"][0] < 0.01  # p is (nearly) the only weighting that cancels
    x = bn.measures(_gram("F", 0.01, rng)[None])
    assert x["ratio"][0] > 10 and x["quantile"][0] > 0.05


def test_the_verdict_can_come_out_either_way():
    base = {"vanilla ASGD": ("p", 0.05), "Rescaled ASGD": ("F", 0.05), "IA²SGD": ("F", 0.05), bn.CONTROL: ("none", 0.05)}
    a = bn.analyse(_cell(base))
    assert a["verdict"] == claims.HOLDS and a["table_verdict"] == claims.HOLDS
    # Rescaled nearer F_p than vanilla: the comparison between them fails
    worse = {**base, "vanilla ASGD": ("p", 0.5), "Rescaled ASGD": ("p", 0.01)}
    assert bn.analyse(_cell(worse))["verdict"] == claims.FAILS
    # vanilla's runs unrelated to the speeds: nothing holds
    flat = {**base, "vanilla ASGD": ("none", 0.05)}
    assert bn.analyse(_cell(flat))["verdict"] != claims.HOLDS
    # a tuned cell whose step sits at its grid's edge is inconclusive whatever its intervals say
    cell = _cell(base)
    for m in bn.METHODS:
        cell[m]["bracket"] = {"steps": [0.02, 0.05], "scores": [2.0, 1.0], "best": 0.05, "interior": False,
                              "edge": "upper", "extended": 1}
    assert bn._gate(cell, claims.HOLDS)[0] == claims.INCONCLUSIVE


def test_the_row_is_one_conjunction_over_the_non_iid_cells():
    base = {"vanilla ASGD": ("p", 0.05), "Rescaled ASGD": ("F", 0.05), "IA²SGD": ("F", 0.05)}
    worse = {**base, "vanilla ASGD": ("p", 0.5), "Rescaled ASGD": ("p", 0.01)}

    def data(**cells):
        return {"cells": {("MLP", split, "fixed"): _cell(spec) for split, spec in cells.items()}, "dataset": "made-up",
                "preset": "test"}

    row, = bn.verdicts(data(iid=worse, grouped=base))  # the i.i.d. cell is a reference, not judged
    assert (row["id"], row["kind"], row["verdict"]) == ("frequency-bias-networks", "superiority", claims.HOLDS)
    assert "MLP grouped fixed: vanilla" in row["evidence"] and "iid" not in row["evidence"]
    assert len(bn.headline(data(grouped=base, other=base)).parts) == 2 * 3  # 3 comparisons per cell
    row, = bn.verdicts(data(grouped=base, other=worse))
    assert row["verdict"] == claims.FAILS
    # a tuned step at its grid's edge makes the row inconclusive, with the reason
    d = data(grouped=base)
    for m in bn.METHODS:
        d["cells"][("MLP", "grouped", "fixed")][m]["bracket"] = {"steps": [0.02, 0.05], "scores": [2.0, 1.0],
                                                                 "best": 0.05, "interior": False, "edge": "upper",
                                                                 "extended": 1}
    row, = bn.verdicts(d)
    assert row["verdict"] == claims.INCONCLUSIVE and "grid's edge" in row["evidence"]


def test_figure_end_to_end_on_a_tiny_preset(tmp_path, monkeypatch):
    tiny = dataclasses.replace(bn.PRESETS["test"], splits=("speed-grouped",), cnn_splits=(), seeds=2, events=300,
                               logs=4)
    monkeypatch.setitem(bn.PRESETS, "test", tiny)
    assert cli.main(["figure", "bias-networks", "--preset", "test", "--out", str(tmp_path)]) == 0
    text = (tmp_path / "bias_networks.txt").read_text()
    assert "VERDICT — at this horizon, vanilla ASGD's tail-averaged model is nearer a stationary point" in text
    assert "MLP, speed-grouped, steps tuned" in text and "p-quantile" in text
    with open(tmp_path / "bias_networks.csv") as fh:
        rows = list(csv.DictReader(fh))
    # (fixed: 3 methods + the equal-job-times control; tuned: 3) × 2 reported seeds × (tail average, final iterate)
    assert len(rows) == (4 + 3) * 2 * 2 and {r["seed"] for r in rows} == {"0", "1"}
    import json

    got = json.loads((tmp_path / "bias_networks.verdicts.json").read_text())
    assert [(r["id"], r["kind"]) for r in got] == [("frequency-bias-networks", "superiority")]
    # a part is one run: the ratio in the CSV is what one_run gives for that seed directly
    run = bn.one_run(tiny, "MLP", "speed-grouped", "vanilla ASGD", tiny.step, 1, False)
    row = next(r for r in rows if r["mode"] == "fixed" and r["method"] == "vanilla ASGD" and r["seed"] == "1"
               and r["at"] == "avg")
    prob, _, _ = bn.problem(tiny, "MLP", "speed-grouped", 1)
    assert float(row["grad_p"]) == pytest.approx(bn.norm_of(run["avg"]["gram"], bn.P)[0], rel=1e-12)
    assert float(row["grad_F"]) == pytest.approx(bn.norm_of(run["avg"]["gram"], np.ones(bn.N))[0], rel=1e-12)
    # the Gram matrix is that of the workers' whole-shard gradients at the stored model's weights
    assert np.all(np.linalg.eigvalsh(run["avg"]["gram"]) > -1e-9) and np.isfinite(float(row["grad_p"]))
