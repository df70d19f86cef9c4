"""Asynchronous dispatch through a server that takes time: each update travels to the server,
waits its turn, is applied one at a time, and the new model travels back before the worker's next
job (docs/theory.md §14).

The other dispatch policies apply a result the moment its job ends and hand the worker the new
model at once, so worker i's update rate is 1/τ_i. On real workers it is not: every update
queues at one server and crosses the network both ways, and a fixed cost per update lengthens a
short cycle proportionally more than a long one. :class:`Server` describes that cost;
:func:`served` turns a timing model and a server into a :class:`~sim.schedules.schedule.Schedule`,
computed on the host like every other schedule (the times never depend on the model's values).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from delaylab.sim.schedules.dispatch import _rounds
from delaylab.sim.schedules.schedule import Schedule, _check_count, _short, _versions_async, as_numbers
from delaylab.sim.schedules.timing import Timing, TraceTiming, _finish_time, _job_key

SERVICE_KINDS = ("fixed", "exponential", "lognormal")


@dataclasses.dataclass(frozen=True, eq=False)
class Server:
    """A parameter server that applies one update at a time, first come first served, and the
    links between it and the workers.

    Attributes:
      service: the mean time the server takes to apply one update (≥ 0).
      uplink, downlink: the time an update takes to reach the server, and the new model to reach
        the worker (≥ 0; one value, or one per worker). Fixed: a latency that varies belongs in
        the job times.
      kind: how service times vary: "fixed" (every update takes ``service``), "exponential"
        (mean ``service``: the case in which docs/theory.md §14's mean value analysis is exact)
        or "lognormal" (``service`` · exp(shape · Z − shape²/2), Z ~ N(0, 1), mean ``service``).
      shape: the lognormal's spread.
      seed: the service times' stream, ``numpy.random.default_rng((seed, SERVICE_STREAM))``, the
        e-th draw for the e-th update applied (independent of the timing model's streams, which
        are ``(seed, worker)``).
    """

    service: float
    uplink: object = 0.0
    downlink: object = 0.0
    kind: str = "fixed"
    shape: float = 1.0
    seed: int = 0

    def __post_init__(self):
        s = float(as_numbers(self.service, "service"))
        if not (math.isfinite(s) and s >= 0):
            raise ValueError(f"service must be a finite time >= 0; got {self.service!r}")
        object.__setattr__(self, "service", s)
        for name in ("uplink", "downlink"):
            v = as_numbers(getattr(self, name), name)
            if v.ndim > 1 or not np.all(np.isfinite(v)) or np.any(v < 0):
                raise ValueError(f"{name} must be a finite time >= 0, one value or one per worker; got {_short(v)}")
            object.__setattr__(self, name, v)
        if self.kind not in SERVICE_KINDS:
            raise ValueError(f"kind must be one of {SERVICE_KINDS}; got {self.kind!r}")
        if not (math.isfinite(self.shape) and self.shape > 0):
            raise ValueError(f"shape must be positive and finite; got {self.shape!r}")

    def links(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """(uplink, downlink) per worker, for n workers."""
        out = []
        for name in ("uplink", "downlink"):
            v = getattr(self, name)
            if v.ndim == 1 and v.shape[0] != n:
                raise ValueError(f"{name} has {v.shape[0]} entries for {n} workers; give one value or one per worker")
            out.append(np.broadcast_to(v, (n,)).astype(np.float64))
        return out[0], out[1]

    def service_times(self, count: int) -> np.ndarray:
        """The first ``count`` service times, in the order the updates are applied."""
        if self.kind == "fixed":
            return np.full(count, self.service)
        rng = np.random.default_rng((self.seed, SERVICE_STREAM))
        if self.kind == "exponential":
            return rng.exponential(1.0, count) * self.service
        z = rng.standard_normal(count)
        return self.service * np.exp(self.shape * z - 0.5 * self.shape**2)

    def describe(self) -> str:
        links = {name: f"{float(v):g}" if v.ndim == 0 else _short(v)
                 for name, v in (("uplink", self.uplink), ("downlink", self.downlink))}
        return f"FCFS server, {self.kind} service of mean {self.service:g}, uplink {links['uplink']}, downlink {links['downlink']}"


# The service times' stream id: (seed, SERVICE_STREAM) never equals a worker's (seed, i), since no
# schedule has 2**31 workers.
SERVICE_STREAM = 2**31


def _check_server(server) -> None:
    if not isinstance(server, Server):
        raise TypeError(f"server must be a sim.schedules.Server; got {type(server).__name__}")


def served(timing: Timing, server: Server, *, num_events: int, description: str = "") -> Schedule:
    """Asynchronous workers whose updates go through ``server``.

    Worker i starts its job k at s (every worker at 0 first); the job's computation ends at c =
    s + its duration (``timing``'s table; under time-varying speeds, when its work is done); the
    update reaches the server at a = c + uplink_i; the server applies updates one at a time in the
    order they reached it (ties: lower worker index first, as every schedule breaks ties), the e-th
    taking its service time S_e, from max(a, f_{e−1}) to f_e = max(a, f_{e−1}) + S_e; and the new
    model reaches the worker at f_e + downlink_i, when its job k + 1 starts.

    The schedule's events are the applications: ``finish`` is when the server has applied the
    update (the model's time), ``start`` when the worker started the job, and ``compute_finish``
    when its computation ended, so that ``sim.telemetry.worker_timing`` reads the time each update
    spent travelling, queueing and being applied. Each job starts from the model the server
    produced by applying the worker's previous update (asynchronous versions). With no latency
    and no service time this is :func:`~sim.schedules.dispatch.asynchronous` (its times summed
    job by job: equal where the sums are exact, such as integer durations).
    """
    num_events = _check_count(num_events, "num_events")
    _check_server(server)
    n = timing.num_workers
    up, down = server.links(n)
    service = server.service_times(num_events)
    jobs = max(8, int(math.ceil(2.0 * num_events / n)))
    if isinstance(timing, TraceTiming):
        jobs = max(len(d) for d in timing.table)
    while True:  # the duration table must outlast every worker's share of the events
        dur = timing.durations(jobs)
        out = _events(timing, dur, up, down, service, num_events)
        if out is not None:
            break
        if isinstance(timing, TraceTiming):
            raise ValueError(f"num_events={num_events} needs more jobs of some worker than the trace recorded; "
                             "ask for fewer events")
        jobs *= 2
    worker, start, compute, finish = out
    delivered = np.ones(num_events, dtype=bool)
    return Schedule(
        worker=worker, start=start, finish=finish, version=_versions_async(worker, delivered, n), delivered=delivered,
        round=np.full(num_events, -1, dtype=np.int64), num_workers=n, policy="async",
        mean_durations=np.asarray(timing.mean_durations, dtype=np.float64).copy(),
        description=description or f"async {type(timing).__name__} through a {server.describe()}, {num_events} events",
        compute_finish=compute, job_key=_job_key(timing), server=server)


def _events(timing, dur: np.ndarray, up: np.ndarray, down: np.ndarray, service: np.ndarray, num_events: int):
    """The event loop of :func:`served` (one pass per application; the next update applied is the
    earliest to reach the server, a worker having at most one update on its way or waiting).
    None where some worker needs more jobs than ``dur`` holds."""
    n, jobs = dur.shape
    k = np.zeros(n, np.int64)
    start = np.zeros(n)
    compute = np.array([_finish_time(timing, i, 0.0, dur[i, 0]) for i in range(n)])
    arrive = compute + up
    free = 0.0  # when the server finished its last update
    w_out = np.empty(num_events, np.int32)
    s_out, c_out, f_out = np.empty(num_events), np.empty(num_events), np.empty(num_events)
    for e in range(num_events):
        i = int(np.argmin(arrive))  # the first minimum: ties go to the lower worker index
        free = max(arrive[i], free) + service[e]
        w_out[e], s_out[e], c_out[e], f_out[e] = i, start[i], compute[i], free
        if e + 1 == num_events:
            break
        k[i] += 1
        if k[i] >= jobs or not np.isfinite(dur[i, k[i]]):  # a trace's worker out of recorded jobs: inf
            return None
        start[i] = free + down[i]
        compute[i] = _finish_time(timing, i, start[i], dur[i, k[i]])
        arrive[i] = compute[i] + up[i]
    return w_out, s_out, c_out, f_out


def served_rounds(timing: Timing, server: Server, *, num_rounds: int, description: str = "") -> Schedule:
    """Barrier rounds whose results go through ``server``: the synchronous counterpart of
    :func:`served` (minibatch SGD on real workers, ``sim.real`` in rounds).

    Round r: worker i receives the round's model at f_{r−1} + downlink_i (every worker at 0 in
    round 0), computes its job r until c_i (``timing``'s duration; under time-varying speeds, when
    its work is done), and its result reaches the server at a_i = c_i + uplink_i. The server
    applies the round once, when the last result is in, taking one service time S_r: f_r =
    max_i a_i + S_r. The round's events are its results in order of arrival (ties: lower worker
    index first); each has ``finish`` = f_r (when the round's model exists), ``start`` its job's
    start and ``compute_finish`` c_i. With no latency and no service time this is
    :func:`~sim.schedules.dispatch.barrier`.
    """
    num_rounds = _check_count(num_rounds, "num_rounds")
    _check_server(server)
    n = timing.num_workers
    up, down = server.links(n)
    service = server.service_times(num_rounds)
    dur = timing.durations(num_rounds)
    if not np.all(np.isfinite(dur)):
        raise ValueError(f"num_rounds={num_rounds} exceeds the rounds the trace records for every worker")
    worker_l, start_l, finish_l, compute_l = [], [], [], []
    free = 0.0
    for r in range(num_rounds):
        start = np.zeros(n) if r == 0 else free + down
        compute = np.array([_finish_time(timing, i, start[i], dur[i, r]) for i in range(n)])
        arrive = compute + up
        order = np.lexsort((np.arange(n), arrive))
        free = float(arrive.max()) + float(service[r])
        worker_l.append(order)
        start_l.append(start[order])
        compute_l.append(compute[order])
        finish_l.append(np.full(n, free))
    sched = _rounds(timing, worker_l, start_l, finish_l, None,
                    description or f"barrier {type(timing).__name__} through a {server.describe()}, {num_rounds} rounds",
                    compute_finish=compute_l)
    return dataclasses.replace(sched, server=server)


# --- a server model fitted to a real run's trace ------------------------------------------------

MIN_IDLE_UPDATES = 3  # a worker's uplink is its own mean over this many updates at an idle server, or more


@dataclasses.dataclass(frozen=True, eq=False)
class Fit:
    """A timing model and a server fitted to a real run's trace (:func:`fit`).

    Attributes:
      timing: each worker's job times, its shortest job plus an exponential tail of the measured
        mean's excess (so the mean is the measured one): a :class:`~sim.schedules.timing.RandomTiming`.
      server: the service times' measured mean and log-spread (lognormal; fixed where every
        service took the same time), and each worker's uplink and downlink.
      job_mean: each worker's measured mean job time; service: the measured service times.
    """

    timing: object
    server: Server
    job_mean: np.ndarray
    service: np.ndarray

    def schedule(self, num_events: int) -> Schedule:
        """A schedule of the fitted model (:func:`served`)."""
        return served(self.timing, self.server, num_events=num_events, description=f"server model fitted to a trace, "
                                                                                   f"{num_events} events")

    def rounds(self, num_rounds: int) -> Schedule:
        """Barrier rounds under the fitted model (:func:`served_rounds`), one service per round."""
        return served_rounds(self.timing, self.server, num_rounds=num_rounds,
                             description=f"barrier rounds under a server model fitted to a trace, {num_rounds} rounds")

    def think(self) -> np.ndarray:
        """Each worker's mean job time plus its links: the think times of docs/theory.md §14."""
        up, down = self.server.links(self.job_mean.size)
        return self.job_mean + up + down


def fit(trace, *, seed: int = 0) -> Fit:
    """Fit a server model to a real run's trace (``sim.real.RealResult.trace``, or the path of a
    trace file it wrote): per update the worker, when its job started and finished on the worker,
    when the server began applying it (``applied``) and had applied it (``served``).

    Job times: ``finish − start`` per worker. Service times: ``served − applied``. Uplink of worker
    i: the mean of ``applied − finish`` over its updates whose job ended after the server had
    finished the update before (so that none waited behind another at the server: what remains is
    the time in transit, including the driver's; pooled over the workers where a worker has fewer
    than MIN_IDLE_UPDATES such updates). Downlink: the mean time from ``served`` to the worker's
    next ``start``. The links are delays in the model: a driver that handles one update at a time
    queues them, which the model does not. ``seed`` seeds the fitted model's draws."""
    from delaylab.sim.schedules.timing import RandomTiming

    need = ("worker", "start", "finish", "applied", "served")
    if not isinstance(trace, dict):
        import csv
        import os

        with open(os.fspath(trace), newline="") as fh:
            rows = list(csv.DictReader(fh))
        trace = {c: np.asarray([float(r[c]) for r in rows]) for c in need if rows and c in rows[0]}
    missing = [c for c in need if c not in trace]
    if missing:
        raise ValueError(f"the trace lacks {missing}: a real run's trace records, per update, {list(need)} "
                         "(traces written before the server's end of service was recorded cannot be fitted)")
    w = np.asarray(trace["worker"], np.int64)
    start, finish, applied, done = (np.asarray(trace[c], np.float64) for c in need[1:])
    n = int(w.max()) + 1
    per = [np.flatnonzero(w == i) for i in range(n)]
    if any(len(ev) < 2 for ev in per):
        raise ValueError(f"every worker needs at least two updates in the trace to fit its links; counts "
                         f"{[len(ev) for ev in per]}")
    jobs = finish - start
    job_mean = np.array([jobs[ev].mean() for ev in per])
    shortest = np.array([jobs[ev].min() for ev in per])
    order = np.argsort(applied, kind="stable")  # the server's order
    idle = np.ones(w.size, bool)
    idle[order[1:]] = finish[order[1:]] >= done[order[:-1]]  # the update before was served when this job ended
    transit = applied - finish
    if not np.any(idle):
        raise ValueError("no update in the trace reached an idle server, so its uplink cannot be told from its wait")
    pooled = float(transit[idle].mean())
    up = np.array([max(0.0, float(transit[ev][idle[ev]].mean())) if np.sum(idle[ev]) >= MIN_IDLE_UPDATES
                   else max(0.0, pooled) for ev in per])
    down = np.array([max(0.0, float(np.mean(start[ev[1:]] - done[ev[:-1]]))) for ev in per])
    service = np.maximum(done - applied, 0.0)
    positive = service[service > 0]
    spread = float(np.std(np.log(positive))) if positive.size > 1 else 0.0
    kind = "lognormal" if spread > 0 else "fixed"
    server = Server(float(service.mean()), uplink=up, downlink=down, kind=kind, shape=spread if spread > 0 else 1.0,
                    seed=seed)
    timing = RandomTiming(shortest, noise="exponential", scale=job_mean - shortest, seed=seed)
    return Fit(timing, server, job_mean, service)
