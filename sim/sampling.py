"""The minibatch sampler every sharded problem uses, below both ``sim.problems`` and
``sim.schedules``: :class:`sim.schedules.ExampleCostTiming` replays the same draws to time a job
by the examples it draws."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def sample_indices(key, count: int, size: int) -> jax.Array:
    """``count`` indices drawn uniformly with replacement from range(size).

    ``bits % size``: one 32-bit word per index, which on CPU costs about half of
    ``jax.random.randint`` (measured in benchmarks/RESULTS.md). The modulo bias is below
    size/2³² (2.4e-7 for 1000 rows), and zero when size is a power of two.
    """
    return (jax.random.bits(key, (count,), jnp.uint32) % jnp.uint32(size)).astype(jnp.int32)
