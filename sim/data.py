"""Data on disk, never from the network: MNIST-format files, with a bundled fallback.

``load_mnist_format(path)`` reads IDX files (gzipped or not) or an ``.npz`` from the path the user
gives, else from the usual places, in order: ``$DELAYLAB_DATA``, ``/usr/share/datasets/mnist``,
``~/.keras/datasets/mnist.npz``, ``/usr/share/datasets/fashion-mnist`` (Debian's
``dataset-fashion-mnist`` package); and falls back to scikit-learn's bundled 8×8 handwritten
digits, which need no download. ``DELAYLAB_DATA=digits`` asks for those digits whatever else is
installed. The returned :class:`Dataset` says which one it is.

Splits across workers (all equal-size): iid, by label (sorted, contiguous shards), and
Dirichlet(α) label proportions per worker, all disjoint; and overlapping (a shared subset that
every worker holds plus disjoint parts of the rest).
"""

from __future__ import annotations

import dataclasses
import functools
import gzip
import os
from typing import Optional, Sequence

import numpy as np

IDX_FILES = {
    "x_train": ("train-images-idx3-ubyte", "train-images.idx3-ubyte"),
    "y_train": ("train-labels-idx1-ubyte", "train-labels.idx1-ubyte"),
    "x_test": ("t10k-images-idx3-ubyte", "t10k-images.idx3-ubyte"),
    "y_test": ("t10k-labels-idx1-ubyte", "t10k-labels.idx1-ubyte"),
}
NPZ_KEYS = ("x_train", "y_train", "x_test", "y_test")
DIGITS = "digits"  # the value of $DELAYLAB_DATA that asks for the bundled digits
_IDX_TYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: np.dtype(">i2"), 0x0C: np.dtype(">i4"),
              0x0D: np.dtype(">f4"), 0x0E: np.dtype(">f8")}


@dataclasses.dataclass(frozen=True, eq=False)
class Dataset:
    """Images scaled to [0, 1] (float32, [N, H, W]) and integer labels."""

    name: str
    source: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray

    @property
    def num_classes(self) -> int:
        return int(max(self.y_train.max(), self.y_test.max())) + 1


def read_idx(path: str) -> np.ndarray:
    """One IDX file (``.gz`` or raw): magic 0x0000TTDD, D big-endian uint32 sizes, then data."""
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rb") as fh:
            raw = fh.read()
    except (OSError, EOFError) as err:
        raise ValueError(f"cannot read {path!r} as an IDX file{' (gzip)' if path.endswith('.gz') else ''}: {err}") from None
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_TYPES:
        raise ValueError(f"{path!r} is not an IDX file: expected magic bytes 00 00 <type> <ndim>, got {raw[:4].hex(' ')}")
    dtype, ndim = np.dtype(_IDX_TYPES[raw[2]]), raw[3]
    header = 4 + 4 * ndim
    shape = tuple(int.from_bytes(raw[4 + 4 * k: 8 + 4 * k], "big") for k in range(ndim))
    expected = header + int(np.prod(shape)) * dtype.itemsize
    if len(raw) != expected:
        raise ValueError(f"{path!r} is a truncated or corrupt IDX file: header says shape {shape} "
                         f"({expected} bytes), file has {len(raw)} bytes")
    return np.frombuffer(raw, dtype=dtype, offset=header).reshape(shape)


def _find_idx(folder: str, stem_options: Sequence[str]) -> Optional[str]:
    for stem in stem_options:
        for name in (stem, stem + ".gz"):
            p = os.path.join(folder, name)
            if os.path.exists(p):
                return p
    return None


def _scale(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x)
    return (x.astype(np.float32) / 255.0) if x.dtype == np.uint8 else x.astype(np.float32)


def _load_folder(folder: str, name: str) -> Dataset:
    paths = {k: _find_idx(folder, stems) for k, stems in IDX_FILES.items()}
    missing = [IDX_FILES[k][0] for k, p in paths.items() if p is None]
    if missing:
        raise FileNotFoundError(f"{folder!r} lacks MNIST-format IDX file(s) {missing} (with or without .gz)")
    stamp = tuple((k, p, os.stat(p).st_mtime_ns, os.stat(p).st_size) for k, p in sorted(paths.items()))
    return _folder_dataset(folder, name, stamp)


@functools.lru_cache(maxsize=2)
def _folder_dataset(folder: str, name: str, stamp: tuple) -> Dataset:
    """A folder's dataset, read once per process while its files are unchanged (``stamp``: each
    file's path, modification time and size). Why: decompressing and scaling Fashion-MNIST takes
    about a second, and a figure or the test suite asks for it many times. Its arrays are made
    read-only, since every caller shares them."""
    arrays = {k: read_idx(p) for k, p, _, _ in stamp}
    d = _dataset(name, folder, arrays)
    for a in (d.x_train, d.y_train, d.x_test, d.y_test):
        a.setflags(write=False)
    return d


def _load_npz(path: str, name: str) -> Dataset:
    try:
        with np.load(path, allow_pickle=False) as data:
            missing = [k for k in NPZ_KEYS if k not in data.files]
            if missing:
                raise ValueError(f"{path!r} lacks array(s) {missing}; an MNIST-format .npz holds {list(NPZ_KEYS)}")
            arrays = {k: data[k] for k in NPZ_KEYS}
    except (OSError, EOFError) as err:
        raise ValueError(f"cannot read {path!r} as an .npz with arrays {list(NPZ_KEYS)}: {err}") from None
    return _dataset(name, path, arrays)


def _dataset(name: str, source: str, a: dict) -> Dataset:
    for split in ("train", "test"):
        x, y = a[f"x_{split}"], a[f"y_{split}"]
        if x.ndim != 3 or y.ndim != 1 or x.shape[0] != y.shape[0]:
            raise ValueError(f"{source!r}: {split} images must be [N, H, W] and labels [N]; got {x.shape} and {y.shape}")
    return Dataset(name, source, _scale(a["x_train"]), a["y_train"].astype(np.int32),
                   _scale(a["x_test"]), a["y_test"].astype(np.int32))


def default_locations() -> list[tuple[str, str]]:
    """(name, path) pairs searched in order when no path is given (``$DELAYLAB_DATA`` first,
    unless it is ``digits``: :func:`load_mnist_format` then reads the bundled digits)."""
    out = []
    if os.environ.get("DELAYLAB_DATA") and os.environ["DELAYLAB_DATA"] != DIGITS:
        out.append(("user data", os.environ["DELAYLAB_DATA"]))
    out += [("mnist", "/usr/share/datasets/mnist"),
            ("mnist", os.path.expanduser("~/.keras/datasets/mnist.npz")),
            ("fashion-mnist", "/usr/share/datasets/fashion-mnist")]
    return out


def digits() -> Dataset:
    """scikit-learn's bundled 8×8 digits (1797 images), 80/20 split by a fixed permutation."""
    from sklearn.datasets import load_digits

    d = load_digits()
    x = (d.images / 16.0).astype(np.float32)
    y = d.target.astype(np.int32)
    perm = np.random.default_rng(0).permutation(len(y))
    cut = int(0.8 * len(y))
    tr, te = perm[:cut], perm[cut:]
    return Dataset("digits", "sklearn.datasets.load_digits", x[tr], y[tr], x[te], y[te])


def load_mnist_format(path: Optional[str] = None, *, fallback: bool = True,
                      locations: Optional[list[tuple[str, str]]] = None) -> Dataset:
    """MNIST-format data from ``path`` (a folder of IDX files or an ``.npz``), else the first of
    ``default_locations()`` that exists, else (with ``fallback``) scikit-learn's digits; with
    ``$DELAYLAB_DATA`` set to ``digits`` (and no ``path`` or ``locations``), the digits."""
    if path is not None:
        path = os.fspath(path)
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path!r} does not exist; give a folder of MNIST IDX files "
                                    "(train-images-idx3-ubyte[.gz], …) or an .npz with x_train, y_train, x_test, y_test")
        name = os.path.basename(path.rstrip("/")) or path
        return _load_npz(path, name) if path.endswith(".npz") else _load_folder(path, name)
    if locations is None and os.environ.get("DELAYLAB_DATA") == DIGITS:
        return digits()
    for name, p in (default_locations() if locations is None else locations):
        if os.path.exists(p):
            return _load_npz(p, name) if p.endswith(".npz") else _load_folder(p, name)
    if not fallback:
        raise FileNotFoundError("no MNIST-format data found in " + ", ".join(p for _, p in default_locations()))
    return digits()


# --- splits -----------------------------------------------------------------------------------


def stratified_subset(labels, size: Optional[int], *, seed: int = 0) -> np.ndarray:
    """Sorted indices of a class-stratified random subset of exactly ``size`` examples (all of them
    when ``size`` is None or not smaller): each class gets its share size·n_c/N, rounded by largest
    remainders, drawn without replacement in class order from one generator seeded by ``seed``."""
    y = np.asarray(labels)
    if size is None or size >= len(y):
        return np.arange(len(y))
    if int(size) != size or size < 1:
        raise ValueError(f"size must be a positive integer or None; got {size!r}")
    rng = np.random.default_rng(seed)
    classes, counts = np.unique(y, return_counts=True)
    quota = size * counts / len(y)
    take = np.floor(quota).astype(int)
    take[np.argsort(take - quota)[: int(size) - take.sum()]] += 1  # largest remainders: exactly `size`
    out = [rng.choice(np.flatnonzero(y == c), size=k, replace=False) for c, k in zip(classes, take)]
    return np.sort(np.concatenate(out))


def _check_split(labels: np.ndarray, num_workers: int) -> int:
    if isinstance(num_workers, bool) or int(num_workers) != num_workers or num_workers < 1:
        raise ValueError(f"num_workers must be a positive integer; got {num_workers!r}")
    m = len(labels) // int(num_workers)
    if m < 1:
        raise ValueError(f"{len(labels)} examples cannot give each of {num_workers} workers one")
    return m


def split_iid(labels, num_workers: int, *, seed: int = 0) -> np.ndarray:
    """[n, m] example indices: a random permutation cut into equal shards (remainder dropped)."""
    labels = np.asarray(labels)
    m = _check_split(labels, num_workers)
    perm = np.random.default_rng(seed).permutation(len(labels))
    return perm[: m * num_workers].reshape(num_workers, m)


def split_by_label(labels, num_workers: int) -> np.ndarray:
    """[n, m]: examples sorted by label (stable), cut into contiguous equal shards."""
    labels = np.asarray(labels)
    m = _check_split(labels, num_workers)
    order = np.argsort(labels, kind="stable")
    return order[: m * num_workers].reshape(num_workers, m)


def split_dirichlet(labels, num_workers: int, alpha: float, *, seed: int = 0) -> np.ndarray:
    """[n, m]: each worker's class proportions drawn from Dirichlet(α·1); equal-size shards.

    Shard by shard, m examples are drawn without replacement from the class pools in the drawn
    proportions; when a class runs out, its share goes to the classes that remain, in proportion
    to the shard's weights (so shards stay equal and disjoint). The shards drawn last get what the
    pools have left, so they are the most skewed (for n = 100, α = 0.1: label entropy 0.40 for the
    last five against 0.80 for the first twenty); they are handed to the workers in an order
    drawn from the same seed, so that no worker index, and with it no worker speed where speed
    follows the index, is tied to the leftovers.
    """
    labels = np.asarray(labels)
    m = _check_split(labels, num_workers)
    if not (np.isfinite(alpha) and alpha > 0):
        raise ValueError(f"alpha must be positive and finite; got {alpha!r}")
    rng = np.random.default_rng(seed)
    classes = np.unique(labels)
    pools = [list(rng.permutation(np.flatnonzero(labels == c))) for c in classes]
    out = np.empty((num_workers, m), dtype=np.int64)
    for w in range(num_workers):
        p = rng.dirichlet(np.full(len(classes), float(alpha)))
        taken = []
        need = m
        while need > 0:
            avail = np.array([len(pool) > 0 for pool in pools])
            q = np.where(avail, p, 0.0)
            q = q / q.sum() if q.sum() > 0 else avail / avail.sum()
            counts = rng.multinomial(need, q)
            for c, k in enumerate(counts):
                k = min(k, len(pools[c]))
                taken += pools[c][:k]
                del pools[c][:k]
                need -= k
        out[w] = taken
    return out[rng.permutation(num_workers)]


def split_by_group(labels, groups, *, seed: int = 0) -> np.ndarray:
    """[n, m]: worker i's shard drawn (without replacement, equal sizes) from the classes of its
    group, ``groups[i]`` (a list of classes per worker). Workers of one group share its classes'
    examples evenly. For splits where speed and data are correlated: give the fast workers a
    subset of the classes and the slow ones the rest."""
    labels = np.asarray(labels)
    groups = [tuple(sorted(int(c) for c in g)) for g in groups]
    if not groups or any(not g for g in groups):
        raise ValueError("groups must give every worker a non-empty list of classes")
    rng = np.random.default_rng(seed)
    members = {}
    for i, g in enumerate(groups):
        members.setdefault(g, []).append(i)
    if len({c for g in members for c in g}) != sum(len(g) for g in members):
        raise ValueError(f"distinct groups must not share classes; got {sorted(members)}")
    sizes = []
    for g, workers in members.items():
        pool = np.flatnonzero(np.isin(labels, g))
        sizes.append(len(pool) // len(workers))
    m = min(sizes)
    if m < 1:
        raise ValueError("some group has fewer examples than workers")
    out = np.empty((len(groups), m), dtype=np.int64)
    for g, workers in members.items():
        pool = rng.permutation(np.flatnonzero(np.isin(labels, g)))
        for k, w in enumerate(workers):
            out[w] = pool[k * m:(k + 1) * m]
    return out


def split_overlap(labels, num_workers: int, ratio: float, *, seed: int = 0) -> np.ndarray:
    """[n, m]: every worker holds a common subset O with |O| = round(r·N) plus its own disjoint
    part of the rest (equal parts, remainder dropped): the overlapping split of the DEAHES-O paper
    (r = |O|/|D|; the paper uses r = 1/P). At r = 0 this is :func:`split_iid` (the same draw).

    Rows are ordered [O, S_j], the shared examples first, so ``idx[:, :len(O)]`` is the same for
    every worker."""
    labels = np.asarray(labels)
    _check_split(labels, num_workers)
    r = float(ratio)
    if not (np.isfinite(r) and 0.0 <= r < 1.0):
        raise ValueError(f"overlap ratio must be in [0, 1); got {ratio!r}")
    perm = np.random.default_rng(seed).permutation(len(labels))
    shared = int(round(r * len(labels)))
    rest = perm[shared:]
    m = len(rest) // int(num_workers)
    if m < 1:
        raise ValueError(f"overlap ratio {r} leaves {len(rest)} examples, fewer than one per worker ({num_workers})")
    own = rest[: m * num_workers].reshape(num_workers, m)
    return np.concatenate([np.broadcast_to(perm[:shared], (num_workers, shared)), own], axis=1)
