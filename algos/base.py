"""The protocol every algorithm implements: a worker half and a server half, as pure functions.

A *job* is (worker ``i``, the point it was handed). The :class:`Worker` half says what a job
computes from that point (the worker's *message*), what a worker holds before its first job, which
parameters telemetry reads from a worker and what the worker holds after its job. The
:class:`Server` half says how the server starts, where its model is, and how it handles either one
arrival (:attr:`Server.apply`) or one round of simultaneous arrivals (:attr:`Server.apply_round`),
never both. The engine (``sim``) runs any :class:`Algorithm`; it never imports a concrete one.

Everything a sweep varies lives in the ``hparams`` dict passed to every function, never in a
closure, so ``vmap`` over hyperparameters needs no recompilation: every function is a
module-level function or a frozen dataclass (equal by value), so two algorithms that differ only
in hyperparameter values compile once. See docs/theory.md for the event model.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional, Protocol

import jax

PyTree = Any
Params = PyTree  # the model, a pytree of arrays
HParams = PyTree  # hyperparameters: a dict of scalars/arrays; leaves may carry a sweep axis
State = PyTree  # server state
Point = PyTree  # what a worker is handed and holds between jobs (the model, or a worker state)
Message = PyTree  # what a worker sends when its job finishes


class Event(NamedTuple):
    """What the server knows about one arrival. All fields are scalars (traced under ``jit``).

    Attributes:
      index: position of the event in the schedule (0-based).
      worker: index of the worker whose job finished.
      time: simulated finish time of the job.
      staleness: number of delivered arrivals the server processed between this job's dispatch
        and its arrival (the delay δ_k of docs/theory.md §1 for one-update-per-arrival methods).
      delivered: False when a failure lost the job's result; the message must then be ignored.
      tag: the model tag the schedule attaches to the job (:attr:`sim.schedules.Schedule.tag`):
        under time-bounded rounds (FedStrag), the broadcast the job was trained from; for a
        release event, that of the worker's last job. 0 where the schedule defines none.
      round_end: True on the last event of a server round (the server closes the round right
        after handling it; :attr:`sim.schedules.Schedule.round_end`). False where the schedule
        has no rounds.
    """

    index: jax.Array
    worker: jax.Array
    time: jax.Array
    staleness: jax.Array
    delivered: jax.Array
    tag: jax.Array = 0
    round_end: jax.Array = False


class Oracle(Protocol):
    """Worker ``i``'s stochastic gradient: ``oracle(params, key) -> (loss, grad)``.

    Samples only from worker ``i``'s own data. ``oracle.worker`` is ``i`` (a traced integer), for
    work that depends on the worker. ``oracle.loss(params, key)`` is the minibatch loss whose
    gradient ``oracle(params, key)`` returns, for work that differentiates further (AdaHessian's
    Hessian-vector products)."""

    worker: jax.Array

    def __call__(self, params: Params, key: jax.Array) -> tuple[jax.Array, Params]: ...

    def loss(self, params: Params, key: jax.Array) -> jax.Array: ...


class JobFn(Protocol):
    """``Worker.job``: one job of one worker from the point it was handed; returns its message."""

    def __call__(self, hparams: HParams, point: Point, oracle: Oracle, key: jax.Array) -> Message:
        """One job of one worker, started at ``point``. Written per worker; batched by the engine."""


class InitFn(Protocol):
    """``Server.init``: the server state before the first arrival."""

    def __call__(self, hparams: HParams, params: Params, num_workers: int) -> State:
        """Server state before the first arrival, given the initial model ``params``."""


class ApplyFn(Protocol):
    """``Server.apply``: handle one arrival; return ``(state, next_point, stats)`` (docs/new_methods.md)."""

    def __call__(self, hparams: HParams, state: State, message: Message, event: Event
                 ) -> tuple[State, Point, dict[str, jax.Array]]:
        """Handle one arrival: ``(state, next_point, stats)``: the new server state, the point
        worker ``event.worker`` computes its next job from, and scalar statistics of this arrival
        (for example ``{"stepsize": γ}``) that the engine sums per worker."""


class ApplyRoundFn(Protocol):
    """``Server.apply_round``: handle a round of simultaneous arrivals (docs/new_methods.md)."""

    def __call__(self, hparams: HParams, state: State, messages: Message, events: Event, mask: jax.Array
                 ) -> tuple[State, Point, dict[str, jax.Array]]:
        """Handle a round of simultaneous arrivals. ``messages`` and ``events`` carry a leading
        axis over the round's slots; ``mask`` marks the slots that hold a real event. Returns the
        new state, the next point of every slot's worker (leading slot axis) and per-slot stats."""


class ValidateFn(Protocol):
    """``Algorithm.validate``: refuse hyperparameters outside their domain."""

    def __call__(self, hparams: HParams, num_workers: Optional[int]) -> None:
        """Raise ``ValueError`` naming the hyperparameter for a value outside its domain.
        ``num_workers`` is None where it is not known yet (at construction): checks that need it
        are then skipped. Called before anything compiles."""


# --- the worker half's defaults: module-level, so that they compare equal -----------------------


def handed_model(hparams: HParams, params: Params) -> Point:
    """A worker starts from the initial model (most algorithms)."""
    del hparams
    return params


def point_is_model(point: Point) -> Params:
    """The point a worker holds is a model (most algorithms)."""
    return point


def model_unchanged(point: Point, message: Message) -> Params:
    """A job that leaves the worker's model as it was handed (a gradient job)."""
    del message
    return point


def gradient_job(hparams: HParams, point: Params, oracle: Oracle, key: jax.Array) -> Message:
    """The default job: one stochastic gradient at the point the worker was handed."""
    del hparams
    _, grad = oracle(point, key)
    return grad


class Worker(NamedTuple):
    """The worker half.

    Attributes:
      job: ``(hparams, point, oracle, key) -> message``: one job from the point handed.
      start: ``(hparams, params) -> point``: what every worker holds before its first job, given
        the initial model (a worker state, where workers keep more than a model). Points the
        server hands back (``apply``'s second output) have the same structure.
      params: ``point -> params``: the model a worker's point holds, which telemetry reads.
      after_job: ``(point, message) -> params``: the model the worker holds at the end of its job
        (for jobs of several local steps: the model they ended at).
    """

    job: JobFn = gradient_job
    start: Callable[[HParams, Params], Point] = handed_model
    params: Callable[[Point], Params] = point_is_model
    after_job: Callable[[Point, Message], Params] = model_unchanged


class Server(NamedTuple):
    """The server half: ``init``, where the model is (``params``), and exactly one handler.

    Attributes:
      init: see :class:`InitFn`.
      params: ``state -> model``: the server model held in ``state``.
      apply: see :class:`ApplyFn`: the handler of one arrival (asynchronous methods).
      apply_round: see :class:`ApplyRoundFn`: the handler of one round (round-based methods,
        which need a schedule with rounds).
    """

    init: InitFn
    params: Callable[[State], Params]
    apply: Optional[ApplyFn] = None
    apply_round: Optional[ApplyRoundFn] = None

    @property
    def by_round(self) -> bool:
        return self.apply_round is not None


class Algorithm(NamedTuple):
    """An asynchronous or round-based distributed algorithm.

    Attributes:
      name: a short name, used in reports.
      hparams: default hyperparameters (a dict). ``sim.run`` uses these unless told otherwise.
      worker: the :class:`Worker` half.
      server: the :class:`Server` half.
      validate: see :class:`ValidateFn`: the one place every hyperparameter is checked (the
        factory calls it through :func:`algorithm`; ``sim.run`` calls it with the problem's n).
      check_schedule: ``schedule -> None``: raises ``ValueError`` when the algorithm cannot run
        on ``schedule`` (called before any compile).

    The engine keys its compiled code on the two halves (:attr:`functions`), so two instances
    that differ in ``hparams`` alone share one compilation.
    """

    name: str
    hparams: dict
    worker: Worker
    server: Server
    validate: Optional[ValidateFn] = None
    check_schedule: Optional[Callable] = None

    @property
    def functions(self) -> tuple:
        """The static part: what the engine's compiled code depends on."""
        return (self.worker, self.server)

    def with_hparams(self, **overrides) -> "Algorithm":
        """The same algorithm with some default hyperparameters replaced (checked)."""
        unknown = set(overrides) - set(self.hparams)
        if unknown:
            raise ValueError(f"{self.name}: unknown hyperparameters {sorted(unknown)}; allowed: {sorted(self.hparams)}")
        hp = {**self.hparams, **overrides}
        if self.validate is not None:
            self.validate(hp, None)
        return self._replace(hparams=hp)


def check_protocol(alg) -> None:
    """Raise ``TypeError``/``ValueError`` saying what is wrong when ``alg`` is not a well-formed
    :class:`Algorithm` (before anything compiles)."""
    if not isinstance(alg, Algorithm):
        raise TypeError(f"an algorithm must be a delaylab.algos.Algorithm; got {type(alg).__name__}")
    if not isinstance(alg.name, str) or not alg.name:
        raise TypeError(f"an algorithm's name must be a non-empty string; got {alg.name!r}")
    if not isinstance(alg.hparams, dict):
        raise TypeError(f"{alg.name}: hparams must be a dict; got {type(alg.hparams).__name__}")
    if not isinstance(alg.worker, Worker):
        raise TypeError(f"{alg.name}: worker must be a delaylab.algos.Worker; got {type(alg.worker).__name__}")
    if not isinstance(alg.server, Server):
        raise TypeError(f"{alg.name}: server must be a delaylab.algos.Server; got {type(alg.server).__name__}")
    if (alg.server.apply is None) == (alg.server.apply_round is None):
        raise ValueError(f"{alg.name}: the server half must define exactly one of apply (one arrival) and "
                         "apply_round (one round)")
    for half, fields in ((alg.worker, Worker._fields), (alg.server, Server._fields)):
        for f in fields:
            fn = getattr(half, f)
            if fn is not None and not callable(fn):
                raise TypeError(f"{alg.name}: {type(half).__name__.lower()}.{f} must be a function; got {fn!r}")
    for f in ("validate", "check_schedule"):
        fn = getattr(alg, f)
        if fn is not None and not callable(fn):
            raise TypeError(f"{alg.name}: {f} must be a function; got {fn!r}")
    try:
        hash(alg.functions)
    except TypeError as err:
        raise TypeError(f"{alg.name}: every function of the two halves must be hashable (a module-level "
                        f"function or a frozen dataclass), so that it keys the compiled program: {err}") from None


def algorithm(name: str, hparams: dict, worker: Worker, server: Server, *, validate: Optional[ValidateFn] = None,
              check_schedule: Optional[Callable] = None) -> Algorithm:
    """Build an :class:`Algorithm` and check it: the protocol, then ``validate(hparams, None)``."""
    alg = Algorithm(name, dict(hparams), worker, server, validate, check_schedule)
    check_protocol(alg)
    if validate is not None:
        validate(alg.hparams, None)
    return alg


def state_params(state: State) -> Params:
    """The server model of a state that keeps it in a ``params`` field (most algorithms): a
    module-level function, so that every algorithm that uses it shares its compiled code."""
    return state.params
