"""Run folders: everything a run that leaves the process writes, in plain formats.

A folder holds ``config.json`` (what was asked), ``environment.json`` (package versions, the
git revision, the platform), ``summary.json``, metrics as ``metrics.npz`` and ``metrics.csv``
(1-D series only) and whatever figures the caller adds. Files are written to a temporary name
and renamed, so an interrupted write never leaves a half file. Nothing is pickled.
"""

from __future__ import annotations

import csv
import importlib.metadata
import io
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
from typing import Mapping, Optional

import numpy as np

_PACKAGES = ("delaylab", "jax", "jaxlib", "flax", "optax", "numpy", "matplotlib")


def git_revision() -> str:
    """The source tree's git revision, with ``+dirty`` if it has uncommitted changes."""
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=10)
        if rev.returncode != 0:
            return "unknown"
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                               capture_output=True, text=True, timeout=10)
        return rev.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def environment() -> dict:
    versions = {}
    for name in _PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    import jax

    from delaylab.sim import native

    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "machine": platform.machine(),
        "jax_backend": jax.default_backend(),
        "x64": bool(jax.config.jax_enable_x64),
        "convolution": native.convolution_in_use(),
        "packages": versions,
        "git_revision": git_revision(),
    }


TMP_PREFIX = ".tmp-"  # atomic_write's temporary files: a process killed mid-write leaves one behind


def remove_stale_temporaries(folder: str) -> list:
    """Delete the temporary files a killed process left in ``folder`` (:func:`atomic_write` writes
    under a temporary name and renames; a SIGKILL between the two leaves the temporary, never a
    half-written file under the real name). Call it only where no other process is writing into
    the folder (a resumed run or figure owns it). Returns the names removed."""
    if not os.path.isdir(folder):
        return []
    stale = sorted(f for f in os.listdir(folder) if f.startswith(TMP_PREFIX))
    for f in stale:
        os.unlink(os.path.join(folder, f))
    return stale


_WRITES: dict = {}  # how many times each path was written in this process (for the test hook below)


def _killed_mid_write(path: str, fh, data: bytes) -> None:
    """A test hook: with ``DELAYLAB_TEST_KILL_MID_WRITE=NAME:K`` in the environment, the K-th write
    (default 1) of a file whose name ends with NAME stops halfway with SIGKILL, the way a kill that
    lands mid-write would: the tests check that no reader ever sees half a file."""
    spec = os.environ.get("DELAYLAB_TEST_KILL_MID_WRITE")
    if not spec:
        return
    name, _, k = spec.partition(":")
    if not path.endswith(name):
        return
    _WRITES[path] = _WRITES.get(path, 0) + 1
    if _WRITES[path] == int(k or 1):
        import signal

        fh.write(data[: len(data) // 2])
        fh.flush()
        os.fsync(fh.fileno())
        os.kill(os.getpid(), signal.SIGKILL)


def atomic_write(path: str, data: bytes) -> None:
    folder = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=TMP_PREFIX)
    try:
        with os.fdopen(fd, "wb") as fh:
            _killed_mid_write(path, fh, data)
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _jsonable(obj):
    """``obj`` with arrays and NumPy scalars as lists and numbers, and every non-finite float
    (NaN, ±inf) as ``None``: the JSON this project writes is strict (RFC 8259 has no NaN or
    Infinity; Python's ``json.loads(..., parse_constant=...)`` and every other strict parser refuse
    them). A file that can hold such a number says why beside it (a run's ``status`` is
    "diverged", with where)."""
    if isinstance(obj, Mapping):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return _jsonable(obj.tolist())
    if isinstance(obj, np.generic):
        return _jsonable(obj.item())
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def dumps_json(obj, *, indent: Optional[int] = 2) -> str:
    """Strict JSON of ``obj`` (:func:`_jsonable`: non-finite numbers as null); every JSON file and
    every ``--json`` output of the project goes through here."""
    return json.dumps(_jsonable(obj), indent=indent, allow_nan=False, ensure_ascii=False)


def write_json(path: str, obj) -> None:
    atomic_write(path, (dumps_json(obj) + "\n").encode())


def write_figure(fig, path: str, **savefig) -> None:
    """A matplotlib figure written to ``path`` (format from its extension, default PNG) under a
    temporary name and renamed (:func:`atomic_write`: a kill leaves the previous file whole), then
    closed."""
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format=os.path.splitext(path)[1].lstrip(".") or "png", **savefig)
    plt.close(fig)
    atomic_write(path, buf.getvalue())


def write_csv(path: str, rows: list[dict], *, fieldnames=None) -> None:
    """``rows`` as CSV (:func:`csv_text`), written atomically."""
    atomic_write(path, csv_text(rows, fieldnames=fieldnames).encode())


def csv_text(rows: list[dict], *, fieldnames=None) -> str:
    """``rows`` as CSV text; ``fieldnames`` (default: the first row's keys) also gives an empty
    table its header."""
    buf = io.StringIO()
    names = list(fieldnames) if fieldnames is not None else (list(rows[0]) if rows else None)
    if names:
        writer = csv.DictWriter(buf, fieldnames=names)
        writer.writeheader()
        writer.writerows(rows)
    return buf.getvalue()


def write_npz(path: str, arrays: Mapping[str, np.ndarray]) -> None:
    """An uncompressed ``.npz`` of ``arrays``, written atomically."""
    buf = io.BytesIO()
    np.savez(buf, **{k: np.asarray(v) for k, v in arrays.items()})
    atomic_write(path, buf.getvalue())


def write_metrics(folder: str, metrics: Mapping[str, np.ndarray], *, name: str = "metrics") -> None:
    """``<name>.npz`` with every array, ``<name>.csv`` with the 1-D series of equal length."""
    arrays = {k: np.asarray(v) for k, v in metrics.items()}
    write_npz(os.path.join(folder, f"{name}.npz"), arrays)
    series = {k: v for k, v in arrays.items() if v.ndim == 1}
    if series:
        length = max(v.shape[0] for v in series.values())
        cols = {k: v for k, v in series.items() if v.shape[0] == length}
        rows = [{k: cols[k][i].item() for k in cols} for i in range(length)]
        write_csv(os.path.join(folder, f"{name}.csv"), rows)


def read_metrics(folder: str, *, name: str = "metrics") -> dict:
    with np.load(os.path.join(folder, f"{name}.npz"), allow_pickle=False) as data:
        return {k: data[k] for k in data.files}


def open_run_folder(folder: str, config: Mapping) -> str:
    """Create ``folder`` and write its ``config.json`` and ``environment.json``."""
    os.makedirs(folder, exist_ok=True)
    write_json(os.path.join(folder, "config.json"), config)
    write_json(os.path.join(folder, "environment.json"), environment())
    return folder
