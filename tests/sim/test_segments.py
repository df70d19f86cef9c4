"""Runs and sweeps in segments: the same bits as one call, interrupted and resumed from a
checkpoint with the same bits, refused against a different run, progress reported per segment."""

import io
import os

import jax
import numpy as np
import pytest

from delaylab import algos, sim
from delaylab.sim import checkpoint as ckpt
from delaylab.sim import schedules
from delaylab.sim.progress import Progress, ProgressBar


def _same(a, b) -> bool:
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    return len(la) == len(lb) and all(np.array_equal(np.asarray(x), np.asarray(y), equal_nan=True)
                                      for x, y in zip(la, lb))


def _fields(r):
    return (r.params, r.state, r.metrics, r.tail_average, r.worker_stats, r.diverged_at)


PROBLEM = sim.problems.random_quadratic(4, 6, condition=4.0, spread=2.0, noise=0.5, seed=3)
SCHEDULE = schedules.fixed_computation([1.0, 2.0, 3.0, 5.0], num_events=1203)  # ragged last chunk


@pytest.mark.parametrize("segment", [1, 7, 500])
def test_run_in_segments_equals_one_call(segment):
    alg, key = algos.asgd(stepsize=0.02), jax.random.key(5)
    one = sim.run(alg, PROBLEM, SCHEDULE, key=key)
    seg = sim.run(alg, PROBLEM, SCHEDULE, key=key, segment=segment)
    assert _same(_fields(one), _fields(seg))


def test_barrier_sweep_in_segments_equals_one_call():
    alg, keys = algos.asgd(stepsize=0.02), jax.random.split(jax.random.key(6), 3)
    sched = schedules.synchronous([1.0, 2.0, 3.0, 5.0], num_rounds=101)
    hp = {"stepsize": [0.01, 0.03]}
    one = sim.sweep(alg, PROBLEM, sched, keys=keys, hparams=hp)
    seg = sim.sweep(alg, PROBLEM, sched, keys=keys, hparams=hp, segment=9)
    assert _same(_fields(one), _fields(seg))


class _Stop(Exception):
    pass


def _stop_after(k):
    def callback(p: Progress):
        if p.segment == k:
            raise _Stop

    return callback


def test_interrupted_run_resumes_to_the_same_bits(tmp_path):
    alg, key = algos.async_local_sgd(stepsize=1.0, local_stepsize=0.01, local_steps=2, momentum=0.5, delay=2), jax.random.key(7)
    path = str(tmp_path / "run.npz")
    whole = sim.run(alg, PROBLEM, SCHEDULE, key=key, segment=10)
    with pytest.raises(_Stop):
        sim.run(alg, PROBLEM, SCHEDULE, key=key, segment=10, checkpoint=path, checkpoint_every=0,
                progress=_stop_after(4))
    seen = []
    resumed = sim.run(alg, PROBLEM, SCHEDULE, key=key, segment=10, checkpoint=path, progress=seen.append)
    assert seen[0].resumed_from == 4 and seen[0].segment == 5  # it did not start again
    assert seen[-1].segment == seen[-1].segments and seen[-1].events == SCHEDULE.num_events
    assert _same(_fields(whole), _fields(resumed))


def test_interrupted_sweep_resumes_to_the_same_bits(tmp_path):
    alg, keys = algos.asgd(stepsize=0.02), jax.random.split(jax.random.key(8), 3)
    hp = {"stepsize": [0.01, 0.02, 0.04]}
    path = str(tmp_path / "sweep.npz")
    whole = sim.sweep(alg, PROBLEM, SCHEDULE, keys=keys, hparams=hp, segment=25)
    with pytest.raises(_Stop):
        sim.sweep(alg, PROBLEM, SCHEDULE, keys=keys, hparams=hp, segment=25, checkpoint=path, checkpoint_every=0,
                  progress=_stop_after(2))
    assert ckpt.read_fingerprint(path)["plan"]["segment"] == 25
    resumed = sim.sweep(alg, PROBLEM, SCHEDULE, keys=keys, hparams=hp, segment=25, checkpoint=path)
    assert _same(_fields(whole), _fields(resumed))


def test_ctrl_c_keeps_the_segments_finished_since_the_last_checkpoint(tmp_path):
    alg, key = algos.asgd(stepsize=0.02), jax.random.key(11)
    path = str(tmp_path / "run.npz")

    def interrupt(p: Progress):
        if p.segment == 6:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):  # checkpoints every hour: none written before the interrupt
        sim.run(alg, PROBLEM, SCHEDULE, key=key, segment=10, checkpoint=path, checkpoint_every=3600, progress=interrupt)
    with np.load(path, allow_pickle=False) as f:
        assert int(f["done"]) == 6 and int(f["events"]) == 6 * 10 * 12
    resumed = sim.run(alg, PROBLEM, SCHEDULE, key=key, segment=10, checkpoint=path)
    assert _same(_fields(sim.run(alg, PROBLEM, SCHEDULE, key=key)), _fields(resumed))


def test_resume_against_another_run_is_refused_saying_what_differs(tmp_path):
    alg, key = algos.asgd(stepsize=0.02), jax.random.key(9)
    path = str(tmp_path / "run.npz")
    sim.run(alg, PROBLEM, SCHEDULE, key=key, checkpoint=path)
    other = schedules.fixed_computation([1.0, 2.0, 3.0, 6.0], num_events=1203)
    with pytest.raises(ckpt.CheckpointMismatch, match=r"schedule\.finish") as err:
        sim.run(alg, PROBLEM, other, key=key, checkpoint=path)
    assert "schedule.worker" not in str(err.value) or "schedule.finish" in str(err.value)
    with pytest.raises(ckpt.CheckpointMismatch, match=r"hyperparameters\.stepsize"):
        sim.run(alg, PROBLEM, SCHEDULE, key=key, hparams={"stepsize": 0.03}, checkpoint=path)
    with pytest.raises(ckpt.CheckpointMismatch, match=r"keys"):
        sim.run(alg, PROBLEM, SCHEDULE, key=jax.random.key(10), checkpoint=path)


def test_checkpoint_with_tampered_state_is_refused(tmp_path):
    alg, key = algos.asgd(stepsize=0.02), jax.random.key(9)
    path = str(tmp_path / "run.npz")
    sim.run(alg, PROBLEM, SCHEDULE, key=key, checkpoint=path)
    with np.load(path, allow_pickle=False) as f:
        files = {k: f[k] for k in f.files}
    files["carry/0"] = files["carry/0"][:-1]
    np.savez(path, **files)
    with pytest.raises(ckpt.CheckpointMismatch, match="carry/0"):
        sim.run(alg, PROBLEM, SCHEDULE, key=key, checkpoint=path)


def test_progress_reports_every_segment_in_order():
    seen = []
    sim.run(algos.asgd(stepsize=0.02), PROBLEM, SCHEDULE, key=jax.random.key(1), segment=30, progress=seen.append)
    assert [p.segment for p in seen] == list(range(1, len(seen) + 1))
    # 101 log chunks: 100 of 12 events in segments of 30, 30, 30, 10; then the short last one alone
    # (segments never mix chunks with and without padding)
    assert seen[-1].segments == len(seen) == 5
    assert [p.events for p in seen] == [360, 720, 1080, 1200, 1203]
    events = [p.events for p in seen]
    assert events == sorted(events) and events[-1] == SCHEDULE.num_events
    assert seen[-1].time == SCHEDULE.end_time and np.isfinite(seen[-1].loss)


def test_progress_bar_is_silent_for_short_runs_and_ends_on_a_full_line():
    def report(k, elapsed):
        return Progress(segment=k, segments=4, events=25 * k, num_events=100, time=2.5 * k, end_time=10.0, loss=0.25,
                        elapsed=elapsed, events_per_second=25 * k / elapsed)

    quiet = io.StringIO()
    ProgressBar(stream=quiet, after=60.0)(report(2, 12.0))
    assert quiet.getvalue() == ""
    out = io.StringIO()
    bar = ProgressBar(stream=out, after=0.0, every=0.0)
    for k in range(1, 5):
        bar(report(k, 3.0 * k))
    text = out.getvalue()
    assert text.endswith("\n") and text.count("\n") == 1  # one line, closed when the run ends
    last = text.rstrip("\n").split("\r")[-1]
    assert "100%" in last and "100/100" in last and "t 10/10, loss 0.25" in last



@pytest.mark.parametrize("kwargs, match", [
    ({"segment": 0}, "segment must be"),
    ({"segment": 2.5}, "segment must be"),
    ({"progress": "yes"}, "progress must be"),
    ({"checkpoint": 3}, "checkpoint must be a file path"),
    ({"checkpoint_every": -1.0}, "checkpoint_every"),
])
def test_bad_segment_options_are_refused_before_compiling(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        sim.run(algos.asgd(stepsize=0.02), PROBLEM, SCHEDULE, key=jax.random.key(1), **kwargs)


def test_checkpoint_file_is_plain_arrays(tmp_path):
    path = str(tmp_path / "run.npz")
    sim.run(algos.asgd(stepsize=0.02), PROBLEM, SCHEDULE, key=jax.random.key(2), checkpoint=path)
    with np.load(path, allow_pickle=False) as f:  # raises if anything needs unpickling
        assert all(f[k].dtype != object for k in f.files)
        # default: about 20 segments, ceil(101 / 20) = 6 chunks each: 17 for the first 100, 1 for the last
        assert int(f["done"]) == 18 and int(f["events"]) == SCHEDULE.num_events
        assert np.array_equal(f["key_data"], jax.random.key_data(jax.random.key(2)))
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".tmp")]


def test_a_finished_checkpoint_returns_the_same_result_without_running(tmp_path):
    alg, key = algos.asgd(stepsize=0.02), jax.random.key(12)
    path = str(tmp_path / "run.npz")
    first = sim.run(alg, PROBLEM, SCHEDULE, key=key, checkpoint=path)
    seen = []
    again = sim.run(alg, PROBLEM, SCHEDULE, key=key, checkpoint=path, progress=seen.append)
    assert seen == []  # nothing left to run
    assert _same(_fields(first), _fields(again))


@pytest.mark.parametrize("run_batch", [0, -2, 1.5, True])
def test_bad_run_batch_is_refused_before_compiling(run_batch):
    with pytest.raises(ValueError, match="run_batch must be a whole number of runs >= 1"):
        sim.sweep(algos.asgd(stepsize=0.02), PROBLEM, SCHEDULE, keys=jax.random.split(jax.random.key(1), 2),
                  run_batch=run_batch)


def test_a_probe_runs_the_first_segments_and_predicts_the_rest(tmp_path):
    """Under `driver.probing` (told to cut every run) a run stops after its first segments (here
    three: the run is too quick to reach the probe's execution time), returns results of the full run's shapes whose
    computed log points are the full run's bits (the last repeated to the end), counts its
    prediction with the compilation told apart, and writes no checkpoint; a run too short to cut
    runs whole, with the full run's bits."""
    from delaylab.sim import driver

    alg, key = algos.asgd(stepsize=0.02), jax.random.key(5)
    full = sim.run(alg, PROBLEM, SCHEDULE, key=key, log_every=10)  # 121 chunks
    with driver.probing(driver.Probe(pieces=40, steady=2, short=0.0)) as probe:  # short=0: always cut
        cut = sim.run(alg, PROBLEM, SCHEDULE, key=key, log_every=10, checkpoint=str(tmp_path / "c.npz"))
        short = sim.run(alg, PROBLEM, SCHEDULE, key=key, log_every=600)  # 3 chunks: 3 segments, all run
    assert not os.path.exists(tmp_path / "c.npz")
    assert (probe.runs, probe.cut) == (2, 1)
    assert 0 < probe.compiling < probe.predicted  # the programs were compiled inside the probe
    for k, v in full.metrics.items():
        assert np.shape(cut.metrics[k]) == np.shape(v), k
    # 3 segments of ceil(121 / 40) = 4 chunks ran: log points 0 … 12 are the full run's
    done = 1 + 3 * 4
    np.testing.assert_array_equal(cut.metrics["loss"][:done], full.metrics["loss"][:done])
    assert np.all(cut.metrics["loss"][done:] == cut.metrics["loss"][done - 1])
    assert not np.array_equal(cut.params, full.params)
    assert np.all(np.isfinite(cut.tail_average))  # the tail window was not reached: the last model stands in
    np.testing.assert_array_equal(cut.tail_average, cut.params)
    whole = sim.run(alg, PROBLEM, SCHEDULE, key=key, log_every=600)
    assert _same(_fields(short), _fields(whole))
    # by default a run whose rest would execute in under a second finishes in one more call: the
    # full run's bits, timed whole
    with driver.probing() as probe:
        quick = sim.run(alg, PROBLEM, SCHEDULE, key=key, log_every=10)
    assert (probe.runs, probe.cut) == (1, 0) and 0 < probe.predicted <= probe.spent
    assert _same(_fields(quick), _fields(full))
