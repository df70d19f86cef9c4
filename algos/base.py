"""The protocol every algorithm implements, in the manner of optax's ``GradientTransformation``.

An algorithm is a :class:`Algorithm` NamedTuple of pure functions plus the default values of
its hyperparameters. The engine in ``sim`` runs any object of this shape; it never imports a
concrete algorithm, and an algorithm never imports the engine.

Event model (see ``DESIGN.md``): a *job* is (worker ``i``, the point it was handed). When the
job finishes, the worker's *message* (by default one stochastic gradient at that point) reaches
the server, which handles it with :attr:`Algorithm.apply` and says at which point worker ``i``
computes next. Everything a sweep varies (step sizes, τ vectors, ...) lives in the
``hparams`` pytree passed to every function, never in a closure, so that ``vmap`` over
hyperparameters needs no recompilation.

Per-worker work (:attr:`Algorithm.work`) is written for one worker; the engine batches it.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional, Protocol

import jax

PyTree = Any
Params = PyTree  # the model, a pytree of arrays
HParams = PyTree  # hyperparameters: a dict of scalars/arrays; leaves may carry a sweep axis
State = PyTree  # server state
Message = PyTree  # what a worker sends when its job finishes


class Event(NamedTuple):
    """What the server knows about one arrival. All fields are scalars (traced under ``jit``).

    Attributes:
      index: position of the event in the schedule (0-based).
      worker: index of the worker whose job finished.
      time: simulated finish time of the job.
      staleness: number of delivered arrivals the server processed between this job's dispatch
        and its arrival (the delay δ_k of specs/asgd.md §2.1 for one-update-per-arrival methods).
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

    Samples only from worker ``i``'s own data (data heterogeneity). ``oracle.worker`` is ``i``
    (a traced integer), for work that depends on the worker. ``oracle.loss(params, key)`` is the
    minibatch loss whose gradient ``oracle(params, key)`` returns (problems that define it), for
    work that differentiates further (AdaHessian's Hessian-vector products)."""

    worker: jax.Array

    def __call__(self, params: Params, key: jax.Array) -> tuple[jax.Array, Params]: ...

    def loss(self, params: Params, key: jax.Array) -> jax.Array: ...


class InitFn(Protocol):
    def __call__(self, hparams: HParams, params: Params, num_workers: int) -> State:
        """Server state before the first arrival, given the initial model ``params``."""


class WorkFn(Protocol):
    def __call__(self, hparams: HParams, point: Params, oracle: Oracle, key: jax.Array) -> Message:
        """One job of one worker, started at ``point``. Written per worker; batched by the engine."""


class ApplyFn(Protocol):
    def __call__(
        self, hparams: HParams, state: State, message: Message, event: Event
    ) -> tuple[State, Params, dict[str, jax.Array]]:
        """Handle one arrival.

        Returns:
          ``(state, next_point, stats)``: the new server state, the point at which worker
          ``event.worker`` computes its next job, and a dict of scalar statistics of this
          arrival (for example ``{"stepsize": γ}``) that the engine sums per worker.
        """


class ApplyRoundFn(Protocol):
    def __call__(
        self, hparams: HParams, state: State, messages: Message, events: Event, mask: jax.Array
    ) -> tuple[State, Params, dict[str, jax.Array]]:
        """Handle a whole synchronous round at once (round-based algorithms only).

        ``messages`` and ``events`` carry a leading axis over the round's slots; ``mask`` marks
        the slots that hold a real event. Returns the new state, the next point of every slot's
        worker (leading slot axis) and per-slot stats.
        """


class ValidateFn(Protocol):
    def __call__(self, hparams: HParams, num_workers: int) -> None:
        """Raise ``ValueError`` for hyperparameters outside their domain (before any compile)."""


class Algorithm(NamedTuple):
    """An asynchronous or round-based distributed algorithm, as pure functions.

    Attributes:
      name: a short name, used in reports.
      hparams: default hyperparameters (a dict). ``sim.run`` uses these unless told otherwise.
      init: see :class:`InitFn`.
      work: see :class:`WorkFn`.
      apply: see :class:`ApplyFn`; ``None`` for algorithms that only handle whole rounds.
      params: ``params(state) -> model``: the server model held in ``state``.
      apply_round: see :class:`ApplyRoundFn`; set for round-based algorithms, which then need
        a barrier schedule.
      validate: see :class:`ValidateFn`.
      point_init: ``point_init(hparams, params) -> point``: what every worker is handed before
        its first job, when that is more than the model (e.g. elastic averaging's worker state:
        its own parameters and optimiser state). ``None``: the initial model. ``apply`` must then
        return next points of the same structure.
      check_schedule: ``check_schedule(schedule) -> None``: raises ``ValueError`` when the
        algorithm cannot run on ``schedule`` (called by ``sim.run``/``sim.sweep`` before any
        compile; e.g. FedStrag needs a schedule with broadcast tags and a history long enough).

    Only the function fields take part in equality and hashing that matters to ``jit``; the
    engine keys its compiled code on them, so two instances that differ in ``hparams`` alone
    share one compilation. That holds because every function field is a module-level function
    or a frozen dataclass (compared by value), never a closure or lambda built per call: a
    factory called twice with different hyperparameter values returns equal functions
    (tests/algos/test_registry.py checks it for every registered algorithm).
    """

    name: str
    hparams: dict
    init: InitFn
    work: WorkFn
    apply: Optional[ApplyFn]
    params: Callable[[State], Params]
    apply_round: Optional[ApplyRoundFn] = None
    validate: Optional[ValidateFn] = None
    point_init: Optional[Callable] = None
    check_schedule: Optional[Callable] = None

    @property
    def functions(self) -> tuple:
        """The static part: what the engine's compiled code depends on."""
        return (self.init, self.work, self.apply, self.params, self.apply_round, self.point_init)

    def with_hparams(self, **overrides) -> "Algorithm":
        """The same algorithm with some default hyperparameters replaced."""
        unknown = set(overrides) - set(self.hparams)
        if unknown:
            raise ValueError(
                f"{self.name}: unknown hyperparameters {sorted(unknown)}; "
                f"allowed: {sorted(self.hparams)}"
            )
        return self._replace(hparams={**self.hparams, **overrides})


def state_params(state: State) -> Params:
    """The server model of a state that keeps it in a ``params`` field (most algorithms): a
    module-level function, so that every algorithm that uses it shares its compiled code."""
    return state.params


def own_model(hparams: HParams, params: Params) -> Params:
    """A ``point_init`` for algorithms whose workers keep their own parameters (the point they
    are handed is their own model, which starts as the initial model)."""
    del hparams
    return params


def gradient_work(hparams: HParams, point: Params, oracle: Oracle, key: jax.Array) -> Message:
    """The default job: one stochastic gradient at the point the worker was handed."""
    del hparams
    _, grad = oracle(point, key)
    return grad
