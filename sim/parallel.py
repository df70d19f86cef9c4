"""Laying a sweep's runs over devices and hosts.

A sweep's runs (hyperparameter values × seeds, flattened to one axis, hyperparameter-major) are
independent, so they are split over a one-axis device mesh (axis name ``"runs"``) with
``jax.shard_map``; the problem's data, the schedule and the plan are replicated. Each device takes
its share in groups of ``run_batch`` runs, one group after another, each group batched (``vmap``,
or ``lax.map`` with :func:`sim.sweep`'s ``runs="map"``): the group width, not the number of
devices, decides the arithmetic (:func:`default_run_batch`).

When the number of runs does not divide the number of devices, the last run is repeated up to the
next multiple and the copies are dropped from the result. With ``jax.distributed.initialize()``
called first, ``jax.devices()`` lists every host's devices, the mesh spans them all, each host
holds its share of the runs, and the results are gathered on every host.
"""

from __future__ import annotations

from typing import Optional, Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

AXIS = "runs"


def mesh(devices: Optional[Sequence] = None) -> Mesh:
    """A one-axis mesh over ``devices`` (default: every device of every host, ``jax.devices()``)."""
    devs = list(jax.devices() if devices is None else devices)
    if not devs:
        raise ValueError("devices: need at least one device")
    if len({d.platform for d in devs}) != 1:
        raise ValueError(f"devices: all must be of one platform; got {sorted({d.platform for d in devs})}")
    return Mesh(np.asarray(devs, dtype=object), (AXIS,))


def default_run_batch(runs: int) -> int:
    """How many runs each device batches at once by default: its share when the runs are spread
    over every device (``jax.device_count()``, all hosts'). The width decides the bits (XLA picks
    kernels by batch width), so tying it to the machine rather than to the devices a sweep uses
    makes a sweep on any subset of the devices match one on all of them, bit for bit."""
    return max(1, -(-runs // jax.device_count()))


def padded_size(runs: int, num_devices: int) -> int:
    """The smallest multiple of ``num_devices`` that is at least ``runs``."""
    return -(-runs // num_devices) * num_devices


def pad_runs(tree, size: int):
    """Each leaf's leading (runs) axis extended to ``size`` by repeating its last entry."""

    def pad(x):
        x = np.asarray(x)
        extra = size - x.shape[0]
        if extra < 0:
            raise ValueError(f"cannot pad {x.shape[0]} runs down to {size}")
        return x if extra == 0 else np.concatenate([x, np.repeat(x[-1:], extra, axis=0)])

    return jax.tree.map(pad, tree)


def _place(x, m: Mesh, spec: PartitionSpec):
    sharding = NamedSharding(m, spec)
    if jax.process_count() == 1:
        return jax.device_put(x, sharding)
    # Several hosts: every host holds the whole host array and hands each of its devices its part.
    x = np.asarray(x)
    return jax.make_array_from_callback(x.shape, sharding, lambda index: x[index])


def split_runs(tree, m: Mesh):
    """Leaves with a leading runs axis (a multiple of the mesh size), laid over ``m``."""
    return jax.tree.map(lambda x: _place(x, m, PartitionSpec(AXIS)), tree)


def replicate(tree, m: Mesh):
    """Leaves every device needs whole. On one host jit places them itself: left as they are."""
    if jax.process_count() == 1:
        return tree
    return jax.tree.map(lambda x: _place(x, m, PartitionSpec()), tree)


def to_host(tree):
    """NumPy copies of (possibly sharded) arrays; across hosts, gathered on every host."""
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        return jax.tree.map(np.asarray, multihost_utils.process_allgather(tree, tiled=True))
    return jax.tree.map(np.asarray, tree)
