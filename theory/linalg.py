"""Reductions over a leading (worker or slot) axis, written as contractions.

XLA's CPU backend reduces over a non-minor axis slowly: ``jnp.mean(x, axis=0)`` of an
[8, 100480] float32 array took 6.7 ms on the 2-core CI machine, ``jnp.tensordot(w, x, 1)`` 0.08
ms (the same holds for the mean over a group axis; see benchmarks/RESULTS.md, "What telemetry
costs"). Code that combines per-worker arrays uses these instead.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def weighted_sum(w: jax.Array, x: jax.Array) -> jax.Array:
    """``Σ_i w[i] · x[i]`` over the leading axis of ``x``."""
    return jnp.tensordot(w.astype(x.dtype), x, axes=1)


def leading_mean(x: jax.Array) -> jax.Array:
    """The mean over the leading axis of ``x``."""
    n = x.shape[0]
    return weighted_sum(jnp.full((n,), 1.0 / n, x.dtype), x)


def mix(matrix: jax.Array, x: jax.Array) -> jax.Array:
    """``y[i] = Σ_j matrix[i, j] · x[j]`` over the leading axis of ``x`` (group means, mixing)."""
    return jnp.tensordot(matrix.astype(x.dtype), x, axes=1)
