import gzip
import os

import numpy as np
import pytest

from tests.conftest import needs_fashion_mnist

from delaylab.sim import data


def _write_idx(path, arr, gz):
    arr = np.asarray(arr)
    code = {np.dtype(np.uint8): 0x08}[arr.dtype]
    raw = bytes([0, 0, code, arr.ndim]) + b"".join(int(s).to_bytes(4, "big") for s in arr.shape) + arr.tobytes()
    with (gzip.open if gz else open)(path, "wb") as fh:
        fh.write(raw)


def _fake_mnist(folder, gz=True, n_train=50, n_test=10):
    rng = np.random.default_rng(0)
    arrays = {"x_train": rng.integers(0, 256, (n_train, 4, 4), dtype=np.uint8),
              "y_train": rng.integers(0, 10, n_train).astype(np.uint8),
              "x_test": rng.integers(0, 256, (n_test, 4, 4), dtype=np.uint8),
              "y_test": rng.integers(0, 10, n_test).astype(np.uint8)}
    os.makedirs(folder, exist_ok=True)
    for key, stems in data.IDX_FILES.items():
        _write_idx(os.path.join(folder, stems[0] + (".gz" if gz else "")), arrays[key], gz)
    return arrays


@pytest.mark.parametrize("gz", [True, False])
def test_idx_round_trip(tmp_path, gz):
    arrays = _fake_mnist(tmp_path / "m", gz=gz)
    ds = data.load_mnist_format(str(tmp_path / "m"))
    np.testing.assert_array_equal(ds.x_train, arrays["x_train"] / np.float32(255))
    np.testing.assert_array_equal(ds.y_test, arrays["y_test"])
    assert ds.x_train.dtype == np.float32 and ds.name == "m"


def test_npz_and_errors(tmp_path):
    arrays = _fake_mnist(tmp_path / "m")
    np.savez(tmp_path / "d.npz", **arrays)
    ds = data.load_mnist_format(str(tmp_path / "d.npz"))
    assert ds.x_test.shape == (10, 4, 4)
    np.savez(tmp_path / "bad.npz", x_train=arrays["x_train"])
    with pytest.raises(ValueError, match=r"lacks array\(s\) \['y_train', 'x_test', 'y_test'\]"):
        data.load_mnist_format(str(tmp_path / "bad.npz"))
    with pytest.raises(FileNotFoundError, match="does not exist; give a folder of MNIST IDX files"):
        data.load_mnist_format(str(tmp_path / "nowhere"))
    # a corrupt IDX file names the path and the format
    p = tmp_path / "m" / "train-labels-idx1-ubyte.gz"
    with gzip.open(p, "wb") as fh:
        fh.write(b"\x00\x00\x08\x01\x00\x00\x00\x64abc")
    with pytest.raises(ValueError, match="truncated or corrupt IDX file"):
        data.load_mnist_format(str(tmp_path / "m"))
    (tmp_path / "x.gz").write_bytes(b"not gzip")
    with pytest.raises(ValueError, match="cannot read .* as an IDX file"):
        data.read_idx(str(tmp_path / "x.gz"))
    os.remove(tmp_path / "m" / "t10k-images-idx3-ubyte.gz")
    with pytest.raises(FileNotFoundError, match=r"lacks MNIST-format IDX file\(s\) \['t10k-images-idx3-ubyte'\]"):
        data.load_mnist_format(str(tmp_path / "m"))


def test_search_order_and_fallback(tmp_path):
    _fake_mnist(tmp_path / "first")
    ds = data.load_mnist_format(locations=[("a", str(tmp_path / "missing")), ("b", str(tmp_path / "first"))])
    assert ds.name == "b"
    fb = data.load_mnist_format(locations=[("a", str(tmp_path / "missing"))])
    assert fb.name == "digits" and fb.x_train.shape[1:] == (8, 8) and fb.num_classes == 10
    assert 0.0 <= fb.x_train.min() and fb.x_train.max() <= 1.0
    with pytest.raises(FileNotFoundError, match="no MNIST-format data found"):
        data.load_mnist_format(locations=[], fallback=False)


@needs_fashion_mnist
def test_default_locations_find_debian_fashion_mnist():
    ds = data.load_mnist_format(locations=[(n, p) for n, p in data.default_locations() if n == "fashion-mnist"],
                                fallback=False)
    assert ds.name == "fashion-mnist"
    assert ds.x_train.shape == (60000, 28, 28) and ds.x_test.shape == (10000, 28, 28)
    assert np.bincount(ds.y_train).tolist() == [6000] * 10
    assert 0.0 <= ds.x_train.min() and ds.x_train.max() == 1.0


def test_without_data_the_loader_falls_back_to_the_digits():
    ds = data.load_mnist_format(locations=[("nowhere", "/nonexistent/mnist")])
    assert ds.name == "digits" and ds.x_train.shape[1:] == (8, 8)


def test_delaylab_data_names_a_path_or_the_digits(tmp_path, monkeypatch):
    _fake_mnist(tmp_path / "mine")
    monkeypatch.setenv("DELAYLAB_DATA", str(tmp_path / "mine"))
    assert data.default_locations()[0] == ("user data", str(tmp_path / "mine"))
    assert data.load_mnist_format().name == "user data"
    monkeypatch.setenv("DELAYLAB_DATA", "digits")  # whatever else is installed
    assert all(p != "digits" for _, p in data.default_locations())
    assert data.load_mnist_format().name == "digits"
    # a path or locations given still win
    assert data.load_mnist_format(str(tmp_path / "mine")).name == "mine"
    assert data.load_mnist_format(locations=[("b", str(tmp_path / "mine"))]).name == "b"


def test_splits():
    labels = np.repeat(np.arange(10), 100)
    for idx in (data.split_iid(labels, 7, seed=1), data.split_by_label(labels, 7),
                data.split_dirichlet(labels, 7, 0.1, seed=1)):
        assert idx.shape == (7, 1000 // 7)
        assert len(np.unique(idx)) == idx.size  # disjoint
    by_label = data.split_by_label(labels, 10)
    assert all(len(np.unique(labels[r])) == 1 for r in by_label)
    # small α: each worker dominated by few classes; large α: close to the global mix
    skew = data.split_dirichlet(labels, 10, 0.05, seed=0)
    flat = data.split_dirichlet(labels, 10, 1000.0, seed=0)
    top = lambda rows: np.mean([np.bincount(labels[r], minlength=10).max() / len(r) for r in rows])
    assert top(skew) > 0.5 and top(flat) < 0.2
    with pytest.raises(ValueError, match="alpha must be positive"):
        data.split_dirichlet(labels, 3, 0.0)
    # the shards drawn last (from the pools' leftovers) land on no fixed worker: over 40 splits of
    # 100 workers at α = 0.1, the last ten workers' label entropy is the others' (drawn in
    # worker order it was 0.51 against 0.79; in a drawn order 0.79 against 0.76)
    many = np.repeat(np.arange(10), 600)

    def entropy(rows):
        p = np.stack([np.bincount(many[r], minlength=10) / len(r) for r in rows])
        return -np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0), axis=1)

    h = np.stack([entropy(data.split_dirichlet(many, 100, 0.1, seed=s)) for s in range(40)])
    assert abs(h[:, 90:].mean() - h[:, :90].mean()) < 0.06
    with pytest.raises(ValueError, match="cannot give each of 2000 workers one"):
        data.split_iid(labels, 2000)


def test_overlap_split():
    y = np.arange(1000) % 10
    for n, r in ((4, 0.25), (8, 0.125), (3, 0.1)):
        idx = data.split_overlap(y, n, r, seed=2)
        shared = int(round(r * len(y)))
        assert idx.shape == (n, shared + (len(y) - shared) // n)  # equal sizes
        common = set(idx[0])
        for row in idx[1:]:
            common &= set(row)
        assert len(common) == shared and shared / len(y) == r  # the shared fraction, exactly
        np.testing.assert_array_equal(idx[:, :shared], np.broadcast_to(idx[0, :shared], (n, shared)))
        own = idx[:, shared:]
        assert len(np.unique(own)) == own.size and not (set(own.ravel()) & common)  # the rest disjoint
    np.testing.assert_array_equal(data.split_overlap(y, 4, 0.0, seed=5), data.split_iid(y, 4, seed=5))  # r = 0
    with pytest.raises(ValueError, match="overlap ratio must be in"):
        data.split_overlap(y, 4, 1.0)


def test_stratified_subset():
    """Exactly `size` distinct sorted indices; every class within one of its share size·n_c/N; on
    balanced labels each class gets its share exactly; None or too large: everything."""
    rng = np.random.default_rng(3)
    y = rng.choice(4, size=1000, p=[0.1, 0.2, 0.3, 0.4])
    for size in (1, 7, 250, 999):
        idx = data.stratified_subset(y, size, seed=1)
        assert idx.size == size and np.all(np.diff(idx) > 0)
        share = size * np.bincount(y, minlength=4) / y.size
        assert np.all(np.abs(np.bincount(y[idx], minlength=4) - share) < 1.0)
    np.testing.assert_array_equal(data.stratified_subset(y, 250, seed=1), data.stratified_subset(y, 250, seed=1))
    assert not np.array_equal(data.stratified_subset(y, 250, seed=1), data.stratified_subset(y, 250, seed=2))
    balanced = np.repeat(np.arange(10), 60)
    np.testing.assert_array_equal(np.bincount(balanced[data.stratified_subset(balanced, 120, seed=0)]), np.full(10, 12))
    np.testing.assert_array_equal(data.stratified_subset(y, None), np.arange(1000))
    np.testing.assert_array_equal(data.stratified_subset(y, 5000), np.arange(1000))
    with pytest.raises(ValueError, match="size must be a positive integer"):
        data.stratified_subset(y, 2.5)


def test_split_by_group_gives_each_worker_only_its_groups_classes():
    labels = np.repeat(np.arange(10), 30)
    groups = [range(5)] * 4 + [range(5, 10)] * 4
    idx = data.split_by_group(labels, groups, seed=3)
    assert idx.shape == (8, 37) and len(np.unique(idx)) == idx.size  # equal, disjoint shards
    for w in range(8):
        assert set(labels[idx[w]]) <= set(groups[w])
    with pytest.raises(ValueError, match="must not share classes"):
        data.split_by_group(labels, [range(5), range(4, 10)])
