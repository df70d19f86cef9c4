"""Neural-network problems (Flax) on data split across workers.

``mlp_classifier`` builds the MLP problem of the Ringleader/Rescaled experiments (spec §4.5, §9
R5): images flattened, Linear(p, hidden)–ReLU–Linear(hidden, classes), cross-entropy. Worker i
samples minibatches only from its own shard; F is the mean of the workers' full-shard losses
(the full training loss when shards have equal size).
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from sim import data as data_lib
from sim.problems import Problem, ProblemFns, worker_batch


class MLP(nn.Module):
    hidden: int
    classes: int

    @nn.compact
    def __call__(self, x):
        x = x.reshape((x.shape[0], -1))
        x = nn.relu(nn.Dense(self.hidden)(x))
        return nn.Dense(self.classes)(x)


def _loss(module: MLP, params, X, y):
    logits = module.apply({"params": params}, X)
    return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, y))


@dataclasses.dataclass(frozen=True)
class _MLPValueAndGrad:
    module: MLP
    batch_size: Optional[int]

    def __call__(self, data, params, worker, key):
        X, y = worker_batch(data, "X", "y", worker, key, self.batch_size)
        return jax.value_and_grad(lambda p: _loss(self.module, p, X, y))(params)


@dataclasses.dataclass(frozen=True)
class _MLPLocalObjectives:
    module: MLP

    def __call__(self, data, params):
        return jax.lax.map(lambda xy: _loss(self.module, params, *xy), (data["X"], data["y"]))


def mlp_classifier(images, labels, *, num_workers: int, split: str = "dirichlet", alpha: float = 0.1,
                   hidden: int = 128, batch_size: Optional[int] = 4, seed: int = 0, dtype=None) -> Problem:
    """An MLP classifier trained by ``num_workers`` workers, each on its own shard.

    Args:
      images: [N, ...] inputs (flattened inside the model); labels: [N] integer classes.
      split: "iid", "label" (sorted contiguous shards) or "dirichlet" (α per worker, equal sizes).
      hidden: width of the hidden layer. batch_size: examples per stochastic gradient (None:
        the whole shard). seed: seeds the split and the initial parameters.
    """
    X = np.asarray(images, dtype=np.float32)
    y = np.asarray(labels).astype(np.int32)
    if X.shape[0] != y.shape[0]:
        raise ValueError(f"images and labels must have the same length; got {X.shape[0]} and {y.shape[0]}")
    if split == "iid":
        idx = data_lib.split_iid(y, num_workers, seed=seed)
    elif split == "label":
        idx = data_lib.split_by_label(y, num_workers)
    elif split == "dirichlet":
        idx = data_lib.split_dirichlet(y, num_workers, alpha, seed=seed)
    else:
        raise ValueError(f"split must be 'iid', 'label' or 'dirichlet'; got {split!r}")
    if batch_size is not None and (int(batch_size) != batch_size or batch_size < 1):
        raise ValueError(f"batch_size must be a positive integer or None; got {batch_size!r}")
    classes = int(y.max()) + 1
    module = MLP(hidden=hidden, classes=classes)
    dt = jnp.dtype(dtype) if dtype is not None else jnp.asarray(0.0).dtype
    params = module.init(jax.random.key(seed), jnp.zeros((1,) + X.shape[1:], dt))["params"]
    params = jax.tree.map(lambda p: p.astype(dt), params)
    return Problem(
        name=f"mlp({X.shape[1:]}→{hidden}→{classes}, n={num_workers}, {split}, batch={batch_size})",
        num_workers=int(num_workers),
        fns=ProblemFns(_MLPValueAndGrad(module, None if batch_size is None else int(batch_size)),
                       _MLPLocalObjectives(module)),
        data={"X": jnp.asarray(X[idx], dt), "y": jnp.asarray(y[idx])},
        x0=params,
    )
