"""Real asynchrony: the same algorithms on real concurrent workers, traced, and replayed exactly.

:func:`run` starts a parameter-server actor and n worker actors on Ray (``pip install
delaylab[ray]``) and runs an asynchronous algorithm (one with ``apply``) on a problem, with the
same pure functions the simulator uses and optional injected slowdowns (:class:`Slowdown`); an
algorithm in rounds (``apply_round``, such as minibatch SGD) runs in barrier rounds.

The run records a trace (:meth:`RealResult.write_trace`). :func:`sim.schedules.from_trace` turns
it into a schedule with the server's order, and ``sim.run(alg, problem, schedule,
key=replay_key(path))`` recomputes the same run in the simulator: same order, same keys, same
functions, so the same final model up to floating-point rounding (XLA may fuse the simulator's
program differently).

Clocks: times are ``time.time()`` differences from the run's start, read by each process; on one
machine they share one clock, across machines they are only as good as the machines' clock sync.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from typing import Any, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from delaylab.algos.base import Algorithm, Event, check_protocol

# "duration" (finish − start) makes the trace readable by sim.schedules.read_trace as well, as a
# table of job durations (for timing models fitted to a real run)
TRACE_COLUMNS = ("event", "worker", "job", "start", "finish", "duration", "applied", "served", "version", "staleness",
                 "delivered", "round", "key0", "key1")


@dataclasses.dataclass(frozen=True)
class Slowdown:
    """Injected slowness and failures.

    sleep: seconds added to every job of each worker (one entry per worker), after its computation.
    stalls: (worker, job, seconds): before job ``job``, worker ``worker`` stalls for ``seconds``.
    deaths: (worker, job): the worker's process exits while computing job ``job`` (its result is
      lost, and it takes no further jobs).
    """

    sleep: Sequence[float] = ()
    stalls: Sequence[tuple] = ()
    deaths: Sequence[tuple] = ()

    def check(self, n: int) -> None:
        if self.sleep and (len(self.sleep) != n or any(not (s >= 0) for s in self.sleep)):
            raise ValueError(f"Slowdown.sleep needs {n} entries >= 0 (seconds per job, one per worker); got {self.sleep!r}")
        for entry in self.stalls:
            if len(entry) != 3 or not (0 <= int(entry[0]) < n) or int(entry[1]) < 0 or not (float(entry[2]) >= 0):
                raise ValueError(f"Slowdown.stalls: each entry is (worker in 0..{n - 1}, job >= 0, seconds >= 0); got {entry!r}")
        for entry in self.deaths:
            if len(entry) != 2 or not (0 <= int(entry[0]) < n) or int(entry[1]) < 0:
                raise ValueError(f"Slowdown.deaths: each entry is (worker in 0..{n - 1}, job >= 0); got {entry!r}")


@dataclasses.dataclass(frozen=True, eq=False)
class RealResult:
    """What a real run returns.

    Attributes:
      params: the server's final model; state: its final state.
      trace: per applied result, arrays named as :data:`TRACE_COLUMNS` (times in seconds since the
        clock started, after every actor compiled).
      dead: (worker, seconds since the start) of every worker whose process died.
      snapshot_time, snapshot_params: the server model after every ``log_every`` applied results
        (and before the first), with the time the server applied the last of them.
      wall_seconds: from the first job's dispatch to the last result's application.
      base_key: the raw data of the run's key; key_impl: its PRNG implementation.
      num_workers: n.
    """

    params: Any
    state: Any
    trace: dict
    dead: list
    snapshot_time: np.ndarray
    snapshot_params: Any
    wall_seconds: float
    base_key: np.ndarray
    key_impl: str
    num_workers: int
    algorithm: str

    @property
    def num_events(self) -> int:
        return int(self.trace["event"].shape[0])

    def write_trace(self, path: str) -> str:
        """The trace as CSV at ``path`` and its metadata as ``path + '.json'``; returns ``path``.

        Per applied result: the worker, its job number, when the job started and finished on the
        worker, when the server began applying it (``applied``) and had applied it (``served``),
        the server version the job started from, its staleness
        and the job's key; the JSON file holds the run's base key and its dead workers."""
        from delaylab.sim import store

        store.write_csv(path, [{c: self.trace[c][e].item() for c in TRACE_COLUMNS} for e in range(self.num_events)],
                        fieldnames=TRACE_COLUMNS)
        store.write_json(path + ".json", {
            "format": "delaylab real-run trace 1", "algorithm": self.algorithm, "num_workers": self.num_workers,
            "base_key": [int(v) for v in self.base_key], "key_impl": self.key_impl,
            "dead": [{"worker": int(w_), "time": float(t)} for w_, t in self.dead],
            "wall_seconds": self.wall_seconds, "columns": list(TRACE_COLUMNS)})
        return path


def replay_key(path: str):
    """The key a replay of the traced real run at ``path`` must use: the run's base key, read from
    the trace's JSON file."""
    meta = read_trace_meta(path)
    return jax.random.wrap_key_data(jnp.asarray(meta["base_key"], jnp.uint32), impl=meta["key_impl"])


def read_trace_meta(path: str) -> dict:
    meta_path = os.fspath(path) + ".json"
    if not os.path.exists(meta_path):
        raise FileNotFoundError(f"{meta_path!r} does not exist: a real run's trace is a CSV and a JSON beside it "
                                "(RealResult.write_trace writes both)")
    with open(meta_path) as fh:
        return json.load(fh)


# --- the actors (plain classes here; wrapped with ray.remote in run) ---------------------------


def _time_dtype():
    return jnp.asarray(0.0).dtype  # float64 with x64, as the engine's event times


class _Worker:
    def __init__(self, worker: int, job, fns, data, hparams, base_key, key_impl: str, x64: bool,
                 sleep: float, stalls: dict, death: Optional[int]):
        jax.config.update("jax_enable_x64", x64)
        from delaylab.sim.engine import WorkerOracle

        self.worker, self.sleep, self.stalls, self.death = worker, sleep, stalls, death
        self.hparams = hparams
        self.base = jax.random.wrap_key_data(jnp.asarray(base_key, jnp.uint32), impl=key_impl)

        def one_job(hparams, point, worker, base, k):
            key = jax.random.fold_in(jax.random.fold_in(base, worker), k)
            return job(hparams, point, WorkerOracle(fns, data, worker), key), jax.random.key_data(key)

        self._job = jax.jit(one_job)

    def _run(self, point, k: int):
        with jax.threefry_partitionable(True):  # the engine's random stream
            return jax.block_until_ready(self._job(self.hparams, point, jnp.asarray(self.worker, jnp.int32), self.base,
                                                   jnp.asarray(k, jnp.int32)))

    def warm(self, point) -> None:
        """Compile the job, key derivation included (before the clock starts)."""
        self._run(point, 0)

    def job(self, point, k: int, t0: float):
        if k in self.stalls:
            time.sleep(self.stalls[k])
        start = time.time() - t0
        if self.death is not None and k >= self.death:
            os._exit(1)  # an injected failure: the process dies mid-job
        msg, key_data = self._run(point, k)
        if self.sleep:
            time.sleep(self.sleep)
        finish = time.time() - t0
        return jax.tree.map(np.asarray, msg), start, finish, np.asarray(key_data)


class _Server:
    def __init__(self, alg_fns: tuple, hparams, x0, n: int, x64: bool, log_every: int):
        jax.config.update("jax_enable_x64", x64)
        worker, server = alg_fns
        params_of = server.params
        self.hparams, self.n, self.log_every = hparams, n, log_every
        self.state = server.init(hparams, x0, n)
        self.params_of = params_of
        self._start = worker.start(hparams, x0)
        self._apply = None if server.apply is None else jax.jit(server.apply)
        self._apply_round = None if server.apply_round is None else jax.jit(server.apply_round)
        self.version = 0
        self.handed = np.zeros(n, np.int64)
        self.snapshots = [(0.0, jax.tree.map(np.asarray, params_of(self.state)))]

    def start_point(self):
        return jax.tree.map(np.asarray, self._start)

    @staticmethod
    def _event(e: int, worker: int, applied: float, staleness: int) -> Event:
        return Event(index=jnp.asarray(e, jnp.int32), worker=jnp.asarray(worker, jnp.int32),
                     time=jnp.asarray(applied, _time_dtype()), staleness=jnp.asarray(staleness, jnp.int32),
                     delivered=jnp.asarray(True), tag=jnp.asarray(0, jnp.int32), round_end=jnp.asarray(False))

    def _round_events(self, e0: int, workers: Sequence[int], applied: float) -> Event:
        """The events of one barrier round, its slots in arrival order (the last ends the round)."""
        m = len(workers)
        return Event(index=jnp.arange(e0, e0 + m, dtype=jnp.int32), worker=jnp.asarray(workers, jnp.int32),
                     time=jnp.full((m,), applied, _time_dtype()), staleness=jnp.zeros((m,), jnp.int32),
                     delivered=jnp.ones((m,), bool), tag=jnp.zeros((m,), jnp.int32),
                     round_end=jnp.arange(m) == m - 1)

    def warm(self, msg) -> None:
        """Compile ``apply`` (or ``apply_round`` on a round of n slots) on a message of the right
        shape (its result is discarded)."""
        with jax.threefry_partitionable(True):
            if self._apply is not None:
                jax.block_until_ready(self._apply(self.hparams, self.state, msg, self._event(0, 0, 0.0, 0)))
            else:
                msgs = jax.tree.map(lambda a: np.stack([a] * self.n), msg)
                jax.block_until_ready(self._apply_round(self.hparams, self.state, msgs,
                                                        self._round_events(0, list(range(self.n)), 0.0),
                                                        jnp.ones((self.n,), bool)))

    def apply(self, worker: int, msg, k: int, start: float, finish: float, key_data, t0: float):
        applied = time.time() - t0
        e = self.version
        version = int(self.handed[worker])  # the server version the job started from
        staleness = e - version
        event = self._event(e, worker, applied, staleness)
        with jax.threefry_partitionable(True):
            self.state, point, _ = self._apply(self.hparams, self.state, msg, event)
            point = jax.tree.map(np.asarray, point)
        self.version += 1
        self.handed[worker] = self.version
        if self.version % self.log_every == 0:
            self.snapshots.append((applied, jax.tree.map(np.asarray, self.params_of(self.state))))
        # the end of the service: everything the server does for this update is done (only the
        # return of the new model, to the worker, is left)
        served = time.time() - t0
        row = {"event": e, "worker": worker, "job": k, "start": start, "finish": finish, "applied": applied, "served": served,
               "version": version, "staleness": staleness,
               "delivered": 1, "round": -1, "key0": int(key_data[0]), "key1": int(key_data[1])}
        return point, row

    def apply_round(self, arrivals: list, r: int, t0: float):
        """Apply barrier round ``r``: ``arrivals`` holds every worker's (worker, message, job,
        start, finish, key data) in the order the results reached the driver, which is the order
        of the round's slots. Returns the next point of each slot's worker and the trace rows."""
        applied = time.time() - t0
        e0, workers = self.version, [a[0] for a in arrivals]
        msgs = jax.tree.map(lambda *m: np.stack(m), *[a[1] for a in arrivals])
        with jax.threefry_partitionable(True):
            self.state, points, _ = self._apply_round(self.hparams, self.state, msgs,
                                                      self._round_events(e0, workers, applied),
                                                      jnp.ones((len(arrivals),), bool))
            points = jax.tree.map(np.asarray, points)
        self.version += len(arrivals)
        if self.version // self.log_every > e0 // self.log_every:  # a snapshot per log_every results, at round ends
            self.snapshots.append((applied, jax.tree.map(np.asarray, self.params_of(self.state))))
        served = time.time() - t0
        rows = [{"event": e0 + j, "worker": w, "job": k, "start": start, "finish": finish, "applied": applied,
                 "served": served, "version": e0, "staleness": 0, "delivered": 1, "round": r,
                 "key0": int(key[0]), "key1": int(key[1])}
                for j, (w, _, k, start, finish, key) in enumerate(arrivals)]
        return (rows, *[jax.tree.map(lambda a, j=j: a[j], points) for j in range(len(arrivals))])

    def final(self):
        return (jax.tree.map(np.asarray, self.params_of(self.state)), jax.tree.map(np.asarray, self.state),
                self.snapshots)


class _Host:
    """One actor process that serves a run as a worker (:meth:`as_worker`) or as the server
    (:meth:`as_server`), and is kept idle for the next run in the same Ray session (:func:`run`'s
    pool): starting an actor process costs seconds (it imports JAX and delaylab), a new role only
    its compilation."""

    def __init__(self):
        self.role = None

    def as_worker(self, *args) -> None:
        self.role = _Worker(*args)

    def as_server(self, *args) -> None:
        self.role = _Server(*args)

    def clear(self) -> None:
        """Drop the last run's role: its data, state and compiled programs."""
        self.role = None
        jax.clear_caches()

    def warm(self, arg) -> None:
        self.role.warm(arg)

    def job(self, point, k: int, t0: float):
        return self.role.job(point, k, t0)

    def start_point(self):
        return self.role.start_point()

    def apply(self, *args):
        return self.role.apply(*args)

    def apply_round(self, *args):
        return self.role.apply_round(*args)

    def final(self):
        return self.role.final()


# Idle hosts of the Ray session they were started in (``ray.get_runtime_context().get_job_id()``,
# new at every ``ray.init``): a later run in the same session takes them before starting new ones.
_POOL: dict = {"session": None, "idle": []}


def _session(ray) -> str:
    return ray.get_runtime_context().get_job_id()


def _hosts(ray, roles: list) -> list:
    """One host per ``(method, args)`` in ``roles``, configured by ``host.method(*args)``: idle
    hosts of this session first (one that died while idle is replaced), then new ones."""
    if _POOL["session"] != _session(ray):
        _POOL.update(session=_session(ray), idle=[])
    Host = ray.remote(num_cpus=0, max_restarts=0)(_Host)
    out = [None] * len(roles)
    todo = list(range(len(roles)))
    try:
        while todo:  # every host starts and sets up at once; one that died while idle is replaced
            calls = {}
            for r in todo:
                pooled = bool(_POOL["idle"])
                out[r] = _POOL["idle"].pop() if pooled else Host.remote()
                method, args = roles[r]
                calls[r] = (getattr(out[r], method).remote(*args), pooled)
            todo = []
            for r, (call, pooled) in calls.items():
                try:
                    ray.get(call)
                except ray.exceptions.RayActorError:
                    if not pooled:
                        raise  # a new process that could not start: nothing to fall back on
                    out[r] = None
                    todo.append(r)
    except BaseException:
        for h in out:
            if h is not None:
                ray.kill(h)
        raise
    return out


def release() -> int:
    """End the idle actor processes that :func:`run` keeps for later runs in this Ray session;
    returns how many. (``ray.shutdown()`` ends them too.)"""
    import ray

    idle, _POOL["idle"] = _POOL["idle"], []
    if ray.is_initialized() and _POOL["session"] == _session(ray):
        for h in idle:
            ray.kill(h)
    return len(idle)


# --- the driver ---------------------------------------------------------------------------------


def _next_result(ray, pending: dict, timeout: float, late: str) -> tuple:
    """The next job result to reach the driver: (worker, job, result), the result None where the
    worker's process died; ``pending`` maps each job's reference to (worker, job) and loses it.
    Raises TimeoutError(``late``) when none arrives within ``timeout`` seconds."""
    ready, _ = ray.wait(list(pending), num_returns=1, timeout=timeout)
    if not ready:
        raise TimeoutError(late)
    i, k = pending.pop(ready[0])
    try:
        return i, k, ray.get(ready[0])
    except (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError):
        return i, k, None


def run(alg: Algorithm, problem, *, num_events: int, key, hparams: Optional[dict] = None,
        slowdown: Optional[Slowdown] = None, log_every: Optional[int] = None, address: Optional[str] = None,
        timeout: float = 600.0) -> RealResult:
    """Run ``alg`` on ``problem`` with real concurrent workers (Ray actors, one per worker;
    ``ray.init()`` on this machine unless Ray is already initialised or an ``address`` is given):

    * worker i computes job k with ``alg.worker.job`` (the same pure function the simulator batches) at the
      point the server last handed it, with the key ``fold_in(fold_in(key, i), k)``, the keying the
      engine uses for schedules that carry a ``job_key``;
    * the driver passes each result to the server the moment it arrives (``ray.wait``), in arrival
      order; the server applies ``alg.server.apply`` (the same function again) and hands the worker its next
      point, which goes straight to the worker's next job;
    * a synchronous algorithm (one with ``apply_round``, such as ``algos.minibatch_sgd``) runs in
      barrier rounds: round r hands every worker the same model, waits for all n results (job r of
      each), and the server applies ``apply_round`` once to them, its slots in the order the
      results arrived; the trace's ``round`` column numbers the rounds (−1 for asynchronous runs);
    * optional injected slowdowns (:class:`Slowdown`): a sleep added to every job of a worker, a
      worker that stalls once for a while, a worker whose process dies at a given job. A dead worker
      is reported (:attr:`RealResult.dead`) and an asynchronous run goes on without it; it ends when
      ``num_events`` results have been applied or no worker is left, with what it has (rounds wait
      for every worker, so a synchronous run refuses injected deaths);
    * the actor processes that live to the end of a complete run are kept, idle, for the next run
      in the same Ray session, which takes them before starting new ones (starting one costs
      seconds: it imports JAX); :func:`release` or ``ray.shutdown()`` ends them.

    Args:
      alg: an :class:`algos.Algorithm`: asynchronous (``apply``) or in rounds (``apply_round``).
      problem: a :class:`sim.problems.Problem`; its data is shipped to every worker.
      num_events: results to apply (fewer if every worker dies first); for an algorithm in rounds,
        a multiple of n (whole rounds).
      key: the run's PRNG key; worker i's job k uses ``fold_in(fold_in(key, i), k)``.
      hparams: overrides of ``alg.hparams``.
      slowdown: injected sleeps, stalls and deaths (:class:`Slowdown`).
      log_every: applied results between snapshots of the server model (default: about 50).
      address: a Ray cluster to join (``"auto"``, or ``"ray://host:10001"``); default: the Ray
        instance already initialised in this process, else a new local one.
      timeout: seconds to wait for any one result before giving up on the run.
    """
    from delaylab.sim import driver, engine
    from delaylab.sim.problems import Problem

    called = time.perf_counter()

    check_protocol(alg)
    if not isinstance(problem, Problem):
        raise TypeError(f"problem must be a sim.problems.Problem; got {type(problem).__name__}")
    if isinstance(num_events, bool) or not isinstance(num_events, (int, np.integer)) or num_events < 1:
        raise ValueError(f"num_events must be a whole number >= 1; got {num_events!r}")
    by_round = alg.server.apply is None
    n = problem.num_workers
    if by_round and num_events % n:
        raise ValueError(f"{alg.name} runs in barrier rounds of all {n} workers: num_events must be a multiple of {n} "
                         f"(whole rounds); got {num_events}")
    engine._check_key(key, batched=False)
    if not jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        raise ValueError("key must be a typed key, e.g. jax.random.key(0), so that its implementation is recorded")
    slowdown = slowdown or Slowdown()
    slowdown.check(n)
    if by_round and slowdown.deaths:
        raise ValueError(f"{alg.name} runs in barrier rounds, each waiting for every worker: a round after an injected "
                         "death would never end; inject deaths into asynchronous runs only")
    if log_every is None:
        log_every = max(1, num_events // 50)
    # under a calibration (sim.driver.probing: `delaylab figure --estimate`), only the run's first
    # results are computed and the rest of its time predicted from their pace (driver.real_predict);
    # the cut result is there for the caller's control flow to go on with, not as a result
    probe = driver.active_probe()
    cut = num_events if probe is None else driver.real_cut(probe, num_events, n, by_round)
    try:
        import ray
    except ImportError:
        raise ImportError("the real runtime needs Ray: pip install 'delaylab[ray]' (or pip install ray)") from None
    dtype = engine._float_dtype_of(problem.x0)
    hp, _ = engine._prepare_hparams(alg, hparams, dtype, batched=False, num_workers=n)
    hp = jax.tree.map(np.asarray, hp)
    x64 = bool(jax.config.jax_enable_x64)
    base = np.asarray(jax.random.key_data(key))
    impl = str(jax.random.key_impl(key))

    if not ray.is_initialized():
        import warnings

        with warnings.catch_warnings():  # Ray starts its daemons by fork+exec: nothing of JAX runs in them
            warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called")
            ray.init(address=address, include_dashboard=False, log_to_driver=False,
                     **({} if address else {"num_cpus": max(2, os.cpu_count() or 2)}))
    stalls = {i: {} for i in range(n)}
    for w, k, s in slowdown.stalls:
        stalls[int(w)][int(k)] = float(s)
    deaths = {int(w): int(k) for w, k in slowdown.deaths}
    data_ref = ray.put(problem.data)
    server, *workers = _hosts(ray, [("as_server", (alg.functions, hp, jax.tree.map(np.asarray, problem.x0), n, x64,
                                                   log_every))]
                              + [("as_worker", (i, alg.worker.job, problem.fns, data_ref, hp, base, impl, x64,
                                                float(slowdown.sleep[i]) if slowdown.sleep else 0.0, stalls[i],
                                                deaths.get(i))) for i in range(n)])
    pending, rows, dead = {}, [], []
    applied = 0
    finished = False
    try:
        start = ray.get(server.start_point.remote())
        # compile everywhere before the clock starts: a worker's job, and the server's apply on a
        # message of the shape a job returns
        msg_like = jax.eval_shape(lambda: alg.worker.job(hp, start, engine.WorkerOracle(problem.fns, problem.data,
                                                                                        jnp.int32(0)), key))
        ray.get([w.warm.remote(start) for w in workers]
                + [server.warm.remote(jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), msg_like))])
        t0 = time.time()
        pending = {workers[i].job.remote(start, 0, t0): (i, 0) for i in range(n)}
        while by_round and applied < cut:  # barrier rounds: job r of every worker, then one application
            r, arrivals = applied // n, []
            while pending:
                i, k, got = _next_result(ray, pending, timeout, f"round {r}: not every worker reported within "
                                                                f"{timeout} s")
                if got is None:
                    dead.append((i, time.time() - t0))
                    raise RuntimeError(f"worker {i} died in round {r}; a run in barrier rounds cannot go on without it")
                arrivals.append((i, got[0], k, *got[1:]))
            row_ref, *points = server.apply_round.options(num_returns=n + 1).remote(arrivals, r, t0)
            rows.append(row_ref)
            applied += n
            if applied < cut:
                pending = {workers[i].job.remote(p, r + 1, t0): (i, r + 1) for (i, *_), p in zip(arrivals, points)}
        delivered = np.zeros(n, np.int64)

        def more() -> bool:  # results still to apply (a calibration's cut run: driver.real_cut)
            lost = {w for w, _ in dead}
            return applied < num_events and (applied < cut or (probe is not None and any(
                delivered[i] < probe.cycles for i in range(n) if i not in lost)))

        while not by_round and more() and pending:
            i, k, got = _next_result(ray, pending, timeout, f"no worker reported within {timeout} s; the run stopped "
                                                            f"after {applied} results")
            if got is None:
                dead.append((i, time.time() - t0))
                continue
            msg, t_start, t_finish, key_data = got
            point, row = server.apply.options(num_returns=2).remote(i, msg, k, t_start, t_finish, key_data, t0)
            rows.append(row)
            applied += 1
            delivered[i] += 1
            if more():
                pending[workers[i].job.remote(point, k + 1, t0)] = (i, k + 1)
        rows = ray.get(rows)
        if by_round:
            rows = [row for r in rows for row in r]
        params, state, snaps = ray.get(server.final.remote())
        finished = True
    finally:
        # after a complete run, the hosts that live on wait for the next run (a worker still busy
        # with a job the run did not need finishes it first); a worker whose pending job is the
        # one it dies in, and every host of a run that failed, end here
        pending_job = {i: k for i, k in pending.values()}
        doomed = {i for i, k in pending_job.items() if i in deaths and k >= deaths[i]} | {i for i, _ in dead}
        for i, h in [(None, server), *enumerate(workers)]:
            if finished and i not in doomed:
                h.clear.remote()
                _POOL["idle"].append(h)
            else:
                ray.kill(h)
    wall = rows[-1]["applied"] if rows else 0.0
    trace = {c: np.asarray([r[c] for r in rows], np.float64 if c in ("start", "finish", "applied", "served") else np.int64)
             for c in TRACE_COLUMNS if c != "duration"}
    trace["duration"] = trace["finish"] - trace["start"]
    times = np.asarray([t for t, _ in snaps])
    snap_params = jax.tree.map(lambda *a: np.stack(a), *[p for _, p in snaps])
    if probe is not None:  # a run that ended on its own (every worker dead) is whole, not cut
        whole = applied >= num_events or len({w for w, _ in dead}) == n
        driver.real_predict(probe, seconds=time.perf_counter() - called, served=trace["served"],
                            num_events=applied if whole else num_events, num_workers=n)
    return RealResult(params=params, state=state, trace=trace, dead=dead, snapshot_time=times,
                      snapshot_params=snap_params, wall_seconds=float(wall), base_key=base, key_impl=impl,
                      num_workers=n, algorithm=alg.name)
