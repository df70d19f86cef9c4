import numpy as np
import pytest

from delaylab import cli


def test_figure_help_lists_every_name(capsys):
    try:
        cli.main(["figure", "--help"])
    except SystemExit:
        pass
    out = capsys.readouterr().out
    assert "r1" in out and "r2" in out


def test_r2_quick_weights_follow_step_mass(tmp_path, capsys):
    assert cli.main(["figure", "r2", "--quick", "--out", str(tmp_path)]) == 0
    rows = np.genfromtxt(tmp_path / "r2_implicit_weights.csv", delimiter=",", names=True, dtype=None, encoding="utf-8")
    err = np.abs(rows["measured"] - rows["exact"])
    assert err.max() < 0.005  # the step-mass prediction, independent of the run's model values
    resc = rows[rows["rule"] == "rescaled_asgd"]
    assert np.abs(resc["measured"] - 1 / 6).max() < 0.005  # Rescaled: uniform
    assert (tmp_path / "r2_implicit_weights.png").stat().st_size > 10_000
    assert "within" in (tmp_path / "r2_implicit_weights.txt").read_text()


def test_r1_writes_three_rules(tmp_path):
    assert cli.main(["figure", "r1", "--out", str(tmp_path)]) == 0
    text = (tmp_path / "fig_a.txt").read_text()
    assert "holds here" in text and "1/τ_i" in text
    header = (tmp_path / "fig_a.csv").read_text().splitlines()[0]
    assert header == "time,x_vanilla,x_rescaled,x_inverse_tau"


def test_r6_quick_rescaled_floor_exceeds_vanilla(tmp_path):
    assert cli.main(["figure", "r6", "--quick", "--out", str(tmp_path)]) == 0
    text = (tmp_path / "r6_homogeneous.txt").read_text()
    assert "holds here" in text
    rows = np.genfromtxt(tmp_path / "r6_homogeneous.csv", delimiter=",", names=True)
    tail = rows["time"] >= 0.5 * rows["time"][-1]
    v, r = rows["vanilla_ASGD"][tail].mean(), rows["Rescaled_ASGD"][tail].mean()
    # The small-step formula predicts the ratio τ_A/τ_H of the mean durations (n = 24, τ_i = i + |N(0, i)|:
    # E τ_i = i + √(2i/π)); staleness only adds to Rescaled's penalty (measured 1.95 against 1.67).
    i = np.arange(1.0, 25.0)
    tau = i + np.sqrt(2.0 * i / np.pi)
    predicted = tau.mean() * np.mean(1.0 / tau)
    assert predicted <= r / v <= 1.5 * predicted


def test_r3_quick_floors_match_small_step_formula(tmp_path):
    assert cli.main(["figure", "r3", "--quick", "--out", str(tmp_path)]) == 0
    rows = np.genfromtxt(tmp_path / "r3_noise_floor.csv", delimiter=",", names=True, dtype=None, encoding="utf-8")
    small = rows[rows["stepsize"] <= 0.004]
    assert np.all(np.abs(small["measured"] / small["predicted"] - 1) < 0.05)


def test_r4_quick_biased_methods_stall_at_their_limit(tmp_path):
    assert cli.main(["figure", "r4", "--quick", "--out", str(tmp_path)]) == 0
    rows = np.genfromtxt(tmp_path / "r4_time_to_eps.csv", delimiter=",", names=True)
    text = (tmp_path / "r4_time_to_eps.txt").read_text()
    stall = float(text.split("‖∇F(x_p)‖² = ")[1].split(",")[0])

    def smallest(col):
        ok = np.isfinite(rows[col])
        return rows["eps"][ok].min() if ok.any() else np.inf

    assert smallest("vanilla_ASGD") >= 0.9 * stall  # cannot settle below its biased limit
    for col in ("Ringleader_ASGD", "Malenia_SGD_S__n", "IA²SGD", "Rescaled_ASGD"):
        assert smallest(col) < stall / 100, col


def test_r5_quick_runs_all_methods_and_starts_at_the_initial_loss(tmp_path, monkeypatch):
    """R5 through the CLI on a smaller quick preset (under half its horizon, a quarter of its data, 2 seeds: the
    real preset's runtime is recorded in benchmarks/RESULTS.md, not tested); the logged F at
    t = 0 equals a plain NumPy forward pass of the initial MLP over the same training subset, and
    every method lowers the loss."""
    from paper_figures import r5_mnist

    monkeypatch.setitem(r5_mnist.PRESETS, "quick",
                        dict(horizon=700.0, seeds=2, grid=(0, 1), train_size=1500, log_points=10))
    assert cli.main(["figure", "r5", "--quick", "--out", str(tmp_path)]) == 0
    assert not (tmp_path / ".parts").exists()  # resume parts are removed once the figure is written
    rows = np.genfromtxt(tmp_path / "r5_mnist.csv", delimiter=",", names=True)
    problem, _, _ = r5_mnist.build(**{k: r5_mnist.PRESETS["quick"][k] for k in ("train_size", "horizon")})
    p = {k: {kk: np.asarray(vv, np.float64) for kk, vv in v.items()} for k, v in problem.x0.items()}
    X = np.asarray(problem.data["X"], np.float64).reshape(-1, 784)
    y = np.asarray(problem.data["y"]).ravel()
    h = np.maximum(X @ p["Dense_0"]["kernel"] + p["Dense_0"]["bias"], 0.0)
    z = h @ p["Dense_1"]["kernel"] + p["Dense_1"]["bias"]
    z = z - z.max(axis=1, keepdims=True)
    f0 = float(np.mean(np.log(np.exp(z).sum(axis=1)) - z[np.arange(len(y)), y]))
    names = [n for n in rows.dtype.names if n.endswith("_loss")]
    assert len(names) == 5
    for n in names:
        assert abs(rows[n][0] - f0) < 1e-4 * f0
        assert rows[n][-1] < 0.8 * f0
    text = (tmp_path / "r5_mnist.txt").read_text()
    assert "Ranking by final training loss" in text and "quick preset" in text
    # the stored data redraw the same findings without rerunning
    assert r5_mnist.findings(r5_mnist.load_data(str(tmp_path / "r5_mnist.npz"))) == text


def test_r5_control_timing_is_exact_and_bad_timing_is_refused():
    from paper_figures import r5_mnist

    problem, sched, _ = r5_mnist.build(train_size=2000, horizon=30.0, timing="fixed")
    assert problem.num_workers == 100 and problem.data["y"].shape[0] == 100
    np.testing.assert_array_equal(sched.durations, sched.worker + 1.0)  # τ_i = i exactly
    with pytest.raises(ValueError, match="timing must be 'random' or 'fixed'"):
        r5_mnist.build(train_size=2000, horizon=30.0, timing="lognormal")


def test_r5_parts_equal_one_sweep_and_a_stopped_run_resumes(tmp_path, monkeypatch):
    """R5 runs one sweep per (method, step size); the parts equal one sweep over the whole grid bit
    for bit, a rerun reuses every stored part, and a part stored for another configuration is
    recomputed."""
    import jax

    import sim
    from paper_figures import r5_mnist

    cfg = dict(horizon=40.0, seeds=2, grid=(0, 1), train_size=1000, log_points=4)
    monkeypatch.setitem(r5_mnist.PRESETS, "tiny", cfg)
    full_methods = r5_mnist._methods
    monkeypatch.setattr(r5_mnist, "_methods", lambda n, taus: {
        k: v for k, v in full_methods(n, taus).items() if k in ("vanilla ASGD", "Ringleader ASGD")})
    parts = tmp_path / "parts"
    data = r5_mnist.compute(preset="tiny", parts_dir=str(parts), progress=False)
    assert sorted(f.name for f in parts.iterdir()) == ["m0_g0.npz", "m0_g1.npz", "m1_g0.npz", "m1_g1.npz"]

    problem, schedule, _ = r5_mnist.build(train_size=1000, horizon=40.0)
    keys = jax.random.split(jax.random.key(0), 2)
    for mi, (name, make) in enumerate(r5_mnist._methods(100, schedule.mean_durations).items()):
        grid = np.asarray(r5_mnist.GRIDS[name][:2], np.float32)
        joint = sim.sweep(make(float(grid[0])), problem, schedule, keys=keys, hparams={"stepsize": grid},
                          log_every=max(1, schedule.num_events // 4))
        for k in range(2):
            with np.load(parts / f"m{mi}_g{k}.npz") as z:
                np.testing.assert_array_equal(z["loss"], np.asarray(joint.metrics["loss"], np.float64)[k])
        best = data["methods"][name]["best"]
        np.testing.assert_array_equal(data["methods"][name]["loss"], np.asarray(joint.metrics["loss"], np.float64)[best])

    calls = []
    real_sweep = sim.sweep
    monkeypatch.setattr(sim, "sweep", lambda *a, **kw: calls.append(1) or real_sweep(*a, **kw))
    again = r5_mnist.compute(preset="tiny", parts_dir=str(parts), progress=False)
    assert calls == []  # every part reused
    for name, m in data["methods"].items():
        np.testing.assert_array_equal(again["methods"][name]["loss"], m["loss"])
        assert again["methods"][name]["seconds"] == m["seconds"]

    with np.load(parts / "m1_g0.npz") as z:  # pretend this part came from another configuration
        stored = {k: z[k] for k in z.files}
    stored["key"] = np.asarray(str(stored["key"]).replace('"seeds": 2', '"seeds": 3'))
    np.savez_compressed(parts / "m1_g0.npz", **stored)
    third = r5_mnist.compute(preset="tiny", parts_dir=str(parts), progress=False)
    assert calls == [1]
    np.testing.assert_array_equal(third["methods"]["Ringleader ASGD"]["loss"], data["methods"]["Ringleader ASGD"]["loss"])


def test_deahes_parts_resume_and_redraw(tmp_path, monkeypatch, capsys):
    """DEAHES-O on a tiny configuration: a (P, method) part equals a direct sweep bit for bit, a
    rerun reuses every stored part (no sweep is called), writing deletes the parts, and `--redraw`
    rebuilds the same figure text from the stored .npz. (Recomputing a part whose key differs is
    tested once for every figure in test_parts_store_reuse_and_recompute.)"""
    import jax

    import sim
    from algos import elastic as ea
    from paper_figures import deahes
    from sim import schedules
    from sim.models import cnn_classifier

    monkeypatch.setitem(deahes.PRESETS, "tiny", dict(data="digits", rounds=3, seeds=2, train_size=192,
                                                     eval_size=96, test_size=96, log_rounds=1,
                                                     batching="vmap"))
    monkeypatch.setattr(deahes, "WORKERS", (2,))
    monkeypatch.setattr(deahes, "PERIODS", (1, 2))
    parts = tmp_path / "parts"
    data = deahes.compute(preset="tiny", parts_dir=str(parts), progress=False)
    assert sorted(f.name for f in parts.iterdir()) == sorted(
        f"P2_{m}.npz" for m in ("calibration",) + deahes.METHODS)

    # an independent run of one part: EAMSGD on the disjoint split, failures drawn as the figure does
    _, Xtr, ytr, Xte, yte = deahes._dataset(deahes.PRESETS["tiny"], None)
    prob = cnn_classifier(Xtr, ytr, Xte, yte, num_workers=2, split="iid", batch_size=deahes.BATCH, eval_size=96,
                          dtype=np.float32)
    failing = schedules.with_failures(schedules.fixed_computation(np.ones(2), num_events=6),
                                      probability=deahes.FAILURE_P, seed=2)
    direct = sim.sweep(ea.eamsgd(learning_rate=deahes.LR, momentum=deahes.MOMENTUM, alpha=deahes.ALPHA), prob, failing,
                       keys=jax.random.split(jax.random.key(0), 2), hparams={"period": np.asarray([1, 2], np.int32)},
                       log_every=2, runs="map")
    np.testing.assert_array_equal(data["runs"][(2, "EAMSGD")]["loss"], np.asarray(direct.metrics["loss"]))
    assert np.all(np.isfinite(data["runs"][(2, "DEAHES-O")]["auc"]) | (data["runs"][(2, "DEAHES-O")]["positives"] == 0))

    calls = []
    real_sweep = sim.sweep
    monkeypatch.setattr(sim, "sweep", lambda *a, **kw: calls.append(1) or real_sweep(*a, **kw))
    again = deahes.compute(preset="tiny", parts_dir=str(parts), progress=False)
    assert calls == []
    assert deahes.findings(again) == deahes.findings(data)


    # write (computes from the stored parts, then deletes them), then redraw from the .npz
    out = tmp_path / "out"
    (out / ".parts").mkdir(parents=True)
    parts.rename(out / ".parts" / "deahes_tiny")
    deahes.write(str(out), preset="tiny")
    assert not (out / ".parts").exists()
    text = (out / "deahes.txt").read_text()
    assert "does NOT hold" in text or "holds" in text
    (out / "deahes.txt").unlink()
    assert cli.main(["figure", "deahes", "--redraw", str(out / "deahes.npz"), "--out", str(out)]) == 0
    assert (out / "deahes.txt").read_text() == text
    capsys.readouterr()
    assert cli.main(["figure", "deahes", "--redraw", str(out / "missing.npz"), "--out", str(out)]) == 2
    assert "no such file" in capsys.readouterr().err
    assert cli.main(["figure", "deahes", "--redraw", str(out / "deahes.npz"), "--quick", "--out", str(out)]) == 2
    assert "drop --quick/--preset" in capsys.readouterr().err
    assert cli.main(["figure", "r2", "--redraw", str(out / "deahes.npz"), "--out", str(out)]) == 2
    assert "r2 stores no data" in capsys.readouterr().err
    assert cli.main(["figure", "r5", "--redraw", str(out / "deahes.npz"), "--out", str(out)]) == 2
    assert "not a r5 data file" in capsys.readouterr().err


def test_parts_store_reuse_and_recompute(tmp_path):
    """paper_figures._parts: a part is computed once and stored; the same key reuses it; another key
    recomputes and replaces it; no temporary file is left; without a folder nothing is stored."""
    from paper_figures import _parts

    calls = []

    def compute():
        calls.append(1)
        return {"x": np.arange(3.0) * len(calls)}

    key = _parts.make_key(code="abc", cfg={"n": 1})
    a, reused = _parts.load_or_compute(str(tmp_path), "p", key, compute)
    assert not reused and calls == [1] and float(a["seconds"]) >= 0
    b, reused = _parts.load_or_compute(str(tmp_path), "p", key, compute)
    assert reused and calls == [1]
    np.testing.assert_array_equal(b["x"], a["x"])
    assert float(b["seconds"]) == float(a["seconds"])
    c, reused = _parts.load_or_compute(str(tmp_path), "p", _parts.make_key(code="abc", cfg={"n": 2}), compute)
    assert not reused and calls == [1, 1]
    np.testing.assert_array_equal(c["x"], 2 * np.arange(3.0))
    assert sorted(f.name for f in tmp_path.iterdir()) == ["p.npz"]
    _, reused = _parts.load_or_compute(None, "p", key, compute)
    assert not reused and calls == [1, 1, 1]
    assert _parts.make_key(b=1, a=2) == _parts.make_key(a=2, b=1)
    _parts.remove(str(tmp_path / "p_dir_that_does_not_exist"))
