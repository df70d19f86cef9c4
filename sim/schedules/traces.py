"""Schedules from recorded traces: a table of job durations (``worker,duration``), or a real run's
trace (:mod:`sim.real`), replayed in the server's own order."""

from __future__ import annotations

import csv
import math
import os

import numpy as np

from delaylab.sim.schedules.dispatch import asynchronous
from delaylab.sim.schedules.schedule import Schedule, _check_count, _versions_async, _versions_barrier
from delaylab.sim.schedules.timing import TraceTiming


def read_trace(path: str | os.PathLike) -> TraceTiming:
    """Read a CSV trace with columns ``worker`` and ``duration`` (one row per job, in order).

    Workers are numbered 0..n−1; every worker from 0 to the largest index must appear. Durations
    are finite and ≥ 0 (integer-tick traces record zero for jobs shorter than a tick).
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"trace file {path!r} does not exist; expected a CSV with columns worker,duration")
    with open(path, newline="") as fh:
        reader = csv.DictReader(fh)
        columns = reader.fieldnames or []
        missing = [c for c in ("worker", "duration") if c not in columns]
        if missing:
            raise ValueError(
                f"trace file {path!r} lacks column(s) {missing}; found {columns}, "
                "expected a CSV header with at least: worker,duration"
            )
        per_worker: dict[int, list[float]] = {}
        for line, row in enumerate(reader, start=2):
            try:
                w = int(row["worker"])
                d = float(row["duration"])
            except (TypeError, ValueError):
                raise ValueError(f"trace file {path!r}, line {line}: worker must be an integer and duration a number; got {row}") from None
            if w < 0:
                raise ValueError(f"trace file {path!r}, line {line}: worker must be >= 0; got {w}")
            if not (math.isfinite(d) and d >= 0):  # zero: a job shorter than the trace's clock tick
                raise ValueError(f"trace file {path!r}, line {line}: duration must be finite and >= 0; got {d}")
            per_worker.setdefault(w, []).append(d)
    if not per_worker:
        raise ValueError(f"trace file {path!r} has no rows; expected at least one job per worker")
    n = max(per_worker) + 1
    absent = [i for i in range(n) if i not in per_worker]
    if absent:
        raise ValueError(f"trace file {path!r} has no jobs for worker(s) {absent}; workers must be numbered 0..{n - 1}")
    return TraceTiming(tuple(np.asarray(per_worker[i]) for i in range(n)))


def from_trace(path: str | os.PathLike, *, num_events: int | None = None) -> Schedule:
    """A schedule from a recorded trace.

    Two kinds of trace:

    * durations only (columns ``worker,duration``, see :func:`read_trace`): asynchronous dispatch
      with those job durations. With ``num_events=None`` the schedule holds every event that
      finishes no later than the moment the first worker runs out of recorded jobs.
    * a real run's trace (:meth:`sim.real.RealResult.write_trace`: it has an ``applied`` column
      and a JSON file beside it): the server's own order, exactly. Event e is the e-th result the
      server applied, at time ``applied``; the job's start is ``start`` and its end on the worker
      ``finish`` (kept as ``compute_finish``). The schedule carries the run's base key as
      ``job_key``, so the engine keys job k of worker i as the real worker did; run it with
      ``sim.real.replay_key(path)``. ``num_events`` keeps the first that many. A run in barrier
      rounds (its ``round`` column ≥ 0: an algorithm with ``apply_round``) replays as a barrier
      schedule, each round's events in the order the results reached the driver, all at the time
      the server applied the round; a head must end a round.
    """
    path = os.fspath(path)
    if os.path.exists(path):
        with open(path, newline="") as fh:
            header = next(csv.reader(fh), [])
        if "applied" in header:
            return _from_real_trace(path, num_events)
    return asynchronous(read_trace(path), num_events=num_events, description=f"trace {path}")


def _from_real_trace(path: str, num_events: int | None) -> Schedule:
    import json

    meta_path = path + ".json"
    if not os.path.exists(meta_path):
        raise FileNotFoundError(f"{meta_path!r} does not exist: a real run's trace is the CSV and a JSON beside it")
    with open(meta_path) as fh:
        meta = json.load(fh)
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    if not rows:
        raise ValueError(f"trace file {path!r} has no events")
    need = ("event", "worker", "job", "start", "finish", "applied", "version", "delivered")
    missing = [c for c in need if c not in rows[0]]
    if missing:
        raise ValueError(f"trace file {path!r} lacks column(s) {missing}")
    if num_events is not None:
        rows = rows[: _check_count(num_events, "num_events")]
    col = lambda c, t: np.asarray([t(r[c]) for r in rows])  # noqa: E731
    event, worker, job = col("event", int), col("worker", int), col("job", int)
    if not np.array_equal(event, np.arange(len(rows))):
        raise ValueError(f"trace file {path!r}: events must be numbered 0, 1, 2, ... in the order applied")
    applied, start, finish = col("applied", float), col("start", float), col("finish", float)
    if np.any(np.diff(applied) < 0):
        raise ValueError(f"trace file {path!r}: 'applied' times must not decrease (they are the server's order)")
    n = int(meta["num_workers"])
    if worker.min() < 0 or worker.max() >= n:
        raise ValueError(f"trace file {path!r}: workers must be in 0..{n - 1}")
    delivered = col("delivered", int).astype(bool)
    recorded = col("version", int)
    rounds = col("round", int) if "round" in rows[0] else np.full(len(rows), -1)
    if np.any(rounds >= 0):
        version = _round_versions(path, worker, job, delivered, recorded, rounds, n)
        policy, what = "barrier", " (barrier rounds)"
    else:
        version = _versions_async(worker, delivered, n)
        if not np.array_equal(version, recorded):
            e = int(np.argmax(version != recorded))
            raise ValueError(f"trace file {path!r}, event {e}: the recorded server version {recorded[e]} is not the "
                             f"asynchronous one ({version[e]}): the trace is not of a server that hands each worker "
                             "the model right after applying its result")
        policy, what = "async", ""
    sched = Schedule(
        worker=worker.astype(np.int32), start=start, finish=applied, version=version, delivered=delivered,
        round=rounds.astype(np.int64), num_workers=n, policy=policy,
        mean_durations=np.array([np.mean((finish - start)[worker == i]) if np.any(worker == i) else np.nan
                                 for i in range(n)]),
        description=f"replay of the real run {path}{what}", compute_finish=finish,
        job_key=np.asarray(meta["base_key"], np.uint32))
    if not np.array_equal(sched.job_number, job):
        raise ValueError(f"trace file {path!r}: each worker's job numbers must run 0, 1, 2, ... in the order applied")
    return sched


def _round_versions(path, worker, job, delivered, recorded, rounds, n) -> np.ndarray:
    """The versions of a real run in barrier rounds (:func:`_from_real_trace`), checked: every
    worker once per round, rounds whole and in order, each job the worker's job of its round, and
    each recorded version the results applied before its round."""
    counts = np.bincount(rounds, minlength=int(rounds.max()) + 1) if np.all(rounds >= 0) else None
    if counts is None or np.any(np.diff(rounds) < 0) or np.any(counts != n):
        raise ValueError(f"trace file {path!r}: a run in rounds numbers them 0, 1, 2, ... in order, each with every one "
                         f"of the {n} workers once (a head must end a round)")
    if any(len(set(worker[rounds == r].tolist())) != n for r in range(counts.size)):
        raise ValueError(f"trace file {path!r}: each round must hold every worker once")
    version = _versions_barrier(rounds, delivered)
    if not np.array_equal(version, recorded):
        e = int(np.argmax(version != recorded))
        raise ValueError(f"trace file {path!r}, event {e}: the recorded version {recorded[e]} is not the number "
                         f"of results applied before its round ({version[e]})")
    if not np.array_equal(job, rounds):
        raise ValueError(f"trace file {path!r}: in a run in rounds, worker i's job r is its job of round r")
    return version
