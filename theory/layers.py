"""Layers of a parameter pytree: the node one level above its leaves.

For Flax parameters ``{"Dense_0": {"kernel", "bias"}, ...}`` the layers are ``Dense_0``, ...; a
leaf with no parent dict is a layer on its own, named by its key (or ``params`` for a bare array).
Per-layer rules (EDiT's per-layer anomaly detection and weighting) and per-layer telemetry
(``sim.telemetry``) both group leaves this way.
"""

from __future__ import annotations

import jax


def _key_name(k) -> str:
    for attr in ("key", "name", "idx"):
        if hasattr(k, attr):
            return str(getattr(k, attr))
    return str(k)


def leaf_layers(tree) -> list[str]:
    """The layer name of each leaf of ``tree``, in leaf order."""
    return ["/".join(_key_name(k) for k in (path[:-1] if len(path) > 1 else path)) or "params"
            for path, _ in jax.tree_util.tree_flatten_with_path(tree)[0]]


def layer_names(tree) -> list[str]:
    """The distinct layer names of ``tree``, in the order of its leaves."""
    return list(dict.fromkeys(leaf_layers(tree)))


def leaf_layer_index(tree) -> list[int]:
    """For each leaf of ``tree``, the position of its layer in :func:`layer_names`."""
    names = layer_names(tree)
    return [names.index(n) for n in leaf_layers(tree)]
