"""The worker and the server of elastic averaging (docs/theory.md §9.1): :func:`elastic_averaging`
composes a local optimiser and an exchange rule; :func:`sync_easgd` is the synchronous ablation."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax.tree_utils as otu

from delaylab.algos.base import Algorithm, Event, HParams, Params, Server, Worker, algorithm
from delaylab.algos.elastic.exchange import Exchange, ExchangeContext, fixed
from delaylab.algos.elastic.local import Local, sgd
from delaylab.algos.local_steps import LocalSteps

SEMANTICS = ("suppressed", "stale")


# --- the worker and the server ----------------------------------------------------------------


class WorkerState(NamedTuple):
    """What the engine hands worker i (and what its job returns)."""

    params: Params
    opt_state: Any
    grad_point: Params  # where the next job's first gradient is taken: the point before the last exchange
    master_copy: Params  # θ̃ᵐ: the master the worker last received
    u: jax.Array  # [p] the last p log-distances, newest last
    seen: jax.Array  # int32 [], how many u values were recorded (capped use: min(seen, p))
    failed_last: jax.Array  # bool [], the worker's previous arrival was lost (a failed exchange or a crash)


@dataclasses.dataclass(frozen=True)
class _WorkerStart:
    """``Worker.start``: a worker before its first exchange: the model, a fresh optimiser state, no u
    recorded."""

    recipe: Any
    history: int

    def __call__(self, hparams, params) -> WorkerState:
        return WorkerState(params, self.recipe.init(hparams, params), params, params,
                           jnp.zeros((self.history,), _float_dtype(params)), jnp.zeros((), jnp.int32),
                           jnp.zeros((), bool))


class EAState(NamedTuple):
    master: Params
    attempts: jax.Array  # int32 [], exchange attempts so far (the trace's write position)
    trace_a: jax.Array  # [K] trend a at each attempt (K = trace capacity, may be 0)
    trace_follows: jax.Array  # bool [K] the attempt follows a failed attempt of the same worker
    trace_delivered: jax.Array  # bool [K]
    trace_worker: jax.Array  # int32 [K]


def master_params(state: EAState) -> Params:
    return state.master


def worker_params(point: WorkerState) -> Params:
    """``Worker.params``: the model a worker holds is its state's ``params``."""
    return point.params


def _end_params(point: WorkerState, message: WorkerState) -> Params:
    """``Worker.after_job`` when the job returns the worker's state at its end."""
    del point
    return message.params


def _stale_end_params(point: WorkerState, message: tuple) -> Params:
    """``Worker.after_job`` under "stale" failures, where the job returns (start, end) states."""
    del point
    return message[1].params


def _float_dtype(params):
    return jax.tree.leaves(params)[0].dtype


def trend(u: jax.Array, seen: jax.Array) -> jax.Array:
    """a = −Σⱼ cⱼ Δuⱼ over the last p values (c ∝ 1, 2, …, p − 1, sum 1); 0 until p are held."""
    p = u.shape[0]
    c = jnp.arange(1, p, dtype=u.dtype)
    c = c / jnp.sum(c)
    a = -jnp.sum(c * jnp.diff(u))
    return jnp.where(seen >= p, a, jnp.zeros_like(a))


def _worker_steps(recipe) -> LocalSteps:
    """τ = ``hparams["period"]`` local steps (traced: one compiled program serves every τ)."""
    return LocalSteps(recipe, steps="period", output="end")


def _local_job(recipe, hparams: HParams, point: WorkerState, oracle, key) -> WorkerState:
    """τ local steps from the worker's parameters, the first gradient at ``point.grad_point`` (the
    point before the exchange that closed the previous period: Algorithm 1's x)."""
    job = _worker_steps(recipe).run(hparams, point.params, oracle, key, point.opt_state, first_at=point.grad_point)
    return point._replace(params=job.end, opt_state=job.state, grad_point=job.end)


@dataclasses.dataclass(frozen=True)
class _Work:
    """A job: τ local steps from the worker's own state; under "stale" failures the job's start
    travels with it, so that a crashed worker can be reverted."""

    recipe: Any
    failure: str

    def __call__(self, hparams, point: WorkerState, oracle, key):
        end = _local_job(self.recipe, hparams, point, oracle, key)
        return (point, end) if self.failure == "stale" else end


@dataclasses.dataclass(frozen=True)
class _Init:
    trace: int

    def __call__(self, hparams, params, n) -> EAState:
        del hparams, n
        z = jnp.zeros((self.trace,), jnp.float32)
        return EAState(params, jnp.zeros((), jnp.int32), z, jnp.zeros((self.trace,), bool),
                       jnp.zeros((self.trace,), bool), jnp.zeros((self.trace,), jnp.int32))


@dataclasses.dataclass(frozen=True)
class _Apply:
    """One exchange attempt: u recorded, (h1, h2) from the rule, the elastic moves (:func:`elastic_averaging`)."""

    weights: Callable
    failure: str
    trace: int

    def __call__(self, hparams, s: EAState, message, event: Event):
        ok = event.delivered
        if self.failure == "stale":
            start, end = message
            ws = otu.tree_where(ok, end, start)  # a crashed worker made no progress
            attempt = ok  # and attempted nothing
        else:
            ws = message
            attempt = jnp.asarray(True)
        x, master = ws.params, s.master
        estimate = otu.tree_where(ok, master, ws.master_copy)
        u_now = jnp.log(jnp.maximum(otu.tree_norm(otu.tree_sub(x, estimate)), jnp.finfo(ws.u.dtype).tiny)).astype(ws.u.dtype)
        u = jnp.where(attempt, jnp.concatenate([ws.u[1:], u_now[None]]), ws.u)
        seen = ws.seen + attempt.astype(jnp.int32)
        a = trend(u, seen)
        alpha = jnp.asarray(hparams["alpha"], ws.u.dtype)
        h1, h2 = self.weights(hparams, ExchangeContext(alpha, a, ws.failed_last, event.worker))
        d = jax.tree.map(lambda xi, m: xi - m, x, master)
        new_x = jax.tree.map(lambda xi, di: jnp.where(ok, xi - h1.astype(xi.dtype) * di, xi), x, d)
        new_master = jax.tree.map(lambda m, di: jnp.where(ok, m + h2.astype(m.dtype) * di, m), master, d)
        # the next job's first gradient at x, the point before this exchange (Algorithm 1; a
        # crashed worker keeps its whole start state, so it repeats the lost job); the worker's
        # estimate of the master: the master it read, if the exchange happened
        grad_point = otu.tree_where(attempt, x, ws.grad_point)
        nxt = WorkerState(new_x, ws.opt_state, grad_point, estimate, u, seen, ~ok)
        state = EAState(new_master, s.attempts + attempt.astype(jnp.int32), *s[2:])
        trace = self.trace
        if trace:
            k = jnp.where(attempt & (s.attempts < trace), s.attempts, trace)  # out of range: dropped
            state = state._replace(trace_a=s.trace_a.at[k].set(a.astype(jnp.float32), mode="drop"),
                                   trace_follows=s.trace_follows.at[k].set(ws.failed_last, mode="drop"),
                                   trace_delivered=s.trace_delivered.at[k].set(ok, mode="drop"),
                                   trace_worker=s.trace_worker.at[k].set(event.worker.astype(jnp.int32), mode="drop"))
        stats = {"exchanged": ok.astype(jnp.float32), "h1": jnp.where(ok, h1, 0.0).astype(jnp.float32),
                 "h2": jnp.where(ok, h2, 0.0).astype(jnp.float32)}
        return state, nxt, stats


def _check_period(name, period) -> None:
    v = np.asarray(period)
    if v.dtype == bool or not np.issubdtype(v.dtype, np.integer) or not np.all(v >= 1):
        raise ValueError(f"{name}: period τ must be an integer ≥ 1 (local steps per exchange); got {period!r}")


def _check_local_hparams(name: str, hparams: HParams, local_names) -> None:
    for key in local_names:
        v = np.asarray(hparams[key], np.float64)
        if not np.all(np.isfinite(v)) or np.any(v < 0):
            raise ValueError(f"{name}: {key} must be finite and >= 0; got {hparams[key]!r}")
    if "momentum" in local_names and not np.all(np.asarray(hparams["momentum"], np.float64) < 1):
        raise ValueError(f"{name}: momentum must be in [0, 1); got {hparams['momentum']!r}")


@dataclasses.dataclass(frozen=True)
class _Validate:
    name: str
    local_names: tuple
    rule_check: Optional[Callable] = None
    synchronous: bool = False

    def __call__(self, hparams, n):
        a = np.asarray(hparams["alpha"], dtype=np.float64)
        if not np.all((a > 0) & (a < 0.5)):
            raise ValueError(f"{self.name}: alpha must be in (0, 0.5) (an exchange shrinks the gap by 1 − 2α); "
                             f"got {hparams['alpha']!r}")
        if self.synchronous and n and not np.all(n * a < 1):
            raise ValueError(f"{self.name}: needs n·alpha < 1 for a stable master; got n = {n}, "
                             f"alpha = {hparams['alpha']!r}")
        _check_period(self.name, hparams["period"])
        _check_local_hparams(self.name, hparams, self.local_names)
        if self.rule_check is not None:
            self.rule_check(self.name, hparams)


def elastic_averaging(local: Local, *, alpha: float = 0.1, period: int = 1, exchange: Exchange = fixed(),
                      failure: str = "suppressed", a0: Optional[float] = None, trace: int = 0,
                      name: str = "elastic") -> Algorithm:
    """Asynchronous elastic averaging (see the module docstring for its parts).

    Event model. A job of worker i is τ local steps from its own state (parameters, optimiser
    state); at the job's arrival the worker attempts an exchange with the master x̃ (h1 pulls the
    worker to the master, h2 the master to the worker):

        x = xⁱ;  d = x − x̃;  xⁱ ← x − h1 d;  x̃ ← x̃ + h2 d.

    With h1 = h2 = α this is EASGD's exchange (xⁱ + x̃ is conserved, ‖xⁱ − x̃‖ shrinks by 1 − 2α).
    The exchange that closes one period is the one that opens the next in the paper's Algorithm 1
    (worker i exchanges when τ divides its clock tⁱ, at the moment its previous τ steps end), and
    the order within a step is the paper's: the first gradient of the next period is taken at x,
    the point *before* the exchange, and applied to xⁱ after it (xⁱ ← xⁱ − η g(x); the synchronous
    eq. 5–6 likewise). The worker keeps x in its state (``WorkerState.grad_point``) for that step;
    later steps of the period take the gradient at the iterate. The first exchange of Algorithm 1,
    at tⁱ = 0 with xⁱ = x̃ = x₀, is a no-op and is not simulated. EAMSGD's look-ahead gradient is
    taken at x + δv from the same x (:class:`ElasticNesterov`); AdaHessian's gradient and Hessian
    probe at x, its update applied to xⁱ. The worker's whole state travels as the point the engine
    hands it (:class:`WorkerState`), so a job stays a pure function of what the worker was handed;
    the server state holds the master alone (plus the optional detector trace). The evaluated
    model is the master.

    Args:
      local: the local optimiser (:func:`sgd`, :func:`nesterov`, :func:`adahessian`,
        :func:`optax_local`, or a :class:`Local` around any recipe of :mod:`algos.local_steps`);
        its hyperparameters (``learning_rate``, ...) become the algorithm's.
      alpha: α ∈ (0, 0.5), the moving rate (hparams ``alpha``, sweepable).
      period: τ ≥ 1 local steps per job (hparams ``period``, an integer, sweepable: one compiled
        program serves every τ). The schedule's job durations are τ steps' worth.
      exchange: :func:`fixed`, :func:`oracle`, :func:`dynamic`, or an :class:`Exchange` around a
        rule of your own; the hyperparameters it reads become the algorithm's.
      failure: how an undelivered arrival is read. Failures come from the schedule
        (``sim.schedules.with_failures``): an undelivered arrival is a failed exchange, and the
        oracle rule reads the same flag. Two semantics (a reconstruction, docs/theory.md §9.6):
        "suppressed", the exchange does not happen and the worker keeps its τ steps and trains on;
        "stale", the worker made no progress (crashed), its state reverts to the job's start, and
        its next exchange carries those old parameters (after the next job's τ steps).
      a0: the dynamic rule's scale (hparams ``a0``, > 0); overrides the rule's default.
      trace: for the first ``trace`` exchange attempts the server keeps a, whether the attempt was
        delivered, and whether it follows a failed attempt of the same worker; the ROC AUC of −a
        for "follows a failure" is then :func:`detection_auc`.
    """
    if not isinstance(local, Local):
        raise ValueError(f"{name}: local must be an algos.elastic.Local (e.g. elastic.sgd(0.01)); got {type(local).__name__}")
    if not isinstance(exchange, Exchange):
        raise ValueError(f"{name}: exchange must be an algos.elastic.Exchange (elastic.fixed(), elastic.oracle(), "
                         f"elastic.dynamic() or one of your own); got {exchange!r}")
    if failure not in SEMANTICS:
        raise ValueError(f"{name}: failure must be one of {SEMANTICS}; got {failure!r}")
    if isinstance(trace, bool) or int(trace) != trace or trace < 0:
        raise ValueError(f"{name}: trace must be an integer ≥ 0; got {trace!r}")
    rule_hp = dict(exchange.defaults)
    if a0 is not None:
        if "a0" not in rule_hp:
            raise ValueError(f"{name}: a0 applies to exchange rules that read it (elastic.dynamic()); this one reads "
                             f"{sorted(rule_hp) or 'no hyperparameter'}")
        rule_hp["a0"] = a0
    hp = {"alpha": alpha, "period": period, **local.hparams, **rule_hp}
    worker = Worker(_Work(local.recipe, failure), _WorkerStart(local.recipe, exchange.history), worker_params,
                    _stale_end_params if failure == "stale" else _end_params)
    return algorithm(name, hp, worker, Server(_Init(int(trace)), master_params,
                                              apply=_Apply(exchange.weights, failure, int(trace))),
                     validate=_Validate(name, tuple(sorted(local.hparams)), exchange.validate))


# --- synchronous EASGD (ablation) -------------------------------------------------------------------


def _sync_init(hparams, params, n):
    del hparams, n
    return params


def _identity_params(state):
    return state


def _sync_apply_round(hparams, master, messages: WorkerState, events: Event, mask):
    ok = mask & events.delivered
    alpha = jnp.asarray(hparams["alpha"])

    def leaf(xi, m):
        w = ok.reshape((-1,) + (1,) * (xi.ndim - 1))
        d = xi - m[None]
        return jnp.where(w, xi - alpha.astype(xi.dtype) * d, xi), m + alpha.astype(m.dtype) * jnp.sum(jnp.where(w, d, 0), 0)

    pairs = jax.tree.map(leaf, messages.params, master)
    new_x = jax.tree.map(lambda t: t[0], pairs, is_leaf=lambda t: isinstance(t, tuple))
    new_master = jax.tree.map(lambda t: t[1], pairs, is_leaf=lambda t: isinstance(t, tuple))
    nxt = messages._replace(params=new_x, grad_point=messages.params)  # eq. 5: the gradient at the pre-exchange point
    return new_master, nxt, {"exchanged": ok.astype(jnp.float32)}


@dataclasses.dataclass(frozen=True)
class _SyncWork:
    recipe: Any

    def __call__(self, hparams, point: WorkerState, oracle, key):
        return _local_job(self.recipe, hparams, point, oracle, key)


def sync_easgd(*, learning_rate: float = 0.01, alpha: float = 0.1, period: int = 1, local: Optional[Local] = None) -> Algorithm:
    """Synchronous EASGD: each round every worker runs τ local steps, then all exchange with the same
    master: xⁱ ← xⁱ − α (xⁱ − x̃), x̃ ← x̃ + α Σᵢ (xⁱ − x̃) (over the delivered workers). Needs a
    barrier schedule. The elastic symmetry needs n α < 1 for the master to stay a contraction.
    ``local`` replaces the default SGD(``learning_rate``) local optimiser."""
    local = local or sgd(learning_rate)
    hp = {"alpha": alpha, "period": period, **local.hparams}
    # u is not used by the synchronous rule: a history of 1
    worker = Worker(_SyncWork(local.recipe), _WorkerStart(local.recipe, 1), worker_params, _end_params)
    return algorithm("sync EASGD", hp, worker, Server(_sync_init, _identity_params, apply_round=_sync_apply_round),
                     validate=_Validate("sync_easgd", tuple(sorted(local.hparams)), synchronous=True))
