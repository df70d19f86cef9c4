"""Cooperating processes (``delaylab figure --jobs N``): helpers share a figure's parts through its
output folder, each part is computed once, by whichever process claimed it, and the main process's
data are the same, bit for bit, as one process's.

The figure below is this module's own (a helper finds a figure by its ``compute``'s module): six
units, each a short simulator run on a quadratic whose seed is the unit's, stored with the id of the
process that computed it. Its main process waits in its first unit until a helper has stored a part,
so that the test does not depend on how fast a helper starts."""

import dataclasses
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from delaylab.paper_figures import _figure
from delaylab.paper_figures._figure import Figure, Parts
from tests.delaylab.test_run_cli import ROOT

UNITS = [f"u{i}" for i in range(6)]


@dataclasses.dataclass(frozen=True)
class Preset:
    name: str
    events: int = 200


PRESETS = {"quick": Preset("quick"), "full": Preset("full", events=400)}


def _unit(seed: int, events: int) -> dict:
    import jax

    from delaylab import algos, sim
    from delaylab.sim import schedules

    problem = sim.problems.random_quadratic(4, 3, seed=seed, noise=0.5)
    schedule = schedules.asynchronous(schedules.FixedTiming(np.array([1.0, 2.0, 3.0, 5.0])), num_events=events)
    res = sim.run(algos.asgd(stepsize=0.05), problem, schedule, key=jax.random.key(seed), log_every=50)
    return {"params": np.asarray(jax.tree.leaves(res.params)[0]), "pid": os.getpid()}


def _compute(p: Preset, parts: Parts) -> dict:
    out = {}
    for u in parts.order(UNITS):
        def work(u=u):
            if parts.rank == 0 and u == UNITS[0] and parts.jobs > 1:  # until a helper has stored a part
                deadline = time.monotonic() + 120
                while time.monotonic() < deadline and not any(
                        f.endswith(".npz") for f in os.listdir(parts.directory)):
                    time.sleep(0.05)
            return _unit(UNITS.index(u), p.events)

        out[u], _ = parts.get(u, {"preset": p, "unit": u}, work)
    return {"preset": p.name, "units": {u: out[u] for u in UNITS}}


FIGURE = Figure(name="jobs-test", description="test figure", presets=PRESETS, compute=_compute,
                plot=lambda data, path: None, findings=lambda data: "", rows=lambda data: [], stem="jobs_test",
                module=__file__, units="units")


def test_helpers_share_the_parts_and_the_data_are_one_process_s(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    alone = FIGURE.compute_data("quick", None, quiet=True)
    shared = FIGURE.compute_data("quick", str(tmp_path), quiet=True, jobs=2)
    pids = {u: int(shared["units"][u]["pid"]) for u in UNITS}
    assert pids[UNITS[0]] == os.getpid()
    # u0 was the main process's while the helper started: the helper claimed the next unit
    assert pids[UNITS[1]] != os.getpid(), pids
    for u in UNITS:
        np.testing.assert_array_equal(shared["units"][u]["params"], alone["units"][u]["params"])
    parts = os.listdir(tmp_path / ".parts" / "jobs-test_quick")
    assert sorted(f for f in parts if f.endswith(".npz")) == sorted(f"{u}.npz" for u in UNITS)
    assert not [f for f in parts if f.endswith(_figure.CLAIM)], parts  # every claim let go
    assert sorted(f for f in parts if f.endswith(".done")) == [f"unit-{i}.done" for i in range(len(UNITS))]


def test_order_takes_unclaimed_units_first_and_every_unit_once(tmp_path):
    alone = Parts(None, code="", conv=None, label="t")
    assert list(alone.order("abc")) == list("abc")
    parts = Parts(str(tmp_path), code="", conv=None, label="t", quiet=True, jobs=2, rank=0)
    (tmp_path / ("unit-1" + _figure.CLAIM)).write_text(str(os.getppid()))  # another live process works on b
    (tmp_path / "unit-2.done").write_text("")  # and c is finished
    seen = []
    for u in parts.order("abcd"):
        seen.append(u)
        if u == "a":  # a unit is claimed while this process works on it
            assert (tmp_path / ("unit-0" + _figure.CLAIM)).read_text() == str(os.getpid())
    assert seen == list("adbc")
    assert (tmp_path / "unit-0.done").exists() and not (tmp_path / ("unit-0" + _figure.CLAIM)).exists()


def test_a_claim_whose_holder_is_gone_is_taken_over(tmp_path):
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(gone.stdout)  # a process that has exited
    parts = Parts(str(tmp_path), code="c", conv=None, label="t", quiet=True, jobs=2, rank=0)
    (tmp_path / ("x.npz" + _figure.CLAIM)).write_text(str(dead_pid))
    part, reused = parts.get("x", {"a": 1}, lambda: {"v": np.arange(3)})
    assert not reused and part["v"].tolist() == [0, 1, 2]
    assert sorted(os.listdir(tmp_path)) == ["x.npz"]
    # a claim left empty for longer than a writer needs counts as abandoned too
    empty = tmp_path / ("y.npz" + _figure.CLAIM)
    empty.write_text("")
    os.utime(empty, (time.time() - 60, time.time() - 60))
    part, reused = parts.get("y", {"a": 2}, lambda: {"v": np.zeros(2)})
    assert not reused and sorted(os.listdir(tmp_path)) == ["x.npz", "y.npz"]


def test_a_part_claimed_by_a_live_process_is_waited_for_not_computed(tmp_path):
    import json
    import threading

    parts = Parts(str(tmp_path), code="c", conv=None, label="t", quiet=True, jobs=2, rank=0)
    claim = tmp_path / ("z.npz" + _figure.CLAIM)
    claim.write_text(str(os.getppid()))  # held by a live process
    key = json.dumps({"code": "c", "inputs": _figure._canonical({"a": 3})}, sort_keys=True)

    def holder_stores_it():  # as the holder does: store the part, then let go of the claim
        time.sleep(0.5)
        _figure.save_data(str(tmp_path / "z.npz"), {"v": np.ones(2), "seconds": 0.0}, key=key, convolution="None")
        claim.unlink()

    t = threading.Thread(target=holder_stores_it)
    t.start()
    part, reused = parts.get("z", {"a": 3}, lambda: pytest.fail("computed a part another process holds"))
    t.join()
    assert reused and part["v"].tolist() == [1.0, 1.0]


def test_the_command_line_refuses_jobs_where_it_cannot_use_them(tmp_path, capsys):
    from delaylab import cli

    assert cli.main(["figure", "r5", "--jobs", "0", "--out", str(tmp_path)]) == 2
    assert "--jobs must be at least 1" in capsys.readouterr().err
    assert cli.main(["figure", "r1", "--jobs", "2", "--out", str(tmp_path)]) == 2
    assert "computes its parts in one sequence" in capsys.readouterr().err
    assert cli.main(["figure", "r5", "--jobs", "2", "--estimate", "--out", str(tmp_path)]) == 2
    assert "--estimate calibrates one process" in capsys.readouterr().err
    assert not os.listdir(tmp_path)  # refused before anything ran
    with pytest.raises(ValueError, match="output folder"):
        FIGURE.compute_data("quick", None, jobs=2)
