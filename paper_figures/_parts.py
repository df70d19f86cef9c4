"""Resumable figure runs: a long figure is computed in parts, each stored on disk when it finishes.

A part is a dict of NumPy arrays, stored as ``<dir>/<name>.npz`` together with a *key*: a JSON
string of everything its numbers depend on (the configuration and a hash of the sources). A rerun
that finds a stored part under the same name and key reuses it; a part with another key (the
configuration or the code changed) is recomputed. Files are written under a temporary name and
renamed, so a run stopped half-way never leaves a half-written part.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from typing import Callable, Optional

import numpy as np

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def code_hash(*files: str) -> str:
    """A hash of the sources a figure's numbers depend on: every ``.py`` under ``algos/`` and
    ``sim/`` plus ``files`` (typically the figure's own module). Take it once, when a run starts:
    the code the process loaded, not what is on disk when a part is saved."""
    h = hashlib.sha256()
    paths = [os.path.abspath(f) for f in files]
    for sub in ("algos", "sim"):
        for dirpath, _, names in sorted(os.walk(os.path.join(_ROOT, sub))):
            paths += [os.path.join(dirpath, f) for f in sorted(names) if f.endswith(".py")]
    for p in paths:
        with open(p, "rb") as fh:
            h.update(fh.read())
    return h.hexdigest()[:16]


def make_key(**fields) -> str:
    """The key of a part: its fields as canonical JSON (floats should be rounded by the caller)."""
    return json.dumps(fields, sort_keys=True)


def load_or_compute(directory: Optional[str], name: str, key: str,
                    compute: Callable[[], dict]) -> tuple[dict, bool]:
    """The part ``name``: read from ``directory`` when stored there under ``key``, else computed by
    ``compute()`` (a dict of arrays), timed (``"seconds"`` is added) and stored. Returns the part
    and whether it was reused. With ``directory=None`` nothing is read or written."""
    path = None if directory is None else os.path.join(directory, f"{name}.npz")
    if path is not None and os.path.exists(path):
        with np.load(path, allow_pickle=False) as z:
            if str(z["key"]) == key:
                return {k: z[k] for k in z.files if k != "key"}, True
    t0 = time.perf_counter()
    part = {k: np.asarray(v) for k, v in compute().items()}
    part["seconds"] = np.asarray(time.perf_counter() - t0)
    if path is not None:
        os.makedirs(directory, exist_ok=True)
        tmp = path + ".tmp.npz"
        np.savez_compressed(tmp, key=np.asarray(key), **part)
        os.replace(tmp, path)
    return part, False


def announce_resume(directory: Optional[str], stem: str) -> None:
    """Say so when a run picks up stored parts of an earlier, stopped run."""
    if directory is not None and os.path.isdir(directory) and any(f.endswith(".npz") for f in os.listdir(directory)):
        print(f"  {stem}: resuming; finished parts of an earlier stopped run are in {directory} "
              "(a part whose configuration or code differs is recomputed)", flush=True)


def remove(directory: str) -> None:
    """Delete a finished run's parts (and ``.parts/`` when it is left empty)."""
    import shutil

    shutil.rmtree(directory, ignore_errors=True)
    parent = os.path.dirname(directory)
    if os.path.isdir(parent) and not os.listdir(parent):
        os.rmdir(parent)
