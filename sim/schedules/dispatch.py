"""Dispatch policies: when each worker starts its jobs, hence the event sequence of a schedule.

Asynchronous (a worker restarts the moment it reports), barrier (synchronous rounds), backup
workers (rounds that close at the N-th of N + b results, cancelled or TensorFlow's
SyncReplicas drop-and-restart), rounds that close once every worker has one result (Malenia
SGD's "stop" reading), hierarchical group averaging, and stale synchronous parallel within
groups. FedStrag's time-bounded rounds are in :mod:`sim.schedules.time_bounded`; the
convenience constructors at the end of this module are the usual entry points.
"""

from __future__ import annotations

import math

import numpy as np

from delaylab.sim.schedules.schedule import Schedule, _check_count, _short, _versions_async, _versions_barrier
from delaylab.sim.schedules.timing import FixedTiming, RandomTiming, SlowdownTiming, Timing, TraceTiming, _advance, _finish_time, _job_key
from delaylab.theory.hierarchy import check_levels, check_warmup, sync_level


def asynchronous(timing: Timing, *, num_events: int | None, description: str = "") -> Schedule:
    """Asynchronous dispatch: each worker restarts the moment it reports.

    Worker i's finish times are then the cumulative sums of its own durations (exactly k·τ_i
    for fixed computation), independent of the others; the schedule is their merge, ordered by
    (finish time, worker index). ``num_events=None`` is allowed for a trace only: every event
    that ends no later than the moment the first worker runs out of recorded jobs.
    """
    n = timing.num_workers
    is_trace = isinstance(timing, TraceTiming)
    if num_events is not None or not is_trace:
        num_events = _check_count(num_events, "num_events")
    if is_trace:
        jobs = max(len(d) for d in timing.table)
    else:
        rate = 1.0 / timing.mean_durations
        jobs = int(math.ceil(num_events * rate.max() / rate.sum() * 1.25)) + 8
    while True:
        dur = timing.durations(jobs)
        if timing.exact_clock:
            ks = np.arange(1, jobs + 1, dtype=np.float64)
            finish = ks[None, :] * timing.mean_durations[:, None]  # closed form k·τ_i
            start = (ks - 1)[None, :] * timing.mean_durations[:, None]
        elif isinstance(timing, SlowdownTiming):
            work = np.cumsum(dur, axis=1)  # each worker starts at 0 and never waits
            finish = np.stack([timing.time_at(i, work[i]) for i in range(n)])
            start = np.concatenate([np.zeros((n, 1)), finish[:, :-1]], axis=1)
        else:
            with np.errstate(invalid="ignore"):
                finish = np.cumsum(dur, axis=1)
                start = finish - dur
        workers = np.broadcast_to(np.arange(n)[:, None], finish.shape)
        order = np.lexsort((workers.ravel(), finish.ravel()))
        if is_trace:
            # Past the first worker's last recorded job, later events would need unrecorded jobs.
            cut = min(float(np.sum(d)) for d in timing.table)
            available = int(np.sum(finish <= cut))
            if num_events is None:
                num_events = available
            elif num_events > available:
                raise ValueError(
                    f"num_events={num_events} exceeds what the trace supports: {available} events "
                    "end before its first worker runs out of recorded jobs"
                )
            order = order[:num_events]
            break
        order = order[:num_events]
        # Enough jobs per worker if every worker's last generated job ends after the cut-off.
        if np.all(finish[:, -1] > finish.ravel()[order[-1]]):
            break
        jobs *= 2
    worker = workers.ravel()[order].astype(np.int32)
    delivered = np.ones(num_events, dtype=bool)
    return Schedule(
        worker=worker,
        start=start.ravel()[order].copy(),
        finish=finish.ravel()[order].copy(),
        version=_versions_async(worker, delivered, n),
        delivered=delivered,
        round=np.full(num_events, -1, dtype=np.int64),
        num_workers=n,
        policy="async",
        mean_durations=np.asarray(timing.mean_durations, dtype=np.float64).copy(),
        description=description or f"async {type(timing).__name__}, {num_events} events",
        job_key=_job_key(timing),
    )


def barrier(timing: Timing, *, num_rounds: int, description: str = "") -> Schedule:
    """Synchronous rounds: all n workers start together; the round ends when the last reports.

    Round r starts at the previous round's last finish; its n events are ordered by (finish,
    worker). Every event of a round carries the same version (the server steps between rounds).
    """
    num_rounds = _check_count(num_rounds, "num_rounds")
    n = timing.num_workers
    dur = timing.durations(num_rounds)  # [n, R]: worker i's duration in round r
    if not np.all(np.isfinite(dur)):
        raise ValueError(f"num_rounds={num_rounds} exceeds the rounds the trace records for every worker")
    worker_l, start_l, finish_l = [], [], []
    t = 0.0
    for r in range(num_rounds):
        fin = _advance(timing, np.full(n, t), dur[:, r])
        order = np.lexsort((np.arange(n), fin))
        worker_l.append(order)
        start_l.append(np.full(n, t))
        finish_l.append(fin[order])
        t = float(fin.max())
    return _rounds(timing, worker_l, start_l, finish_l, None,
                   description or f"barrier {type(timing).__name__}, {num_rounds} rounds")


def _rounds(timing, worker_l, start_l, finish_l, delivered, description, compute_finish=None) -> Schedule:
    """A barrier-policy schedule from per-round lists of n events each (``delivered=None``: all)."""
    n = timing.num_workers
    rounds = np.repeat(np.arange(len(worker_l)), n).astype(np.int64)
    delivered = np.ones(rounds.shape[0], dtype=bool) if delivered is None else delivered
    return Schedule(
        worker=np.concatenate(worker_l).astype(np.int32),
        start=np.concatenate(start_l),
        finish=np.concatenate(finish_l),
        version=_versions_barrier(rounds, delivered),
        delivered=delivered,
        round=rounds,
        num_workers=n,
        policy="barrier",
        mean_durations=np.asarray(timing.mean_durations, dtype=np.float64).copy(),
        description=description,
        compute_finish=None if compute_finish is None else np.concatenate(compute_finish),
        job_key=_job_key(timing),
    )


def backup_workers(timing: Timing, *, num_rounds: int, backups: int, cancel_on_close: bool = True,
                   description: str = "") -> Schedule:
    """Synchronous rounds with ``backups`` backup workers (Chen et al. 2016; docs/theory.md §10.1).

    All n = N + b workers start round 0 on the same model; a round closes when its N-th result
    computed on the round's model arrives (N = n − ``backups``), in (finish, worker) order.

    ``cancel_on_close=True`` (an idealised variant, the default): the other b jobs are
    cancelled at the close (undelivered events finishing at the close) and every worker starts the
    next round together: a barrier schedule, for round-based algorithms (``algos.minibatch_sgd``).
    ``backups=0`` is :func:`barrier` exactly.

    ``cancel_on_close=False``: TensorFlow's ``SyncReplicasOptimizer`` (the same team's
    implementation). A straggler's job runs on; its result, computed on an older model, arrives
    and is dropped by the server, and the worker starts again at once on the current model, so it
    can be dropped and then accepted in the same round. A worker whose result was accepted waits
    for the round to close (it takes a token the chief issues at the close) and is released then:
    a ``pull_only`` event at the close. An asynchronous schedule; run it with
    ``algos.rennala_sgd(batch=N)``, whose rule (accept only results computed on the current round's
    model, step on the mean of the first N) is the chief's. ``num_rounds`` counts closes.
    """
    num_rounds = _check_count(num_rounds, "num_rounds")
    n = timing.num_workers
    b = int(backups)
    if backups != b or not (0 <= b < n):
        raise ValueError(f"backups must be an integer in [0, n) = [0, {n}) (at least one result per round); got {backups!r}")
    keep = n - b
    if not cancel_on_close:
        return _sync_replicas(timing, num_rounds, keep, description)
    dur = timing.durations(num_rounds)
    if not np.all(np.isfinite(dur)):
        raise ValueError(f"num_rounds={num_rounds} exceeds the rounds the trace records for every worker")
    worker_l, start_l, finish_l, deliv_l = [], [], [], []
    t = 0.0
    for r in range(num_rounds):
        fin = _advance(timing, np.full(n, t), dur[:, r])
        order = np.lexsort((np.arange(n), fin))
        close = float(fin[order[keep - 1]])
        late = np.sort(order[keep:])  # cancelled at the close, listed by worker index
        worker_l.append(np.concatenate([order[:keep], late]))
        start_l.append(np.full(n, t))
        finish_l.append(np.concatenate([fin[order[:keep]], np.full(b, close)]))
        deliv_l.append(np.arange(n) < keep)
        t = close
    return _rounds(timing, worker_l, start_l, finish_l, np.concatenate(deliv_l),
                   description or f"barrier with {b} backup worker(s) of {n}, {type(timing).__name__}, {num_rounds} rounds")


class _Jobs:
    """Jobs in flight for the event-by-event builders: ``launch(i, t, label)`` starts worker i's
    next job (the next column of ``dur``) at t; ``pop()`` gives the next to finish, (finish, i),
    ties to the lower worker index. False from ``launch``: ``dur`` has too few jobs."""

    def __init__(self, timing, dur: np.ndarray):
        import heapq

        self._heapq, self._timing, self._dur = heapq, timing, dur
        n = dur.shape[0]
        self.started = np.zeros(n, np.int64)  # jobs started (the column of ``dur`` used next)
        self.began = np.zeros(n)
        self.label = np.zeros(n, np.int64)  # the round or tag of the job in flight
        self.heap: list = []

    def launch(self, i: int, t: float, label: int) -> bool:
        if self.started[i] >= self._dur.shape[1]:
            return False
        self._heapq.heappush(self.heap, (_finish_time(self._timing, i, t, self._dur[i, self.started[i]]), i))
        self.started[i] += 1
        self.began[i], self.label[i] = t, label
        return True

    def pop(self) -> tuple:
        return self._heapq.heappop(self.heap)


def _sync_replicas(timing, num_rounds: int, keep: int, description: str) -> Schedule:
    """:func:`backup_workers` with ``cancel_on_close=False``."""
    n = timing.num_workers
    # Every job but the last in flight spans a close (an accepted one waits for it, a dropped one
    # crossed one), and nothing starts after the last close: num_rounds jobs per worker suffice.
    dur = timing.durations(num_rounds)
    if not np.all(np.isfinite(dur)):
        raise ValueError(f"num_rounds={num_rounds} exceeds the jobs the trace records for every worker")
    J = _Jobs(timing, dur)

    def launch(i, t, r):
        if not J.launch(i, t, r):
            raise AssertionError("backup_workers: a worker started more jobs than rounds")

    ev_w, ev_s, ev_f, ev_p = [], [], [], []
    for i in range(n):
        launch(i, 0.0, 0)
    r, accepted, waiting = 0, 0, {}
    while r < num_rounds:
        f, i = J.pop()
        ev_w.append(i), ev_s.append(J.began[i]), ev_f.append(f), ev_p.append(False)
        if J.label[i] == r:  # accepted
            accepted += 1
            if accepted < keep:
                waiting[i] = f
                continue
            r, accepted = r + 1, 0
            if r == num_rounds:
                break
            for j in sorted(waiting):  # the tokens of the close, in worker order
                ev_w.append(j), ev_s.append(waiting[j]), ev_f.append(f), ev_p.append(True)
                launch(j, f, r)
            waiting = {}
        launch(i, f, r)  # the closer, or a dropped straggler: at once, on the current model
    worker = np.asarray(ev_w, np.int32)
    pull = np.asarray(ev_p, bool)
    return Schedule(
        worker=worker, start=np.asarray(ev_s), finish=np.asarray(ev_f),
        version=_versions_async(worker, ~pull, n), delivered=~pull,
        round=np.full(worker.shape[0], -1, np.int64), num_workers=n, policy="async",
        mean_durations=np.asarray(timing.mean_durations, dtype=np.float64).copy(),
        description=description or (f"SyncReplicas: first {keep} of {n} results per round, stragglers dropped and "
                                    f"restarted, {type(timing).__name__}, {num_rounds} rounds"),
        job_key=_job_key(timing), pull_only=pull)


def every_worker_rounds(timing: Timing, *, num_rounds: int, description: str = "") -> Schedule:
    """Rounds that collect until every worker has one result, then cancel the rest: Malenia SGD's
    "stop" reading (docs/theory.md §7.5). All workers start round r together at its start on the
    round's model and work back to back; the round closes at the arrival that gives every worker
    at least one result computed on that model (ties by the lower worker index). At the close
    every other worker's job in flight is cancelled: a ``pull_only``, undelivered event at the
    close for each (``start``: when the cancelled job began), listed after the closer in worker
    order, and every worker starts the next round at the close.

    An asynchronous-policy schedule; run it with ``algos.malenia_sgd(batch=n)``, which then steps
    exactly once per round and discards nothing. ``num_rounds`` counts closes. Timing models whose
    durations come from the jobs' drawn examples (a ``job_key``) are refused: a cancelled job uses
    up its draw, which the engine's job numbering (completed jobs only) would not follow.
    """
    num_rounds = _check_count(num_rounds, "num_rounds")
    if _job_key(timing) is not None:
        raise ValueError("every_worker_rounds: durations drawn from the jobs' examples (a job_key) cannot be "
                         "cancelled consistently; use a timing model without one")
    n = timing.num_workers
    rate = 1.0 / np.asarray(timing.mean_durations, np.float64)
    # a round lasts about the slowest worker's job, in which worker i finishes about τ_max/τ_i jobs
    jobs = int(math.ceil(num_rounds * (rate.max() / rate.min() + 1) * 1.25)) + 8
    if isinstance(timing, TraceTiming):
        jobs = max(len(d) for d in timing.table)
    while True:
        dur = timing.durations(jobs)
        out = _every_worker_events(timing, dur, num_rounds)
        if out is not None:
            break
        if isinstance(timing, TraceTiming):
            raise ValueError(f"num_rounds={num_rounds} exceeds the jobs the trace records for some worker")
        jobs *= 2
    worker, start, finish, pull = (np.asarray(a) for a in out)
    worker = worker.astype(np.int32)
    return Schedule(
        worker=worker, start=start, finish=finish, version=_versions_async(worker, ~pull, n), delivered=~pull,
        round=np.full(worker.shape[0], -1, np.int64), num_workers=n, policy="async",
        mean_durations=np.asarray(timing.mean_durations, dtype=np.float64).copy(),
        description=description or (f"rounds until every worker has one result, the rest cancelled, "
                                    f"{type(timing).__name__}, {num_rounds} rounds"),
        job_key=None, pull_only=pull)


def _every_worker_events(timing, dur, num_rounds):
    """The event lists of :func:`every_worker_rounds`, or None if ``dur`` has too few jobs."""
    n = dur.shape[0]
    J = _Jobs(timing, dur)
    ev_w, ev_s, ev_f, ev_p = [], [], [], []
    t = 0.0
    for r in range(num_rounds):
        J.heap.clear()  # the cancelled jobs of the last round
        for i in range(n):
            if not J.launch(i, t, r):
                return None
        has = np.zeros(n, bool)
        while True:
            f, i = J.pop()
            if not math.isfinite(f):  # a trace's worker ran out of recorded jobs
                return None
            ev_w.append(i), ev_s.append(J.began[i]), ev_f.append(f), ev_p.append(False)
            has[i] = True
            if has.all():
                break
            if not J.launch(i, f, r):
                return None
        for j in range(n):  # the jobs in flight at the close, cancelled, in worker order
            if j != i:
                ev_w.append(j), ev_s.append(J.began[j]), ev_f.append(f), ev_p.append(True)
        t = f
    return ev_w, ev_s, ev_f, ev_p


def hierarchical(timing: Timing, *, num_steps: int, levels, warmup: int = 0, comm_time: float = 0.0,
                 description: str = "") -> Schedule:
    """Local steps with hierarchical group averaging (docs/theory.md §10.3; PyTorch's
    HierarchicalModelAverager): round k is every worker's k-th local step. After step k the
    groups of :func:`sync_level` (consecutive blocks of workers) average, a blocking collective:
    each member starts step k + 1 at the group's last end plus ``comm_time``. Groups that do not
    average that step do not wait for anyone, so a straggler stalls only its own group until the
    next longer-period average.

    Events of round k carry ``finish`` = the time every worker has ended step k (non-decreasing),
    ``start`` and ``compute_finish`` = each worker's own start and end.
    """
    num_steps = _check_count(num_steps, "num_steps")
    n = timing.num_workers
    lv = check_levels(levels, n)
    warmup = check_warmup(warmup)
    comm = float(comm_time)
    if not (math.isfinite(comm) and comm >= 0):
        raise ValueError(f"comm_time must be finite and >= 0; got {comm_time!r}")
    dur = timing.durations(num_steps)
    if not np.all(np.isfinite(dur)):
        raise ValueError(f"num_steps={num_steps} exceeds the jobs the trace records for every worker")
    begin = np.zeros(n)
    worker_l, start_l, finish_l, compute_l = [], [], [], []
    for k in range(num_steps):
        end = _advance(timing, begin, dur[:, k])
        order = np.lexsort((np.arange(n), end))
        worker_l.append(order)
        start_l.append(begin[order])
        compute_l.append(end[order])
        finish_l.append(np.full(n, end.max()))
        size = sync_level(k, lv, warmup)
        if size:
            group_end = end.reshape(n // size, size).max(axis=1)
            begin = np.repeat(group_end, size) + comm
        else:
            begin = end
    return _rounds(timing, worker_l, start_l, finish_l, None,
                   description or f"hierarchical local steps, levels {dict(lv)}, warm-up {warmup}, {num_steps} steps",
                   compute_finish=compute_l)


def stale_synchronous(timing: Timing, *, num_jobs: int, groups, bound: int | None, description: str = "") -> Schedule:
    """Stale synchronous parallel within groups (SSP; the intra-group rule of GSP/GSSP,
    docs/theory.md §10.4): a worker that has completed ``c_i`` iterations may start another only while
    ``c_i <= min_{j in its group} c_j + bound``; otherwise it waits, and it is released the moment
    the slowest of its group reports. ``bound=None``: no waiting (:func:`asynchronous`).

    A release is an event of its own: a ``pull_only``, undelivered event at the release time
    (``start`` = when the worker began to wait), so the released worker computes on the model as
    it is then, not as it was when it reported. Releases follow the report that caused them, in
    worker order. ``num_jobs`` counts the reports (the delivered events), not the releases.

    Args:
      groups: one group index per worker (workers of a group share the bound).
      bound: s ≥ 0, or None.
    """
    n = timing.num_workers
    num_jobs = _check_count(num_jobs, "num_jobs")
    group = np.asarray(groups)
    if group.shape != (n,) or not np.issubdtype(group.dtype, np.integer) or np.any(group < 0):
        raise ValueError(f"groups must give one group index (>= 0) per worker ({n}); got {groups!r}")
    if bound is not None and (isinstance(bound, bool) or int(bound) != bound or bound < 0):
        raise ValueError(f"bound must be an integer >= 0 or None (no waiting); got {bound!r}")
    members = {int(g): np.flatnonzero(group == g) for g in np.unique(group)}
    jobs = int(num_jobs) + 8
    while True:
        dur = timing.durations(jobs)
        if not np.all(np.isfinite(dur)):
            raise ValueError("the timing model ran out of recorded jobs")
        out = _ssp_events(timing, dur, group, members, bound, num_jobs)
        if out is not None:
            break
        jobs *= 2
    worker, start, finish, compute, pull = (np.asarray(a) for a in out)
    delivered = ~pull
    return Schedule(
        worker=worker.astype(np.int32), start=start, finish=finish,
        version=_versions_async(worker, delivered, n), delivered=delivered,
        round=np.full(worker.shape[0], -1, dtype=np.int64), num_workers=n, policy="async",
        mean_durations=np.asarray(timing.mean_durations, dtype=np.float64).copy(),
        description=description or f"SSP bound {bound} in {len(members)} group(s), {type(timing).__name__}, {num_jobs} jobs",
        compute_finish=compute, job_key=_job_key(timing), pull_only=pull)


def _ssp_events(timing, dur, group, members, bound, num_jobs):
    """The event lists of :func:`stale_synchronous`, or None if ``dur`` has too few jobs."""
    n = dur.shape[0]
    count = np.zeros(n, np.int64)  # completed iterations
    J = _Jobs(timing, dur)
    began = J.began
    waiting_since = np.full(n, np.nan)
    ev_w, ev_s, ev_f, ev_c, ev_p = [], [], [], [], []

    def launch(i, t):
        return J.launch(i, t, 0)

    for i in range(n):
        if not launch(i, 0.0):
            return None
    reports = 0
    while reports < num_jobs:
        t, i = J.pop()
        count[i] += 1
        reports += 1
        ev_w.append(i), ev_s.append(began[i]), ev_f.append(t), ev_c.append(t), ev_p.append(False)
        peers = members[int(group[i])]
        low = count[peers].min()
        if bound is None or count[i] <= low + bound:
            if not launch(i, t):
                return None
        else:
            waiting_since[i] = t
        for j in peers:  # releases, in worker order
            if j != i and not np.isnan(waiting_since[j]) and count[j] <= low + bound:
                ev_w.append(j), ev_s.append(waiting_since[j]), ev_f.append(t), ev_c.append(waiting_since[j])
                ev_p.append(True)
                waiting_since[j] = np.nan
                if not launch(j, t):
                    return None
    return ev_w, ev_s, ev_f, ev_c, ev_p


# --- convenience constructors (the public names) ----------------------------------------------


def fixed_computation(taus, *, num_events: int) -> Schedule:
    """Asynchronous workers with fixed computation times: worker i reports at τ_i, 2τ_i, ...

    Args:
      taus: τ_i > 0, one per worker.
      num_events: how many arrivals the schedule holds (≥ 1).
    """
    timing = FixedTiming(taus)
    return asynchronous(timing, num_events=num_events, description=f"fixed computation, τ={_short(timing.taus)}")


def random_durations(
    taus, *, num_events: int, noise: str = "exponential", scale=1.0, shape: float = 1.0, seed: int = 0
) -> Schedule:
    """Asynchronous workers whose every job takes τ_i + η (see :class:`RandomTiming`)."""
    timing = RandomTiming(taus, noise=noise, scale=scale, shape=shape, seed=seed)
    return asynchronous(
        timing,
        num_events=num_events,
        description=f"random durations τ+{noise}(scale), τ={_short(timing.taus)}, seed {seed}",
    )


def synchronous(taus, *, num_rounds: int, noise: str | None = None, scale=1.0, seed: int = 0) -> Schedule:
    """Barrier rounds with fixed (``noise=None``) or random per-job durations."""
    timing = FixedTiming(taus) if noise is None else RandomTiming(taus, noise=noise, scale=scale, seed=seed)
    return barrier(timing, num_rounds=num_rounds)
