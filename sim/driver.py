"""The host driver: a run or a sweep as a sequence of compiled segments.

Every run goes through here. A segment is one call of the compiled program (:func:`sim.core.segment`)
over some chunks of the plan, the carry staying on the device between calls; a run in one call is
one segment over the whole plan. Between segments the host sees the metrics (for progress) and the
carry (for checkpoints): nothing is added to the compiled program, and a run in segments computes
exactly what the one-call run computes, the same chunk body in the same order
(tests/sim/test_segments.py checks the bits).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import math
import os
import time
from typing import Callable, Iterator, Optional

import jax
import numpy as np

from delaylab.sim import checkpoint as ckpt
from delaylab.sim.blocks import BlockPlan
from delaylab.sim.progress import Progress


@dataclasses.dataclass
class Program:
    """A run's or a sweep's compiled segment, bound to its inputs.

    Attributes:
      segment: ``(carry, pieces, start) -> (carry, first, metrics per piece)`` on the device;
        ``pieces`` is a tuple of ``(plan chunks, padded)``; with ``start`` the run begins there
        (``carry`` ignored, ``first`` the metrics at time 0), else ``first`` is None.
      to_host, from_host: move a carry (or metrics) between its device form and the NumPy form a
        checkpoint holds (a sweep's padding runs dropped).
      log_axis: the metrics' log-point axis in host form (0 for a run, 1 for a sweep).
      runs: a sweep's number of runs (its host form's leading axis), None for a run.
    """

    segment: Callable
    to_host: Callable
    from_host: Callable
    log_axis: int
    runs: Optional[int] = None

    def host_like(self) -> tuple:
        """Abstract shapes of (carry, first metrics) in host form, without compiling anything."""
        carry, first, _ = jax.eval_shape(lambda: self.segment(None, (), True))
        if self.runs is None:
            return carry, first
        return jax.tree.map(lambda v: jax.ShapeDtypeStruct((self.runs,) + tuple(v.shape[1:]), v.dtype), (carry, first))


def split_plan(plan: BlockPlan) -> list[tuple[np.ndarray, bool]]:
    """The plan's pieces in order, as (chunks, padded): the chunks without padding slots, then the
    rest (empty pieces left out).

    Padding slots are skipped with a branch, and XLA copies a branch's operands, the whole server
    state, on every slot; so the engine branches only where the plan has padding. With one event
    per block, only a ragged last chunk has any, and it is cut to its real length.
    """
    has_pad = np.any(plan.events < 0, axis=(1, 2))
    c = int(np.argmax(has_pad)) if has_pad.any() else has_pad.shape[0]
    clean, rest = [plan.events[:c]], plan.events[c:]
    if plan.block_size == 1 and rest.shape[0] == 1:
        last = rest[0][rest[0, :, 0] >= 0]
        clean.append(last[None])
        rest = rest[:0]
    return [(p, False) for p in clean if p.shape[0]] + ([(rest, True)] if rest.shape[0] else [])


@dataclasses.dataclass(frozen=True)
class Segment:
    """The pieces of one compiled call, and the index of its last chunk in the plan."""

    pieces: tuple
    last_chunk: int


def segments(plan: BlockPlan, size: Optional[int]) -> list[Segment]:
    """The plan cut into segments of at most ``size`` chunks, never across a piece boundary of
    :func:`split_plan` (``size=None``: one segment holding every piece)."""
    pieces = split_plan(plan)
    if size is None:
        return [Segment(tuple(pieces), int(plan.events.shape[0]) - 1)]
    out, c0 = [], 0
    for part, padded in pieces:
        for a in range(0, part.shape[0], size):
            piece = part[a : a + size]
            out.append(Segment(((piece, padded),), c0 + a + piece.shape[0] - 1))
        c0 += part.shape[0]
    return out


@dataclasses.dataclass
class Probe:
    """A calibration: while :func:`probing` is active, :func:`drive` cuts each run into about
    ``pieces`` segments and runs only the first ones: until ``enough`` seconds of execution were
    timed, or ``1 + steady`` segments ran. The seconds JAX spends compiling inside a segment
    (tracing, lowering, XLA's backend: reported through ``jax.monitoring``) are told apart from its
    execution. The prediction for the whole run is the compilation the run pays (the program
    that starts it; for a caller that drives it in segments, the program that continues it too,
    taken to cost as much) plus the segments' execution pace for every segment. The run returns
    full-length results: the metrics of the segments it ran, the last of them repeated to the
    run's end, and (where the tail window was not reached) the last model as the tail average;
    numbers for the caller's control flow to go on with, not results. Runs too short to cut run
    whole, their time measured, and so do runs whose rest would execute in under ``short``
    seconds (their rest in one call). A real run (:func:`sim.real.run`) inside the block is cut
    too: :func:`real_cut` says how many results it applies, :func:`real_predict` how long the
    whole run would take. Its ``log_every`` stays the full run's (so that the pace includes the
    snapshots' cost), so a cut run holds only a few snapshots.

    Attributes (totals over the runs driven while active):
      runs: runs (or sweeps) driven; cut: of those, how many were stopped early.
      spent: seconds the probed runs took; predicted: seconds the whole runs would take;
      compiling: seconds of the prediction that are compilation.
    """

    pieces: int = 40
    steady: int = 2
    enough: float = 0.3
    short: float = 1.0
    cycles: int = 16  # a real run cut: results (or rounds) each worker delivers at least (real_cut)
    runs: int = 0
    cut: int = 0
    spent: float = 0.0
    predicted: float = 0.0
    compiling: float = 0.0
    _compile_now: float = 0.0  # compilation seconds reported since the segment under way began


_PROBE: contextvars.ContextVar[Optional[Probe]] = contextvars.ContextVar("delaylab_probe", default=None)


def active_probe() -> Optional[Probe]:
    """The :class:`Probe` of the :func:`probing` block this code runs in, or None."""
    return _PROBE.get()


def real_cut(probe: Probe, num_events: int, num_workers: int, rounds: bool) -> int:
    """How many results a real run (:func:`sim.real.run`) applies under ``probe`` at least: its
    first ``num_events / probe.pieces`` results and at least 4 per worker (so that the pace is read
    after every worker's first cycle); a run in rounds, at least ``probe.cycles`` whole rounds; all
    of a short run. An asynchronous run goes on past it until every live worker has delivered
    ``probe.cycles`` results: a figure that fits a timing model to the cut trace (or to a part of
    it) needs a few from each worker."""
    m = max(4 * num_workers, math.ceil(num_events / probe.pieces))
    if rounds:
        m = num_workers * max(probe.cycles, math.ceil(m / num_workers))
    return min(int(num_events), int(m))


def real_predict(probe: Probe, *, seconds: float, served: np.ndarray, num_events: int, num_workers: int) -> None:
    """Count a real run cut by :func:`real_cut` in ``probe``: it took ``seconds`` (start-up
    included) and its results were served at ``served`` (seconds since its clock started). The
    rest of the run is predicted at the pace of the results after the first ``num_workers`` (the
    first cycle also waits for every worker's first job): real workers run at steady rates, so
    results arrive at a steady pace."""
    served = np.asarray(served, np.float64)
    m = int(served.shape[0])
    probe.runs += 1
    probe.spent += seconds
    rest = int(num_events) - m
    if rest <= 0 or m == 0:  # whole (or ended before any result: every worker died)
        probe.predicted += seconds
        return
    k0 = min(int(num_workers), m - 1)
    pace = (served[-1] - served[k0 - 1]) / (m - k0) if k0 >= 1 else served[-1] / m
    probe.cut += 1
    probe.predicted += seconds + rest * float(pace)


_COMPILE_EVENTS = ("/jax/core/compile/jaxpr_trace_duration", "/jax/core/compile/jaxpr_to_mlir_module_duration",
                   "/jax/core/compile/backend_compile_duration")
_listening = False


def _on_duration(event: str, seconds: float, **_) -> None:
    probe = _PROBE.get()
    if probe is not None and event in _COMPILE_EVENTS:
        probe._compile_now += seconds


@contextlib.contextmanager
def probing(probe: Optional[Probe] = None) -> Iterator[Probe]:
    """Within the block every run :func:`drive` starts is a calibration (:class:`Probe`): its
    time is predicted from its first segments. Checkpoints are neither read nor written."""
    global _listening
    if not _listening:  # one listener for the process (jax.monitoring has no public way to remove one)
        jax.monitoring.register_event_duration_secs_listener(_on_duration)
        _listening = True
    probe = Probe() if probe is None else probe
    token = _PROBE.set(probe)
    try:
        yield probe
    finally:
        _PROBE.reset(token)


def _probe_segments(plan: BlockPlan, segment: Optional[int], probe: Probe) -> list[Segment]:
    """The run cut for a probe: segments of at most ``ceil(chunks / probe.pieces)`` chunks (or the
    run's own, if smaller), so that one of them is a small part of the run."""
    size = max(1, math.ceil(int(plan.events.shape[0]) / probe.pieces))
    return segments(plan, size if segment is None else min(segment, size))


def _rest(plan: BlockPlan, done: int) -> tuple:
    """The plan's pieces (:func:`split_plan`) after its first ``done`` chunks."""
    out, c0 = [], 0
    for part, padded in split_plan(plan):
        if c0 + part.shape[0] > done:
            out.append((part[max(done - c0, 0):], padded))
        c0 += part.shape[0]
    return tuple(out)


def _probe(program: Program, plan: BlockPlan, segment: Optional[int], probe: Probe) -> dict:
    """One run under a probe (see :class:`Probe`): drive's result, from the segments run."""
    segs = _probe_segments(plan, segment, probe)
    axis = program.log_axis
    carry, first, parts, took, compiled = None, None, [], [], []
    while len(took) < len(segs):
        i = len(took)
        probe._compile_now = 0.0
        t = time.perf_counter()
        carry, start_metrics, metrics = program.segment(carry, segs[i].pieces, i == 0)
        if i == 0:
            first = program.to_host(start_metrics)
        parts.extend(program.to_host(m) for m in metrics)
        took.append(time.perf_counter() - t)
        compiled.append(min(probe._compile_now, took[-1]))
        if len(took) >= 1 + probe.steady or sum(took) - sum(compiled) >= probe.enough:
            break
    done = segs[len(took) - 1].last_chunk + 1  # chunks run
    pace = (sum(took) - sum(compiled)) / len(took)  # execution seconds per segment
    # a run driven in one call compiles the program that starts it; one driven in segments also
    # the one that continues it (taken to cost the same where the probe did not run it)
    pays = compiled[0] + ((compiled[1] if len(took) > 1 else compiled[0]) if segment is not None else 0.0)
    probe.runs += 1
    probe.spent += sum(took)
    probe.compiling += pays
    if len(took) < len(segs) and pace * (len(segs) - len(took)) < probe.short:
        # a short run: cutting it would cost more in calls than it saves, and each call would add
        # its host overhead to the prediction; the rest runs in one call (its program compiled
        # once per shape, the probe's own cost) and the run is timed whole
        probe._compile_now = 0.0
        t = time.perf_counter()
        carry, _, metrics = program.segment(carry, _rest(plan, done), False)
        parts.extend(program.to_host(m) for m in metrics)
        rest = time.perf_counter() - t
        probe.spent += rest
        probe.predicted += pays + sum(took) - sum(compiled) + rest - min(probe._compile_now, rest)
        done = int(plan.events.shape[0])
    elif len(took) == len(segs):
        probe.predicted += pays + sum(took) - sum(compiled)
    else:
        probe.cut += 1
        probe.predicted += pays + len(segs) * pace
        left = int(plan.events.shape[0]) - done
        last = jax.tree.map(lambda a: np.take(a, [-1], axis=axis), parts[-1])
        parts.append(jax.tree.map(lambda a: np.repeat(a, left, axis=axis), last))
    out = _result(program, carry, first, parts)
    if done < int(plan.events.shape[0]):  # the tail window not reached: the last model stands in for its average
        out["tail"] = jax.tree.map(lambda t, p: np.where(np.isnan(t), np.asarray(p, t.dtype), t), out["tail"], out["params"])
    return out


def _concat(first, parts, axis: int):
    """The initial metrics, then each segment's, along the log-point axis (on the host)."""
    return jax.tree.map(lambda f, *a: np.concatenate([np.expand_dims(f, axis), *a], axis=axis), first, *parts)


def tail_average(out: dict) -> dict:
    """On the host: the tail sums over their weight, NaN where no event was committed inside the
    window (a run that diverged before it). Divided here, not in the compiled program, because
    XLA's vectorised division on CPU is not correctly rounded, and its result depended on how many
    runs a device held; NumPy's is, whatever the batching."""
    out = dict(out)
    w = np.asarray(out.pop("tail_weight"))

    def average(t):
        t = np.asarray(t)
        ww = w.reshape(w.shape + (1,) * (t.ndim - w.ndim))
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(ww > 0, t / np.where(ww > 0, ww, 1).astype(t.dtype), np.nan).astype(t.dtype)

    out["tail"] = jax.tree.map(average, out.pop("tail_sum"))
    return out


def drive(program: Program, plan: BlockPlan, schedule, *, segment: Optional[int], progress, checkpoint: Optional[str],
          checkpoint_every: float, fingerprint: Optional[dict], keys) -> dict:
    """Run the segments one after another: metrics to the host after each, progress reported,
    a checkpoint written every ``checkpoint_every`` seconds and after the last segment; resume
    from ``checkpoint`` if it exists. Returns, on the host: ``state``, ``params`` (the last finite
    model), ``metrics`` (joined along the log axis), ``tail`` (the tail average), ``stats``, ``bad``."""
    probe = _PROBE.get()
    if probe is not None:
        return _probe(program, plan, segment, probe)
    segs = segments(plan, segment)
    axis = program.log_axis
    if checkpoint is not None and os.path.exists(checkpoint):
        carry_like, first_like = program.host_like()
        saved = ckpt.load(checkpoint, fingerprint=fingerprint, carry_like=carry_like, first_like=first_like,
                          log_axis=axis)
        carry, first, parts, done = program.from_host(saved.carry), saved.first, [saved.metrics], saved.done
    else:
        carry, first, parts, done = None, None, [], 0
    resumed, t0 = done, time.monotonic()
    last_save, saved_done = t0, done
    events0 = int(plan.chunk_end[segs[done - 1].last_chunk]) + 1 if done else 0

    def save(k):  # the carry and metrics after segment k (1-based)
        ckpt.save(checkpoint, carry=program.to_host(carry), first=first,
                  metrics=jax.tree.map(lambda *a: np.concatenate(a, axis=axis), *parts), done=k,
                  fingerprint=fingerprint, events=int(plan.chunk_end[segs[k - 1].last_chunk]) + 1, keys=keys)

    try:
        for i in range(done, len(segs)):
            carry, start_metrics, metrics = program.segment(carry, segs[i].pieces, i == 0)
            if i == 0:
                first = program.to_host(start_metrics)
            parts.extend(program.to_host(m) for m in metrics)
            done = i + 1
            now = time.monotonic()
            if checkpoint is not None and (done == len(segs) or now - last_save >= checkpoint_every):
                save(done)
                last_save, saved_done = time.monotonic(), done
            if progress is not None:
                events = int(plan.chunk_end[segs[i].last_chunk]) + 1
                loss = np.take(np.asarray(parts[-1]["loss"], np.float64), -1, axis=axis)
                finite = loss[np.isfinite(loss)]
                progress(Progress(segment=done, segments=len(segs), events=events,
                                  num_events=schedule.num_events, time=float(schedule.finish[events - 1]),
                                  end_time=schedule.end_time, loss=float(np.median(finite)) if finite.size else np.nan,
                                  elapsed=now - t0, events_per_second=(events - events0) / max(now - t0, 1e-9),
                                  resumed_from=resumed))
    except KeyboardInterrupt:
        # Ctrl-C: keep the segments finished since the last checkpoint (the one interrupted is lost)
        if checkpoint is not None and done > saved_done:
            save(done)
        raise
    return _result(program, carry, first, parts)


def _result(program: Program, carry, first, parts) -> dict:
    """:func:`drive`'s result on the host from the last carry and the metrics of the segments run."""
    c = program.to_host(carry)
    out = tail_average({"state": c.state, "params": c.last_good, "tail_sum": c.tail_sum,
                        "tail_weight": c.tail_weight, "stats": c.stat_sums, "bad": c.bad})
    return {**out, "metrics": _concat(first, parts, program.log_axis)}


def fingerprint(alg, problem, schedule, static, hp: dict, keys, plan: BlockPlan, segment: Optional[int], targets: dict,
                run_batch=None) -> dict:
    """What a checkpoint must match: hashes of every input the numbers depend on."""
    sched = {name: ckpt.digest(getattr(schedule, name)) for name in (
        "worker", "start", "finish", "version", "delivered", "round", "job_key", "pull_only", "tag")
        if getattr(schedule, name) is not None}
    return {
        "algorithm": alg.name,
        "hyperparameters": {k: ckpt.digest(v) for k, v in hp.items()},
        "keys": ckpt.digest(keys),
        "x0": ckpt.tree_digest(problem.x0),
        "problem_data": ckpt.tree_digest(problem.data),
        "targets": {k: ckpt.digest(v) for k, v in targets.items()},
        "schedule": sched,
        "plan": {"chunks": int(plan.events.shape[0]), "block_size": int(plan.block_size),
                 "chunk_end": ckpt.digest(plan.chunk_end), "segment": None if segment is None else int(segment)},
        "options": {"batching": static.batching, "runs": static.runs, "record_params": static.record_params,
                    "by_round": static.by_round, "telemetry": type(static.telemetry).__name__,
                    "run_batch": run_batch, "x64": bool(jax.config.jax_enable_x64),
                    "platform": jax.default_backend(), "convolution": problem.convolution},
    }

