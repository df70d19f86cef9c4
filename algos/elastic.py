"""Elastic averaging (EASGD, EAMSGD; Zhang, Choromanska, LeCun 2015) with pluggable parts, and the
DEAHES-O family (Xu & Carr 2024, arXiv 2409.09242): docs/theory.md §9.

Three independent parts, composed by :func:`elastic_averaging` (which states the event model):

* the **local optimiser** (:class:`Local`): a recipe of :mod:`algos.local_steps` (SGD, EAMSGD's
  Nesterov step, AdaHessian, or any optax transformation) with the default values of the
  hyperparameters it reads; the worker's job is that module's :class:`~algos.local_steps.LocalSteps`;
* the **data split** (disjoint, or with a shared overlap ratio r): a property of the problem
  (:func:`sim.models.cnn_classifier` ``split=``), not of the algorithm;
* the **exchange rule** (:class:`Exchange`): the elastic weights (h1, h2) of each exchange, from
  the hyperparameters and the worker's :class:`ExchangeContext`: :func:`fixed_weights` (α, α),
  :func:`oracle_weights` (1, 0 after a failure, else α, α), DEAHES-O's :func:`dynamic_weights`
  (from the trend of the worker–master log-distance, :func:`dynamic`), or any function a user
  writes with the same signature.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax.tree_utils as otu

from delaylab.algos import adahessian as ah
from delaylab.algos.base import Algorithm, Event, HParams, Params, Server, Worker, algorithm
from delaylab.algos.local_steps import SGD, LocalSteps, OptaxRecipe

SEMANTICS = ("suppressed", "stale")


class Local(NamedTuple):
    """A worker's local optimiser: a recipe of :mod:`algos.local_steps` (it builds an optax
    transformation from the hyperparameters, so their values are traced) and the default values
    of the hyperparameters it reads, which become the algorithm's (``learning_rate``, ...)."""

    recipe: Any
    hparams: dict


@dataclasses.dataclass(frozen=True)
class OptaxTransform(OptaxRecipe):
    """A recipe around a ready-made optax transformation (its hyperparameters are constants of
    the transformation: build it once and reuse it, since a new one compiles anew)."""

    tx: Any

    def transform(self, hparams, start):
        del hparams, start
        return self.tx


def sgd(learning_rate: float) -> Local:
    return Local(SGD(learning_rate="learning_rate"), {"learning_rate": learning_rate})


@dataclasses.dataclass(frozen=True)
class ElasticNesterov:
    """EAMSGD's local step, Algorithm 2 of Zhang, Choromanska and LeCun (2015): with the velocity
    v (the optimiser state, kept across periods) and x the gradient point,

        g = ∇ℓ(x + δ v; ξ);  v ← δ v − η g;  xⁱ ← xⁱ + v.

    Written out rather than built from optax's ``sgd(nesterov=True)``: optax keeps the look-ahead
    point x + δv as its iterate (Sutskever et al.'s reformulation), and the elastic move acts on
    xⁱ; the two agree without exchanges but not across one."""

    learning_rate: str = "learning_rate"
    momentum: str = "momentum"

    def init(self, hparams, start):
        del hparams
        return jax.tree.map(jnp.zeros_like, start)

    def step(self, hparams, x, v, oracle, key, k, start, at=None):
        del k, start
        base = x if at is None else at
        delta = jnp.asarray(hparams[self.momentum])
        eta = jnp.asarray(hparams[self.learning_rate])
        _, g = oracle(jax.tree.map(lambda b, vi: b + delta.astype(vi.dtype) * vi, base, v), key)
        v = jax.tree.map(lambda vi, gi: delta.astype(vi.dtype) * vi - eta.astype(vi.dtype) * gi, v, g)
        return jax.tree.map(jnp.add, x, v), v, None


def nesterov(learning_rate: float, momentum: float) -> Local:
    """EAMSGD's local optimiser: Nesterov momentum δ as in the paper's Algorithm 2
    (:class:`ElasticNesterov`)."""
    return Local(ElasticNesterov(), {"learning_rate": learning_rate, "momentum": momentum})


def adahessian(learning_rate: float = 0.01, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-4,
               hessian_power: float = 1.0, weight_decay: float = 0.0, num_probes: int = 1,
               layout: Optional[str] = "HWIO") -> Local:
    """AdaHessian as the local optimiser (the paper: η = 0.01, β = (0.9, 0.999), one probe,
    spatial averaging; the authors' optimiser's ε, k and weight decay, 0: the paper states none).
    η is a hyperparameter (``learning_rate``); the other constants are the recipe's."""
    return Local(ah.AdaHessianRecipe("learning_rate", b1, b2, eps, hessian_power, weight_decay, num_probes, layout),
                 {"learning_rate": learning_rate})


def optax_local(tx) -> Local:
    """Any optax transformation as the local optimiser (its constants fixed; see
    :class:`OptaxTransform`)."""
    return Local(OptaxTransform(tx), {})


# --- exchange rules ---------------------------------------------------------------------------


class ExchangeContext(NamedTuple):
    """What an exchange rule may read about one exchange attempt (scalars, in the model's dtype).

    Attributes:
      alpha: α, the moving rate (``hparams["alpha"]``).
      trend: a, the trend of the worker–master log-distance u (0 until ``history`` values are held).
      failed_last: whether this worker's previous arrival was lost (the oracle rule's signal).
      worker: the worker's index.
    """

    alpha: jax.Array
    trend: jax.Array
    failed_last: jax.Array
    worker: jax.Array


def fixed_weights(hparams: HParams, ctx: ExchangeContext) -> tuple:
    """EASGD's rule: (h1, h2) = (α, α)."""
    del hparams
    return ctx.alpha, ctx.alpha


def oracle_weights(hparams: HParams, ctx: ExchangeContext) -> tuple:
    """(1, 0) on an exchange that follows a failure of the same worker, else (α, α) (EAHES-OM,
    the "full reset" reading: the worker is snapped onto the master, which ignores it)."""
    del hparams
    return jnp.where(ctx.failed_last, 1.0, ctx.alpha), jnp.where(ctx.failed_last, 0.0, ctx.alpha)


def oracle_master_side_weights(hparams: HParams, ctx: ExchangeContext) -> tuple:
    """(α, 0) on an exchange that follows a failure, else (α, α): the "master side only" reading
    of the oracle (the master ignores the returning worker, the worker is pulled as usual)."""
    del hparams
    return ctx.alpha, jnp.where(ctx.failed_last, 0.0, ctx.alpha)


@dataclasses.dataclass(frozen=True)
class DynamicWeights:
    """DEAHES-O's weight map, with every part the paper leaves open as a named axis [CHOICE]:

        a' = sign · a;   s = clip((a_start − a') / a0, 0, 1)
        h1 = α + (h1_cap − α) s,   h2 = α (1 − s).

    * ``sign`` (static): +1 reads a failure as a falling trend (a < 0, the paper's convention as
      summarised, and ours for a = −Σ c Δu); −1 the opposite.
    * ``a_start`` (hyperparameter ``a_start``, ≤ 0): where the ramp starts, i.e. the dead zone: 0
      (none: any negative trend acts), −a0, or the failure-free mean of a minus k standard
      deviations (calibrated from runs without failures, as the DEAHES figures do).
    * ``a0`` (hyperparameter, > 0): the ramp's length, from α to the cap.
    * ``h1_cap`` (hyperparameter, in [α, 1]): h1 at the ramp's end: 1 snaps the worker onto the
      master; α leaves the worker's pull alone and only lowers the master's (h2 → 0).
    """

    sign: int = 1

    def __post_init__(self):
        if self.sign not in (1, -1):
            raise ValueError(f"DynamicWeights: sign must be +1 or -1; got {self.sign!r}")

    def __call__(self, hparams: HParams, ctx: ExchangeContext) -> tuple:
        dt = ctx.alpha.dtype
        a = self.sign * ctx.trend
        s = jnp.clip((jnp.asarray(hparams["a_start"], dt) - a) / jnp.asarray(hparams["a0"], dt), 0.0, 1.0)
        cap = jnp.asarray(hparams["h1_cap"], dt)
        return ctx.alpha + (cap - ctx.alpha) * s, ctx.alpha * (1 - s)


def dynamic_weights(hparams: HParams, ctx: ExchangeContext) -> tuple:
    """DEAHES-O's rule with the paper's sign (:class:`DynamicWeights` ``sign=+1``)."""
    return DynamicWeights()(hparams, ctx)


def ramp_weights(a, alpha, a0):
    """(h1, h2): α each for a ≥ 0; toward (1, 0) linearly as a falls to −a0 (the map with no
    dead zone and cap 1)."""
    s = jnp.clip(-a / a0, 0.0, 1.0)
    return alpha + (1 - alpha) * s, alpha * (1 - s)


def _check_a0(name: str, hparams: HParams) -> None:
    if not np.all(np.asarray(hparams["a0"], dtype=np.float64) > 0):
        raise ValueError(f"{name}: a0 must be positive; got {hparams['a0']!r}")


def _check_dynamic(name: str, hparams: HParams) -> None:
    _check_a0(name, hparams)
    start = np.asarray(hparams["a_start"], dtype=np.float64)
    if not np.all(np.isfinite(start) & (start <= 0)):
        raise ValueError(f"{name}: a_start (where the ramp starts) must be finite and <= 0; got {hparams['a_start']!r}")
    cap, alpha = np.asarray(hparams["h1_cap"], dtype=np.float64), np.asarray(hparams["alpha"], dtype=np.float64)
    if not np.all((cap >= alpha) & (cap <= 1)):
        raise ValueError(f"{name}: h1_cap must be in [alpha, 1]; got {hparams['h1_cap']!r} (alpha = {hparams['alpha']!r})")


@dataclasses.dataclass(frozen=True)
class Exchange:
    """An exchange rule: ``weights(hparams, ctx) -> (h1, h2)`` (a module-level function or a
    frozen dataclass: it keys the compiled code), the number ``history`` of u values a worker
    keeps for the trend (p ≥ 2), the hyperparameters the rule reads with their defaults
    (``defaults``: ``((name, value), ...)``) and ``validate(name, hparams)`` for them."""

    weights: Callable
    history: int = 3
    defaults: tuple = ()
    validate: Optional[Callable] = None

    def __post_init__(self):
        h = self.history
        if isinstance(h, bool) or int(h) != h or h < 2:
            raise ValueError(f"exchange rule: history p must be an integer ≥ 2; got {h!r}")
        if not callable(self.weights):
            raise ValueError(f"exchange rule: weights must be a function (hparams, ctx) -> (h1, h2); got {self.weights!r}")


def fixed() -> Exchange:
    return Exchange(fixed_weights)


def oracle(master_side_only: bool = False) -> Exchange:
    """The oracle rule: full reset (:func:`oracle_weights`) or master side only
    (:func:`oracle_master_side_weights`)."""
    return Exchange(oracle_master_side_weights if master_side_only else oracle_weights)


def dynamic(history: int = 3, a0: float = 1.0, a_start: float = 0.0, h1_cap: float = 1.0, sign: int = 1) -> Exchange:
    """DEAHES-O's rule (:class:`DynamicWeights`); ``a0``, ``a_start`` and ``h1_cap`` become
    hyperparameters (traced: one compiled program serves every reading of them).

    Monitoring (a reconstruction, docs/theory.md §9.6). At each exchange attempt the worker
    computes u = log ‖xⁱ − θ̃ᵐ‖, θ̃ᵐ being its estimate of the master: the master it reads now if
    the exchange goes through, else the copy it last received. It keeps the last p = ``history``
    values and a = −Σⱼ cⱼ (u_{j+1} − u_j), c ∝ (1, 2, …, p−1) normalised to sum 1 (the newest
    difference weighted most; :func:`trend`); a failure makes u jump up, so a < 0 after one (the
    paper's sign convention). Until p values are held, a = 0. The weights are piecewise linear in
    a; with the ramp starting at a = 0 and h1 capped at 1 (the plainest reading; the default of
    :func:`deahes_o` starts the ramp at −a0 and caps h1 at 0.5, for the reason given there):

        h1(a) = α + (1 − α) min(1, max(0, −a/a0)),   h2(a) = α (1 − min(1, max(0, −a/a0))).

    ``a0`` is meant to be chosen from failure-free runs (a multiple of the spread of a there); the
    DEAHES figure does this and documents the multiple."""
    weights = dynamic_weights if sign == 1 else DynamicWeights(sign)
    return Exchange(weights, history, (("a0", a0), ("a_start", a_start), ("h1_cap", h1_cap)), _check_dynamic)


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


def detection_auc(state: EAState) -> dict:
    """The ROC AUC of −a as a score for "this exchange follows a failure", over the delivered
    attempts in the trace (ties count one half); with the counts of both classes. NaN when a
    class is empty. Accepts a sweep's state (leading run axes): one AUC per run."""
    a = np.asarray(state.trace_a, np.float64)
    follows = np.asarray(state.trace_follows, bool)
    ok = np.asarray(state.trace_delivered, bool)
    filled = np.arange(a.shape[-1]) < np.asarray(state.attempts)[..., None]
    lead = a.shape[:-1]
    auc = np.full(lead, np.nan)
    pos_n = np.zeros(lead, int)
    neg_n = np.zeros(lead, int)
    for idx in np.ndindex(*lead):
        keep = filled[idx] & ok[idx]
        score = -a[idx][keep]
        lab = follows[idx][keep]
        pos, neg = score[lab], score[~lab]
        pos_n[idx], neg_n[idx] = pos.size, neg.size
        if pos.size and neg.size:
            auc[idx] = auc_of(pos, neg)
    return {"auc": auc, "positives": pos_n, "negatives": neg_n}


def auc_of(pos: np.ndarray, neg: np.ndarray) -> float:
    """P(score of a positive > score of a negative) + ½ P(tie), by ranks (Mann–Whitney U)."""
    allv = np.concatenate([pos, neg])
    order = np.argsort(allv, kind="mergesort")
    ranks = np.empty(allv.size)
    sorted_v = allv[order]
    # average ranks over ties
    i = 0
    while i < allv.size:
        j = i
        while j + 1 < allv.size and sorted_v[j + 1] == sorted_v[i]:
            j += 1
        ranks[order[i:j + 1]] = 0.5 * (i + j) + 1
        i = j + 1
    u = ranks[: pos.size].sum() - pos.size * (pos.size + 1) / 2
    return float(u / (pos.size * neg.size))


# --- the paper's methods (docs/theory.md §9.4): each a composition of the three parts ------------------


def easgd(*, learning_rate: float = 0.01, alpha: float = 0.1, period: int = 1, failure: str = "suppressed",
          trace: int = 0) -> Algorithm:
    return elastic_averaging(sgd(learning_rate), alpha=alpha, period=period, failure=failure, trace=trace,
                             name="EASGD")


def eamsgd(*, learning_rate: float = 0.01, momentum: float = 0.5, alpha: float = 0.1, period: int = 1,
           failure: str = "suppressed", trace: int = 0) -> Algorithm:
    return elastic_averaging(nesterov(learning_rate, momentum), alpha=alpha, period=period, failure=failure,
                             trace=trace, name="EAMSGD")


def eahes(*, learning_rate: float = 0.01, alpha: float = 0.1, period: int = 1, failure: str = "suppressed",
          trace: int = 0, **adahessian_kw) -> Algorithm:
    """EASGD with AdaHessian workers. EAHES-O is the same algorithm on an overlapping split."""
    return elastic_averaging(adahessian(learning_rate, **adahessian_kw), alpha=alpha, period=period,
                             failure=failure, trace=trace, name="EAHES")


def eahes_om(*, learning_rate: float = 0.01, alpha: float = 0.1, period: int = 1, failure: str = "suppressed",
             trace: int = 0, **adahessian_kw) -> Algorithm:
    """The oracle: (h1, h2) = (1, 0) on an exchange that follows a failure (docs/theory.md §9.4; a reconstruction, §9.6)."""
    return elastic_averaging(adahessian(learning_rate, **adahessian_kw), alpha=alpha, period=period,
                             exchange=oracle(), failure=failure, trace=trace, name="EAHES-OM")


def deahes_o(*, learning_rate: float = 0.01, alpha: float = 0.1, a0: float = 1.0, a_start: Optional[float] = None,
             h1_cap: float = 0.5, history: int = 3, period: int = 1, failure: str = "suppressed", trace: int = 0,
             exchange: Optional[Exchange] = None, **adahessian_kw) -> Algorithm:
    """DEAHES-O: AdaHessian workers, dynamic weights (run it on an overlapping split). ``a0``,
    ``a_start`` and ``h1_cap`` are the weight map's readings (:class:`DynamicWeights`).

    Default reading [CHOICE]: the ramp starts at a = −a0 (``a_start=None``; a dead zone as wide as
    the ramp) and h1 rises to 0.5 at its end: the reading that passes the failure-free sanity
    check (without failures DEAHES-O must equal EAHES-O, mean h1 within 10% of α).
    `delaylab figure deahes-readings` compares the readings. The others fail the check: without
    a dead zone (ramp from a = 0, cap 1) the failure-free trend's ordinary dips fall inside the
    ramp when a0 is a couple of its standard deviations; with a dead zone of a0 and cap 1, a snap
    onto the master makes the worker's distance grow back, the trend dips, and the rule fires
    again.
    ``exchange`` replaces the dynamic rule by another."""
    if a_start is None:
        a_start = -a0
    if exchange is None:
        rule = dynamic(history, a0=a0, a_start=a_start, h1_cap=h1_cap)
        return elastic_averaging(adahessian(learning_rate, **adahessian_kw), alpha=alpha, period=period,
                                 exchange=rule, failure=failure, trace=trace, name="DEAHES-O")
    return elastic_averaging(adahessian(learning_rate, **adahessian_kw), alpha=alpha, period=period,
                             exchange=exchange, failure=failure, a0=a0 if "a0" in dict(exchange.defaults) else None,
                             trace=trace, name="DEAHES-O")


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
