"""The table methods update their per-worker tables in place: no table-sized copy per event.

XLA copies a scan-carried array whenever the old array is read by anything besides the
in-place write (algos/_rows.py). These tests read the optimised program and look for a copy of
an array of the table's shape; a control algorithm that keeps a separate running total (the
pattern that copies) shows that the check finds such copies on this JAX/XLA version.
"""

import re
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from delaylab import algos
from delaylab.algos.base import Algorithm, Server, Worker, algorithm
from delaylab.sim import engine, problems, schedules

N, D = 6, 37  # D: a size nothing else in the program has


def _problem():
    rng = np.random.default_rng(0)
    return problems.quadratic(np.stack([np.eye(D)] * N), rng.normal(size=(N, D)), noise=0.1)


def _table_copies(text: str) -> list:
    """Copies of a table: arrays whose trailing axes are [n + 1, D] (leading axes: slots, runs).
    No other array in these programs has that shape (worker arrays are [n, ...])."""
    shapes = re.findall(r"= f(?:32|64)\[([0-9,]+)\]\{[0-9,]*\} copy\(", text)
    return [s for s in shapes if s == f"{N + 1},{D}" or s.endswith(f",{N + 1},{D}")]


class _CopyState(NamedTuple):
    params: jax.Array
    table: jax.Array
    total: jax.Array


def _copying_control() -> Algorithm:
    """IA²SGD written the natural way (separate total): XLA copies its table at every event.
    (The table gets a spare row so that it has the shape the check looks for.)"""

    def init(h, x, n):
        return _CopyState(x, jnp.zeros((n + 1,) + x.shape, x.dtype), jnp.zeros_like(x))

    def apply(h, s, g, ev):
        i = ev.worker
        total = s.total + g - s.table[i]
        table = s.table.at[i].set(g)
        x = s.params - h["stepsize"] * total / (s.table.shape[0] - 1)
        return _CopyState(x, table, total), x, {}

    return algorithm("control", {"stepsize": 0.01}, Worker(), Server(init, lambda s: s.params, apply=apply))


CASES = [
    ("ia2sgd", lambda: algos.ia2sgd(stepsize=0.01)),
    ("malenia", lambda: algos.malenia_sgd(stepsize=0.01, batch=N)),
    ("ringleader", lambda: algos.ringleader_asgd(stepsize=0.01)),
]


@pytest.mark.parametrize("name,make", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("swept", [False, True], ids=["run", "sweep"])
def test_tables_are_updated_in_place(name, make, swept):
    sched = schedules.fixed_computation(np.arange(1, N + 1), num_events=203)  # 203: a ragged last chunk (padding)
    keys = jax.random.split(jax.random.key(0), 3) if swept else None
    text = engine.compiled_text(make(), _problem(), sched, keys=keys)
    assert _table_copies(text) == []


@pytest.mark.parametrize("swept", [False, True], ids=["run", "sweep"])
def test_the_check_sees_a_copying_table(swept):
    sched = schedules.fixed_computation(np.arange(1, N + 1), num_events=203)  # 203: a ragged last chunk (padding)
    keys = jax.random.split(jax.random.key(0), 3) if swept else None
    text = engine.compiled_text(_copying_control(), _problem(), sched, keys=keys)
    assert len(_table_copies(text)) >= 1
