"""The mechanism tests/conftest.py relies on: every program a jitted function has compiled keeps
its memory mappings (three per compiled object) until ``jax.clear_caches()``, which gives them
back. (Linux caps a process at vm.max_map_count mappings, 65,530 by default; past it XLA's
compiler segfaults, see tests/conftest.py.)"""

import functools
import os

import jax
import jax.numpy as jnp
import pytest

from tests.conftest import memory_mappings as _mappings

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs Linux's /proc/self/maps")


@functools.partial(jax.jit, static_argnums=1)
def _program(x, i):
    for k in range(4):  # a few kernels per program
        x = jnp.cumsum(jnp.sin(x) * (i + k), axis=k % 2)
    return x


def test_compiled_programs_hold_mappings_until_the_caches_are_cleared():
    jax.clear_caches()
    before = _mappings()
    for i in range(30):
        _program(jnp.ones((3, 5)), 1000 + i).block_until_ready()
    held = _mappings() - before
    assert held >= 3 * 30, f"30 compiled programs added only {held} mappings"
    jax.clear_caches()
    left = _mappings() - before
    assert left < 0.25 * held, f"jax.clear_caches() gave back only {held - left} of {held} mappings"
