import numpy as np

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
    assert 1.2 < r / v < 3.0  # predicted τ_A/τ_H ≈ 1.67 (small-step formula; staleness adds to it)


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
