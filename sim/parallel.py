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


def over_runs(mode: str, mesh: Mesh, run_batch: int, fn):
    """``fn(hparams, key, carry, shared)`` for one run → the same over a flat runs axis laid over
    ``mesh``. Each device takes its runs in groups of ``run_batch``, one group after another
    (``lax.map``); a group's runs are batched with ``vmap`` (``mode="vmap"``), or computed one after
    another too (``"map"``: for convolutions on CPU, batching runs whose kernels differ is slower
    than a loop; benchmarks/RESULTS.md). ``shared`` is replicated.

    Why groups: XLA picks kernels (matmul blockings, reduction orders) by the batch width, so the
    same run batched 16-wide and 2-wide can differ in the last bits; with the width fixed, every
    run's arithmetic is the same whatever the number of devices."""

    def local(h, k, c, shared):
        def group(args):
            h, k, c = args
            if mode == "map":
                return jax.lax.map(lambda a: fn(*a, shared), (h, k, c))
            return jax.vmap(fn, in_axes=(0, 0, 0, None))(h, k, c, shared)

        G = k.shape[0] // run_batch  # explicit sizes: a leaf may have a zero-size axis
        groups = jax.tree.map(lambda v: v.reshape((G, run_batch) + v.shape[1:]), (h, k, c))
        out = jax.lax.map(group, groups)
        return jax.tree.map(lambda v: v.reshape((G * run_batch,) + v.shape[2:]), out)

    runs = PartitionSpec(AXIS)
    return jax.shard_map(local, mesh=mesh, in_specs=(runs, runs, runs, PartitionSpec()), out_specs=runs,
                         check_vma=False)


class Runs:
    """A sweep's H × S runs as one flat axis (hyperparameter-major), padded to a multiple of
    devices × ``run_batch`` and laid over the devices; :meth:`unflatten` drops the padding and
    restores [H, S]. ``hparams`` (every leaf with a leading H axis) and ``keys`` (a batch of S
    PRNG keys) are held as laid out; ``key_impl`` names the keys' implementation (their raw data
    travel, and the compiled program wraps them back)."""

    def __init__(self, hp: dict, keys, devices, run_batch: Optional[int]):
        import jax.numpy as jnp

        self.mesh = mesh(devices)
        self.H = int(jax.tree.leaves(hp)[0].shape[0])
        typed = jnp.issubdtype(keys.dtype, jax.dtypes.prng_key)
        self.key_impl = str(jax.random.key_impl(keys)) if typed else None
        data = np.asarray(jax.random.key_data(keys) if typed else keys)
        self.S = data.shape[0]
        self.R = self.H * self.S
        D = self.mesh.size
        if run_batch is None:  # the width a sweep over all of this machine's devices gives each
            run_batch = default_run_batch(self.R)
        elif isinstance(run_batch, bool) or not isinstance(run_batch, (int, np.integer)) or run_batch < 1:
            raise ValueError(f"run_batch must be a whole number of runs >= 1 (this sweep has {self.R}); got {run_batch!r}")
        self.run_batch = int(run_batch)
        self.padded = size = padded_size(self.R, D * self.run_batch)
        flat_h = {k: np.repeat(np.asarray(v), self.S, axis=0) for k, v in hp.items()}
        flat_k = np.tile(data, (self.H,) + (1,) * (data.ndim - 1))
        self.hparams, self.keys = split_runs(pad_runs((flat_h, flat_k), size), self.mesh)

    def unflatten(self, tree):
        return jax.tree.map(lambda v: v[: self.R].reshape((self.H, self.S) + v.shape[1:]), tree)

    def to_host(self, tree):
        """NumPy copies, the padding runs dropped (flat runs axis)."""
        return jax.tree.map(lambda v: v[: self.R], to_host(tree))

    def from_host(self, tree):
        """A host tree with a flat runs axis (no padding), laid out again."""
        return split_runs(pad_runs(tree, self.padded), self.mesh)
