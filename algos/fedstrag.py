"""FedStrag: weighted averaging of stale results in time-bounded rounds (Kumar and Srirama 2025;
docs/theory.md §10.6, the rule as the authors' server and client code it).

Timing comes from :func:`sim.schedules.time_bounded_rounds`: the server broadcasts model k, checks
its queue every few seconds, and at the first check that finds a result it aggregates every queued
result into model k + 1 and broadcasts that. Each client works through its backlog of broadcasts
in order, so a slow client trains on ever older models; each result carries the tag of the
broadcast it was trained from (``event.tag``).

Worker: H steps of SGD of size η from the broadcast model (a fresh minibatch of its own data each
step); it sends the model it ends at, w_j. Server: when the round closes (``event.round_end``),
model k + 1 is Σ_j c_j w_j / Σ_j c_j over the round's results, with weights c_j that fall with
staleness (:func:`fedstrag`); it replaces model k, with no mixing in of the previous model.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from delaylab.algos import _checks
from delaylab.algos.base import Algorithm, Event, HParams, Params, Server, Worker, algorithm
from delaylab.algos.local_steps import SGD, LocalSteps, message_is_model

WEIGHTINGS = ("fedstrag", "equal")


class FedStragState(NamedTuple):
    history: Params  # [history, ...]: broadcast t sits in row t mod history; the model is row k
    round: jax.Array  # int32 k
    acc: Params  # Σ c_j w_j over the open round
    weight: jax.Array  # Σ c_j over the open round


def fedstrag_history(schedule) -> int:
    """How many past broadcasts the server must keep for ``schedule``: the largest backlog, over
    events, between the latest broadcast and the tag of the job the event's worker starts next."""
    if schedule.tag is None:
        raise ValueError("fedstrag needs a schedule whose events carry broadcast tags: build it with "
                         "delaylab.sim.schedules.time_bounded_rounds")
    k_after = np.cumsum(schedule.round_end)  # broadcasts made once each event is handled
    return int(max(1, np.max(k_after - schedule.tag)))


@dataclasses.dataclass(frozen=True)
class _Apply:
    """The server's handling of one result (:func:`fedstrag`), for one weighting and history size."""

    weighting: str
    size: int

    def __call__(self, hparams: HParams, s: FedStragState, w: Params, event: Event):
        size = self.size
        ok = event.delivered
        behind = (s.round - event.tag).astype(s.weight.dtype)  # broadcasts made since r_j
        c = 1.0 / (behind + 2.0) if self.weighting == "fedstrag" else jnp.ones_like(behind)
        c = jnp.where(ok, c, 0.0)
        acc = jax.tree.map(lambda a, z: a + c.astype(a.dtype) * z, s.acc, w)
        total = s.weight + c
        close = event.round_end
        use = close & (total > 0)  # a round whose results were all lost keeps the model
        safe = jnp.where(use, total, 1.0)
        k = s.round + close.astype(s.round.dtype)
        row = k % size  # model k + 1's row if the round closes; else model k's, left as it is

        def write(a, h):
            x = jnp.where(use, a / safe.astype(a.dtype), h[s.round % size])
            return h.at[row].set(jnp.where(close, x, h[row]))

        history = jax.tree.map(write, acc, s.history)
        acc = jax.tree.map(lambda a: jnp.where(close, jnp.zeros_like(a), a), acc)
        total = jnp.where(close, jnp.zeros_like(total), total)
        # The worker's next job is on broadcast tag + 1 if it exists already; otherwise it waits,
        # and the release event at the broadcast hands it the model then (tag + 1 = k there).
        nxt = jnp.minimum(event.tag + 1, k) % size
        point = jax.tree.map(lambda h: h[nxt], history)
        stats = {"weight": c, "rounds_behind": jnp.where(ok, behind, 0.0)}
        return FedStragState(history, k, acc, total), point, stats


@dataclasses.dataclass(frozen=True)
class _Init:
    size: int

    def __call__(self, hparams, params, n):
        history = jax.tree.map(lambda a: jnp.broadcast_to(a, (self.size,) + a.shape), params)
        zero = jnp.zeros((), jnp.result_type(*[a.dtype for a in jax.tree.leaves(params)]))
        return FedStragState(history, jnp.zeros((), jnp.int32), jax.tree.map(jnp.zeros_like, params), zero)


@dataclasses.dataclass(frozen=True)
class _Model:
    """The server model: model k, in row k mod ``size`` of the history."""

    size: int

    def __call__(self, s: FedStragState):
        return jax.tree.map(lambda h: h[s.round % self.size], s.history)


@dataclasses.dataclass(frozen=True)
class _CheckSchedule:
    size: int

    def __call__(self, schedule) -> None:
        need = fedstrag_history(schedule)
        if need > self.size:
            raise ValueError(f"fedstrag: this schedule has a client {need} broadcasts behind, but the server "
                             f"keeps {self.size}; pass history=algos.fedstrag_history(schedule) (= {need})")


_WORK = LocalSteps(SGD(), output="end")  # H SGD steps from the broadcast model; sends the end point


def _validate(hparams: HParams, num_workers: int) -> None:
    _checks.check_stepsize("fedstrag", hparams["local_stepsize"], argument="local_stepsize")
    _checks.check_int_hparam("fedstrag", hparams, "local_steps")


def fedstrag(*, local_stepsize: float, history: int, local_steps: int = 1, weighting: str = "fedstrag") -> Algorithm:
    """FedStrag (see the module docstring); run it on a :func:`sim.schedules.time_bounded_rounds`
    schedule.

    Result j, trained from broadcast r_j, gets weight c_j = 1/(r − r_j + 1), where r = k + 1 is the
    server's counter once broadcast k went out (the code increments it right after broadcasting),
    so a result trained from the latest broadcast has c = ½ and one trained from the broadcast
    before it c = ⅓. A round whose results were all lost keeps the model. Deviation, named: the
    code trains E epochs on the client's next C stream samples; here a job is H SGD steps on
    minibatches drawn from the client's shard (``local_steps``).

    Args:
      local_stepsize: η ≥ 0 (sweepable). local_steps: H ≥ 1.
      history: broadcasts the server keeps (≥ 1), since a client with a backlog of b broadcasts
        needs the model from b rounds ago; ``fedstrag_history(schedule)`` gives what a schedule
        needs, and ``sim.run`` refuses a schedule that needs more (before compiling).
      weighting: ``"fedstrag"`` (c = 1/(r − r_j + 1), the default here: the released code's
        commented-out alternative) or ``"equal"`` (c = 1: what the released code's ``main`` calls,
        plain ``fedAvg``, stale results included).
    """
    if weighting not in WEIGHTINGS:
        raise ValueError(f"fedstrag: weighting must be one of {list(WEIGHTINGS)}; got {weighting!r}")
    size = _checks.check_int("fedstrag", "history", history)
    hp = {"local_stepsize": local_stepsize, "local_steps": _checks.check_int("fedstrag", "local_steps", local_steps)}
    return algorithm(f"fedstrag_{weighting}", hp, Worker(_WORK, after_job=message_is_model),
                     Server(_Init(size), _Model(size), apply=_Apply(weighting, size)),
                     validate=_validate, check_schedule=_CheckSchedule(size))
