"""`sim.sweep` across two processes on one machine (issue 25, part 6): each process calls
``jax.distributed.initialize`` and holds one CPU device; the sweep's runs are split over the two,
and both processes receive every result, equal bit for bit to a one-process sweep of the same runs
(``run_batch`` given). And when one process dies mid-sweep, the other does not hang: JAX's
coordination service ends it within its heartbeat timeout, its log naming the task that stopped."""

import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from tests.conftest import SUITE_XLA_FLAGS
from tests.delaylab.test_run_cli import ROOT, _env

pytestmark = pytest.mark.slow

WORKER = """
import sys, time
import numpy as np
import jax
pid, n, port, out, events, heartbeat = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6])
if n > 1:
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=n, process_id=pid,
                               initialization_timeout=60, heartbeat_timeout_seconds=heartbeat)
from delaylab import algos, sim
from delaylab.sim import problems, schedules
assert jax.device_count() == n and jax.local_device_count() == 1
prob = problems.random_quadratic(4, 6, seed=1, noise=0.3)
sched = schedules.fixed_computation(np.array([1.0, 2.0, 3.0, 4.0]), num_events=events)
keys = jax.random.split(jax.random.key(0), 8)
print("started", flush=True)
res = sim.sweep(algos.asgd(stepsize=0.05), prob, sched, keys=keys, hparams={"stepsize": np.array([0.02, 0.05])},
                run_batch=4, log_every=max(1, events // 4))
np.savez(out, loss=np.asarray(res.metrics["loss"]), params=np.asarray(res.params), tail=np.asarray(res.tail_average))
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(pid, n, port, out, events, heartbeat=10):
    # one CPU device per process (no emulated devices), compiled fast as the suite compiles
    env = {**_env(), "XLA_FLAGS": SUITE_XLA_FLAGS}
    return subprocess.Popen([sys.executable, "-c", WORKER, str(pid), str(n), str(port), str(out), str(events),
                             str(heartbeat)], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _finish(procs, timeout=120):
    try:
        return [p.communicate(timeout=timeout) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def test_two_processes_share_a_sweep_and_equal_one_process_bit_for_bit(tmp_path):
    port = _free_port()
    outs = [tmp_path / f"p{i}.npz" for i in range(2)]
    pair = [_start(i, 2, port, outs[i], 400) for i in range(2)]
    single = _start(0, 1, 0, tmp_path / "single.npz", 400)
    results = _finish(pair + [single])
    for p, (_, err) in zip(pair + [single], results):
        assert p.returncode == 0, err[-2000:]
    with np.load(tmp_path / "single.npz") as one:
        for out in outs:  # every process holds every run's result
            with np.load(out) as got:
                assert got["loss"].shape == (2, 8, 5)
                for k in one.files:
                    assert np.array_equal(got[k], one[k]), k


def test_a_dead_peer_ends_the_other_process_within_the_heartbeat_timeout(tmp_path):
    port = _free_port()
    # long enough that process 1 is killed mid-sweep; a heartbeat timeout of 4 s, not the 10 s of
    # the sharing test: the survivor computes until it notices, and the suite waits for it
    procs = [_start(i, 2, port, tmp_path / f"p{i}.npz", 3_000_000, heartbeat=4) for i in range(2)]
    try:
        deadline = time.monotonic() + 120
        seen = 0
        while seen < 2 and time.monotonic() < deadline:  # both initialised (the kill may land while one compiles)
            seen = sum(p.stdout.readline().strip() == "started" for p in procs if p.poll() is None)
            if any(p.poll() is not None for p in procs):
                break
        assert seen == 2 and all(p.poll() is None for p in procs), "the pair did not start"
        time.sleep(1.0)
        procs[1].send_signal(signal.SIGKILL)
        t0 = time.monotonic()
        _, err = procs[0].communicate(timeout=90)  # a hang fails here, not the suite's overall timeout
        waited = time.monotonic() - t0
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert procs[0].returncode != 0  # JAX's coordination service terminates it (SIGABRT)
    assert "stopped sending heartbeats" in err and "\n1\n" in err  # naming task 1, the lost peer
    assert waited < 60, f"took {waited:.0f} s to notice the lost peer"
    assert not os.path.exists(tmp_path / "p0.npz")
