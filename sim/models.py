"""Neural-network problems (Flax) on data split across workers.

``mlp_classifier`` builds the MLP problem of the Ringleader/Rescaled experiments (docs/theory.md §7.6, §12
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

from delaylab.sim import data as data_lib
from delaylab.sim.conv import CONV_IMPLS, Conv2D, conv2d_im2col, conv_impl_for  # noqa: F401 (public here too)
from delaylab.sim.problems import Problem, ProblemFns, worker_batch


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
class _BatchLoss:
    """Worker ``worker``'s minibatch loss: ``(data, params, worker, key) -> scalar``."""

    module: nn.Module
    batch_size: Optional[int]

    def __call__(self, data, params, worker, key):
        X, y = worker_batch(data, "X", "y", worker, key, self.batch_size)
        return _loss(self.module, params, X, y)


@dataclasses.dataclass(frozen=True)
class _ValueAndGradOf:
    loss: _BatchLoss

    def __call__(self, data, params, worker, key):
        return jax.value_and_grad(lambda p: self.loss(data, p, worker, key))(params)


@dataclasses.dataclass(frozen=True)
class _ShardLosses:
    """Each worker's loss over its whole shard: ``(data, params) -> [n]``."""

    module: nn.Module

    def __call__(self, data, params):
        return jax.lax.map(lambda xy: _loss(self.module, params, *xy), (data["X"], data["y"]))


def _shards(y, split, num_workers: int, *, seed: int, alpha: float = 0.1, overlap: float = 0.0,
            allowed=("iid", "label", "dirichlet")) -> np.ndarray:
    """[n, m] example indices of each worker's shard: ``split`` names a rule of ``allowed``
    (:mod:`sim.data`'s splits) or gives the shards themselves (``sim.data.split_by_group``)."""
    if not isinstance(split, str):  # precomputed shards, [n, m] indices
        idx = np.asarray(split)
        if idx.ndim != 2 or idx.shape[0] != num_workers or not np.issubdtype(idx.dtype, np.integer) \
                or idx.min() < 0 or idx.max() >= len(y):
            raise ValueError(f"split given as shards must be [{num_workers}, m] indices into the {len(y)} examples; "
                             f"got an array of shape {idx.shape}")
        return idx
    if split not in allowed:
        raise ValueError(f"split must be {', '.join(map(repr, allowed))} or [n, m] shard indices; got {split!r}")
    if split == "iid":
        return data_lib.split_iid(y, num_workers, seed=seed)
    if split == "label":
        return data_lib.split_by_label(y, num_workers)
    if split == "dirichlet":
        return data_lib.split_dirichlet(y, num_workers, alpha, seed=seed)
    return data_lib.split_overlap(y, num_workers, overlap, seed=seed)


def mlp_classifier(images, labels, *, num_workers: int, split: str = "dirichlet", alpha: float = 0.1,
                   hidden: int = 128, batch_size: Optional[int] = 4, seed: int = 0, dtype=None,
                   test_images=None, test_labels=None, init_seed: Optional[int] = None) -> Problem:
    """An MLP classifier trained by ``num_workers`` workers, each on its own shard.

    Args:
      images: [N, ...] inputs (flattened inside the model); labels: [N] integer classes.
      split: "iid", "label" (sorted contiguous shards), "dirichlet" (α per worker, equal sizes), or
        the shards themselves, [n, m] indices (``sim.data.split_by_group``).
      hidden: width of the hidden layer. batch_size: examples per stochastic gradient (None:
        the whole shard). seed: seeds the split, and the initial parameters unless ``init_seed``
        is given (then the two are independent sources).
      test_images, test_labels: if given, the test accuracy is logged with F at every log point
        (``metrics["test_accuracy"]``).
    """
    X = np.asarray(images, dtype=np.float32)
    y = np.asarray(labels).astype(np.int32)
    if X.shape[0] != y.shape[0]:
        raise ValueError(f"images and labels must have the same length; got {X.shape[0]} and {y.shape[0]}")
    idx = _shards(y, split, num_workers, seed=seed, alpha=alpha)
    if batch_size is not None and (int(batch_size) != batch_size or batch_size < 1):
        raise ValueError(f"batch_size must be a positive integer or None; got {batch_size!r}")
    classes = int(y.max()) + 1
    module = MLP(hidden=hidden, classes=classes)
    dt = jnp.dtype(dtype) if dtype is not None else jnp.asarray(0.0).dtype
    params = module.init(jax.random.key(seed if init_seed is None else init_seed), jnp.zeros((1,) + X.shape[1:], dt))["params"]
    params = jax.tree.map(lambda p: p.astype(dt), params)
    loss = _BatchLoss(module, None if batch_size is None else int(batch_size))
    data = {"X": jnp.asarray(X[idx], dt), "y": jnp.asarray(y[idx])}
    metrics = None
    if (test_images is None) != (test_labels is None):
        raise ValueError("give both test_images and test_labels, or neither")
    if test_images is not None:
        Xt = np.asarray(test_images, dtype=np.float32)
        yt = np.asarray(test_labels).astype(np.int32)
        if Xt.shape[1:] != X.shape[1:] or Xt.shape[0] != yt.shape[0]:
            raise ValueError(f"test_images must be [M, {', '.join(map(str, X.shape[1:]))}] with one label each; "
                             f"got {Xt.shape} and {yt.shape}")
        data.update(X_test=jnp.asarray(Xt, dt), y_test=jnp.asarray(yt))
        metrics = _TestAccuracy(module, len(yt), len(yt))
    return Problem(
        name=f"mlp({X.shape[1:]}→{hidden}→{classes}, n={num_workers}, "
             f"{split if isinstance(split, str) else 'given shards'}, batch={batch_size})",
        num_workers=int(num_workers),
        fns=ProblemFns(_ValueAndGradOf(loss), _ShardLosses(module), loss=loss, metrics=metrics),
        data=data,
        x0=params,
    )


def max_pool_2x2(x):
    """2×2 max-pooling, stride 2, of [B, H, W, C] ("SAME": odd sizes padded with −∞), by a reshape
    and a max. Same values as ``flax.linen.max_pool``; on CPU its gradient costs far less than
    the reduce-window form's (select-and-scatter): the CNN's whole gradient took half the time
    (``benchmarks/workers.py``)."""
    B, H, W, C = x.shape
    if H % 2 or W % 2:
        x = jnp.pad(x, ((0, 0), (0, H % 2), (0, W % 2), (0, 0)), constant_values=-jnp.inf)
        B, H, W, C = x.shape
    return x.reshape(B, H // 2, 2, W // 2, 2, C).max(axis=(2, 4))


class CNN(nn.Module):
    """Two 5×5 convolutions (``channels``, ReLU, 2×2 max-pool each), then a dense head
    (``hidden`` units, ReLU; ``hidden=0``: none) and the class logits: the DEAHES-O paper's
    two-layer CNN (docs/theory.md §9.6; the head's width is our choice). Inputs
    [B, H, W] or [B, H, W, C]; kernels are HWIO (Flax)."""

    classes: int
    channels: tuple = (32, 64)
    hidden: int = 128
    conv_impl: str = "auto"  # see Conv2D

    @nn.compact
    def __call__(self, x):
        if x.ndim == 3:
            x = x[..., None]
        for i, c in enumerate(self.channels):
            # relu(pool(conv)) = pool(relu(conv)), on a quarter of the values
            x = nn.relu(max_pool_2x2(Conv2D(c, impl=self.conv_impl, name=f"Conv_{i}")(x)))
        x = x.reshape((x.shape[0], -1))
        if self.hidden:
            x = nn.relu(nn.Dense(self.hidden)(x))
        return nn.Dense(self.classes)(x)


# Evaluations over many images run in chunks of about this many pixels (``lax.map``): on the
# 2-core CPU the 28×28 CNN's loss over 10,240 images took 12.7 s in one pass (15 GB resident: the
# im2col patches of every image at once), 3.5 s in chunks of 512 images and 3.0 s in chunks of
# 128 (this budget). On 8×8 digits a chunk holds 1,568 images, so their 1,437 training images go
# in one pass, which there was faster than chunks of 128 (a sweep of the DEAHES figure: 8.4 s
# against 11.0 s).
EVAL_CHUNK_PIXELS = 128 * 28 * 28


def _pad_to_chunks(a: np.ndarray, chunk: int) -> np.ndarray:
    """``a`` with zero rows appended up to a multiple of ``chunk`` (unchanged when it has at most
    ``chunk`` rows: evaluated in one pass)."""
    n = a.shape[0]
    if n <= chunk or n % chunk == 0:
        return a
    return np.concatenate([a, np.zeros((chunk - n % chunk,) + a.shape[1:], a.dtype)])


def _chunked_sum(fn, X, y, count: int, chunk: int):
    """Σ over the first ``count`` examples of ``fn(X_chunk, y_chunk) -> [chunk]`` values, chunk
    by chunk (one pass when ``X`` has at most ``chunk`` rows); padding rows are left out."""
    if X.shape[0] <= chunk:
        return jnp.sum(fn(X[:count], y[:count]))
    if X.shape[0] % chunk:
        raise ValueError(f"{X.shape[0]} evaluation rows are not whole chunks of {chunk} (the data were padded for "
                         "another eval_chunk)")
    Xc = X.reshape((-1, chunk) + X.shape[1:])
    yc = y.reshape(-1, chunk)
    valid = (jnp.arange(X.shape[0]) < count).reshape(-1, chunk)

    def one(a):
        v = fn(a[0], a[1])
        return jnp.sum(jnp.where(a[2], v, jnp.zeros_like(v)))

    return jnp.sum(jax.lax.map(one, (Xc, yc, valid)))


@dataclasses.dataclass(frozen=True)
class _EvalLoss:
    """F: the loss over the ``count`` training examples held in ``data['X_eval']`` (each once;
    zero rows after them pad to whole chunks of ``chunk``)."""

    module: nn.Module
    count: int
    chunk: int

    def __call__(self, data, params):
        def losses(X, y):
            return optax.softmax_cross_entropy_with_integer_labels(self.module.apply({"params": params}, X), y)

        return _chunked_sum(losses, data["X_eval"], data["y_eval"], self.count, self.chunk) / self.count


@dataclasses.dataclass(frozen=True)
class _TestAccuracy:
    module: nn.Module
    count: int
    chunk: int

    def __call__(self, data, params):
        def hits(X, y):
            logits = self.module.apply({"params": params}, X)
            return (jnp.argmax(logits, -1) == y).astype(logits.dtype)

        return {"test_accuracy": _chunked_sum(hits, data["X_test"], data["y_test"], self.count, self.chunk)
                / self.count}


def cnn_classifier(images, labels, test_images, test_labels, *, num_workers: int, split: str = "iid",
                   overlap: float = 0.0, batch_size: Optional[int] = 64, channels=(32, 64), hidden: int = 128,
                   eval_size: Optional[int] = None, seed: int = 0, dtype=None, conv_impl: str = "auto",
                   eval_chunk: Optional[int] = None, init_seed: Optional[int] = None,
                   eval_seed: Optional[int] = None) -> Problem:
    """The CNN of :class:`CNN` trained by ``num_workers`` workers on shards of ``images``.

    Args:
      split: "iid" (disjoint random shards), "overlap" (every worker also holds a shared
        subset, ``overlap`` = r = |O|/|D|; see :func:`sim.data.split_overlap`), or the shards
        themselves, [n, m] indices (``sim.data.split_dirichlet``, ``sim.data.split_by_group``).
      seed: seeds the split, and the evaluation subset and the initial parameters unless
        ``eval_seed`` / ``init_seed`` are given (then each is an independent source).
      conv_impl: how :class:`Conv2D` computes, one of ``CONV_IMPLS`` (default "auto": oneDNN on
        CPU where it is built, else im2col; the problem's name says which).
      eval_size: F is the mean loss over this many training examples (class-stratified, each
        once; None: all), so that it is the training loss even where shards overlap; the test
        accuracy over ``test_images`` is logged with it.
      eval_chunk: both evaluations run in chunks of this many images (``data['X_eval']`` and
        ``data['X_test']`` are zero-padded to whole chunks; at most this many: one pass). None:
        ``EVAL_CHUNK_PIXELS`` // pixels per image.
    """
    X = np.asarray(images, dtype=np.float32)
    y = np.asarray(labels).astype(np.int32)
    Xt = np.asarray(test_images, dtype=np.float32)
    yt = np.asarray(test_labels).astype(np.int32)
    if X.shape[0] != y.shape[0] or Xt.shape[0] != yt.shape[0]:
        raise ValueError(f"images and labels must have the same length; got {X.shape[0]}/{y.shape[0]} (train) "
                         f"and {Xt.shape[0]}/{yt.shape[0]} (test)")
    if X.ndim not in (3, 4) or Xt.shape[1:] != X.shape[1:]:
        raise ValueError(f"images must be [N, H, W] or [N, H, W, C], train and test alike; got {X.shape} and {Xt.shape}")
    overlapping = isinstance(split, str) and split == "overlap"
    if not overlapping and overlap != 0.0:
        raise ValueError("overlap applies to split='overlap' only")
    idx = _shards(y, split, num_workers, seed=seed, overlap=overlap, allowed=("iid", "overlap"))
    if batch_size is not None and (int(batch_size) != batch_size or batch_size < 1):
        raise ValueError(f"batch_size must be a positive integer or None; got {batch_size!r}")
    if eval_chunk is None:
        eval_chunk = max(1, EVAL_CHUNK_PIXELS // (X.shape[1] * X.shape[2]))
    if isinstance(eval_chunk, bool) or int(eval_chunk) != eval_chunk or eval_chunk < 1:
        raise ValueError(f"eval_chunk must be a positive integer or None; got {eval_chunk!r}")
    eval_chunk = int(eval_chunk)
    classes = int(max(y.max(), yt.max())) + 1
    dt = jnp.dtype(dtype) if dtype is not None else jnp.asarray(0.0).dtype
    used = conv_impl_for(conv_impl, dt)
    module = CNN(classes=classes, channels=tuple(int(c) for c in channels), hidden=int(hidden), conv_impl=conv_impl)
    params = module.init(jax.random.key(seed if init_seed is None else init_seed), jnp.zeros((1,) + X.shape[1:], dt))["params"]
    params = jax.tree.map(lambda p: p.astype(dt), params)
    ev = data_lib.stratified_subset(y, eval_size, seed=seed if eval_seed is None else eval_seed)
    loss = _BatchLoss(module, None if batch_size is None else int(batch_size))
    return Problem(
        name=f"cnn({X.shape[1:]}, {channels}, head {hidden}, n={num_workers}, {split}"
             f"{f' r={overlap:g}' if overlapping else ''}, batch={batch_size}, conv={used})",
        num_workers=int(num_workers),
        fns=ProblemFns(_ValueAndGradOf(loss), _ShardLosses(module), loss=loss,
                       global_objective=_EvalLoss(module, len(ev), eval_chunk),
                       metrics=_TestAccuracy(module, len(yt), eval_chunk)),
        data={"X": jnp.asarray(X[idx], dt), "y": jnp.asarray(y[idx]),
              "X_eval": jnp.asarray(_pad_to_chunks(X[ev], eval_chunk), dt),
              "y_eval": jnp.asarray(_pad_to_chunks(y[ev], eval_chunk)),
              "X_test": jnp.asarray(_pad_to_chunks(Xt, eval_chunk), dt),
              "y_test": jnp.asarray(_pad_to_chunks(yt, eval_chunk))},
        x0=params,
        convolution=used,
    )
