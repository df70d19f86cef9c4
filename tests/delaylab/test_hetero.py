"""The heterogeneity lab's experiments (paper_figures._hetero and its four figures): their set-up
pieces against hand values, and one experiment end to end on a tiny preset through the CLI."""

import dataclasses

import numpy as np
import pytest

from delaylab import cli
from delaylab.paper_figures import _hetero as lab
from delaylab import claims
from delaylab.paper_figures import hetero_frontier, hetero_mitigation
from delaylab.sim import schedules

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
    """Through the CLI, on a tiny preset and three of the six schemes (one pair, one scheme without
    its counterpart), each at its bracketed step; the pair is judged at every step setting (each
    scheme compiles its own programs; the real preset's runtime is in benchmarks/RESULTS.md, not tested)."""
    import csv
    import json

    tiny = dataclasses.replace(lab.PRESETS["quick"], train=800, test=200, pool=4, hidden=16, seeds=2, tune_seeds=2,
                               horizon=40.0, probes=32, logs=5, max_extend=1, more_seeds=2)
    monkeypatch.setitem(lab.PRESETS, "quick", tiny)
    real = hetero_mitigation.mitigation_schemes
    keep = ("ASGD", "ASGD + staleness weighting", "synchronous + 2 backup workers")
    monkeypatch.setattr(hetero_mitigation, "mitigation_schemes",
                        lambda horizon: {k: v for k, v in real(horizon).items() if k in keep})
    monkeypatch.setattr(hetero_mitigation, "SPLITS", ("dirichlet 1",))  # one split of the two: the same code path
    assert cli.main(["figure", "hetero-mitigation", "--quick", "--out", str(tmp_path)]) == 0
    text = (tmp_path / "hetero_mitigation.txt").read_text()
    with open(tmp_path / "hetero_mitigation.csv") as fh:
        rows = list(csv.DictReader(fh))
    tuned = [r for r in rows if r["setting"] == "tuned"]
    assert len(tuned) == 3 * 2  # three schemes, two reported seeds
    assert {r["seed"] for r in rows} == {"0", "1"}  # reported seeds, disjoint from the tuning seeds 10000, 10001
    assert {r["split"] for r in rows} == {"dirichlet 1"}
    assert (tmp_path / "hetero_mitigation.png").stat().st_size > 10_000

    def col(method, name, setting="tuned"):
        return np.array([float(r[name]) for r in rows if r["method"] == method and r["setting"] == setting])

    # the six fast workers (τ = 1, exponential noise of mean 0.1) close every round without the stragglers
    assert np.all((4.0 < col("synchronous + 2 backup workers", "throughput"))
                  & (col("synchronous + 2 backup workers", "throughput") < 6.0))
    assert np.all(np.abs(col("synchronous + 2 backup workers", "specialisation")) < 1e-6)  # one model for all
    assert np.all(col("ASGD", "specialisation") > 0.0)  # asynchronous workers hold stale copies
    assert np.all(col("ASGD", "final_loss") < np.log(10))  # below the untrained loss
    # each scheme's step comes from its bracket: the chosen step is among those evaluated
    for method, start in (("ASGD", (0.05, 0.1, 0.2)), ("synchronous + 2 backup workers", (0.2, 0.4, 0.8))):
        g = col(method, "gamma")[0]
        assert min(start) / 2 - 1e-9 <= g <= max(start) * 2 + 1e-9
    assert "ASGD |" in text and "synchronous + 2 backup workers |" in text
    # the pair: both arms at one common step that both brackets evaluated, and each at its grid neighbours
    d = hetero_mitigation.FIGURE.load(str(tmp_path / "hetero_mitigation.npz"))
    pair = d["pairs"]["dirichlet 1"]["staleness weighting"]
    tuned_steps = pair["settings"]["tuned"]
    brackets = {n: claims.Bracket.from_stored(d["rows"]["dirichlet 1"][n]["bracket"]) for n in tuned_steps}
    (common,) = [k for k in pair["settings"] if k.startswith("common")]
    (g,) = set(pair["settings"][common].values())
    assert all(g in b.steps for b in brackets.values())
    for n, g in tuned_steps.items():
        if brackets[n].interior:
            assert pair["settings"]["neighbours −"][n] < g < pair["settings"]["neighbours +"][n]
    # a setting's values are the runs at its steps: the tuned setting equals the rows' values
    np.testing.assert_array_equal(pair["values"]["tuned"]["ASGD"]["loss"], d["rows"]["dirichlet 1"]["ASGD"]["loss"])
    (row,) = json.loads((tmp_path / "hetero_mitigation.verdicts.json").read_text())
    assert row["id"] == "mitigation-lowers-loss" and row["kind"] == "superiority"
    assert row["verdict"] in claims.VERDICTS and "common step γ" in text


def test_tuned_cells_resample_every_source_and_read_the_budget():
    """Seeds of experiments 3 and 4 draw their own split and initial model; tuning reads held-out
    training images, never the test images; a run is read at the budget, not past it."""
    tiny = dataclasses.replace(lab.PRESETS["quick"], train=800, test=200, pool=4, hidden=16)
    a, ta, ka = lab.seeded_problem(tiny, 0)
    b, tb, kb = lab.seeded_problem(tiny, 1)
    v, tv, kv = lab.seeded_problem(tiny, 0, validation=True)
    assert ta != tb and not np.array_equal(np.asarray(a.data["X"]), np.asarray(b.data["X"]))
    assert not np.array_equal(np.asarray(a.x0["Dense_0"]["kernel"]), np.asarray(b.x0["Dense_0"]["kernel"]))
    assert ta == tv and np.array_equal(np.asarray(a.data["X"]), np.asarray(v.data["X"]))  # same seed, same draws
    _, xtr, _, held = lab.tuning_images(tiny)
    ds = lab.sim.data.load_mnist_format()
    n_tr, n_val = len(xtr), len(held["test"][1])
    np.testing.assert_array_equal(xtr, lab.pool(ds.x_train[:n_tr], tiny.pool))
    # the validation images are the training split's next images, as many as the test images
    np.testing.assert_array_equal(held["validation"][0], lab.pool(ds.x_train[n_tr: n_tr + n_val], tiny.pool))
    assert len(held["validation"][1]) == n_val
    run = {"time": np.array([0.0, 5.0, 9.5, 10.0, 12.0]), "v": np.array([9.0, 9.0, 1.0, 3.0, 100.0])}
    assert lab.tail(run, "v", 10.0) == 2.0  # the points in (9, 10]
    assert lab.tail(run, "v", 20.0) == 100.0  # ends before the budget: its own last tenth, (10.8, 12]
    assert lab.tail(run, "v", 7.0) == 9.0  # nothing in (6.3, 7]: the last point before


def test_frontier_runs_of_a_scheme_have_one_length_and_reach_the_budget():
    """GSP's release events make its length vary with the timing draws; the frontier cuts every
    run of a scheme to one length (one compiled program), long enough for the budget."""
    counts = hetero_frontier.run_counts(60.0)
    # round-based schemes slow down with the slowest worker: a length per level, not the longest
    assert counts[2.0, "synchronous SGD"][0] < counts[0.0, "synchronous SGD"][0] / 4
    assert counts[2.0, "vanilla ASGD"] == counts[0.0, "vanilla ASGD"]  # same total compute: one length
    for h in (0.0, 2.0):
        taus = lab.spread_taus(h)
        sc = hetero_frontier.frontier_schemes(taus, 60.0)["grouped (GSP)"]
        count, events = counts[h, "grouped (GSP)"]
        raw = {sc.build(lab.timing_noise(taus, s), count).num_events for s in range(6)}
        cut = [hetero_frontier.schedule_of(sc, lab.timing_noise(taus, s), count, events) for s in range(6)]
        assert {c.num_events for c in cut} == {events}
        assert min(c.end_time for c in cut) > 0.9 * 60.0  # every seed reaches (nearly) the budget
        if h == 0.0:
            assert len(raw) > 1  # what the cut is for


def test_matched_progress_reads_each_run_where_its_loss_reaches_the_levels():
    """Two runs on one path at different speeds: b's loss falls twice as fast, and at every loss
    level a's divergence is 3 times b's. Read at matched progress the ratio is 3 exactly, though at
    equal times it is not."""
    from delaylab.paper_figures import hetero_divergence as hd

    t = np.linspace(0.0, 1.0, 201)
    loss_a, loss_b = np.exp(-t), np.exp(-2 * t)
    div_a, div_b = 3 * 0.1 / loss_a, 0.1 / loss_b  # divergence as a function of the loss reached
    x = hd.at_matched_progress(loss_a[None], div_a[None], loss_b[None], div_b[None])
    assert x[0] == pytest.approx(np.log(3.0), abs=0.02)  # up to reading at log points
    assert not np.isclose(np.mean(np.log(div_a / div_b)), np.log(3.0), atol=0.1)  # at equal times it differs
    # runs that share no loss range give NaN, not a number
    assert np.isnan(hd.at_matched_progress(np.array([[1.0, 0.9]]), np.ones((1, 2)), np.array([[0.5, 0.4]]),
                                           np.ones((1, 2))))[0]


def test_divergence_row_judges_the_residual_beyond_the_step_shrink_in_every_layer():
    """Made-up runs on one loss curve, so that matched progress reads each run's divergence ratio
    exactly: at R = 1 the weighting's log ratio is k · log s̄ (the step-size effect, k per seed); at
    R = 16 it is k · log s̄_16 plus ``extra``, the part the step shrink does not explain."""
    from delaylab import claims
    from delaylab.paper_figures import hetero_divergence as hd

    rng = np.random.default_rng(0)
    seeds, t = 6, np.linspace(0.0, 1.0, 40)
    loss = np.tile(np.exp(-t), (seeds, 1))
    k = 1.0 + 0.2 * rng.random(seeds)
    s_mean = {1.0: 0.8 + 0.05 * rng.random(seeds), 16.0: 0.6 + 0.05 * rng.random(seeds)}

    def data(extra: dict) -> dict:
        progress = {}
        for r, s in s_mean.items():
            for layer in lab.LAYERS:
                x = k * np.log(s) + (extra[layer] if r == 16.0 else 0.0)  # per seed
                progress[(r, "ASGD", layer)] = (loss, np.ones_like(loss))
                progress[(r, hd.WEIGHTED[0], layer)] = (loss, np.exp(x)[:, None] * np.ones_like(loss))
        return {"ratios": np.array([1.0, 16.0]), "s_mean": s_mean, "progress": progress, "dataset": "made-up"}

    lower = {layer: -0.3 + 0.01 * rng.normal(size=seeds) for layer in lab.LAYERS}
    np.testing.assert_allclose(hd.beyond_step_size(data(lower), lab.LAYERS[0])[2], lower[lab.LAYERS[0]], atol=1e-9)
    row, = hd.verdicts(data(lower))
    assert (row["id"], row["kind"], row["verdict"]) == ("staleness-weighting-divergence", "superiority", claims.HOLDS)
    assert all(f"{layer}: log ratio weighted/vanilla" in row["evidence"] for layer in lab.LAYERS)
    # one layer as the step shrink predicts (residual about 0): no longer every layer
    flat = dict(lower, **{lab.LAYERS[-1]: 0.05 * rng.normal(size=seeds)})
    assert hd.verdicts(data(flat))[0]["verdict"] == claims.INCONCLUSIVE
    higher = dict(lower, **{lab.LAYERS[-1]: 0.3 + 0.01 * rng.normal(size=seeds)})
    assert hd.verdicts(data(higher))[0]["verdict"] == claims.FAILS


def test_frontier_dirichlet_presets_draw_dirichlet_shards_and_say_so():
    """Each lab preset has a -dirichlet twin whose seeds draw Dirichlet α = 1 shards (the shards'
    class mixes differ, where the i.i.d. presets' match), stored and named in the texts."""
    p = hetero_frontier.PRESETS["quick-dirichlet"]
    assert p.split == "dirichlet 1" and dataclasses.replace(p, name="quick", split="iid") == hetero_frontier.PRESETS["quick"]
    assert hetero_frontier.PRESETS["quick"] == dataclasses.replace(lab.PRESETS["quick"], max_extend=5)
    probs = {split: lab.seeded_problem(p, 0, split=split)[0] for split in ("iid", p.split)}

    def class_mix(prob):  # [workers, 10]: each shard's share of each class
        y = np.asarray(prob.data["y"])
        return np.stack([np.bincount(y[i].ravel(), minlength=10) / y[i].size for i in range(y.shape[0])])

    spread = {s: np.abs(class_mix(pr) - class_mix(pr).mean(0)).max() for s, pr in probs.items()}
    assert spread["iid"] < 0.1 < spread[p.split]
    d = {"split": p.split, "preset": p.name}
    assert hetero_frontier.shards(d) == "Dirichlet α = 1 shards"
    assert hetero_frontier.stem(d) == "hetero_frontier_quick_dirichlet" and hetero_frontier.stem({"preset": "quick"}) == "hetero_frontier"
