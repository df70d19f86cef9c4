"""Grouping synchronous parallel (GSP/GSSP; Gui et al., docs/theory.md §10.4), the rule of the
authors' code with its evident intent (the forwarding that the released code never triggers).

Workers are split into groups by speed. Each group has its own parameter server holding its own
model x_g. A worker of group g computes a gradient at x_g (pulled when it starts) and pushes it;
the group server applies it at once, x_g ← x_g − γ g / n (n = all workers, as the code divides
by n_total = 16). Every ``forward_every`` pushes a group server sends the sum of the gradients it
applied since its last forward to every other group server, which applies it at once, x_h ←
x_h − γ Σ / n (the ``peer`` topology of the code; :func:`gsp` also offers the abstract's global server).
Within a group, stale synchronous parallel with bound s decides when a worker may start: run it
on ``sim.schedules.stale_synchronous`` with the same groups. The optimiser is plain SGD (the code
uses momentum 0.9 and weight decay 5e-4). Grouping Dynamic Sparsification (GDS) is not built.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from delaylab.algos import _checks
from delaylab.algos.base import Algorithm, Event, HParams, Params, Server, Worker, algorithm
from delaylab.theory import linalg


class GSPState(NamedTuple):
    models: Params  # [G, ...], one model per group server
    pending: Params  # [G, ...], gradients applied since the group's last forward
    pushes: jax.Array  # int32 [G], pushes applied since the group's last forward
    global_model: Params = None  # the global server's model (topology "global_ps" only)


def groups_by_speed(taus, num_groups: int) -> np.ndarray:
    """Group indices from speed: sort workers by τ_i and cut into ``num_groups`` consecutive
    blocks of (nearly) equal size, fastest first (a simple stand-in for the paper's density-based
    clustering [INFERRED])."""
    _checks.check_taus("groups_by_speed", taus)
    t = np.asarray(taus, np.float64)
    G = _checks.check_int("groups_by_speed", "num_groups", num_groups)
    if G > t.shape[0]:
        raise ValueError(f"groups_by_speed: num_groups {G} exceeds the {t.shape[0]} workers")
    order = np.argsort(t, kind="stable")
    out = np.empty(t.shape[0], np.int32)
    for g, block in enumerate(np.array_split(order, G)):
        out[block] = g
    return out


def _global_model(s: "GSPState") -> Params:
    return s.global_model


def _mean_of_groups(s: "GSPState") -> Params:
    return jax.tree.map(linalg.leading_mean, s.models)


@dataclasses.dataclass(frozen=True)
class _Init:
    num_groups: int
    topology: str

    def __call__(self, hparams, params, n):
        G = self.num_groups
        stack = lambda v: jnp.broadcast_to(v, (G,) + jnp.shape(v))  # noqa: E731
        return GSPState(jax.tree.map(stack, params), jax.tree.map(lambda v: jnp.zeros((G,) + jnp.shape(v), v.dtype), params),
                        jnp.zeros((G,), jnp.int32), params if self.topology == "global_ps" else None)


@dataclasses.dataclass(frozen=True)
class _Apply:
    """One push (module docstring, :func:`gsp`): ``groups`` one group index per worker, P = ``forward_every``."""

    groups: tuple
    forward_every: int
    topology: str

    def __call__(self, hparams: HParams, s: "GSPState", grad: Params, event: Event):
        G, P, topology = max(self.groups) + 1, self.forward_every, self.topology
        group_j = jnp.asarray(self.groups, jnp.int32)
        ok = event.delivered
        n = len(self.groups)
        k = group_j[event.worker]
        own = jax.nn.one_hot(k, G) * ok  # [G]
        lr = jnp.asarray(hparams["stepsize"]) / n

        def own_row(g):  # [G, ...]: the gradient in group k's row, zeros elsewhere
            return own.astype(g.dtype).reshape((G,) + (1,) * g.ndim) * g[None]

        models = jax.tree.map(lambda x, g: x - lr.astype(x.dtype) * own_row(g), s.models, grad)
        pending = jax.tree.map(lambda p, g: p + own_row(g), s.pending, grad)
        pushes = s.pushes + own.astype(jnp.int32)
        fwd = ok & (pushes[k] % P == 0)
        glob = s.global_model
        if topology == "global_ps":
            glob = jax.tree.map(lambda x, p: jnp.where(fwd, x - lr.astype(x.dtype) * p[k], x), glob, pending)
            models = jax.tree.map(lambda m, x: m.at[k].set(jnp.where(fwd, x, m[k])), models, glob)
        else:
            others = (1.0 - jax.nn.one_hot(k, G)) * fwd  # [G]

            def forward(x, p):
                sent = p[k]
                return x - lr.astype(x.dtype) * others.astype(x.dtype).reshape((G,) + (1,) * sent.ndim) * sent[None]

            models = jax.tree.map(forward, models, pending)
        keep = 1.0 - jax.nn.one_hot(k, G) * fwd
        pending = jax.tree.map(lambda p: keep.astype(p.dtype).reshape((G,) + (1,) * (p.ndim - 1)) * p, pending)
        pushes = jnp.where(fwd, pushes.at[k].set(0), pushes)
        nxt = jax.tree.map(lambda x: x[k], models)
        return GSPState(models, pending, pushes, glob), nxt, {"forwarded": fwd.astype(jnp.float32)}


@dataclasses.dataclass(frozen=True)
class _Validate:
    num_workers: int

    def __call__(self, hparams, n):
        _checks.check_stepsize("gsp", hparams["stepsize"])
        if n and n != self.num_workers:
            raise ValueError(f"gsp: groups gives {self.num_workers} workers but the problem has {n}")


TOPOLOGIES = ("peer", "global_ps")


def gsp(*, stepsize: float, groups, forward_every: int = 4, topology: str = "peer") -> Algorithm:
    """GSP (see the module docstring).

    Under ``peer`` the model the metrics see is the mean of the group models. A lost push (or a
    release event of the SSP schedule, which carries no result) changes nothing; the worker is
    handed its group's current model. Degenerate cases: one group, or ``forward_every = 1`` (every
    push reaches every group at once), is vanilla ASGD with step γ / n; under ``global_ps``,
    ``forward_every = 1`` is too, and with one group the group model is.

    Args:
      stepsize: γ ≥ 0. groups: one group index per worker (0..G−1, each used).
      forward_every: P ≥ 1, pushes between a group server's forwards to the others.
      topology: ``"peer"`` (group servers forward to each other; the code) or ``"global_ps"``
        (they forward to a global server and take its model back; the abstract).
    """
    if topology not in TOPOLOGIES:
        raise ValueError(f"gsp: topology must be one of {list(TOPOLOGIES)}; got {topology!r}")
    group = np.asarray(groups)
    if group.ndim != 1 or not np.issubdtype(group.dtype, np.integer) or group.size == 0:
        raise ValueError(f"gsp: groups must be a 1-D array of group indices, one per worker; got {groups!r}")
    G = int(group.max()) + 1
    if group.min() < 0 or set(np.unique(group).tolist()) != set(range(G)):
        raise ValueError(f"gsp: groups must use the indices 0..G−1, each at least once; got {sorted(set(group.tolist()))}")
    P = _checks.check_int("gsp", "forward_every", forward_every)
    groups_t = tuple(int(g) for g in group)
    params = _global_model if topology == "global_ps" else _mean_of_groups
    return algorithm(f"gsp_{topology}" if topology != "peer" else "gsp", {"stepsize": stepsize}, Worker(),
                     Server(_Init(G, topology), params, apply=_Apply(groups_t, P, topology)),
                     validate=_Validate(len(groups_t)))
