"""Server-side corrections of an arriving message, one combinator for every family.

:func:`server_correction` wraps any :class:`algos.base.Algorithm`: before the server handles an
arrival, a :class:`Correction` rewrites the message, seeing the model now, the model the job
started from and, if it keeps any, a memory of its own for the arriving worker. Clipping is one;
delay compensation (DC-ASGD, Zheng et al. 2017; notebooks/dc_asgd.py) is a researcher's own.
What theory predicts for a corrected method: docs/theory.md, "New methods".
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import optax

from delaylab.algos.base import Algorithm, Event, HParams, Params, Server, Worker, algorithm

PyTree = Any


def no_memory(hparams: HParams, params: Params) -> tuple:
    """A correction that keeps nothing between arrivals."""
    del hparams, params
    return ()


class Correction(NamedTuple):
    """A server-side correction of an arriving message.

    Attributes:
      apply: ``(hparams, memory, message, start, now, event) -> (message, memory)``: the corrected
        message and the arriving worker's new memory. ``start`` is the model the job started from
        (the worker's ``worker.params`` of the point it was handed; None when ``sees_start`` is
        False), ``now`` the server model at the arrival. On a lost result (``event.delivered``
        False) the memory is kept as it was, whatever ``apply`` returns.
      init: ``(hparams, params) -> memory`` of one worker, given the initial model; the
        combinator keeps one per worker (stacked on a leading worker axis).
      validate: ``(hparams, num_workers) -> None``, raising ValueError for bad values of the
        correction's own hyperparameters (num_workers None at construction).
      sees_start: whether ``apply`` reads ``start``; if not, jobs do not send it.

    Every function should be module-level (or a frozen dataclass), so that two corrected
    algorithms differing only in hyperparameter values share one compiled program.
    """

    apply: Callable
    init: Callable = no_memory
    validate: Optional[Callable] = None
    sees_start: bool = True


class CorrectedState(NamedTuple):
    inner: PyTree  # the wrapped algorithm's server state
    memory: PyTree  # the correction's memory, stacked on a leading worker axis [n, ...]


@dataclasses.dataclass(frozen=True)
class _Job:
    job: Callable
    params: Callable
    sees_start: bool

    def __call__(self, hparams, point, oracle, key):
        message = self.job(hparams, point, oracle, key)
        return message, (self.params(point) if self.sees_start else None)


@dataclasses.dataclass(frozen=True)
class _AfterJob:
    after_job: Callable

    def __call__(self, point, message):
        return self.after_job(point, message[0])


@dataclasses.dataclass(frozen=True)
class _Init:
    init: Callable
    memory_init: Callable

    def __call__(self, hparams, params, num_workers):
        memory = self.memory_init(hparams, params)
        stacked = jax.tree.map(lambda m: jnp.broadcast_to(jnp.asarray(m), (num_workers,) + jnp.shape(m)), memory)
        return CorrectedState(self.init(hparams, params, num_workers), stacked)


@dataclasses.dataclass(frozen=True)
class _Params:
    params: Callable

    def __call__(self, state: CorrectedState):
        return self.params(state.inner)


def _set_rows(memory, workers, rows, keep):
    """memory[workers] ← rows where ``keep`` (one worker, or a leading slot axis). Rows not kept
    are sent out of bounds and dropped, so a padding slot that repeats a real slot's worker
    cannot overwrite its row."""
    def one(m, r):
        return m.at[jnp.where(keep, workers, m.shape[0])].set(r.astype(m.dtype), mode="drop")

    return jax.tree.map(one, memory, rows)


@dataclasses.dataclass(frozen=True)
class _Apply:
    apply: Callable
    params: Callable
    correct: Callable

    def __call__(self, hparams, state: CorrectedState, message, event: Event):
        message, start = message
        now = self.params(state.inner)
        mine = jax.tree.map(lambda m: m[event.worker], state.memory)
        message, updated = self.correct(hparams, mine, message, start, now, event)
        memory = _set_rows(state.memory, event.worker, updated, event.delivered)
        inner, point, stats = self.apply(hparams, state.inner, message, event)
        return CorrectedState(inner, memory), point, stats


@dataclasses.dataclass(frozen=True)
class _ApplyRound:
    apply_round: Callable
    params: Callable
    correct: Callable

    def __call__(self, hparams, state: CorrectedState, messages, events: Event, mask):
        messages, starts = messages
        now = self.params(state.inner)
        mine = jax.tree.map(lambda m: m[events.worker], state.memory)
        messages, updated = jax.vmap(self.correct, in_axes=(None, 0, 0, 0, None, 0))(
            hparams, mine, messages, starts, now, events)
        memory = _set_rows(state.memory, events.worker, updated, mask & events.delivered)
        inner, points, stats = self.apply_round(hparams, state.inner, messages, events, mask)
        return CorrectedState(inner, memory), points, stats


@dataclasses.dataclass(frozen=True)
class _Validate:
    """The wrapped algorithm's checks, then the correction's, its messages prefixed with the name."""

    inner: Optional[Callable]
    own: Callable
    name: str

    def __call__(self, hparams, num_workers):
        if self.inner is not None:
            self.inner(hparams, num_workers)
        try:
            self.own(hparams, num_workers)
        except ValueError as err:
            raise ValueError(f"{self.name}: {err}") from None


def server_correction(alg: Algorithm, correction: Correction, *, hparams: Optional[dict] = None,
                      name: Optional[str] = None) -> Algorithm:
    """``alg`` with every arriving message first rewritten by ``correction``.

    Args:
      alg: any algorithm (one-arrival or round-based).
      correction: a :class:`Correction`.
      hparams: the correction's own hyperparameters (added to ``alg``'s; a name both use is refused).
      name: the new algorithm's name (default ``alg.name + "+correction"``).

    The worker's job sends ``(message, start)`` where ``start`` is the model it started from; the
    server corrects the message, updates the worker's memory, then runs ``alg``'s handler on the
    corrected message. Everything else (the schedule check, what telemetry reads) is ``alg``'s.
    """
    if not isinstance(alg, Algorithm):
        raise TypeError(f"server_correction: alg must be a delaylab.algos.Algorithm; got {type(alg).__name__}")
    if not isinstance(correction, Correction):
        raise TypeError(f"server_correction: correction must be a delaylab.algos.Correction; got {type(correction).__name__}")
    own = dict(hparams or {})
    clash = sorted(set(own) & set(alg.hparams))
    if clash:
        raise ValueError(f"server_correction: hyperparameters {clash} are already {alg.name}'s; name them otherwise")
    w, s = alg.worker, alg.server
    worker = Worker(job=_Job(w.job, w.params, bool(correction.sees_start)), start=w.start, params=w.params,
                    after_job=_AfterJob(w.after_job))
    server = Server(
        init=_Init(s.init, correction.init), params=_Params(s.params),
        apply=None if s.apply is None else _Apply(s.apply, s.params, correction.apply),
        apply_round=None if s.apply_round is None else _ApplyRound(s.apply_round, s.params, correction.apply))
    name = name or f"{alg.name}+correction"
    validate = alg.validate if correction.validate is None else _Validate(alg.validate, correction.validate, name)
    return algorithm(name, {**alg.hparams, **own}, worker, server, validate=validate,
                     check_schedule=alg.check_schedule)


# --- clipping -------------------------------------------------------------------------------------


def clip_message(hparams: HParams, memory, message, start, now, event):
    """clip_c(m) = min(1, c/‖m‖) · m, ‖·‖ the Euclidean norm over all leaves (c = ``threshold``)."""
    del start, now, event
    norm = optax.tree_utils.tree_norm(message)
    c = jnp.asarray(hparams["threshold"])
    scale = jnp.where(norm > c, c / jnp.where(norm > 0, norm, 1), 1.0)
    return jax.tree.map(lambda g: g * scale.astype(g.dtype), message), memory


def _validate_threshold(hparams: HParams, num_workers) -> None:
    del num_workers
    c = jnp.asarray(hparams["threshold"])
    if not bool(jnp.all(jnp.isfinite(c))) or bool(jnp.any(c <= 0)):
        raise ValueError(f"threshold must be positive and finite; got {hparams['threshold']!r}")


clipping = Correction(clip_message, validate=_validate_threshold, sees_start=False)
"""Clip every arriving message to Euclidean length ``threshold`` (any family: gradients, deltas)."""


def clipped(alg: Algorithm, *, threshold: float) -> Algorithm:
    """``alg`` with every arriving message clipped to length ``threshold``."""
    return server_correction(alg, clipping, hparams={"threshold": threshold}, name=f"clipped_{alg.name}")
