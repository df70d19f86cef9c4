"""`delaylab verify`, end to end, in-process, on three of its scenarios: the toy of Fig. A and
τ_i = i² (every registered rule's fixed point and weights; the second has unequal curvatures) and
the cycle map (every rule's finite-step orbit), with `--mutants`: the same runs checked under the
wrong theories of delaylab.mutants (the noise floor's, on a short noise-floor run of their own).
The whole run, every scenario, is `make demo`'s job; here each scenario's checks would only
repeat at other sizes what these test."""

import contextlib
import io
import json

import numpy as np
import pytest

from delaylab import cli, mutants, scenarios, verify
from delaylab.registry import ALGORITHMS

pytestmark = pytest.mark.slow  # holds tests of 10 s or more: run first (tests/conftest.py)

SCENARIOS = ("toy-1d", "tau-i2", "cycle-map")
# the noise floor's mutants are tried on a shorter noise-floor run of their own, and the server's
# on the server scenario (below)
NOISE_MUTANTS = ("noise-floor-x2", "noise-floor-half", "floor-ratio-max-min")
SERVER_MUTANTS = ("server-ignored", "server-links-ignored")


@pytest.fixture(scope="module")
def verified(tmp_path_factory):
    """What `delaylab verify --mutants --scenario ...` runs (the command line itself is tested
    below), with the figure the command line draws."""
    from delaylab import paper_figures

    out = tmp_path_factory.mktemp("verify") / "v"
    table = io.StringIO()
    with contextlib.redirect_stdout(table):
        status = verify.run_verify(str(out), as_json=False, names=list(SCENARIOS), quiet=True, mutants=True,
                                   mutant_list=[m for m in mutants.MUTANTS if m.name not in NOISE_MUTANTS + SERVER_MUTANTS],
                                   figure=lambda o: paper_figures.figure("r1").write(o, quiet=True))
    return status, table.getvalue(), out


def test_verify_passes_and_writes_every_check(verified):
    status, table, out = verified
    assert status == 0
    rows = json.loads((out / "checks.json").read_text())
    assert {tuple(sorted(r)) for r in rows} == {("algorithm", "independent", "measured", "passed", "predicted", "quantity",
                                                 "scenario", "schedule_based", "tolerance", "tolerance_from")}
    assert all(r["tolerance_from"] for r in rows)  # every row says how its tolerance was obtained
    assert {r["scenario"] for r in rows} == set(SCENARIOS)
    assert {r["algorithm"] for r in rows if r["scenario"] == "toy-1d"} == set(ALGORITHMS)
    assert all(r["passed"] for r in rows)
    assert {r["algorithm"] for r in rows if r["scenario"] == "cycle-map"} == {
        name for name, e in ALGORITHMS.items() if e.has_cycle_map}
    # Fixed points: one row per algorithm and scenario; the prediction is schedule-based exactly for
    # the methods whose steps follow their own server clock; the tolerance is a computed O(γ)
    # offset for every method whose arrivals are exact affine maps (from the periodic orbit for the
    # rules theory writes as functions of τ, from a replay of the events for Ringmaster's clock),
    # the 2% cap for the others.
    for sc in ("toy-1d", "tau-i2"):
        fixed = [r for r in rows if r["scenario"] == sc and r["quantity"].startswith("fixed point")]
        assert len(fixed) == len(ALGORITHMS)
        for r in fixed:
            entry = ALGORITHMS[r["algorithm"]]
            modelled = entry.has_finite_step_model
            assert r["schedule_based"] == (entry.event_steps_fn is not None)
            assert ("exact periodic orbit" in r["tolerance_from"]) == entry.has_cycle_map
            assert r["quantity"].startswith("fixed point ‖x̄ − (x_q + δ_γ)‖") == modelled
            assert ("(cap)" in r["tolerance_from"]) == (not modelled)
            assert ("replayed along the run's events" in r["tolerance_from"]) == (modelled and entry.rule is None)
        # clipped ASGD: its limit is checked where clipping is active
        clip = next(r for r in fixed if r["algorithm"] == "clipped_asgd")
        assert "clipping active for workers" in clip["tolerance_from"]
    # the weight rows: every rule with a closed form, delay-dependent ones included
    weights = {r["algorithm"] for r in rows if r["scenario"] == "tau-i2" and r["quantity"].startswith("weight")}
    assert weights == {n for n, e in ALGORITHMS.items() if e.rule is not None and e.closed_form and e.clip is None}
    assert {"delay_adaptive_asgd", "staleness_aware_asgd"} <= weights
    k = sum(r["independent"] for r in rows)
    s = sum(r["schedule_based"] for r in rows)
    assert k + s == len(rows) and s == 2 * sum(e.event_steps_fn is not None for e in ALGORITHMS.values())
    assert (f"{k} of {k} independent checks pass; {s} of {s} schedule-based rows (prediction read off the "
            "realised schedule) pass") in table
    assert "predicted" in table and "measured" in table and "tolerance" in table
    # the folder: the checks as CSV, the run's config and environment, the figure, every run's metrics
    csv = (out / "checks.csv").read_text().splitlines()
    assert len(csv) == len(rows) + 1 and csv[0].split(",")[0] == "scenario"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["passed"] == len(rows) and summary["independent_checks"] == summary["independent_passed"] == k
    env = json.loads((out / "environment.json").read_text())
    assert env["x64"] is True and "jax" in env["packages"] and "convolution" in env
    assert "averaged over the second half): holds." in (out / "fig_a.txt").read_text()
    from delaylab.sim import store

    m = store.read_metrics(str(out / "runs"), name="toy-1d-asgd")
    assert m["loss"].shape == m["time"].shape and m["updates_per_worker"].shape[1] == 3
    assert "loss" in (out / "runs" / "toy-1d-asgd.csv").read_text().splitlines()[0]


def test_every_mutant_is_caught(verified):
    status, table, out = verified
    report = json.loads((out / "summary.json").read_text())["mutants"]
    assert len(mutants.MUTANTS) >= 10
    assert len(report["mutants"]) == len(mutants.MUTANTS) - len(NOISE_MUTANTS) - len(SERVER_MUTANTS)
    for name, row in report["mutants"].items():
        assert row["caught_by"], f"mutant {name} survived"
    assert report["score"] == 1.0 and report["survivors"] == []
    k = len(report["mutants"])
    assert table.rstrip().splitlines()[-2] == f"mutation score: {k}/{k} = 1.00"
    # each check family catches what it should
    caught = report["mutants"]
    assert any("cycle map" in c for c in caught["orbit-wrong-order"]["caught_by"])
    assert all(c.startswith(("toy-1d/clipped", "tau-i2/clipped")) for c in caught["clipping-ignored"]["caught_by"])
    assert all("weight q" in c for c in caught["weights-unnormalised"]["caught_by"])
    assert any("tau-i2" in c for c in caught["fixed-point-unweighted-curvature"]["caught_by"])


def test_the_noise_floor_mutants_are_caught():
    """The noise-floor scenario at a fifth of its events: the published theory passes, each noise
    mutant fails the rows it should (the floors, or the ratio)."""
    import jax

    jax.config.update("jax_enable_x64", True)
    m = verify.measure_noise_floor(num_events=60_000)
    assert all(c.passed for c in verify.check_noise_floor(m))
    by_name = {mu.name: mu for mu in mutants.MUTANTS}
    report = mutants.score([m], verify.check_noise_floor(m), [by_name[n] for n in NOISE_MUTANTS])
    assert report.survivors == []
    assert all("noise floor" in c for c in report.caught_by["noise-floor-x2"] + report.caught_by["noise-floor-half"])
    assert report.caught_by["floor-ratio-max-min"] == ["noise-floor/rescaled_asgd floor ratio Rescaled / vanilla (τ_A/τ_H)"]


def test_the_server_scenario_passes_and_its_mutants_are_caught():
    """The server scenario (updates through a FCFS server with exponential service and links each
    way), vanilla and Rescaled ASGD: the published theory passes, its weight rows read the closed
    network's rates (docs/theory.md §14), and a theory that ignores the server, or its links,
    fails them."""
    import jax

    from delaylab.registry import ALGORITHMS as REG

    jax.config.update("jax_enable_x64", True)
    m = verify.measure_scenario(scenarios.scenario("server"), algorithms=[REG["asgd"], REG["rescaled_asgd"]])
    checks = verify.check_scenario(m)
    assert all(c.passed for c in checks), [c for c in checks if not c.passed]
    # every worker's weight, for each of the two methods
    assert sorted(c.quantity for c in checks if "(closed form, server)" in c.quantity) == sorted(
        f"weight q of worker {i} (closed form, server)" for i in range(4) for _ in range(2))
    by_name = {mu.name: mu for mu in mutants.MUTANTS}
    report = mutants.score([m], checks, [by_name[n] for n in SERVER_MUTANTS])
    assert report.survivors == []
    for n in SERVER_MUTANTS:
        assert {c.split("/")[1].split(" ")[0] for c in report.caught_by[n]} >= {"asgd", "rescaled_asgd"}, n


def test_synthetic_two_percent_method_is_told_apart(verified):
    """A method settling at x* + 0.02 (x_p − x*) fails the fixed-point check wherever its tolerance
    is below the shift less Rescaled's own measured error (the triangle inequality's guarantee);
    with theory's finite-step offset subtracted, Rescaled's tolerance is far below the shift."""
    _, _, out = verified
    synthetic = json.loads((out / "summary.json").read_text())["synthetic_2_percent"]
    assert set(synthetic) == {"toy-1d", "tau-i2"}
    for name, s in synthetic.items():
        if s["tolerance"] < s["shift"] - s["own_error"]:
            assert s["caught"], name
    assert all(s["caught"] and s["tolerance"] < 0.5 * s["shift"] for s in synthetic.values())


def test_a_mutant_no_check_sees_makes_verify_fail():
    """An extra mutant the checks cannot see (a change to nothing any check reads) survives: the
    score drops below 1 and the exit status is 1, while the registered mutant beside it is caught."""
    import dataclasses

    from delaylab import theory

    invisible = mutants.Mutant("invisible", "a renamed copy of the published theory",
                               dataclasses.replace(theory.PAPER, name="invisible"))
    table = io.StringIO()
    with contextlib.redirect_stdout(table):
        status = verify.run_verify(None, as_json=False, names=["cycle-map"], quiet=True, mutants=True,
                                   mutant_list=[mutants.MUTANTS[10], invisible])
    text = table.getvalue()
    assert status == 1
    assert "invisible" in text and "SURVIVES" in text
    assert text.rstrip().splitlines()[-1] == "mutation score: 1/2 = 0.50"


def test_verify_json_on_stdout(capsys):
    assert cli.main(["verify", "--scenario", "cycle-map", "--json", "--no-out"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows and all(r["scenario"] == "cycle-map" and r["passed"] for r in rows)


def test_verify_unknown_scenario(capsys):
    assert cli.main(["verify", "--scenario", "nope", "--no-out"]) == 2
    assert "unknown scenario 'nope'" in capsys.readouterr().err


def test_scenarios_cover_the_required_profiles():
    names = {s.name for s in scenarios.SCENARIOS}
    assert {"tau-i", "tau-sqrt-i", "tau-i2", "straggler-10x", "exponential", "toy-1d", "d100", "logistic"} <= names


def test_theory_side_closed_forms_of_delay_dependent_rules():
    """The delay-dependent rules' closed-form weights under fixed computation, by hand for τ = (1, 2):
    one period (H = 2) has arrivals w0@1 (δ = 1), w0@2 (δ = 0), w1@2 (δ = 2) (theory.orbit)."""
    from delaylab import theory

    q = theory.PAPER.closed_form_weights("staleness_aware", 1.0, [1.0, 2.0])
    # w0: steps 1/max(1,1) and 1/max(1,0) = 1, 1 over 2 time units; w1: 1/2 over 2 time units
    np.testing.assert_allclose(q, np.array([1.0, 0.25]) / 1.25, rtol=1e-12)
    q = theory.PAPER.closed_form_weights("delay_adaptive", 1.0, [1.0, 2.0])
    # n = 2: w0: 2/max(2,1) = 1 twice; w1: 2/max(2,2) = 1 -> frequency weights (2/3, 1/3)
    np.testing.assert_allclose(q, [2 / 3, 1 / 3], rtol=1e-12)
    assert theory.PAPER.closed_form_weights("delay_adaptive", 1.0, [1.0, 1.5]) is None  # τ alone does not fix δ


def test_a_new_methods_step_rule_gets_the_same_theory_as_a_named_one():
    """theory.StepRule (a notebook's rule) goes through the same formulas as the named rules."""
    from delaylab import theory

    taus = np.array([1.0, 2.0, 3.0])
    aware = theory.StepRule("aware", delay_step=lambda g, n, d: g / np.maximum(1.0, d))
    np.testing.assert_array_equal(theory.PAPER.closed_form_weights(aware, 0.1, taus),
                                  theory.PAPER.closed_form_weights("staleness_aware", 0.1, taus))
    const = theory.StepRule("const", tau_steps=lambda g, t: np.full(len(t), g))
    np.testing.assert_allclose(theory.PAPER.closed_form_weights(const, 0.1, taus), theory.frequency_weights(taus))
    A, b = np.ones((3, 1)), np.array([[1.0], [-1.0], [2.0]])
    assert np.array_equal(theory.PAPER.periodic_orbit(A, b, taus, aware, 0.05).average,
                          theory.PAPER.periodic_orbit(A, b, taus, "staleness_aware", 0.05).average)
    with pytest.raises(ValueError, match="exactly one of"):
        theory.StepRule("both", tau_steps=len, delay_step=len)


def test_aperiodic_schedule_goes_through_the_replay_and_can_fail():
    """τ = (1, √2, √3): no period, so theory replays the run's events for δ_γ. The published theory
    passes; a wrong one (weights ∝ 1/τ²) fails the same rows. Small, so the path runs in seconds."""
    import jax

    from delaylab import sim

    jax.config.update("jax_enable_x64", True)
    sc = scenarios.Scenario("aperiodic", "τ = (1, √2, √3), n = 3, d = 2",
                            lambda: sim.problems.random_quadratic(3, 2, condition=3.0, spread=2.0, seed=11),
                            lambda: sim.schedules.fixed_computation(np.sqrt([1.0, 2.0, 3.0]), num_events=6000), 0.01)
    m = verify.measure_scenario(sc, algorithms={k: ALGORITHMS[k] for k in ("asgd", "ringmaster_asgd")})
    checks = verify.check_scenario(m)
    fixed = [c for c in checks if c.quantity.startswith("fixed point")]
    assert len(fixed) == 2 and all(c.passed for c in checks)
    assert all("replayed along the run's events" in c.tolerance_from for c in fixed)
    wrong = verify.check_scenario(m, mutants.MUTANTS[0].theory)
    assert not next(c for c in wrong if c.algorithm == "asgd" and c.quantity.startswith("fixed point")).passed


def test_the_command_line_flag_reports_the_score_and_fails_on_survivors(capsys):
    """`--mutants` on the cycle map alone: only the mutants that change a rule's steps or the
    orbit's composition can be seen there, so the others survive, the report names them, and the
    exit status is 1."""
    assert cli.main(["verify", "--scenario", "cycle-map", "--mutants", "--no-out", "--quiet"]) == 1
    out = capsys.readouterr().out.rstrip().splitlines()
    seen = {"orbit-wrong-order", "staleness-in-time", "rescaled-overcorrects", "rescaled-by-arithmetic-mean"}
    caught = {line.split()[0] for line in out if "caught by" in line}
    assert caught == seen
    assert sum("SURVIVES" in line for line in out) == len(mutants.MUTANTS) - len(seen)
    assert out[-1] == f"mutation score: {len(seen)}/{len(mutants.MUTANTS)} = {len(seen) / len(mutants.MUTANTS):.2f}"


def test_extra_algorithms_are_checked_beside_the_registered_ones():
    """`verify(names, algorithms=...)`: an extra entry (a copy of vanilla ASGD under another name)
    gets the same rows as the registered methods, and they pass; a registered name given to
    another entry is refused before anything runs."""
    import dataclasses

    import jax

    from delaylab.registry import AlgorithmEntry

    jax.config.update("jax_enable_x64", True)
    copy = AlgorithmEntry("asgd_copy", ALGORITHMS["asgd"].make, "constant", "vanilla ASGD under another name")
    [outcome] = verify.verify(["tau-i"], algorithms=[copy])
    by_algorithm = {}
    for c in outcome.checks:
        by_algorithm.setdefault(c.algorithm, []).append(c)
    assert set(ALGORITHMS) | {"asgd_copy"} == set(by_algorithm)
    assert [c.quantity for c in by_algorithm["asgd_copy"]] == [c.quantity for c in by_algorithm["asgd"]]
    assert all(c.passed for c in outcome.checks)
    with pytest.raises(ValueError, match="'asgd' is already registered"):
        verify.verify(["tau-i"], algorithms={"asgd": dataclasses.replace(ALGORITHMS["asgd"], summary="another")})
    # the registered entry itself adds nothing
    assert verify.with_registered([ALGORITHMS["asgd"]])[1] == {}


def test_only_named_algorithms_are_checked_and_unknown_names_refused():
    from delaylab import measure

    with pytest.raises(ValueError, match=r"unknown algorithm\(s\) \['nope'\]"):
        measure.measure(["tau-i"], only=["nope"])
    with pytest.raises(ValueError, match="step_scale must be a number"):
        measure.measure(["tau-i"], step_scale=float("nan"))
    (m,) = measure.measure(["toy-1d"], only=["asgd"])
    assert list(m.runs) == ["asgd"]
