"""Worker-Busy Synchronous Parallel (WBSP; Yang et al., Parallel Computing 2024;
docs/theory.md §10.2), the rule of the authors' parameter-server code.

Every worker takes one SGD step of size γ on its *own* model, y_i ← y_i − γ ∇f_i(y_i; ξ), and
pushes its change since its last push, Δ_i = −γ ∇f_i(y_i; ξ). The server applies every push at
once, x ← x + Δ_i / n, with no staleness factor. When the designated slow worker pushes, the
server raises a pull flag for every worker; a worker whose flag is up when it pushes pulls the
server model (y_i ← x, flag down) and otherwise goes on from its own y_i, without waiting. So
the slow worker pulls after each of its pushes, and a fast worker pulls on its first push after
a slow one, getting a model that already holds that push; a worker tied with the slow one in
time but ordered before it (ties break by worker index) pulls one push later.
A lost push (a failure) is not applied; the worker then restarts from the server model, as a
worker that lost its state would. With one worker WBSP is SGD with step γ.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from delaylab.algos import _checks
from delaylab.algos.base import Algorithm, Event, HParams, Params, Server, Worker, algorithm, state_params


class WBSPState(NamedTuple):
    params: Params  # x, the server model
    pull: jax.Array  # bool [n], pull flags


class WBSPMessage(NamedTuple):
    end: Params  # y_i after the step
    delta: Params  # Δ_i = the step's change


def _work(hparams: HParams, point: Params, oracle, key) -> WBSPMessage:
    _, g = oracle(point, key)
    lr = jnp.asarray(hparams["stepsize"])
    delta = jax.tree.map(lambda gg: -lr.astype(gg.dtype) * gg, g)
    return WBSPMessage(jax.tree.map(jnp.add, point, delta), delta)


def _end(point: Params, msg: WBSPMessage) -> Params:
    """The model a worker holds after its step (before a pull replaces it)."""
    del point
    return msg.end


def _init(hparams, params, n):
    return WBSPState(params, jnp.zeros((n,), bool))


def _apply(hparams: HParams, s: WBSPState, msg: WBSPMessage, event: Event):
    ok = event.delivered
    n = s.pull.shape[0]
    x = jax.tree.map(lambda a, d: jnp.where(ok, a + d / n, a), s.params, msg.delta)
    is_slow = event.worker == jnp.asarray(hparams["slowest"])
    pull = jnp.where(ok & is_slow, jnp.ones_like(s.pull), s.pull)
    pulls = pull[event.worker] | ~ok
    pull = pull.at[event.worker].set(pull[event.worker] & ~pulls)
    nxt = jax.tree.map(lambda xx, y: jnp.where(pulls, xx, y), x, msg.end)
    return WBSPState(x, pull), nxt, {"pulled": pulls.astype(jnp.float32), "weight": jnp.where(ok, 1.0 / n, 0.0)}


def _validate(hparams: HParams, num_workers: int | None) -> None:
    _checks.check_stepsize("wbsp", hparams["stepsize"])
    slow = np.asarray(hparams["slowest"])
    if (not np.issubdtype(slow.dtype, np.integer) or np.any(slow < 0)
            or (num_workers and np.any(slow >= num_workers))):
        allowed = f"0..{num_workers - 1}" if num_workers else "a worker index >= 0"
        raise ValueError(f"wbsp: slowest must be a worker index ({allowed}); got {hparams['slowest']!r}")


def slowest_worker(schedule) -> int:
    """The worker with the longest mean job duration in ``schedule`` (lowest index on ties)."""
    return int(np.argmax(np.asarray(schedule.mean_durations)))


def wbsp(*, stepsize: float, slowest: int) -> Algorithm:
    """WBSP (see the module docstring) on an asynchronous schedule of one-step jobs.

    Args:
      stepsize: γ ≥ 0, each worker's local SGD step.
      slowest: the index of the worker whose pushes open the pull window, an argument rather
        than a fixed index as in the authors' code (worker 1): :func:`slowest_worker` takes it
        from the schedule's measured speeds.
    """
    return algorithm("wbsp", {"stepsize": stepsize, "slowest": slowest}, Worker(_work, after_job=_end),
                     Server(_init, state_params, apply=_apply), validate=_validate)
