"""`delaylab verify`, end to end, in-process, on two of its scenarios: the toy of Fig. A (every
registered rule's fixed point and weights) and the cycle map (every rule's finite-step orbit). The
whole run, every scenario, is `make demo`'s job; here each scenario's checks would only repeat at
other sizes what these two test."""

import json

import numpy as np
import pytest

from delaylab import cli, scenarios
from delaylab.registry import ALGORITHMS

pytestmark = pytest.mark.slow  # holds tests of 10 s or more: run first (tests/conftest.py)

SCENARIOS = ("toy-1d", "cycle-map")


@pytest.fixture(scope="module")
def verified(tmp_path_factory):
    out = tmp_path_factory.mktemp("verify") / "v"
    args = ["verify", "--out", str(out), "--quiet"]
    for name in SCENARIOS:
        args += ["--scenario", name]
    import contextlib
    import io

    table = io.StringIO()
    with contextlib.redirect_stdout(table):
        status = cli.main(args)
    return status, table.getvalue(), out


def test_verify_passes_and_writes_every_check(verified):
    status, table, out = verified
    assert status == 0
    rows = json.loads((out / "checks.json").read_text())
    assert {tuple(sorted(r)) for r in rows} == {("algorithm", "independent", "measured", "passed", "predicted", "quantity",
                                                 "scenario", "tolerance", "tolerance_from")}
    assert all(r["tolerance_from"] for r in rows)  # every row says how its tolerance was obtained
    # the distance rows are implied by the fixed-point rows (triangle inequality): shown, not counted
    assert all(r["independent"] == (not r["quantity"].startswith("distance to optimum")) for r in rows)
    assert {r["scenario"] for r in rows} == set(SCENARIOS)
    assert {r["algorithm"] for r in rows if r["scenario"] == "toy-1d"} == set(ALGORITHMS)
    assert all(r["passed"] for r in rows)
    # Vanilla's measured limit is far from the optimum; Rescaled's is not.
    for r in rows:
        if r["quantity"].startswith("distance to optimum"):
            if r["algorithm"] in ("asgd", "inverse_tau_asgd", "staleness_aware_asgd", "delay_adaptive_asgd"):
                assert r["measured"] > 5 * r["tolerance"]
            elif r["algorithm"] == "rescaled_asgd":
                assert r["measured"] < r["tolerance"]
    assert {r["algorithm"] for r in rows if r["scenario"] == "cycle-map"} == {
        name for name, e in ALGORITHMS.items() if e.has_cycle_map}
    # the table on stdout: every check, and the count
    closed = sum(e.closed_form_steps is not None for e in ALGORITHMS.values())
    n = 2 * len(ALGORITHMS) + closed + len({r["algorithm"] for r in rows if r["scenario"] == "cycle-map"})
    k = n - len(ALGORITHMS)  # independent: less the implied distance rows
    assert len(rows) == n
    assert f"{k} of {k} independent checks pass ({len(ALGORITHMS)} more rows, implied by those, shown)" in table
    assert "predicted" in table and "measured" in table and "tolerance" in table
    # the folder: the checks as CSV, the run's config and environment, the figure, every run's metrics
    csv = (out / "checks.csv").read_text().splitlines()
    assert len(csv) == n + 1 and csv[0].split(",")[0] == "scenario"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["passed"] == n and summary["independent_checks"] == summary["independent_passed"] == k
    env = json.loads((out / "environment.json").read_text())
    assert env["x64"] is True and "jax" in env["packages"] and "convolution" in env
    assert "averaged over the second half): holds." in (out / "fig_a.txt").read_text()
    from sim import store

    m = store.read_metrics(str(out / "runs"), name="toy-1d-asgd")
    assert m["loss"].shape == m["time"].shape and m["updates_per_worker"].shape[1] == 3
    assert "loss" in (out / "runs" / "toy-1d-asgd.csv").read_text().splitlines()[0]


def test_verify_json_on_stdout(capsys):
    assert cli.main(["verify", "--scenario", "cycle-map", "--json", "--no-out"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows and all(r["scenario"] == "cycle-map" and r["passed"] for r in rows)


def test_verify_unknown_scenario(capsys):
    assert cli.main(["verify", "--scenario", "nope", "--no-out"]) == 2
    assert "unknown scenario 'nope'" in capsys.readouterr().err


def test_verify_fails_when_theory_is_wrong(monkeypatch, capsys):
    """The verdict is not a constant: with a wrong prediction (weights ∝ τ instead of 1/τ) it fails."""
    import dataclasses

    entry = ALGORITHMS["asgd"]
    wrong = dataclasses.replace(entry, step=lambda g, taus, n: (lambda i, st: g * float(taus[i]) ** 2),
                                closed_form_steps=lambda g, taus: g * np.asarray(taus) ** 2)
    from delaylab import verify

    monkeypatch.setattr(verify, "ALGORITHMS", {"asgd": wrong})  # the wrong rule alone: its checks are the point
    status = cli.main(["verify", "--scenario", "toy-1d", "--no-out", "--quiet"])
    assert status == 1
    assert "FAIL" in capsys.readouterr().out


def test_scenarios_cover_the_required_profiles():
    names = {s.name for s in scenarios.SCENARIOS}
    assert {"tau-i", "tau-sqrt-i", "tau-i2", "straggler-10x", "exponential", "toy-1d", "d100", "logistic"} <= names
