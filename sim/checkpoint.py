"""Checkpoints of runs and sweeps that go in segments: write, check, read back.

A checkpoint is one ``.npz`` file (written to a temporary name and renamed, so a run killed while
writing leaves the previous checkpoint whole): the engine's carry after the last finished
segment (every leaf of the algorithm's state, the workers' points, the tail sums, the first bad
event), the metrics so far, the number of segments and of events done, the PRNG key(s), and a
*fingerprint*, a JSON record of
hashes of everything the numbers depend on (hyperparameters, keys, starting point, problem data,
each schedule array, the plan and the numerical options). A resume rebuilds the run, compares
fingerprints and refuses, saying which entries differ, when they are not equal; then the stored
leaves are checked against the shapes and dtypes the compiled program expects. Read with
``allow_pickle=False``: nothing in it is executable.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from delaylab.sim import store

FORMAT = 1


class CheckpointMismatch(ValueError):
    """A checkpoint was written for a different run than the one asked to resume it."""


def digest(*arrays) -> str:
    """A short hash of arrays' bytes, dtypes and shapes."""
    h = hashlib.sha256()
    for a in arrays:
        if isinstance(a, jax.Array) and jnp.issubdtype(a.dtype, jax.dtypes.prng_key):
            a = jax.random.key_data(a)
        a = np.ascontiguousarray(np.asarray(a))
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()[:16]


def tree_digest(tree) -> str:
    return digest(*jax.tree.leaves(tree))


def differences(saved: dict, now: dict, prefix: str = "") -> list[str]:
    """Entries of two fingerprints that differ, as 'path: saved → now'."""
    out = []
    for k in sorted(set(saved) | set(now)):
        a, b = saved.get(k, "<absent>"), now.get(k, "<absent>")
        if isinstance(a, dict) and isinstance(b, dict):
            out += differences(a, b, f"{prefix}{k}.")
        elif a != b:
            out.append(f"{prefix}{k}: {a} → {b}")
    return out


@dataclasses.dataclass
class Saved:
    carry: Any
    first: Any
    metrics: Any  # the metrics of the finished segments, joined along the log axis
    done: int  # segments finished


def _leaves(prefix: str, tree) -> dict:
    out = {}
    for i, leaf in enumerate(jax.tree.leaves(tree)):
        if jnp.issubdtype(leaf.dtype, jax.dtypes.prng_key):
            out[f"{prefix}{i}"] = np.asarray(jax.random.key_data(leaf))
            out[f"{prefix}{i}.impl"] = np.asarray(str(jax.random.key_impl(leaf)))
        else:
            out[f"{prefix}{i}"] = np.asarray(leaf)
    return out


def save(path: str, *, carry, first, metrics, done: int, fingerprint: dict, events: int = -1, keys=None) -> None:
    """``done`` segments finished, ``events`` schedule events processed; ``keys``: the run's PRNG
    key(s) as raw data, kept for the record (the fingerprint checks them on resume)."""
    arrays = {"format": np.asarray(FORMAT), "done": np.asarray(done), "events": np.asarray(events),
              "fingerprint": np.asarray(json.dumps(fingerprint, sort_keys=True))}
    if keys is not None:
        arrays["key_data"] = np.asarray(jax.random.key_data(keys) if jnp.issubdtype(keys.dtype, jax.dtypes.prng_key)
                                        else keys)
    arrays.update(_leaves("carry/", carry))
    arrays.update(_leaves("first/", first))
    arrays.update(_leaves("metrics/", metrics))
    store.write_npz(path, arrays)


def read_fingerprint(path: str) -> dict:
    with np.load(path, allow_pickle=False) as f:
        return json.loads(str(f["fingerprint"]))


def load(path: str, *, fingerprint: dict, carry_like, first_like, log_axis: int) -> Saved:
    """The checkpoint at ``path``, after checking that it belongs to this run.

    ``carry_like`` and ``first_like`` are abstract trees (``jax.eval_shape``) of the carry and the
    initial metrics of one segment-program call; the metrics so far are ``first_like`` with an
    extra log axis at ``log_axis``.
    """
    with np.load(path, allow_pickle=False) as f:
        files = {k: f[k] for k in f.files}
    if int(files.get("format", -1)) != FORMAT:
        raise CheckpointMismatch(f"{path}: checkpoint format {files.get('format')} is not {FORMAT}")
    saved = json.loads(str(files["fingerprint"]))
    diff = differences(saved, fingerprint)
    if diff:
        raise CheckpointMismatch(f"{path} was written for a different run; what differs (checkpoint → now):\n  "
                                 + "\n  ".join(diff))

    def rebuild(prefix, like, extra_axis=None):
        leaves, treedef = jax.tree.flatten(like)
        out = []
        for i, spec in enumerate(leaves):
            name = f"{prefix}{i}"
            if name not in files:
                raise CheckpointMismatch(f"{path}: {name} is missing (the program's state has changed shape)")
            arr = files[name]
            if f"{name}.impl" in files:
                arr = jax.random.wrap_key_data(arr, impl=str(files[f"{name}.impl"]))
            shape = tuple(spec.shape)
            if extra_axis is not None:
                shape = shape[:extra_axis] + (arr.shape[extra_axis],) + shape[extra_axis:]
            if tuple(arr.shape) != shape or arr.dtype != spec.dtype:
                raise CheckpointMismatch(f"{path}: {name} is {arr.dtype}{list(arr.shape)}, the program expects "
                                         f"{spec.dtype}{list(shape)}")
            out.append(arr)
        if f"{prefix}{len(leaves)}" in files:
            raise CheckpointMismatch(f"{path}: more {prefix} leaves than the program has")
        return jax.tree.unflatten(treedef, out)

    return Saved(carry=rebuild("carry/", carry_like), first=rebuild("first/", first_like),
                 metrics=rebuild("metrics/", first_like, log_axis), done=int(files["done"]))
