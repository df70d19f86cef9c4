"""The DEAHES-O set-up (delaylab.deahes): the oracle's readings as exchange rules, the steps'
families, and the tuning's summary, against weights and numbers written here."""

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest

from delaylab import deahes
from delaylab.algos.elastic import ExchangeContext


def _ctx(failed_last: bool, alpha: float = 0.1) -> ExchangeContext:
    return ExchangeContext(jnp.asarray(alpha, jnp.float32), jnp.asarray(-0.3, jnp.float32), jnp.asarray(failed_last),
                           jnp.asarray(0))


@pytest.mark.parametrize("reading,failure,after,otherwise", [
    ("full reset", "suppressed", (1.0, 0.0), (0.1, 0.1)),
    ("full reset", "stale", (1.0, 0.0), (0.1, 0.1)),
    ("master side", "suppressed", (0.1, 0.0), (0.1, 0.1)),
    ("master side", "stale", (0.1, 0.0), (0.1, 0.1)),
    # the worker's parameters are stale only under stale failures: only there is it reset
    ("reset where stale", "stale", (1.0, 0.0), (0.1, 0.1)),
    ("reset where stale", "suppressed", (0.1, 0.1), (0.1, 0.1)),
])
def test_each_oracle_reading_gives_its_weights_after_a_failure(reading, failure, after, otherwise):
    rule = deahes.oracle_exchange(reading, failure).weights
    for failed, want in ((True, after), (False, otherwise)):
        h1, h2 = rule({}, _ctx(failed))
        assert (float(h1), float(h2)) == pytest.approx(want, abs=1e-7)


def test_oracle_names_families_and_shared_runs():
    assert [deahes.oracle_name(r) for r in deahes.ORACLES] == [
        "EAHES-OM", "EAHES-OM (master side)", "EAHES-OM (reset where stale)"]
    assert [deahes.family(m) for m in ("EASGD", "EAMSGD", "EAHES", "EAHES-O", "EAHES-OM", "EAHES-OM (master side)",
                                       "DEAHES-O")] == ["SGD", "SGD"] + ["AdaHessian"] * 5
    # the stale-only reset never fires under suppressed failures (EAHES-O's rule) and always under
    # stale ones (the full reset's)
    assert deahes.same_runs("EAHES-OM (reset where stale)", "suppressed") == "EAHES-O"
    assert deahes.same_runs("EAHES-OM (reset where stale)", "stale") == "EAHES-OM"
    assert deahes.same_runs("EAHES-OM", "suppressed") is None and deahes.same_runs("EAHES-OM", "stale") is None
    with pytest.raises(ValueError, match="oracle reading"):
        deahes.oracle_exchange("half reset", "stale")
    algs = deahes.algorithms(trace=8, failure="stale", oracles=deahes.ORACLES)
    assert [m for m in algs] == ["EASGD", "EAMSGD", "EAHES", "EAHES-O", "EAHES-OM", "EAHES-OM (master side)",
                                 "EAHES-OM (reset where stale)", "DEAHES-O"]
    assert all(split == "overlap" for m, (_, split) in algs.items() if m.startswith("EAHES-OM"))


def test_sweep_hparams_put_the_step_beside_each_period_and_start_the_ramp_at_minus_a0():
    hp = deahes.sweep_hparams((1, 2, 4), 0.05, a0=[0.1, 0.2, 0.4])
    np.testing.assert_array_equal(hp["period"], [1, 2, 4])
    np.testing.assert_allclose(hp["learning_rate"], [0.05] * 3)
    np.testing.assert_allclose(hp["a_start"], [-0.1, -0.2, -0.4], rtol=1e-7)
    assert set(deahes.sweep_hparams((1,), 0.1)) == {"period", "learning_rate"}


def test_every_preset_resamples_its_failures_per_seed_and_tunes_on_three_seeds():
    from delaylab.sim import schedules

    cfg = deahes.PRESETS["quick"]
    _, a = deahes.schedules_for(4, cfg, seed=0)
    _, b = deahes.schedules_for(4, cfg, seed=1)
    want = schedules.with_failures(schedules.fixed_computation(np.ones(4), num_events=80), probability=1 / 3,
                                   seed=deahes.sources(1, 4)[deahes.failure_source("iid", 4)])
    np.testing.assert_array_equal(b.delivered, want.delivered)
    assert not np.array_equal(a.delivered, b.delivered)
    _, c = deahes.schedules_for(4, cfg, seed=1, failures="outages")
    want = schedules.with_outages(schedules.fixed_computation(np.ones(4), num_events=80), fraction=1 / 3,
                                  lengths=cfg.outage_lengths, seed=deahes.sources(1, 4)[deahes.failure_source("outages", 4)])
    np.testing.assert_array_equal(c.delivered, want.delivered)
    for name in ("quick", "quick-stale", "medium", "medium-outages"):
        assert deahes.PRESETS[name].tune_seeds >= 3 and deahes.PRESETS[name].refine >= 1
    # the deciding preset runs the paper's failure model; the earlier one keeps its own outputs
    from delaylab.paper_figures import deahes as fig

    medium = deahes.PRESETS["medium"]
    assert (medium.semantics, medium.failures) == ("suppressed", "iid")
    assert [fig.stem({"preset": p}) for p in ("medium", "medium-outages", "quick")] == [
        "deahes_medium", "deahes_medium_outages", "deahes"]


def test_each_source_of_a_seed_has_its_own_stream(monkeypatch):
    """Split, evaluation subset, initial model, minibatch keys and each failure model at each P come
    from distinct seeds (claims.seed_sources), and the problems and keys are built from them (the
    CNN builder recorded, not run)."""
    import jax

    src = deahes.sources(3)
    assert set(src) == set(deahes.SOURCES) and len(set(src.values())) == len(src)
    assert src != deahes.sources(4)
    # each failure model at each P its own stream too; the others the same for every P
    at4, at8 = deahes.sources(3, 4), deahes.sources(3, 8)
    assert {k: at4[k] for k in deahes.SOURCES} == src == {k: at8[k] for k in deahes.SOURCES}
    assert len(set(at4.values()) | set(at8.values())) == len(deahes.SOURCES) + 4
    calls = []
    monkeypatch.setattr(deahes, "cnn_classifier", lambda *a, **kw: calls.append(kw) or kw["split"])
    assert deahes.problems(4, deahes.PRESETS["quick"], None, None, None, None, seed=3) == {"iid": "iid",
                                                                                         "overlap": "overlap"}
    assert [(c["seed"], c["eval_seed"], c["init_seed"]) for c in calls] == [
        (src["split"], src["evaluation subset"], src["initial model"])] * 2
    np.testing.assert_array_equal(jax.random.key_data(deahes.keys(3)),
                                  jax.random.key_data(jax.random.key(src["minibatches and probes"])[None]))


def test_resolution_says_the_best_and_second_best_scores():
    b = {"steps": [0.03, 0.1, 0.3, 0.055], "scores": [1.5, 1.2, 2.0, 1.26]}
    assert deahes.resolution(b) == ("best η 0.1 scores 1.2000, the second best, η 0.055, 1.2600 (5.00% apart)")
    # with the per-seed scores: second best less best per tuning seed, (0.1, 0.0, −0.1) + 0.06 → mean 0.06,
    # sd 0.1, half-width t(0.975, 2) · 0.1 / √3 = 4.3027 · 0.057735 = 0.2484
    b["seed_scores"] = [[1.5] * 3, [1.1, 1.2, 1.3], [2.0] * 3, [1.26, 1.26, 1.26]]
    assert deahes.resolution(b) == ("best η 0.1 scores 1.2000, the second best, η 0.055, 1.2600 (5.00% apart; "
                                    "per tuning seed +0.0600 ± 0.2484 over 3 seeds, which do not order the two)")
    b["seed_scores"][1] = [1.19, 1.2, 1.21]  # differences 0.07, 0.06, 0.05: half-width 0.0248, above 0
    assert deahes.resolution(b).endswith("per tuning seed +0.0600 ± 0.0248 over 3 seeds)")


def test_readings_tune_on_tuning_seeds_and_calibrate_a0_there(monkeypatch):
    """deahes-readings' bookkeeping with closed-form runs: each family's tuning score is the mean of
    its methods' losses (log η − log η*)² over the tuning seeds 10,000, 10,001, 10,002 alone; the
    brackets refine once (SGD: η* = 0.1 on the grid; AdaHessian: η* = 0.05, so 0.03 wins, the grid
    extends once below it and the refinement picks √(0.03 · 0.1)); a0 is calibrated on seed 10,000
    at each set's AdaHessian η, and the reported seeds 0, 1, 2 run once per η set with it."""
    from delaylab.paper_figures import _figure
    from delaylab.paper_figures import deahes_readings as R

    star = {"SGD": 0.1, "AdaHessian": 0.05}
    seen = {"tune": set(), "calibrate": [], "report": []}

    def tuning_run(cfg, data, seed, m, eta, a0):
        seen["tune"].add(seed)
        if m == "DEAHES-O":  # with a0 calibrated at the same η
            assert a0 == 1000 * eta
        return {"loss": float((np.log(eta) - np.log(star[deahes.family(m)])) ** 2)}

    def calibrate(cfg, data, eta):
        seen["calibrate"].append(eta)
        return {"a0": 1000 * eta, "a_mean": 0.0, "a_sd": 0.0}

    def seed_part(cfg, seed, data, eta, a0, progress):
        seen["report"].append((seed, dict(eta), a0))
        return {"seed": seed}

    monkeypatch.setattr(R, "dataset", lambda cfg, path: ("none", None, None, None, None))
    monkeypatch.setattr(R, "_tuning_run", tuning_run)
    monkeypatch.setattr(R, "_calibrate", calibrate)
    monkeypatch.setattr(R, "_seed_part", seed_part)
    parts = _figure.Parts(None, code="", conv=None, label="test", quiet=True)
    data = R.compute(R.PRESETS["quick"], parts, progress=False)
    assert seen["tune"] == {10_000, 10_001, 10_002}
    sgd, ah = data["brackets"]["SGD"], data["brackets"]["AdaHessian"]
    assert sgd["best"] == pytest.approx(0.1) and sgd["interior"] and len(sgd["steps"]) == 5
    assert ah["best"] == pytest.approx(np.sqrt(0.03 * 0.1)) and ah["interior"] and ah["extended"] == 1
    assert data["sets"] == ["tuned", "paper"]
    for f, b in data["brackets"].items():  # every step's score on each tuning seed is stored
        for step, per_seed in zip(b["steps"], b["seed_scores"]):
            assert per_seed == pytest.approx([(np.log(step) - np.log(star[f])) ** 2] * 3)
    tuned = {"SGD": sgd["best"], "AdaHessian": ah["best"]}
    # the tuned verdicts' other step settings: each family one step of its refined grid below, and above
    below, above = ({f: deahes.claims.Bracket.from_stored(b).neighbours()[i] for f, b in data["brackets"].items()}
                    for i in (0, 1))
    assert data["settings"] == {"tuned": tuned, "neighbours −": below, "neighbours +": above}
    assert below == {"SGD": pytest.approx(np.sqrt(0.03 * 0.1)), "AdaHessian": pytest.approx(0.03)}
    assert seen["report"] == [(s, tuned, pytest.approx(1000 * ah["best"])) for s in range(3)] + [
        (s, {"SGD": 0.01, "AdaHessian": 0.01}, pytest.approx(10.0)) for s in range(3)] + [
        (s, at, pytest.approx(1000 * at["AdaHessian"])) for at in (below, above) for s in range(3)]
    assert data["by_set"]["paper"]["calibration"]["a0"] == pytest.approx(10.0)


def test_a_run_whose_curves_still_fall_checks_the_pipeline():
    from delaylab.paper_figures import deahes as fig

    rounds = np.arange(0, 101, 10, dtype=np.float64)  # logged rounds 0..100; the last fifth from 80
    flat = 2.0 * np.exp(-rounds / 8.0) + 0.1  # fallen by 0.02% of its whole fall after round 80
    steep = 2.3 - 0.02 * rounds  # a straight line: the last fifth holds 20% of its fall

    def data(curve):
        run = lambda c: {"loss": np.broadcast_to(c, (1, 3, c.size)).copy()}  # noqa: E731  [τ, seeds, logs]
        return {"round": rounds, "periods": [1], "runs": {("tuned", 4, "EASGD"): run(flat),
                                                          ("tuned", 4, "EAHES"): run(curve)}}

    assert fig.still_falling(data(flat), "tuned") is None
    share, method, P, tau = fig.still_falling(data(steep), "tuned")
    assert (method, P, tau) == ("EAHES", 4, 1) and share == pytest.approx(0.2)


def test_readings_judge_early_where_a_curve_still_falls_or_was_not_stored():
    """deahes-readings' short-run rule: its claims are inconclusive, the reason first, when some
    method's (or some DEAHES-O reading's) mean curve still falls over the last fifth, or when the
    run stored final losses alone; a flattened run keeps its words."""
    from delaylab.paper_figures import deahes_readings as R

    rounds = np.arange(3, 37, 3, dtype=np.float64)
    flat = 2.0 * np.exp(-rounds / 3.0) + 0.5
    steep = 2.5 - 0.05 * rounds
    readings = list(R.READINGS)

    def seeds(deahes_curve):
        out = []
        for s in range(3):
            curve = {}
            for sem in R.SEMANTICS:
                for fm in R.FAILURE_MODELS:
                    for m in R.BASELINES + ("EAHES-OM (full reset)",):
                        curve[(sem, fm, m)] = flat[None]
                    curve[(sem, fm, "DEAHES-O")] = np.stack([flat] * (len(readings) - 1) + [deahes_curve])
            out.append({"curve": curve, "round": rounds})
        return out

    assert R.short_run({"seeds": seeds(flat), "readings": readings}) is None
    why = R.short_run({"seeds": seeds(steep), "readings": readings})
    assert why.startswith("a check of the pipeline") and f"DEAHES-O {readings[-1]}" in why
    assert "still fell by 27.3%" in why  # a line logged from round 3: its last fifth from round 27 (≤ 28.8), 9/33
    assert "stored only final losses" in R.short_run({"seeds": [{"loss": {}}], "readings": readings})


def test_tune_passes_the_presets_tie_to_the_bracket_and_keeps_per_seed_scores():
    """GRIDS' 0.03 scores within 2% of the best (0.1): with the preset's tie of 2% the bracket
    extends below it, with no tie it does not; every step evaluated keeps its tuning seeds' scores."""
    table = {0.03: [1.00, 1.02], 0.1: [0.99, 1.01], 0.3: [2.0, 2.0]}

    def seed_scores(eta):
        return table.get(round(eta, 6), [3.0, 3.0])

    cfg = deahes.PRESETS["quick"]
    assert cfg.tie == 0.02
    b, per_seed = deahes.tune("SGD", seed_scores, dataclasses.replace(cfg, refine=0))
    assert b.extended == 1 and b.interior and b.steps[0] == pytest.approx(0.03 / np.sqrt(10))
    stored = deahes.stored_bracket(b, per_seed, cfg.tie)
    assert stored["seed_scores"] == [seed_scores(s) for s in b.steps] and stored["tie"] == 0.02
    assert "within 2% of the best count as tied" in deahes.resolution(stored)
    b0, _ = deahes.tune("SGD", seed_scores, dataclasses.replace(cfg, refine=0, tie=0.0))
    assert b0.extended == 0 and b0.interior
