"""FedStrag's time-bounded rounds (docs/theory.md §10.6): a polling server, FIFO client backlogs,
releases at broadcasts."""

from __future__ import annotations

import math

import numpy as np

from delaylab.sim.schedules.dispatch import _Jobs
from delaylab.sim.schedules.schedule import Schedule, _check_count, _versions_tagged
from delaylab.sim.schedules.timing import Timing, _job_key


def time_bounded_rounds(timing: Timing, *, num_rounds: int, poll: float = 4.0, min_results: int = 1,
                        description: str = "") -> Schedule:
    """FedStrag's time-bounded rounds (docs/theory.md §10.6, as in the authors' server and client).

    The server broadcasts model ``k`` (tag k) at ``T_k`` (``T_0 = 0``), then checks its queue
    every ``poll`` seconds; at the first check that finds at least ``min_results`` results queued
    it aggregates all of them, which makes model ``k + 1``, and broadcasts it at once. A client
    handles broadcasts first in, first out: its job on tag t starts at ``max(T_t, end of its job
    on t − 1)``, so a slow client builds a backlog and trains on ever older models.

    Events: every result, at its arrival, with ``tag`` = the broadcast it was trained from and
    ``round`` = the window that aggregates it (the last result of a window has ``round_end``);
    and, at each broadcast, a ``pull_only`` release for every client that was idle, waiting for
    it (tag: its last job's). The run ends with the ``num_rounds``-th aggregation. ``version`` is
    the number of results aggregated into the model a job was trained from, so ``staleness`` is
    the number of results aggregated since.

    Args:
      num_rounds: aggregations (≥ 1).
      poll: seconds between queue checks (> 0); the authors' code uses 4.
      min_results: results the queue must hold for a check to aggregate (1 ≤ m ≤ n; the code: 1).
    """
    n = timing.num_workers
    num_rounds = _check_count(num_rounds, "num_rounds")
    poll = float(poll)
    if not (math.isfinite(poll) and poll > 0):
        raise ValueError(f"poll must be a finite number of seconds > 0; got {poll!r}")
    if isinstance(min_results, bool) or int(min_results) != min_results or not (1 <= min_results <= n):
        raise ValueError(f"min_results must be an integer in [1, {n}] (the number of clients); got {min_results!r}")
    # A client's jobs are on broadcasts 0, 1, ..., each below num_rounds: that many jobs suffice.
    dur = timing.durations(num_rounds)
    if not np.all(np.isfinite(dur)):
        raise ValueError(f"num_rounds={num_rounds} exceeds the jobs the trace records for every worker")
    out = _time_bounded_events(timing, dur, num_rounds, poll, int(min_results))
    worker, start, finish, tag, window, pull, closes = (np.asarray(a) for a in out)
    return Schedule(
        worker=worker.astype(np.int32), start=start, finish=finish,
        version=_versions_tagged(tag, window, pull, ~pull),
        delivered=~pull, round=window.astype(np.int64), num_workers=n, policy="async",
        mean_durations=np.asarray(timing.mean_durations, dtype=np.float64).copy(),
        description=description or (f"time-bounded rounds (poll {poll:g} s, ≥ {min_results} result(s)), "
                                    f"{type(timing).__name__}, {num_rounds} rounds"),
        job_key=_job_key(timing), pull_only=pull, tag=tag.astype(np.int64),
        applied_at=np.where(pull, finish, closes[window - 1]))


def _time_bounded_events(timing, dur, num_rounds, poll, min_results):
    """The event lists of :func:`time_bounded_rounds`."""
    n = dur.shape[0]
    J = _Jobs(timing, dur)
    heap, began, job_tag = J.heap, J.began, J.label  # job_tag: the job in flight's

    def launch(i, t, tag):
        if not J.launch(i, t, tag):
            raise AssertionError("time_bounded_rounds: a client started more jobs than rounds")
    waiting: dict = {}  # clients idle until the next broadcast: worker -> since when
    ev = {k: [] for k in ("w", "s", "f", "tag", "win", "pull")}

    def record(i, s, f, tag, window, pull):
        for k, v in zip(ev, (i, s, f, tag, window, pull)):
            ev[k].append(v)

    for i in range(n):
        launch(i, 0.0, 0)
    k, T = 0, 0.0  # the latest broadcast and its time
    closes = []  # when each round closed
    while k < num_rounds:
        queued, check = 0, None
        while True:
            if check is None and queued >= min_results:
                # the first check at or after the arrival that filled the queue
                last = ev["f"][-1]
                check = T + poll * max(1, math.ceil((last - T) / poll - 1e-12))
            if not heap or (check is not None and heap[0][0] > check):
                break
            f, i = J.pop()
            record(i, began[i], f, job_tag[i], k + 1, False)
            queued += 1
            if job_tag[i] + 1 <= k:  # its backlog holds the next broadcast already
                launch(i, f, job_tag[i] + 1)
            else:
                waiting[i] = f
        if check is None:  # every client is busy or waits with a result queued, so m <= n are queued
            raise AssertionError("time_bounded_rounds: no check can close the round")
        k, T = k + 1, check
        closes.append(T)
        if k == num_rounds:
            break
        for i in sorted(waiting):  # releases, in worker order
            record(i, waiting[i], T, job_tag[i], k + 1, True)
            launch(i, T, k)
        waiting = {}
    return ev["w"], ev["s"], ev["f"], ev["tag"], ev["win"], ev["pull"], closes
