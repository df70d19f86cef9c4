"""Real concurrent workers on a local Ray instance: the trace they record, replayed in the
simulator, gives the real run's final model (float32, 1e-6 relative); dead workers are reported
and the run ends cleanly."""

import csv
import os

import jax
import numpy as np
import pytest

from delaylab import algos, sim
from delaylab.sim import schedules

ray = pytest.importorskip("ray")
from delaylab.sim import real  # noqa: E402

pytestmark = pytest.mark.slow  # holds tests of 10 s or more: run first (tests/conftest.py)


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    yield
    ray.shutdown()


def _rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def _replay(alg, problem, res, tmp_path):
    path = res.write_trace(str(tmp_path / "trace.csv"))
    sched = schedules.from_trace(path)
    return sched, sim.run(alg, problem, sched, key=real.replay_key(path))


def _logistic_run(tmp_path):
    """A real run (it starts a process per worker and one for the server, each compiling its
    functions, so one test reads everything off it): logistic regression, 4 workers slowed by 0, 2,
    4 and 30 ms per job, worker 0 stalling before its job 10 and worker 2 dying at its job 6;
    staleness-aware ASGD, whose step reads the staleness the server saw. (Worker 3 sleeps 30 ms,
    well beyond the server's time per update, so that it delivers fewer updates than worker 1 even
    on a loaded machine: benchmarks/RESULTS.md, the suite's time.)"""
    problem = sim.problems.synthetic_logistic(4, 64, 5, heterogeneity=1.0, l2=0.05, batch_size=8, seed=2,
                                              dtype=np.float32)
    alg = algos.staleness_aware_asgd(stepsize=0.2)
    res = real.run(alg, problem, num_events=200, key=jax.random.key(11), log_every=4,
                   slowdown=real.Slowdown(sleep=(0.0, 0.002, 0.004, 0.03), stalls=((0, 10, 0.05),), deaths=((2, 6),)))
    sched, rep = _replay(alg, problem, res, tmp_path)
    return res, sched, rep


def test_real_runs_replay_exactly_end_when_every_worker_dies_and_draw_the_wallclock_figure(tmp_path, monkeypatch):
    """One test for everything that starts Ray, not a module-scoped fixture or several tests:
    pytest-xdist spreads a module's tests over its workers and runs such a fixture once per worker,
    so each would start Ray and its worker processes again (measured: three tests on two workers
    took 67 s of the suite, one after another in one process 22 s)."""
    res, sched, rep = _logistic_run(tmp_path)
    assert [w for w, _ in res.dead] == [2]  # reported
    assert res.num_events == 200  # the others carried on
    assert sorted(res.trace["job"][res.trace["worker"] == 2]) == list(range(6))  # jobs 0..5 delivered, 6 lost
    # the fast worker delivered more than the slow one: real asynchrony, not round robin
    counts = np.bincount(res.trace["worker"], minlength=4)
    assert counts[1] > counts[3]
    # every job's key is fold_in(fold_in(key, worker), job), the engine's keying for job_key schedules
    base = jax.random.key(11)
    for e in (0, 57, 199):
        k = jax.random.fold_in(jax.random.fold_in(base, int(res.trace["worker"][e])), int(res.trace["job"][e]))
        assert list(np.asarray(jax.random.key_data(k))) == [res.trace["key0"][e], res.trace["key1"][e]]
    assert sched.num_events == 200 and np.array_equal(sched.worker, res.trace["worker"])
    assert np.array_equal(sched.staleness, res.trace["staleness"])
    err = _rel(rep.params, res.params)
    print(f"logistic: replay vs real final model, relative difference {err:.2e} (tolerance 1e-6)")
    assert err <= 1e-6
    assert res.snapshot_time.shape[0] == res.snapshot_params.shape[0] == 51  # before the first, then every 4
    # the trace reads back as a table of job durations, per worker
    timing = schedules.read_trace(res.write_trace(str(tmp_path / "trace.csv")))
    assert [len(d) for d in timing.table] == np.bincount(res.trace["worker"], minlength=4).tolist()
    assert np.allclose(timing.table[3], res.trace["duration"][res.trace["worker"] == 3])

    # the processes that lived to the end wait for the next run: the server and workers 0, 1, 3
    assert len(real._POOL["idle"]) == 4

    # minibatch SGD (apply_round) in barrier rounds, on three of the idle processes (none to start),
    # worker 1 sleeping 20 ms: each round holds both workers' job r, arrivals in order (the slow
    # worker last), versions counting the results before the round; its replay (a barrier
    # schedule) ends at its model
    problem = sim.problems.synthetic_logistic(2, 32, 4, heterogeneity=1.0, l2=0.05, batch_size=8, seed=3,
                                              dtype=np.float32)
    alg = algos.minibatch_sgd(stepsize=0.3)
    res = real.run(alg, problem, num_events=16, key=jax.random.key(5), slowdown=real.Slowdown(sleep=(0.0, 0.02)))
    assert res.trace["round"].tolist() == np.repeat(np.arange(8), 2).tolist()
    assert res.trace["job"].tolist() == res.trace["round"].tolist() and res.trace["worker"].tolist() == [0, 1] * 8
    assert res.trace["version"].tolist() == np.repeat(np.arange(0, 16, 2), 2).tolist()
    assert np.all(res.trace["start"][2::2] >= res.trace["served"][1:-2:2])  # a round starts after the last was served
    sched, rep = _replay(alg, problem, res, tmp_path)
    assert sched.policy == "barrier" and sched.round_end.tolist() == [False, True] * 8
    err = _rel(rep.params, res.params)
    print(f"minibatch SGD in rounds: replay vs real final model, relative difference {err:.2e} (tolerance 1e-6)")
    assert np.linalg.norm(np.asarray(res.params) - np.asarray(problem.x0)) > 0 and err <= 1e-6
    assert len(real._POOL["idle"]) == 4  # its three came back

    # under a calibration (`delaylab figure --estimate`) a real run applies its first results only
    # (driver.real_cut: 4 per worker here, and 16 from each) and the rest is predicted at their pace after the first
    # cycle (driver.real_predict); runs in rounds are cut in whole rounds
    from delaylab.sim import driver

    with driver.probing() as probe:
        cut = real.run(algos.asgd(stepsize=0.05), problem, num_events=400, key=jax.random.key(6),
                       slowdown=real.Slowdown(sleep=(0.0, 0.002)))
        whole_rounds = real.run(alg, problem, num_events=60, key=jax.random.key(5))
    # the asynchronous run stops at the first result by which it has 10 and each worker 16
    w = cut.trace["worker"]
    enough = [e + 1 >= 10 and min(np.bincount(w[:e + 1], minlength=2)) >= 16 for e in range(cut.num_events)]
    assert enough[-1] and not any(enough[:-1])
    assert whole_rounds.num_events == 32 and whole_rounds.trace["round"].max() == 15  # 16 rounds
    assert probe.runs == 2 and probe.cut == 2
    paces = [(r.trace["served"][-1] - r.trace["served"][1]) / (r.num_events - 2) for r in (cut, whole_rounds)]
    assert probe.predicted - probe.spent == pytest.approx((400 - cut.num_events) * paces[0] + 28 * paces[1], rel=1e-9)
    assert len(real._POOL["idle"]) == 4


    # on the same Ray instance (a test of its own would start Ray again on another xdist worker): a
    # run ends cleanly when every worker dies, with what it had: jobs 0-2 of worker 0, 0-3 of worker 1
    # (under a calibration, which counts it whole: it ended on its own, before its cut)
    problem = sim.problems.random_quadratic(2, 3, seed=1, dtype=np.float32)
    with driver.probing() as probe:
        res = real.run(algos.asgd(stepsize=0.05), problem, num_events=100, key=jax.random.key(0),
                       slowdown=real.Slowdown(deaths=((0, 3), (1, 4))))
    assert probe.runs == 1 and probe.cut == 0 and probe.predicted == probe.spent
    assert sorted(w for w, _ in res.dead) == [0, 1]
    assert res.num_events == 7
    _, rep = _replay(algos.asgd(stepsize=0.05), problem, res, tmp_path)
    assert _rel(rep.params, res.params) <= 1e-6
    # it took three of the four idle processes (each set up anew for its role in this run), both
    # its workers died, its server and the fourth wait
    assert len(real._POOL["idle"]) == 2

    # one of the two idle processes ends while idle: the next run replaces it
    ray.kill(real._POOL["idle"][0])

    # `delaylab figure wallclock --quick`, on the same Ray instance: a real run, its replay and the
    # fitted fixed-computation model, in seconds; the replay ends at the real run's model
    from delaylab import cli

    out = tmp_path / "wc"
    assert cli.main(["figure", "wallclock", "--quick", "--out", str(out)]) == 0
    with open(out / "wallclock.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert {row["source"] for row in rows} == {"real", "replay", "fixed_model", "server_model"}
    real_rows = [r for r in rows if r["source"] == "real"]
    assert float(real_rows[-1]["loss"]) < float(real_rows[0]["loss"])  # the real run trained
    text = (out / "wallclock.txt").read_text()
    rel = float(text.split("relative difference ")[1].split(" ")[0])
    assert rel <= 1e-6  # the replay ends at the real run's model
    # the server model fitted to the trace (its runs' shares and time said in the text)
    assert "The server model fitted to the same trace" in text and "by the closed form" in text
    # the trace it wrote is the real run's: read back, a schedule of the quick preset's 300 events, which
    # the replay logged every 10 events (31 log points with the one at time 0)
    assert schedules.from_trace(str(out / "wallclock_trace.csv")).num_events == 300
    assert len([r for r in rows if r["source"] == "replay"]) == 31

    # `delaylab figure server-timing` on a tiny preset (3 workers, sleeps of 2–16 ms, two runs of 150
    # updates), on the same Ray instance: each run's shares and limits under the three timing models and the first half's shares
    # (fitted on the first half of its trace), and a redraw from the stored data gives the same text
    import dataclasses

    from delaylab.paper_figures import server_timing

    tiny = dataclasses.replace(server_timing.PRESETS["quick"], name="tiny", workers=(3,), scales=(0.002,), runs=2,
                               events=150)
    monkeypatch.setitem(server_timing.PRESETS, "tiny", tiny)
    out = tmp_path / "st"
    assert cli.main(["figure", "server-timing", "--preset", "tiny", "--out", str(out)]) == 0
    data = server_timing.FIGURE.load(str(out / "server_timing_tiny.npz"))
    for r in (0, 1):
        got = data["results"][(3, 0.002, r)]
        for k in ("real_share", "server_share", "links_share", "fixed_share", "previous_share", "simulated_share"):
            assert got[k].shape == (3,) and abs(float(got[k].sum()) - 1) < 1e-9, k
        assert got["fixed_share"][0] > got["fixed_share"][2]  # 1/τ̂: the fast worker first
        assert set(got["distance"]) == {"server", "links", "fixed", "own", "previous"} and got["bias"] > 0
        assert 0 < got["busy"] < 1
    text = (out / "server_timing_tiny.txt").read_text()
    assert "- n = 3, sleeps 2–16 ms" in text and "Share error: the first half's shares" in text and "sign test" in text
    (out / "server_timing_tiny.txt").unlink()
    assert cli.main(["figure", "server-timing", "--redraw", str(out / "server_timing_tiny.npz"), "--out", str(out)]) == 0
    assert (out / "server_timing_tiny.txt").read_text() == text
    assert real.release() == 5 and real._POOL["idle"] == []  # the five processes of the largest run ended


def test_bad_inputs_are_refused_before_anything_starts():
    problem = sim.problems.random_quadratic(2, 3, seed=1)
    with pytest.raises(ValueError, match="num_events must be a multiple of 2 .whole rounds.; got 9"):
        real.run(algos.minibatch_sgd(stepsize=0.1), problem, num_events=9, key=jax.random.key(0))
    with pytest.raises(ValueError, match="a round after an injected death would never end"):
        real.run(algos.minibatch_sgd(stepsize=0.1), problem, num_events=10, key=jax.random.key(0),
                 slowdown=real.Slowdown(deaths=((0, 3),)))
    with pytest.raises(ValueError, match="Slowdown.sleep needs 2 entries"):
        real.run(algos.asgd(stepsize=0.1), problem, num_events=10, key=jax.random.key(0),
                 slowdown=real.Slowdown(sleep=(0.1,)))
    with pytest.raises(ValueError, match="num_events"):
        real.run(algos.asgd(stepsize=0.1), problem, num_events=0, key=jax.random.key(0))


def _write_trace(path, rows) -> str:
    """A real run's trace of 2 workers, written by hand: the CSV and the JSON beside it."""
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    with open(str(path) + ".json", "w") as fh:
        fh.write('{"num_workers": 2, "base_key": [0, 1], "key_impl": "threefry2x32"}')
    return str(path)


def test_a_trace_whose_versions_are_not_asynchronous_is_refused(tmp_path):
    path = tmp_path / "t.csv"
    rows = [dict(event=0, worker=0, job=0, start=0.0, finish=0.1, applied=0.1, version=0, staleness=0, delivered=1, key0=0, key1=0),
            dict(event=1, worker=1, job=0, start=0.0, finish=0.2, applied=0.2, version=1, staleness=0, delivered=1, key0=0, key1=0)]
    _write_trace(path, rows)
    with pytest.raises(ValueError, match="event 1: the recorded server version 1 is not the asynchronous one"):
        schedules.from_trace(str(path))
    os.remove(str(path) + ".json")
    with pytest.raises(FileNotFoundError, match="JSON beside it"):
        schedules.from_trace(str(path))


def test_a_trace_in_rounds_must_hold_whole_rounds_of_every_worker(tmp_path):
    def write(rows):
        return _write_trace(tmp_path / "r.csv", rows)

    def row(e, w, r, version):
        return dict(event=e, worker=w, job=r, start=0.0, finish=0.1, applied=0.2 * (r + 1), version=version,
                    staleness=0, delivered=1, round=r, key0=0, key1=0)

    good = [row(0, 1, 0, 0), row(1, 0, 0, 0), row(2, 0, 1, 2), row(3, 1, 1, 2)]
    sched = schedules.from_trace(write(good))
    assert sched.policy == "barrier" and sched.worker.tolist() == [1, 0, 0, 1] and sched.version.tolist() == [0, 0, 2, 2]
    with pytest.raises(ValueError, match="a head must end a round"):
        schedules.from_trace(write(good[:3]))
    with pytest.raises(ValueError, match="each round must hold every worker once"):
        schedules.from_trace(write(good[:2] + [row(2, 0, 1, 2), row(3, 0, 1, 2)]))
    with pytest.raises(ValueError, match="event 2: the recorded version 1 is not the number of results applied"):
        schedules.from_trace(write(good[:2] + [row(2, 0, 1, 1), row(3, 1, 1, 1)]))
