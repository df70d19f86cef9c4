"""EDiT / A-EDiT (Cheng et al. 2025; docs/theory.md §10.9, the Atorch code; see
:mod:`algos.periodic`): per-layer anomaly elimination, weighted averaging and clipping of the
workers' pseudo-gradients before the outer Nesterov step; A-EDiT's time trigger as a planner of
per-worker local steps (:func:`a_edit_local_steps`)."""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from delaylab.algos import _checks
from delaylab.algos.base import Algorithm, Event, HParams, Params, Server, Worker, algorithm, state_params
from delaylab.algos.local_steps import INNER, check_outer_and_inner, inner_hparams, start_minus_message
from delaylab.algos.periodic.common import PeriodicState, broadcast, check_local_steps, init_state, local_steps_arg, outer_step
from delaylab.theory import linalg
from delaylab.theory.layers import leaf_layer_index


class Detector(NamedTuple):
    """Per-layer online EWMA detectors (one entry per layer; ``window`` [L, W] z-scores)."""

    mean: jax.Array
    m2: jax.Array
    count: jax.Array
    window: jax.Array
    pos: jax.Array  # [L], each layer's next window slot


def _detector_z(d: Detector, value, warmup: int):
    std = jnp.sqrt(jnp.where(d.count >= 2, d.m2, 0.0))
    ok = (std > 0) & (d.count >= warmup)
    return jnp.where(ok, (value - d.mean) / jnp.where(ok, std, 1.0), 0.0)


def _detector_outlier(d: Detector, value, threshold, warmup: int):
    w = d.window
    std_recent = jnp.sqrt(jnp.sum((w - jnp.mean(w, axis=-1, keepdims=True)) ** 2, axis=-1) / (w.shape[-1] - 1))
    factor = jnp.maximum(1.0, std_recent)
    return (d.count >= warmup) & (_detector_z(d, value, warmup) > threshold * factor)


def _detector_update(d: Detector, value, alpha, use, warmup: int) -> Detector:
    count = d.count + 1
    delta = value - d.mean
    mean = d.mean + alpha * delta
    m2 = (1 - alpha) * (d.m2 + alpha * delta * (value - mean))
    new = Detector(mean, m2, count, d.window, d.pos)
    z = _detector_z(new, value, warmup)
    L = d.window.shape[0]
    window = d.window.at[jnp.arange(L), d.pos].set(z)
    new = new._replace(window=window, pos=(d.pos + 1) % d.window.shape[-1])
    return jax.tree.map(lambda a, b: jnp.where(jnp.reshape(use, use.shape + (1,) * (a.ndim - use.ndim)), a, b), new, d)


@dataclasses.dataclass(frozen=True)
class _Apply:
    """EDiT's round (``apply_round``), for one reducer, clipping scope, detector update and warm-up."""

    reducer: str
    clip_scope: str
    detector_update: str
    warmup: int

    def __call__(self, hparams: HParams, s: PeriodicState, deltas: Params, events: Event, mask):
        reducer, clip_scope, detector_update, warmup = self.reducer, self.clip_scope, self.detector_update, self.warmup
        ok = mask & events.delivered
        leaves, tdef = jax.tree.flatten(deltas)
        layer_of = leaf_layer_index(s.params)
        L = max(layer_of) + 1
        dt = leaves[0].dtype
        # per-layer norms of every slot's Δ: [slots, L]
        sq = jnp.zeros((mask.shape[0], L), dt)
        for leaf, l in zip(leaves, layer_of):
            sq = sq.at[:, l].add(jnp.sum(jnp.reshape(leaf, (leaf.shape[0], -1)) ** 2, axis=1))
        norms = jnp.sqrt(sq)

        # the detectors see the delivered workers' norms in worker order
        order = jnp.argsort(jnp.where(ok, events.worker, jnp.iinfo(jnp.int32).max))
        alpha = jnp.asarray(hparams["ewma"], dt)
        theta = jnp.asarray(hparams["threshold"], dt)

        def scan_body(det, slot):
            v = norms[slot]
            out = _detector_outlier(det, v, theta, warmup) & ok[slot]
            use = ok[slot] & (~out if detector_update == "inliers" else jnp.ones_like(out))
            return _detector_update(det, v, alpha, use, warmup), out

        detector, outlier_sorted = jax.lax.scan(scan_body, s.detector, order)
        outlier = jnp.zeros_like(outlier_sorted).at[order].set(outlier_sorted)  # [slots, L]

        n_eff = norms + jnp.where(outlier, 1e6, 0.0)
        if reducer == "softmax":
            logits = jnp.where(ok[:, None], -n_eff / jnp.asarray(hparams["temperature"], dt), -jnp.inf)
            w = jax.nn.softmax(logits, axis=0)
            w = jnp.where(ok[:, None], w, 0.0)
        else:
            w = jnp.where(ok[:, None], 1.0, 0.0).astype(dt) * jnp.ones((1, L), dt)
        r = jnp.asarray(hparams["step_weight"], dt)
        H = jnp.asarray(hparams["local_steps"])
        steps = (H[jnp.where(mask, events.worker, 0)] if H.ndim else jnp.broadcast_to(H, ok.shape)).astype(dt)
        steps = jnp.where(ok, steps, 0.0)
        step_share = steps / jnp.maximum(jnp.sum(steps), 1.0)
        w_norm = w / jnp.maximum(jnp.sum(w, axis=0, keepdims=True), 1e-30)
        w = jnp.where(r > 0, (1 - r) * w_norm + r * step_share[:, None], w)

        kept = ok[:, None] & ~outlier  # [slots, L]
        agg = []
        for leaf, l in zip(leaves, layer_of):
            wl = w[:, l]
            num = linalg.weighted_sum(wl * kept[:, l], leaf)
            agg.append(num / jnp.maximum(jnp.sum(wl), 1e-30).astype(leaf.dtype))
        # clipping
        c = jnp.asarray(hparams["clip"], dt)
        layer_sq = jnp.zeros((L,), dt)
        for a, l in zip(agg, layer_of):
            layer_sq = layer_sq.at[l].add(jnp.sum(a ** 2))
        if clip_scope == "layer":
            scale = jnp.minimum(1.0, c / jnp.maximum(jnp.sqrt(layer_sq), 1e-30))
            agg = [a * scale[l].astype(a.dtype) for a, l in zip(agg, layer_of)]
        else:
            total = jnp.sqrt(jnp.sum(layer_sq))
            agg = [a * jnp.minimum(1.0, c / jnp.maximum(total, 1e-30)).astype(a.dtype) for a in agg]
        layer_alive = jnp.any(kept, axis=0)  # [L]
        x, m = outer_step(hparams, s, jax.tree.unflatten(tdef, agg), [layer_alive[l] for l in layer_of])
        stats = {"weight": jnp.mean(w, axis=1), "outlier_layers": jnp.sum(outlier, axis=1).astype(dt)}
        return PeriodicState(x, m, s.round + 1, detector), broadcast(x, mask.shape[0]), stats



@dataclasses.dataclass(frozen=True)
class _Init:
    """The server state with one detector per layer of the model, each with a window of ``warmup``."""

    warmup: int

    def __call__(self, hparams, params, n):
        L = max(leaf_layer_index(params)) + 1
        dt = jax.tree.leaves(params)[0].dtype
        z = jnp.zeros((L,), dt)
        det = Detector(z, z, jnp.zeros((L,), jnp.int32), jnp.zeros((L, self.warmup), dt), jnp.zeros((L,), jnp.int32))
        return init_state(hparams, params, n)._replace(detector=det)


def _validate_edit(hparams, n):
    check_outer_and_inner("edit", hparams)
    check_local_steps("edit", hparams, n)
    for name in ("temperature", "ewma", "clip"):
        v = np.asarray(hparams[name], np.float64)
        if not np.all(v > 0) or np.any(np.isnan(v)):
            raise ValueError(f"edit: {name} must be > 0 (clip may be inf); got {hparams[name]!r}")
    if not np.all(np.asarray(hparams["ewma"]) <= 1):
        raise ValueError(f"edit: ewma α must be in (0, 1]; got {hparams['ewma']!r}")
    r = np.asarray(hparams["step_weight"], np.float64)
    if not np.all((r >= 0) & (r <= 1)):
        raise ValueError(f"edit: step_weight r must be in [0, 1]; got {hparams['step_weight']!r}")
    t = np.asarray(hparams["threshold"], np.float64)
    if np.any(np.isnan(t)) or np.any(t <= 0):
        raise ValueError(f"edit: threshold θ must be > 0 (inf switches detection off); got {hparams['threshold']!r}")


def edit(*, stepsize: float = 1.0, local_stepsize: float, local_steps=1, momentum: float = 0.0,
         inner: str = "sgd", reducer: str = "softmax", temperature: float = 1.0, threshold: float = 3.0,
         ewma: float = 0.02, detector_warmup: int = 120, detector_update: str = "all",
         clip: Optional[float] = None, clip_scope: str = "layer", step_weight: float = 0.0,
         weight_decay: float = 0.0, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8) -> Algorithm:
    """EDiT's round: local steps, per-layer anomaly elimination, weighted averaging, clipping and an
    outer Nesterov step (see the module docstring and docs/theory.md §10.9).

    Per layer ℓ, an EWMA anomaly detector on the norms n_i = ‖Δ_i^ℓ‖ nullifies outliers
    (Δ_i^ℓ ← 0, n_i ← n_i + 10⁶); weights w_i = softmax_i(−n_i / T) (``reducer="softmax"``) or 1
    (``"uniform"``; a nullified worker then still counts in the divisor), optionally mixed with
    step counts, w_i ← (1 − r) w_i + r s_i/Σ_j s_j; Δ^ℓ = Σ_i w_i Δ_i^ℓ / Σ_i w_i, clipped to norm c
    per layer or over all layers. A layer whose workers were all nullified is not updated.

    Args:
      stepsize, momentum: the outer step (the authors' README: η = 0.7, β = 0.8; 1 and 0 average).
      local_stepsize, local_steps, inner, weight_decay, b1, b2, eps: the local phase, as in
        :func:`local_sgd` (the paper uses AdamW); per-worker local steps come from
        :func:`a_edit_local_steps` for A-EDiT.
      reducer: ``"softmax"`` (weights softmax(−‖Δ_i^ℓ‖/T)) or ``"uniform"``. temperature: T > 0.
      threshold: θ of the detector (``inf``: no detection). ewma: its α. detector_warmup: values a
        layer's detector takes before it flags anything (≥ 2; also the length of its window of
        recent z-scores). detector_update: ``"all"`` (the FSDP path: every value updates the
        detector) or ``"inliers"`` (the DDP path).
      clip: c, the norm Δ is clipped to (``None``: no clipping); clip_scope: ``"layer"`` (FSDP)
        or ``"global"`` (DDP).
      step_weight: r ∈ [0, 1], the part of each weight given by the worker's share of local steps
        this round (A-EDiT's ``use_step_weight``; the code uses cumulative step counts, whose
        shares equal these when each worker's H_i is the same every round, as here).
    """
    extra = inner_hparams("edit", inner, weight_decay=weight_decay, b1=b1, b2=b2, eps=eps)
    for name, value, allowed in (("reducer", reducer, ("softmax", "uniform")), ("clip_scope", clip_scope, ("layer", "global")),
                                 ("detector_update", detector_update, ("all", "inliers"))):
        if value not in allowed:
            raise ValueError(f"edit: {name} must be one of {list(allowed)}; got {value!r}")
    warmup = _checks.check_int("edit", "detector_warmup", detector_warmup)
    if warmup < 2:
        raise ValueError(f"edit: detector_warmup must be >= 2 (its window's spread needs two values); got {warmup}")
    hp = {"stepsize": stepsize, "local_stepsize": local_stepsize, "local_steps": local_steps_arg("edit", local_steps),
          "momentum": momentum, "temperature": temperature, "threshold": threshold, "ewma": ewma,
          "clip": math.inf if clip is None else clip, "step_weight": step_weight, **extra}
    return algorithm("edit", hp, Worker(INNER[inner], after_job=start_minus_message),
                     Server(_Init(warmup), state_params, apply_round=_Apply(reducer, clip_scope, detector_update, warmup)),
                     validate=_validate_edit)


def a_edit_local_steps(step_times, window: float, *, min_total_steps: int = 1) -> np.ndarray:
    """A-EDiT's time trigger on fixed per-step times τ_i: all replicas sync at the first step
    boundary of each after the window has passed, so replica i takes H_i = ⌈m·window/τ_i⌉ local
    steps, with m the smallest number of windows for which Σ_i H_i ≥ ``min_total_steps`` (the
    code skips a sync, and restarts the timer, while fewer steps were taken; restarting at the
    window's end rather than at the skipping step boundary is this function's approximation
    [INFERRED]). Job durations for ``schedules.barrier`` are then H_i τ_i."""
    taus = np.asarray(step_times, np.float64)
    _checks.check_taus("a_edit_local_steps", taus, argument="step_times")
    if not (np.isfinite(window) and window > 0):
        raise ValueError(f"a_edit_local_steps: window must be positive and finite; got {window!r}")
    total = _checks.check_int("a_edit_local_steps", "min_total_steps", min_total_steps)
    m = 1
    while True:
        H = np.ceil(m * window / taus - 1e-12).astype(np.int64)
        H = np.maximum(H, 1)
        if H.sum() >= total:
            return H.astype(np.int32)
        m += 1
