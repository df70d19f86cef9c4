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

    log = os.environ.get("DELAYLAB_TEST_JOBS_LOG")
    if log:  # one line per computation, from whichever process computes
        with open(log, "a") as fh:
            fh.write(f"{seed} {os.getpid()}\n")

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
    log = tmp_path / "computed.log"
    monkeypatch.setenv("DELAYLAB_TEST_JOBS_LOG", str(log))
    shared = FIGURE.compute_data("quick", str(tmp_path / "out"), quiet=True, jobs=2)
    computed = [line.split() for line in log.read_text().splitlines()]
    assert sorted(int(u) for u, _ in computed) == list(range(len(UNITS))), computed  # each unit once
    by = {int(u): int(pid) for u, pid in computed}
    assert by[0] == os.getpid() == int(shared["units"][UNITS[0]]["pid"])
    # u0 was the main process's while the helper started: the helper claimed the next unit
    assert by[1] != os.getpid() and len(set(by.values())) == 2, by
    for u in UNITS:  # the same numbers and dtype (float64, as the main process computes) as one process's
        got, want = shared["units"][u]["params"], alone["units"][u]["params"]
        assert got.dtype == want.dtype == np.float64
        np.testing.assert_array_equal(got, want)
    parts = os.listdir(tmp_path / "out" / ".parts" / "jobs-test_quick")
    assert sorted(f for f in parts if f.endswith(".npz")) == sorted(f"{u}.npz" for u in UNITS)
    assert sorted(f for f in parts if f.endswith(".done")) == [f"unit-1-{i}.done" for i in range(len(UNITS))]


def _hold(path) -> int:
    """A lock on ``path`` as another process's claim would be (a second open file: flock locks of
    two open files conflict, in one process as in two)."""
    import fcntl

    fd = os.open(str(path), os.O_CREAT | os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fd


def test_order_takes_unclaimed_units_first_and_every_unit_once(tmp_path):
    alone = Parts(None, code="", conv=None, label="t")
    assert list(alone.order("abc")) == list("abc")
    parts = Parts(str(tmp_path), code="", conv=None, label="t", quiet=True, jobs=2, rank=0)
    held = _hold(tmp_path / ("unit-1-1" + _figure.CLAIM))  # another process works on b
    (tmp_path / ("unit-1-2" + _figure.DONE)).write_text("")  # and c is finished
    seen = []
    for u in parts.order("abcd"):
        seen.append(u)
        if u == "a":  # a unit is claimed while this process works on it
            with pytest.raises(BlockingIOError):
                _hold(tmp_path / ("unit-1-0" + _figure.CLAIM))
    os.close(held)
    assert seen == list("adbc")
    assert (tmp_path / ("unit-1-0" + _figure.DONE)).exists()
    os.close(_hold(tmp_path / ("unit-1-0" + _figure.CLAIM)))  # let go once done


def test_an_earlier_run_s_claims_and_marks_are_cleared_and_a_dead_holder_s_lock_is_gone(tmp_path):
    (tmp_path / ("x.npz" + _figure.CLAIM)).write_text("123")
    (tmp_path / ("unit-1-0" + _figure.DONE)).write_text("")
    parts = Parts(str(tmp_path), code="c", conv=None, label="t", quiet=True, jobs=2, rank=0)
    assert os.listdir(tmp_path) == []  # the main process owns the folder before its helpers start
    # a holder killed while it holds a part's lock, not reaped (a zombie, as a helper is until the
    # main process polls it): the kernel dropped its lock, so the part is computed here
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, os, sys, time\n"
        f"fd = os.open({str(tmp_path / ('y.npz' + _figure.CLAIM))!r}, os.O_CREAT | os.O_RDWR)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(600)")],
        stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    holder.kill()
    time.sleep(0.2)
    part, reused = parts.get("y", {"a": 2}, lambda: {"v": np.zeros(2)})
    assert not reused and part["v"].tolist() == [0.0, 0.0]
    holder.wait()


def test_a_part_claimed_by_a_live_process_is_waited_for_not_computed(tmp_path):
    import json
    import threading

    parts = Parts(str(tmp_path), code="c", conv=None, label="t", quiet=True, jobs=2, rank=0)
    held = _hold(tmp_path / ("z.npz" + _figure.CLAIM))
    key = json.dumps({"code": "c", "inputs": _figure._canonical({"a": 3})}, sort_keys=True)

    def holder_stores_it():  # as the holder does: store the part, then let go of the lock
        time.sleep(0.5)
        _figure.save_data(str(tmp_path / "z.npz"), {"v": np.ones(2), "seconds": 0.0}, key=key, convolution="None")
        os.close(held)

    t = threading.Thread(target=holder_stores_it)
    t.start()
    part, reused = parts.get("z", {"a": 3}, lambda: pytest.fail("computed a part another process holds"))
    t.join()
    assert reused and part["v"].tolist() == [1.0, 1.0]
    # a holder that lets go without storing (it failed): the part is computed here
    held = _hold(tmp_path / ("w.npz" + _figure.CLAIM))
    threading.Timer(0.3, os.close, [held]).start()
    part, reused = parts.get("w", {"a": 4}, lambda: {"v": np.full(2, 7.0)})
    assert not reused and part["v"].tolist() == [7.0, 7.0]


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
