"""The figure protocol: what every module of this package provides, and the one way figures run.

A figure module defines a frozen preset type, a ``PRESETS`` dict of its instances (``quick`` and
``full`` at least), and the four functions of a :class:`Figure`:

* ``compute(preset, parts) -> data``: the numbers (a dict of arrays, numbers, strings, and nested
  dicts and lists of them). Long work goes in parts (:meth:`Parts.get`), so that a stopped run
  resumes where it stopped (:class:`Parts` says how);
* ``plot(data, path)``: the PNG;
* ``findings(data) -> str``: the text of what it found, verdicts included;
* ``rows(data) -> list[dict]``: the CSV of the data behind the figure;

and exports ``FIGURE = Figure(...)``. :meth:`Figure.write` runs it: compute (or load stored data),
then ``<stem>.npz`` (every number the figure and text are drawn from, so that ``--redraw``
redraws both without computing), ``<stem>.png``, ``<stem>.csv`` and ``<stem>.txt``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import sys
import time
from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np

from delaylab.sim import store

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class MixedConvolution(RuntimeError):
    """Stored parts of a figure were computed with another convolution implementation."""


def code_hash(*files: str) -> str:
    """A hash of the sources a figure's numbers depend on: every ``.py`` under ``algos/``, ``sim/``,
    ``theory/`` and ``delaylab/`` plus ``files`` (the figure's own modules). Taken once, when a run starts: the
    code the process loaded, not what is on disk when a part is saved."""
    h = hashlib.sha256()
    paths = [os.path.abspath(f) for f in files]
    for sub in ("algos", "sim", "theory", "delaylab"):  # delaylab: set-ups shared by figures (delaylab.deahes)
        for dirpath, _, names in sorted(os.walk(os.path.join(_ROOT, sub))):
            paths += [os.path.join(dirpath, f) for f in sorted(names) if f.endswith(".py")]
    for p in paths:
        with open(p, "rb") as fh:
            h.update(fh.read())
    return h.hexdigest()[:16]


def convolution() -> str:
    """The convolution implementation the CNN uses in this process, float32 on the default
    backend ("native" (oneDNN), "im2col" or "lax")."""
    import jax.numpy as jnp

    from delaylab.sim.models import conv_impl_for

    return conv_impl_for("auto", jnp.float32)


def _canonical(obj):
    """JSON-able form of a part's inputs (floats rounded to 12 significant digits)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return _canonical(dataclasses.asdict(obj))
    if isinstance(obj, Mapping):
        return {str(k): _canonical(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_canonical(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return _canonical(obj.tolist())
    if isinstance(obj, (float, np.floating)):
        return float(f"{float(obj):.12g}") if np.isfinite(obj) else str(float(obj))
    if isinstance(obj, np.generic):
        return obj.item()
    return obj


class Parts:
    """A figure run's finished parts. ``directory=None``: nothing is stored on disk (a part asked
    for again in the same run is taken from memory). ``out_dir``: the figure's output folder, for
    the few figures that write a file of their own besides the standard four (None: write none).

    A part is stored, when it finishes, under ``<out>/.parts/<figure>_<preset>/`` with a key: a
    hash of the figure's code (every ``.py`` under ``algos/``, ``sim/``, ``theory/`` and
    ``delaylab/`` plus the figure's module), of the part's inputs, and of the convolution
    implementation that runs the CNN (oneDNN or im2col: their float32 results differ in the last
    bits). A rerun reuses a part whose key matches and recomputes one whose code or inputs changed;
    a part computed with another convolution is refused, with the reason, rather than mixed with
    parts of this one. The parts are deleted once the figure is written. Files are written under a
    temporary name and renamed, so a stopped run never leaves a half-written part."""

    def __init__(self, directory: Optional[str], *, code: str, conv: Optional[str], label: str, quiet: bool = False,
                 out_dir: Optional[str] = None, store_parts: bool = True, jobs: int = 1, rank: int = 0,
                 main_pid: Optional[int] = None):
        self.directory, self.code, self.conv, self.label, self.quiet = directory, code, conv, label, quiet
        self.out_dir, self.store_parts = out_dir, store_parts
        self.jobs, self.rank = int(jobs), int(rank)  # cooperating processes (see :meth:`order`); 0 is the main one
        self.main_pid = main_pid  # a helper's: the process that started it (the helper stops when it is gone)
        self.helpers: list = []  # the main process's: (rank, Popen, log) of its helpers, watched by get()
        self._reported: set = set()
        self._orders = 0  # calls of order() so far
        self.first: dict = {}  # part name -> "computed" or "reused": how this run first had it
        self._memo: dict = {}  # runs that store nothing: name -> (key, part) computed in this process
        self.started = time.monotonic()
        self.stored_at_start = self._stored()
        self.plan = _read_estimate(directory)  # a calibration's count of parts and predicted seconds, if any
        if not store_parts or self.rank > 0:  # a calibration (reads, writes nothing) or a helper (the main
            return  # process has cleaned the folder before starting it, and others write into it now)
        stale = store.remove_stale_temporaries(directory) if directory is not None else []
        if directory is not None and os.path.isdir(directory):  # an earlier run's claims and unit marks:
            for f in os.listdir(directory):  # scheduling only (no process of this run exists yet)
                if f.endswith(CLAIM) or f.endswith(DONE):
                    os.unlink(os.path.join(directory, f))
        if stale:
            self.say(f"removed {len(stale)} temporary file(s) a stopped run left in {directory} (a part is "
                     "renamed into place only once written: none was half-written)")
        if directory is not None and os.path.isdir(directory) and any(f.endswith(".npz") for f in os.listdir(directory)):
            self.say(f"resuming; finished parts of an earlier stopped run are in {directory} "
                     "(a part whose code or inputs differ is recomputed)")

    def say(self, msg: str) -> None:
        if not self.quiet:
            print(f"  {self.label}: {msg}", flush=True)

    def order(self, units: Sequence):
        """A figure's independent units of work (methods, settings, cells), one at a time, in the
        order this process is to take them. Alone: as given. With cooperating processes (``delaylab
        figure --jobs N``), which run the same ``compute`` and so ask for the same parts: first the
        units no other process has claimed or finished, each claimed while this process works on
        it (``unit-<k>-<i>.claim`` for the i-th unit of the k-th call; ``.done`` once finished), then the others, whose parts are
        by then stored or being computed (:meth:`get` waits for those). So the processes work in
        parallel wherever units are left, and each still goes through every unit: the data are the
        same whoever computed a part (a part's numbers depend on its code and inputs only), and a
        figure puts its units back in the given order before it uses their order."""
        units = list(units)
        if self.jobs <= 1 or self.directory is None or not self.store_parts:
            yield from units
            return
        os.makedirs(self.directory, exist_ok=True)
        self._orders += 1  # every process makes the same calls in the same sequence: the k-th call's units
        later = []
        for i, u in enumerate(units):
            mark = os.path.join(self.directory, f"unit-{self._orders}-{i}")
            lock = None if os.path.exists(mark + DONE) else self._lock(mark + CLAIM)
            if lock is None:
                later.append(u)
                continue
            try:
                yield u
                store.atomic_write(mark + DONE, b"")
            finally:
                os.close(lock)
        yield from later

    def _lock(self, claim: str) -> Optional[int]:
        """An exclusive lock on the file ``claim`` (``flock``), or None while another process holds
        it. The kernel lets go of a lock when its holder's process ends, however it ends (killed,
        crashed, exited without cleaning up), so a lock is never held by a process that is gone;
        the files stay (empty) until the parts folder is removed, so no two processes can hold
        locks on two files of one name. Returns the open file's descriptor; closing it lets go."""
        import fcntl

        self._check_main()
        fd = os.open(claim, os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        return fd

    def get(self, name: str, inputs: Mapping, compute: Callable[[], Mapping]) -> tuple[dict, bool]:
        """The part ``name``: reused from the directory when stored there with the same code,
        inputs and convolution, else ``compute()`` (a dict: arrays, numbers, strings, nested dicts
        and lists of them), timed (``"seconds"`` is added) and stored. Returns the part and
        whether it was reused.

        With cooperating processes a part is claimed before it is computed (a lock on
        ``<name>.npz.claim``, :meth:`_lock`): a process that finds it held waits for the part to be
        stored, and computes it itself if the holder lets go without storing it (it failed or
        was stopped)."""
        key = json.dumps({"code": self.code, "inputs": _canonical(inputs)}, sort_keys=True)
        if name in self._memo and self._memo[name][0] == key:  # asked again, nothing stored to read it from
            return self._memo[name][1], True
        path = None if self.directory is None else os.path.join(self.directory, f"{name}.npz")
        stored = self._stored_part(path, key)
        if stored is not None:
            self.first.setdefault(name, "reused")
            return stored, True
        self._watch_helpers()
        lock = None
        if path is not None and self.store_parts and self.jobs > 1:
            lock, stored = self._claim(path, key)
            if stored is not None:  # another process computed it meanwhile
                self.first.setdefault(name, "reused")
                return stored, True
        try:
            t0 = time.perf_counter()
            part = dict(compute())
            part["seconds"] = time.perf_counter() - t0
            if path is not None and self.store_parts:
                os.makedirs(self.directory, exist_ok=True)
                save_data(path, part, key=key, convolution=str(self.conv))
            else:  # nowhere to store it (or a calibration): kept in memory, so a part asked for again is not recomputed
                self._memo[name] = (key, part)
        finally:
            if lock is not None:
                os.close(lock)
        self.first.setdefault(name, "computed")
        if self.plan is not None and self.store_parts and self.rank == 0:
            self.say(self.eta())
        return part, False

    def _stored_part(self, path: Optional[str], key: str) -> Optional[dict]:
        """The part stored at ``path`` under ``key``, or None (none stored, or another key's)."""
        if path is None or not os.path.exists(path):
            return None
        with np.load(path, allow_pickle=False) as z:
            stored_key, conv = str(z["key"]), str(z["convolution"])
        if stored_key == key and conv != str(self.conv):
            raise MixedConvolution(
                f"{path} was computed with the {conv} convolution, this process runs {self.conv}; "
                "a figure's parts must come from one implementation. Rerun where the same one is "
                f"available (`make native` builds oneDNN's), or delete {self.directory} to start over.")
        return load_data(path) if stored_key == key else None

    def _claim(self, path: str, key: str) -> tuple:
        """(lock, None) once this process holds the part's lock and the part is not stored, or
        (None, part) when another process has stored it; waits while another holds the lock."""
        os.makedirs(self.directory, exist_ok=True)
        while True:
            lock = self._lock(path + CLAIM)
            try:
                stored = self._stored_part(path, key)  # stored before we looked, or while we waited
            except BaseException:
                if lock is not None:
                    os.close(lock)
                raise
            if stored is not None:
                if lock is not None:
                    os.close(lock)
                return None, stored
            if lock is not None:
                return lock, None
            self._watch_helpers()
            time.sleep(CLAIM_POLL)

    def _check_main(self) -> None:
        """A helper whose main process is gone stops (its parent changed)."""
        if self.rank > 0 and self.main_pid is not None and os.getppid() != self.main_pid:
            raise SystemExit(f"{self.label} helper {self.rank}: the main process is gone; stopping")

    def _watch_helpers(self) -> None:
        """The main process: say once of each helper that has stopped on an error (its parts are
        left to the others), with its log's last lines."""
        for rank, proc, log in self.helpers:
            code = proc.poll()  # also reaps it
            if code not in (None, 0) and rank not in self._reported:
                self._reported.add(rank)
                try:
                    with open(log, errors="replace") as fh:
                        tail = "".join(fh.readlines()[-5:]).rstrip()
                except OSError:
                    tail = ""
                print(f"  {self.label}: helper {rank} stopped with exit code {code}; the other processes compute "
                      f"its parts (its log, {log}, ends:)\n{tail}", flush=True)

    def _stored(self) -> int:
        d = self.directory
        return 0 if d is None or not os.path.isdir(d) else sum(f.endswith(".npz") for f in os.listdir(d))

    @property
    def computed(self) -> int:
        """Parts this run computed (each counted once, however often asked for)."""
        return sum(v == "computed" for v in self.first.values())

    @property
    def reused(self) -> int:
        """Parts this run read from an earlier run's store (each counted once)."""
        return sum(v == "reused" for v in self.first.values())

    def eta(self) -> str:
        """Parts done and (by the calibration's count) left, and the time left at this run's pace
        (with cooperating processes, the parts all of them stored)."""
        total = int(self.plan["parts"])
        if self.jobs > 1:
            done = self._stored()
            pace = (time.monotonic() - self.started) / max(done - self.stored_at_start, 1)
        else:
            done = self.computed + self.reused
            pace = (time.monotonic() - self.started) / max(self.computed, 1)
        left = max(total - done, 0)
        return (f"part {done} of about {total} ({self.reused} reused); about {format_seconds(left * pace)} left "
                f"at {format_seconds(pace)} a part (the calibration predicted {format_seconds(self.plan['predicted'])} "
                "in all)")

    def remove(self) -> None:
        """Delete the parts (and ``.parts/`` when it is left empty)."""
        if self.directory is None:
            return
        shutil.rmtree(self.directory, ignore_errors=True)
        parent = os.path.dirname(self.directory)
        if os.path.isdir(parent) and not os.listdir(parent):
            os.rmdir(parent)


ESTIMATE_FILE = "estimate.json"
CLAIM = ".claim"  # a lock file beside a part (or unit) being computed: see Parts._lock
DONE = ".done"  # beside a unit every part of which is stored (scheduling only)
CLAIM_POLL = 0.2  # seconds between looks at a part another process is computing


def _read_estimate(directory: Optional[str]) -> Optional[dict]:
    path = None if directory is None else os.path.join(directory, ESTIMATE_FILE)
    if path is None or not os.path.exists(path):
        return None
    try:
        with open(path) as fh:
            plan = json.load(fh)
        return plan if {"parts", "predicted"} <= set(plan) else None
    except (OSError, ValueError):
        return None


def format_seconds(t: float) -> str:
    """``3 h 05 min``, ``12 min 40 s`` or ``35 s``."""
    t = max(float(t), 0.0)
    if t >= 3600:
        return f"{int(t // 3600)} h {int(t % 3600 // 60):02d} min"
    if t >= 60:
        return f"{int(t // 60)} min {int(t % 60):02d} s"
    return f"{t:.0f} s"


# --- data files: nested dicts and lists of arrays, without pickles -------------------------------


def _flatten(obj, arrays: dict):
    """The JSON structure of ``obj``; its arrays (and numbers) go to ``arrays``."""
    if isinstance(obj, Mapping):
        return {"dict": [[_flatten(k, arrays), _flatten(v, arrays)] for k, v in obj.items()]}
    if isinstance(obj, tuple):
        return {"tuple": [_flatten(v, arrays) for v in obj]}
    if isinstance(obj, list):
        return {"list": [_flatten(v, arrays) for v in obj]}
    if obj is None or isinstance(obj, (str, bool)):
        return {"value": obj}
    name = f"a{len(arrays)}"
    arrays[name] = np.asarray(obj)
    kind = "int" if isinstance(obj, (int, np.integer)) else "float" if isinstance(obj, (float, np.floating)) else "array"
    return {kind: name}


def _unflatten(node, arrays):
    (kind, v), = node.items()
    if kind == "dict":
        return {_unflatten(k, arrays): _unflatten(x, arrays) for k, x in v}
    if kind == "tuple":
        return tuple(_unflatten(x, arrays) for x in v)
    if kind == "list":
        return [_unflatten(x, arrays) for x in v]
    if kind == "value":
        return v
    a = arrays[v]
    return int(a) if kind == "int" else float(a) if kind == "float" else a


def save_data(path: str, data: Mapping, **extra: str) -> None:
    """``data`` as a plain ``.npz``: its arrays, and its structure as JSON (no pickles); ``extra``
    strings are stored beside them (a part's key)."""
    arrays: dict = {}
    structure = _flatten(dict(data), arrays)
    store.write_npz(path, {"structure": np.asarray(json.dumps(structure)), **{k: np.asarray(v) for k, v in extra.items()},
                           **arrays})


def load_data(path: str) -> dict:
    """The inverse of :func:`save_data`."""
    with np.load(path, allow_pickle=False) as z:
        if "structure" not in z.files:
            raise ValueError(f"{path} holds no figure data (no 'structure' entry)")
        return _unflatten(json.loads(str(z["structure"])), {k: z[k] for k in z.files})


# --- the protocol ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Figure:
    """A reproduced figure (see the module docstring).

    Attributes:
      name: the command line's name (``delaylab figure NAME``).
      description: one line.
      presets: preset name → a frozen preset of the figure's own type.
      compute, plot, findings, rows: the figure's functions.
      stem: the output files' stem, or a function of the data giving it.
      module: the figure module's file, whose code keys its parts (with algos/, sim/, theory/).
      default_preset: what ``delaylab figure NAME`` runs without ``--preset``/``--quick``.
      convolution: whether the figure trains a CNN (its parts then record the convolution).
      save, load: how the data are stored (default: :func:`save_data`, :func:`load_data`).
      units: what the figure's ``compute`` hands out by :meth:`Parts.order` ("methods",
        "settings", ...), so that helper processes (``--jobs``) can take them; "" where it computes
        its parts in one sequence (then ``--jobs`` is refused: a helper would only wait).
      verdicts: optional ``data -> [row]``, the figure's verdicts on the papers' claims, one row
        per claim judged (:meth:`paper_figures.catalogue.Verdict.row`: keys ``id`` and ``kind`` from
        the catalogue, ``claim``, ``verdict``, ``evidence``, ``conditions``), written to
        ``<stem>.verdicts.json``; ``python -m delaylab.paper_figures.table`` writes the verdict table of
        docs/findings.md from these files.
    """

    name: str
    description: str
    presets: Mapping[str, Any]
    compute: Callable[[Any, Parts], dict]
    plot: Callable[[dict, str], None]
    findings: Callable[[dict], str]
    rows: Callable[[dict], list]
    stem: Any
    module: str
    default_preset: str = "full"
    convolution: bool = False
    save: Callable[[str, dict], None] = save_data
    load: Callable[[str], dict] = load_data
    verdicts: Optional[Callable[[Mapping], list]] = None
    units: str = ""

    def __post_init__(self):
        missing = [p for p in ("quick", self.default_preset) if p not in self.presets]
        if missing:
            raise ValueError(f"figure {self.name}: presets {missing} are missing; it has {sorted(self.presets)}")

    def preset(self, name: Optional[str] = None, *, quick: bool = False):
        """The preset ``name`` (default: quick if ``quick``, else the default), checked."""
        name = name or ("quick" if quick else self.default_preset)
        if name not in self.presets:
            raise ValueError(f"figure {self.name} has no preset {name!r}; allowed: {sorted(self.presets)}")
        return name, self.presets[name]

    def file_stem(self, data: Mapping) -> str:
        return self.stem(data) if callable(self.stem) else self.stem

    def compute_data(self, preset: str, out_dir: Optional[str], *, quiet: bool = False, jobs: int = 1,
                     rank: int = 0, plugins: Sequence[str] = (), main_pid: Optional[int] = None) -> dict:
        """Compute the data of ``preset``, its parts kept under ``out_dir/.parts`` until written.

        ``jobs`` > 1 (the main process, ``rank`` 0): ``jobs - 1`` helper processes are started on
        the same preset and parts folder (each loads ``plugins`` first, as the main process did);
        they compute parts the main process will ask for (:meth:`Parts.order`), write nothing else,
        and are stopped once the main process has its data. A helper that fails leaves its parts
        to the others, so the data are the same as with one process."""
        _, p = self.preset(preset)
        jobs = int(jobs)
        if jobs < 1:
            raise ValueError(f"jobs must be at least 1; got {jobs}")
        if jobs > 1 and not self.units:
            raise ValueError(f"figure {self.name} computes its parts in one sequence: helpers would only wait")
        if jobs > 1 and out_dir is None:
            raise ValueError("cooperating processes share their parts through the output folder: give one")
        parts_dir = None if out_dir is None else os.path.join(out_dir, ".parts", f"{self.name}_{preset}")
        parts = Parts(parts_dir, code=code_hash(self.module), conv=convolution() if self.convolution else None,
                      label=self.name, quiet=quiet, out_dir=out_dir, jobs=jobs, rank=rank, main_pid=main_pid)
        try:
            if rank == 0 and jobs > 1:
                self._start_helpers(parts, preset, out_dir, plugins, quiet)
            return self.compute(p, parts)
        finally:
            _stop_helpers(parts)

    def _start_helpers(self, parts: Parts, preset: str, out_dir: str, plugins: Sequence[str], quiet: bool) -> None:
        """Start ``parts.jobs - 1`` helpers (recorded in ``parts.helpers`` as they start)."""
        import subprocess

        import jax.numpy as jnp

        os.makedirs(parts.directory, exist_ok=True)
        x64 = jnp.asarray(1.0).dtype == jnp.float64  # the helpers compute in the main process's precision
        for rank in range(1, parts.jobs):
            log = os.path.join(parts.directory, f"helper-{rank}.log")
            args = [sys.executable, "-c", "from delaylab.paper_figures._figure import run_helper; run_helper()",
                    self.compute.__module__, preset, out_dir, str(rank), str(parts.jobs), "1" if x64 else "0",
                    str(os.getpid()), *plugins]
            with open(log, "w") as fh:
                parts.helpers.append((rank, subprocess.Popen(args, stdout=fh, stderr=subprocess.STDOUT), log))
        if not quiet:
            print(f"  {self.name}: {parts.jobs - 1} helper process(es) started (their logs: "
                  f"{parts.directory}/helper-*.log)", flush=True)

    def estimate(self, preset: str, out_dir: Optional[str], *, probe=None) -> dict:
        """Predict the wall time of computing ``preset`` on this machine from a calibration: the
        figure's ``compute`` with its simulated runs timed by :class:`sim.driver.Probe` (a long run
        cut after its compilation and its first segments, a short one timed whole; a real run on
        Ray workers cut after its first results and predicted at their pace), parts a stopped
        run stored under ``out_dir`` reused, a part asked for twice computed once, and nothing
        written but the estimate itself (``.parts/<figure>_<preset>/estimate.json``, which the run
        then reads to say parts left and time left). Work outside the simulator (evaluation,
        analysis) runs in full and counts as measured. A cut run's numbers stop early, so a decision
        the figure takes on them (a step grid extended, say) may differ from the real run's; the
        estimate counts the parts its own decisions gave.

        Returns ``predicted`` (seconds), ``calibration`` (seconds the estimate took), ``parts``,
        ``reused``, ``runs``, ``cut`` (runs stopped early), ``simulated`` (predicted seconds inside
        the simulator) and ``other`` (measured seconds outside it)."""
        from delaylab.sim import driver

        _, p = self.preset(preset)
        parts_dir = None if out_dir is None else os.path.join(out_dir, ".parts", f"{self.name}_{preset}")
        parts = Parts(parts_dir, code=code_hash(self.module), conv=convolution() if self.convolution else None,
                      label=self.name, quiet=True, out_dir=None, store_parts=False)
        t0 = time.perf_counter()
        with driver.probing(probe) as pr:
            self.compute(p, parts)
        took = time.perf_counter() - t0
        other = took - pr.spent
        out = {"figure": self.name, "preset": preset, "predicted": other + pr.predicted, "calibration": took,
               "parts": parts.computed + parts.reused, "reused": parts.reused, "runs": pr.runs, "cut": pr.cut,
               "simulated": pr.predicted, "other": other}
        if parts_dir is not None:
            os.makedirs(parts_dir, exist_ok=True)
            store.atomic_write(os.path.join(parts_dir, ESTIMATE_FILE), (json.dumps(out, indent=1) + "\n").encode())
        return out

    def write(self, out_dir: str, *, preset: Optional[str] = None, data: Optional[Mapping] = None,
              quiet: bool = False, jobs: int = 1, plugins: Sequence[str] = ()) -> str:
        """Compute ``preset`` (or, given ``data``, only redraw) and write the outputs; returns the
        PNG's path. ``jobs``, ``plugins``: as :meth:`compute_data`."""
        fresh = data is None
        if fresh:
            preset, _ = self.preset(preset)
            data = self.compute_data(preset, out_dir, quiet=quiet, jobs=jobs, plugins=plugins)
        stem = self.file_stem(data)
        os.makedirs(out_dir, exist_ok=True)
        if fresh:  # every number behind the figure, so that it can be redrawn without computing; the
            # figure and text are drawn from what was stored, so a redraw gives the same files
            self.save(os.path.join(out_dir, f"{stem}.npz"), data)
            data = self.load(os.path.join(out_dir, f"{stem}.npz"))
        path = os.path.join(out_dir, f"{stem}.png")
        self.plot(data, path)
        for name, content in self.texts(data).items():
            store.atomic_write(os.path.join(out_dir, name), content)
        if fresh:  # everything is written; the parts were only there to resume a stopped run
            Parts(os.path.join(out_dir, ".parts", f"{self.name}_{preset}"), code="", conv=None, label=self.name,
                  quiet=True).remove()
        return path


    def texts(self, data: Mapping) -> dict:
        """file name -> bytes of every text output drawn from ``data``: ``<stem>.csv``,
        ``<stem>.txt`` and, for a figure with verdicts, ``<stem>.verdicts.json`` (the suite
        regenerates them from each stored ``.npz`` and compares)."""
        stem = self.file_stem(data)
        out = {f"{stem}.csv": store.csv_text(self.rows(data)).encode(), f"{stem}.txt": self.findings(data).encode()}
        if self.verdicts is not None:
            rows = [{"figure": self.name, "stem": stem, **{k: str(r[k]) for k in VERDICT_KEYS}} for r in self.verdicts(data)]
            out[f"{stem}.verdicts.json"] = (json.dumps(rows, indent=1, ensure_ascii=False, allow_nan=False) + "\n").encode()
        return out


VERDICT_KEYS = ("id", "kind", "claim", "verdict", "evidence", "conditions")


def _stop_helpers(parts: Parts) -> None:
    """Stop the main process's helpers (it has every part it needs, or has failed), after saying
    which of them had stopped on an error."""
    parts._watch_helpers()
    for _, proc, _ in parts.helpers:
        if proc.poll() is None:
            proc.terminate()  # SIGTERM's default: the helper ends at once, and the kernel drops its locks
            try:
                proc.wait(timeout=30)
            except Exception:  # noqa: BLE001 - a helper that does not end is killed
                proc.kill()
                proc.wait()


def run_helper(argv: Optional[Sequence[str]] = None) -> None:
    """A helper process of :meth:`Figure.compute_data` (started by it, not by hand): argv is the
    figure's module, preset, output folder, rank, number of processes, whether to compute in
    float64, the main process's id, and plugin paths. On Linux the kernel kills the helper when
    the main process ends, however it ends (``PR_SET_PDEATHSIG``); elsewhere it stops at its
    next claim (:meth:`Parts._lock`)."""
    import importlib

    module, preset, out_dir, rank, jobs, x64, main_pid, *plugins = list(sys.argv[1:] if argv is None else argv)
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != int(main_pid):  # it ended before the line above
        raise SystemExit("the main process is gone; stopping")
    import jax

    from delaylab import plugins as plugin_loader

    plugin_loader.load_all(plugins)  # and the installed ones, as the command line does
    fig = importlib.import_module(module).FIGURE
    with jax.enable_x64(x64 == "1"):
        fig.compute_data(preset, out_dir, quiet=True, jobs=int(jobs), rank=int(rank), main_pid=int(main_pid))


def progress(label: str):
    """A progress printer for a figure's long loops (stdout, flushed)."""

    def say(msg: str) -> None:
        print(f"  {label} {msg}", flush=True)
        sys.stdout.flush()

    return say
