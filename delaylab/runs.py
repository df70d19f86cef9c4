"""`delaylab run` and `delaylab show`: a config run into a folder, resumable, and read back. The folder:

    config.toml, config.json   what was asked (the TOML reads back to the same config)
    environment.json           package versions, git revision, platform
    schedule.json              the schedule's summary and digest
    checkpoint.npz             the state after the last finished segment (sim.checkpoint)
    metrics.npz, metrics.csv   every logged series (a sweep: leading axes [step sizes, seeds];
                               its CSV holds the median over seeds per step size)
    final.npz                  the final server model and its tail average, leaf by leaf
    summary.json               status, final numbers, the theory's prediction where there is one
    figure.png                 loss (and distance to the optimum) against simulated time

Everything is written atomically (a temporary name, then a rename); nothing is pickled. A run
killed at any point resumes with ``delaylab run --resume DIR`` to the same bits as one that was
never interrupted.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import warnings
import zipfile
from typing import Optional

import numpy as np

from delaylab import config as C

CHECKPOINT = "checkpoint.npz"


class RunError(ValueError):
    pass


def _flatten_tree(tree, prefix: str) -> dict:
    import jax

    out = {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        name = prefix + (jax.tree_util.keystr(path) or "")
        out[name] = np.asarray(leaf)
    return out


def _sweep_csv_rows(metrics: dict, stepsizes) -> list[dict]:
    """Per log point and step size, the median over seeds of every [H, S, logs] series."""
    time_ = np.asarray(metrics["time"])
    rows = []
    for h, g in enumerate(stepsizes):
        for t in range(time_.shape[0]):
            row = {"stepsize": g, "time": float(time_[t]), "events": int(metrics["events"][t])}
            for k, v in metrics.items():
                v = np.asarray(v)
                if v.ndim == 3 and v.shape[2] == time_.shape[0] and k not in ("time", "events"):
                    with np.errstate(all="ignore"):
                        row[f"{k}_median"] = float(np.nanmedian(v[h, :, t])) if np.any(np.isfinite(v[h, :, t])) else np.nan
            rows.append(row)
    return rows


def _theory(cfg: C.RunConfig, problem, schedule, result) -> Optional[dict]:
    """Where the registry's theory says the run settles (frequency-weighted limit), against the
    tail average; quadratic problems only (closed-form limits)."""
    from delaylab import registry

    if cfg.problem.kind != "quadratic":
        return None
    entry = registry.algorithm(cfg.algorithm)
    t0 = result.tail_window[0]
    rows = []
    for h, g in enumerate(cfg.stepsize):
        try:
            q = entry.predicted_weights(g, schedule, from_time=t0)
            limit = np.asarray(entry.limit(problem, q), np.float64)
        except (TypeError, ValueError, NotImplementedError):
            return None
        tail = np.asarray(result.tail_average, np.float64)
        tail = tail.reshape((-1,) + limit.shape)[h * cfg.seeds:(h + 1) * cfg.seeds] if cfg.is_sweep else tail[None]
        opt = np.asarray(problem.minimiser, np.float64)
        rows.append({
            "stepsize": g,
            "predicted_weights": q.tolist(),
            "dist_tail_to_predicted_limit": float(np.median(np.linalg.norm(tail - limit, axis=-1))),
            "dist_tail_to_optimum": float(np.median(np.linalg.norm(tail - opt, axis=-1))),
            "dist_predicted_limit_to_optimum": float(np.linalg.norm(limit - opt)),
        })
    return {"note": "the tail average's distance to the limit the theory predicts (minimiser of Σ q_i F_i) "
                    "and to the true optimum; a median over seeds in a sweep", "by_stepsize": rows}


def execute(cfg: C.RunConfig, folder: str, *, resume: bool = False, quiet: bool = False) -> dict:
    """Run ``cfg`` into ``folder`` (resuming from its checkpoint with ``resume``); returns the summary.
    The run is in float64 iff ``cfg.x64``, within this call only (the process-wide setting is left
    as it was)."""
    import jax

    with jax.enable_x64(bool(cfg.x64)):
        return _execute(cfg, folder, resume=resume, quiet=quiet)


def _execute(cfg: C.RunConfig, folder: str, *, resume: bool, quiet: bool) -> dict:
    import jax

    from delaylab import sim
    from delaylab.sim import checkpoint as ckpt
    from delaylab.sim import store
    from delaylab.sim.progress import ProgressBar

    problem, schedule, alg, grid = prepare(cfg)  # before anything is written: a refusal leaves no folder
    os.makedirs(folder, exist_ok=True)
    if not resume:
        store.atomic_write(os.path.join(folder, "config.toml"), C.to_toml(cfg).encode())
        store.open_run_folder(folder, cfg.to_dict())
        store.write_json(os.path.join(folder, "schedule.json"), {**schedule.summary(), "digest": schedule.digest()})
    key = jax.random.key(cfg.seed)
    common = dict(log_every=cfg.log_every or None, segment=cfg.segment or None,
                  progress=None if quiet else ProgressBar(cfg.name),
                  checkpoint=os.path.join(folder, CHECKPOINT), checkpoint_every=cfg.checkpoint_every)
    t0 = time.monotonic()
    try:
        if cfg.is_sweep:
            if grid is None:  # one step size, several seeds
                first = next(iter(alg.hparams))
                grid = {first: np.asarray(alg.hparams[first])[None]}
            result = sim.sweep(alg, problem, schedule, keys=jax.random.split(key, cfg.seeds), hparams=grid, **common)
        else:
            result = sim.run(alg, problem, schedule, key=key, **common)
    except ckpt.CheckpointMismatch as err:
        raise RunError(f"cannot resume {folder}: {err}") from None
    wall = time.monotonic() - t0
    metrics = dict(result.metrics)
    params = metrics.pop("params", None)
    store.write_metrics(folder, {k: v for k, v in metrics.items() if isinstance(v, np.ndarray)}, name="metrics")
    if params is not None:
        store.write_metrics(folder, _flatten_tree(params, "params"), name="params_log")
    if cfg.is_sweep:
        store.write_csv(os.path.join(folder, "metrics.csv"), _sweep_csv_rows(metrics, cfg.stepsize))
    final = {**_flatten_tree(result.params, "params"), **_flatten_tree(result.tail_average, "tail_average")}
    store.write_npz(os.path.join(folder, "final.npz"), final)
    loss = np.asarray(metrics["loss"], np.float64)
    bad = np.asarray(result.diverged_at)
    diverged = int(np.sum(bad >= 0))
    summary = {
        # "complete"; "diverged" (a single run, or every run of a sweep); "partly diverged" (some runs
        # of a sweep: "diverged_at" says which). Non-finite numbers are written as null (sim.store).
        "status": ("complete" if diverged == 0 else
                   "diverged" if diverged == bad.size else "partly diverged"),
        "name": cfg.name,
        "algorithm": cfg.algorithm,
        "sweep": cfg.is_sweep,
        "runs": len(cfg.stepsize) * cfg.seeds,
        "events": int(schedule.num_events),
        "end_time": schedule.end_time,
        # the last finite log point of each run (a diverged run's metrics stop before its bad event)
        "final_loss": _last_finite(loss) if not cfg.is_sweep else _median_last(loss),
        "diverged": diverged,
        "wall_seconds_this_process": wall,
        "resumed": bool(resume),
    }
    if cfg.is_sweep:
        summary["diverged_at"] = bad.tolist()  # [step sizes][seeds]: the event, −1 where the run did not diverge
    elif result.divergence is not None:
        dv = result.divergence
        summary["divergence"] = {"event": dv.event, "worker": dv.worker, "time": dv.time}
    if "dist_optimum" in metrics:
        d = np.asarray(metrics["dist_optimum"], np.float64)
        summary["final_dist_optimum"] = _last_finite(d) if not cfg.is_sweep else _median_last(d)
    theory = _theory(cfg, problem, schedule, result)
    if theory is not None:
        summary["theory"] = theory
    store.write_json(os.path.join(folder, "summary.json"), summary)
    draw(folder)
    if resume:  # only once the resumed run has finished: a refused resume leaves the folder as it was
        stale = store.remove_stale_temporaries(folder)
        if stale and not quiet:
            print(f"{folder}: removed {len(stale)} temporary file(s) an interrupted write left behind "
                  f"({', '.join(stale)}); the files they were to replace were whole", file=sys.stderr)
    return summary


def prepare(cfg: C.RunConfig):
    """(problem, schedule, algorithm, step grid) of ``cfg``, built as ``execute`` builds them, before
    anything is compiled or written. A value the builders refuse (they raise ValueError or TypeError
    naming the argument), an algorithm whose halves break the protocol
    (:func:`delaylab.sim.engine.check_contract`), a numerical failure while building (numpy's
    LinAlgError) or a size that does not fit in memory becomes a :class:`RunError`, one line."""
    from delaylab.sim import engine

    try:
        problem = C.build_problem(cfg)
        schedule = C.build_schedule(cfg)
        alg, grid = C.build_algorithm(cfg, schedule)
        engine.check_contract(alg, problem)  # what the halves return, traced before any folder is made
    except MemoryError as err:
        raise RunError(f"the configuration does not fit in memory while building it ({err}); reduce "
                       "schedule.events, problem.dim, problem.workers or seeds") from None
    except (ValueError, TypeError) as err:
        msg = " ".join(str(err).split())
        raise RunError(f"the configuration cannot be built: {msg}") from None
    return problem, schedule, alg, grid


EXIT_DIVERGED = 3  # `delaylab run`'s exit status when its run (or every run of its sweep) diverged
DRAWN_UP_TO = 1e100  # figure.png leaves out values beyond this (a diverging run's last log points)


def _last_finite(v: np.ndarray) -> float:
    """The last finite value of a 1-D series (NaN if none)."""
    v = np.asarray(v, np.float64).ravel()
    ok = np.flatnonzero(np.isfinite(v))
    return float(v[ok[-1]]) if ok.size else float("nan")


def _median_last(v: np.ndarray) -> list:
    """Per step size, the median over seeds of each run's last finite value ([H, S, logs] → [H])."""
    last = np.apply_along_axis(_last_finite, -1, np.asarray(v, np.float64))
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN rows: every seed diverged at once
        return np.nanmedian(last, axis=1).tolist()


def draw(folder: str, out: Optional[str] = None) -> str:
    """figure.png from the folder's metrics.npz and config (no recomputation)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from delaylab.sim import store

    cfg = C.read_toml(os.path.join(folder, "config.toml"))
    m = store.read_metrics(folder)
    summary = {}
    if os.path.exists(os.path.join(folder, "summary.json")):
        with open(os.path.join(folder, "summary.json")) as fh:
            summary = json.load(fh)
    theory = summary.get("theory")
    panels = ["loss"] + (["dist_optimum"] if "dist_optimum" in m else [])
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 3.8), squeeze=False)
    t = m["time"]
    for ax, key in zip(axes[0], panels):
        v = np.asarray(m[key], np.float64)
        # a diverging run: its finite part is drawn, up to 1e100 (a log axis spanning more decades
        # than that overflows matplotlib's tick locator; the divergence is marked instead)
        v = np.where(np.isfinite(v) & (np.abs(v) < DRAWN_UP_TO), v, np.nan)
        if v.ndim == 1:
            ax.plot(t, v, lw=1.4, label=f"γ = {cfg.stepsize[0]:g}")
        else:
            for h, g in enumerate(cfg.stepsize):
                with np.errstate(all="ignore"), warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)  # log points after every seed diverged
                    med = np.nanmedian(v[h], axis=0)
                    lo, hi = np.nanpercentile(v[h], [10, 90], axis=0)
                line, = ax.plot(t, med, lw=1.4, label=f"γ = {g:g}" + (f" (median of {v.shape[1]})" if v.shape[1] > 1 else ""))
                if v.shape[1] > 1:
                    ax.fill_between(t, lo, hi, color=line.get_color(), alpha=0.2, lw=0)
        finite = v[np.isfinite(v)]
        if finite.size and finite.min() > 0 and finite.max() / finite.min() > 20:
            ax.set_yscale("log")
        if key == "dist_optimum" and theory:
            for h, row in enumerate(theory["by_stepsize"]):
                if row["dist_predicted_limit_to_optimum"] is not None:
                    ax.axhline(row["dist_predicted_limit_to_optimum"], ls="--", lw=1, color=f"C{h}",
                               label="theory: ‖x_q − x*‖" if h == 0 else None)
            ax.legend(fontsize=8)
        if "divergence" in summary:
            ax.axvline(summary["divergence"]["time"], color="r", ls=":", lw=1.2,
                       label=f"diverged at event {summary['divergence']['event']}")
        ax.set_xlabel("simulated time")
        ax.set_ylabel({"loss": "F(x)", "dist_optimum": "‖x − x*‖"}[key])
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    band = " (bands: 10–90 % over seeds)" if cfg.seeds > 1 else ""
    fig.suptitle(f"{cfg.name}: {cfg.algorithm}, {cfg.problem.kind}, n = {cfg.problem.workers}, "
                 f"{cfg.schedule.policy}{band}", fontsize=10)
    fig.tight_layout()
    path = out or os.path.join(folder, "figure.png")
    store.write_figure(fig, path, dpi=110)  # atomically: a kill while drawing leaves the previous figure whole
    return path


FINISHED = ("complete", "diverged", "partly diverged")  # a summary.json's statuses


def file_in_the_way(path: str, flag: str = "--out") -> Optional[str]:
    """One line if ``path`` cannot be an output folder because it, or a folder above it, is a file
    (None otherwise). `delaylab figure` and `verify` create missing folders; `run` checks more
    (:func:`check_out`)."""
    p = os.path.abspath(path)
    while p and not os.path.exists(p):
        p = os.path.dirname(p)
    if p and not os.path.isdir(p):
        return f"{flag} {path!r}: {p!r} is a file, not a folder"
    return None


def check_out(folder: str, *, flag: str = "--out") -> None:
    """Refuse, before anything is built or compiled, an output folder that cannot be one: a path
    that is (or is under) a file, one whose parent folder is missing, or one that cannot be written."""
    bad = file_in_the_way(folder, flag)
    if bad:
        raise RunError(bad)
    parent = os.path.dirname(os.path.abspath(folder))
    if not os.path.isdir(parent):
        raise RunError(f"{flag} {folder!r}: its parent {parent!r} does not exist; create it first")
    target = folder if os.path.isdir(folder) else parent
    try:  # by trying: os.access says yes to root, and /proc or /sys refuse whatever the bits say
        fd, probe = tempfile.mkstemp(dir=target, prefix=".tmp-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        raise RunError(f"{flag} {folder!r}: {target!r} cannot be written ({err.strerror})") from None


def _summary_problem(st) -> str:
    """What is wrong with a parsed summary.json ('' if nothing)."""
    if not isinstance(st, dict) or "status" not in st:
        return "no status"
    if st["status"] not in FINISHED:
        return f"status {st['status']!r} is not one of {list(FINISHED)}"
    missing = [k for k in ("final_loss", "diverged") if k not in st]
    if "divergence" in st and not (isinstance(st["divergence"], dict)
                                   and {"event", "worker", "time"} <= set(st["divergence"])):
        missing.append("divergence's event, worker and time")
    return f"missing {', '.join(missing)}" if missing else ""


def status(folder: str) -> dict:
    """What the folder holds: finished (complete or diverged), interrupted (segments done of how
    many) or not started. A summary or checkpoint that cannot be read (truncated, or written by
    another version) raises :class:`RunError` saying so; the folder is not touched."""
    from delaylab.sim import checkpoint as ckpt

    summary = os.path.join(folder, "summary.json")
    if os.path.exists(summary):
        try:
            with open(summary) as fh:
                st = json.load(fh)
        except (OSError, ValueError) as err:
            raise RunError(f"{summary} cannot be read ({err}); the folder was left as it is") from None
        problem = _summary_problem(st)
        if problem:
            raise RunError(f"{summary} is not a summary delaylab run wrote ({problem}); the folder was left as it is")
        return st
    path = os.path.join(folder, CHECKPOINT)
    if os.path.exists(path):
        try:
            with np.load(path, allow_pickle=False) as f:
                done = int(f["done"])
            fp = ckpt.read_fingerprint(path)
            chunks, segment = fp["plan"]["chunks"], fp["plan"]["segment"]
            total = -(-int(chunks) // int(segment)) if int(segment) > 0 else None
            if done < 0 or (total is not None and done > total):
                raise ValueError(f"it says {done} segments are done, of {total}")
            return {"status": "interrupted", "segments_done": done, "chunks": chunks, "segment": segment}
        except Exception as err:  # a truncated zip, a missing entry, another version's layout
            raise RunError(f"{path} cannot be read ({type(err).__name__}: {err}): truncated, or written by "
                           "another version; the folder was left as it is (delete the checkpoint to start "
                           "the run again)") from None
    return {"status": "not started"}


def show(folder: str, *, out: Optional[str] = None, stream=None) -> int:
    stream = stream or sys.stdout
    if not os.path.exists(os.path.join(folder, "config.toml")):
        raise RunError(f"{folder}: not a run folder (no config.toml); `delaylab run` writes one")
    cfg = C.read_toml(os.path.join(folder, "config.toml"))
    env = {}
    if os.path.exists(os.path.join(folder, "environment.json")):
        try:
            with open(os.path.join(folder, "environment.json")) as fh:
                env = json.load(fh)
        except (OSError, ValueError) as err:
            raise RunError(f"{os.path.join(folder, 'environment.json')} cannot be read ({err})") from None
        env = env if isinstance(env, dict) else {}
    st = status(folder)
    p, s = cfg.problem, cfg.schedule
    w = stream.write
    w(f"{folder}\n")
    w(f"  {cfg.name}: {cfg.algorithm}, γ = {', '.join(f'{g:g}' for g in cfg.stepsize)}, "
      f"{cfg.seeds} seed{'s' if cfg.seeds > 1 else ''} from {cfg.seed}\n")
    w(f"  problem: {p.kind}, n = {p.workers}" + (f", d = {p.dim}" if p.kind != "mlp" else "") + "\n")
    w(f"  schedule: {s.policy}, τ = {list(s.taus)}, noise {s.noise}, {s.events} events"
      + (f", failures {s.failures:g}" if s.failures else "") + "\n")
    if env:
        w(f"  written by: git {env.get('git_revision')}, jax {env.get('packages', {}).get('jax')}, "
          f"{env.get('jax_backend')}, python {env.get('python')}\n")
    w(f"  status: {st['status']}")
    if st["status"] == "interrupted":
        w(f" (segments done: {st['segments_done']}; resume with `delaylab run --resume {folder}`)\n")
        return 0
    w("\n")
    if st["status"] in FINISHED:
        if "divergence" in st:
            dv = st["divergence"]
            w(f"  diverged at event {dv['event']} (worker {dv['worker']}, simulated time {dv['time']:g}); "
              "the numbers below are from the last finite log point\n")
        w(f"  final loss: {st['final_loss']}\n")
        if "final_dist_optimum" in st:
            w(f"  final ‖x − x*‖: {st['final_dist_optimum']}\n")
        if st.get("diverged"):
            w(f"  diverged runs: {st['diverged']}\n")
        for row in st.get("theory", {}).get("by_stepsize", []):
            num = {k: "n/a" if row[k] is None else f"{row[k]:.3g}" for k in
                   ("dist_tail_to_predicted_limit", "dist_tail_to_optimum", "dist_predicted_limit_to_optimum")}
            w(f"  γ = {row['stepsize']:g}: tail average to the predicted limit {num['dist_tail_to_predicted_limit']}, "
              f"to x* {num['dist_tail_to_optimum']} (limit to x*: {num['dist_predicted_limit_to_optimum']})\n")
        if out is not None and not os.path.isdir(os.path.dirname(os.path.abspath(out))):
            raise RunError(f"--out {out!r}: its folder does not exist")
        try:
            path = draw(folder, out)
        except (OSError, ValueError, KeyError, zipfile.BadZipFile) as err:  # a truncated metrics.npz, a bad config
            raise RunError(f"{folder}: the figure cannot be drawn from its files ({type(err).__name__}: "
                           f"{' '.join(str(err).split())})") from None
        w(f"  figure: {path}\n")
    return 0
