"""Suite-wide settings: float64 (tests compare against references to 1e-10) and strict
promotion rules, so that an accidental dtype or rank promotion fails loudly."""

import os

import jax
import numpy as np
import pytest

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_rank_promotion", "raise")


@pytest.fixture
def getkey():
    """A fresh PRNG key per call, from a fixed seed: tests stay deterministic."""
    base = [jax.random.key(1234)]

    def next_key():
        base[0], sub = jax.random.split(base[0])
        return sub

    return next_key


def rel_err(a, b) -> float:
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300))


FASHION_MNIST = "/usr/share/datasets/fashion-mnist"

# Tests that need Debian's Fashion-MNIST skip without it, saying so; where .ci/run installed it,
# DELAYLAB_REQUIRE_DATA=1 makes them run (and fail if it is missing after all).
needs_fashion_mnist = pytest.mark.skipif(
    not os.path.isdir(FASHION_MNIST) and os.environ.get("DELAYLAB_REQUIRE_DATA") != "1",
    reason=f"Debian's Fashion-MNIST is not installed ({FASHION_MNIST}; apt-get install dataset-fashion-mnist, "
           "or `make data`)")
