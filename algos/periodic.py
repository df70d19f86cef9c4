"""Periodic local-update methods on synchronous rounds: local SGD with an outer optimiser
(DiLoCo-style), PALSGD, EDiT / A-EDiT and FedShift (spec mitigation.md §9–§12).

One barrier round is one communication round. Every worker starts it at the synchronised model
x̄, runs H local steps (its job) and sends the pseudo-gradient Δ_i = x̄ − y_i; the server combines
the delivered Δ_i into one Δ and takes an outer step, Nesterov SGD as in DiLoCo (torch's
``SGD(nesterov=True)``): m ← β m + Δ, x̄ ← x̄ − η (Δ + β m). With η = 1 and β = 0 the outer step
is plain averaging, x̄ ← mean_i y_i. Every worker then restarts from the new x̄. A round whose
results were all lost leaves x̄ and m unchanged. Run these on ``sim.schedules.barrier`` with job
durations worth H local steps (or H_i, for per-worker local steps).

The methods differ in the local steps and in how Δ is combined:

- :func:`local_sgd`: H steps of SGD (or AdamW); Δ = the mean over delivered workers.
- :func:`palsgd` (Naganuma et al. 2025, §11, the authors' decoupled variant): each local step is,
  with probability p, a *pseudo-synchronisation* step y ← y − (γ/p) η_p (y − x̄), which needs no
  gradient, and otherwise an SGD step of size γ/(1 − p). The coin is ``shared`` by all workers
  (as the released code, which seeds every rank alike) or drawn ``per_worker``. The DDP warm
  start is not modelled (start the run from a warmed-up model instead).
- :func:`edit` (Cheng et al. 2025, §10, the Atorch code): per layer ℓ, an EWMA anomaly detector
  on the norms n_i = ‖Δ_i^ℓ‖ nullifies outliers (Δ_i^ℓ ← 0, n_i ← n_i + 10⁶); weights
  w_i = softmax_i(−n_i / T) (``reducer="softmax"``) or 1 (``"uniform"``; a nullified worker then
  still counts in the divisor), optionally mixed with step counts, w_i ← (1 − r) w_i + r s_i/Σ_j s_j;
  Δ^ℓ = Σ_i w_i Δ_i^ℓ / Σ_i w_i, clipped to norm c per layer or over all layers; a layer whose
  workers were all nullified is not updated. A-EDiT's time trigger is :func:`a_edit_local_steps`.
- :func:`fedshift` (Seo et al. 2024, §12): the listed workers upload their model quantised to
  b bits per tensor (uniform min–max, 2^b levels); the server averages the models and shifts
  every tensor k, w̄_k ← w̄_k − (I/K) mean(w̄_k), with I of the K delivered workers quantised.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from algos import _checks, _linalg
from algos.base import Algorithm, Event, HParams, Params
from algos.layers import leaf_layer_index
from algos.local import INNER, check_outer_and_inner, inner_hparams, local_sgd_end
from algos.tables import _check_int


class PeriodicState(NamedTuple):
    params: Params  # x̄
    momentum: Params  # the outer Nesterov buffer m
    round: jax.Array  # int32 [], rounds completed
    detector: Any = ()  # EDiT: the per-layer anomaly detectors


class RoundPoint(NamedTuple):
    """What a worker is handed when its job needs the round number (PALSGD's shared coin)."""

    params: Params
    round: jax.Array


def _init(hparams, params, n):
    return PeriodicState(params, jax.tree.map(jnp.zeros_like, params), jnp.zeros((), jnp.int32))


def _outer(hparams, state: PeriodicState, delta: Params, do_leaf: list) -> tuple[Params, Params]:
    """Nesterov SGD on Δ for the leaves whose entry of ``do_leaf`` is True."""
    lr = jnp.asarray(hparams["stepsize"])
    beta = jnp.asarray(hparams["momentum"])
    leaves_x, tdef = jax.tree.flatten(state.params)
    leaves_m = jax.tree.leaves(state.momentum)
    leaves_d = jax.tree.leaves(delta)
    xs, ms = [], []
    for x, m, d, do in zip(leaves_x, leaves_m, leaves_d, do_leaf):
        m_new = beta.astype(m.dtype) * m + d
        x_new = x - lr.astype(x.dtype) * (d + beta.astype(x.dtype) * m_new)
        xs.append(jnp.where(do, x_new, x))
        ms.append(jnp.where(do, m_new, m))
    return jax.tree.unflatten(tdef, xs), jax.tree.unflatten(tdef, ms)


def _broadcast(tree, slots: int):
    return jax.tree.map(lambda x: jnp.broadcast_to(x, (slots,) + x.shape), tree)


def _uniform_mean(deltas: Params, ok: jax.Array) -> Params:
    count = jnp.maximum(jnp.sum(ok), 1)
    return jax.tree.map(lambda d: _linalg.weighted_sum(ok, d) / count.astype(d.dtype), deltas)


def _check_local_steps(name: str, hparams: HParams, n: int) -> None:
    H = np.asarray(hparams["local_steps"])
    if not np.issubdtype(H.dtype, np.integer) or np.any(H < 1):
        raise ValueError(f"{name}: local_steps must be integers >= 1; got {hparams['local_steps']!r}")
    if H.ndim == 1 and n and H.shape[0] != n:
        raise ValueError(f"{name}: local_steps gives {H.shape[0]} workers' steps but the problem has {n} workers")


def _local_steps_arg(name: str, local_steps):
    if np.ndim(local_steps) == 0:
        return _check_int(name, "local_steps", local_steps)
    H = np.asarray(local_steps)
    if H.ndim != 1 or not np.issubdtype(H.dtype, np.integer) or np.any(H < 1):
        raise ValueError(f"{name}: local_steps must be an integer >= 1 or one such integer per worker; got {local_steps!r}")
    return H.astype(np.int32)


# --- local SGD -------------------------------------------------------------------------------

def _local_apply(hparams: HParams, s: PeriodicState, deltas: Params, events: Event, mask):
    ok = mask & events.delivered
    any_ok = jnp.any(ok)
    x, m = _outer(hparams, s, _uniform_mean(deltas, ok), [any_ok] * len(jax.tree.leaves(s.params)))
    share = jnp.where(ok, 1.0 / jnp.maximum(jnp.sum(ok), 1), 0.0)
    return PeriodicState(x, m, s.round + 1, s.detector), _broadcast(x, mask.shape[0]), {"weight": share}


def _validate_local(hparams, n):
    check_outer_and_inner("local_sgd", hparams)
    _check_local_steps("local_sgd", hparams, n)


def local_sgd(*, stepsize: float = 1.0, local_stepsize: float, local_steps=1, momentum: float = 0.0,
              inner: str = "sgd", weight_decay: float = 0.0, b1: float = 0.9, b2: float = 0.999,
              eps: float = 1e-8) -> Algorithm:
    """Synchronous local SGD with an outer Nesterov step (DiLoCo-style; see the module docstring).

    Args:
      stepsize: η, the outer step (1 with momentum 0: plain model averaging).
      local_stepsize: the inner optimiser's learning rate. local_steps: H ≥ 1, or one H_i per worker.
      momentum: β ∈ [0, 1), the outer Nesterov momentum.
      inner: ``"sgd"`` or ``"adamw"`` (fresh moments every round); weight_decay, b1, b2, eps: AdamW's.
    """
    extra = inner_hparams("local_sgd", inner, weight_decay=weight_decay, b1=b1, b2=b2, eps=eps)
    hp = {"stepsize": stepsize, "local_stepsize": local_stepsize,
          "local_steps": _local_steps_arg("local_sgd", local_steps), "momentum": momentum, **extra}
    _validate_local(hp, 0)
    return Algorithm("local_sgd", hp, _init, INNER[inner], None, lambda s: s.params,
                     apply_round=_local_apply, validate=_validate_local)


# --- PALSGD ----------------------------------------------------------------------------------

COINS = ("shared", "per_worker")


def _palsgd_work(shared: bool):
    def work(hparams: HParams, point: RoundPoint, oracle, key):
        p = jnp.asarray(hparams["probability"])
        lr = jnp.asarray(hparams["local_stepsize"])
        pull = jnp.asarray(hparams["pull"])
        xbar = point.params
        if shared:  # every worker flips the same coins in a round
            coin_key = jax.random.fold_in(jax.random.key(jnp.asarray(hparams["coin_seed"])), point.round)
        else:
            coin_key = jax.random.fold_in(key, jnp.uint32(0xFFFFFFFF))  # never a step's index
        prox = jnp.where(p > 0, lr * pull / jnp.where(p > 0, p, 1.0), 0.0)
        grad_lr = lr / (1.0 - p)

        def body(k, carry):
            y, n_pseudo = carry
            pseudo = jax.random.uniform(jax.random.fold_in(coin_key, k)) < p

            def sync_step(y):
                return jax.tree.map(lambda a, b: a - prox.astype(a.dtype) * (a - b), y, xbar)

            def grad_step(y):
                _, g = oracle(y, jax.random.fold_in(key, k))
                return jax.tree.map(lambda a, gg: a - grad_lr.astype(a.dtype) * gg, y, g)

            return jax.lax.cond(pseudo, sync_step, grad_step, y), n_pseudo + pseudo.astype(jnp.int32)

        H = jnp.asarray(hparams["local_steps"])
        H = H[oracle.worker] if H.ndim else H
        end, n_pseudo = jax.lax.fori_loop(0, H, body, (xbar, jnp.zeros((), jnp.int32)))
        return jax.tree.map(jnp.subtract, xbar, end), n_pseudo

    work.__name__ = f"palsgd_work_{'shared' if shared else 'per_worker'}"
    return work


_PALSGD_WORK = {"shared": _palsgd_work(True), "per_worker": _palsgd_work(False)}


def _palsgd_apply(hparams: HParams, s: PeriodicState, messages, events: Event, mask):
    deltas, n_pseudo = messages
    s, _, stats = _local_apply(hparams, s, deltas, events, mask)
    nxt = _broadcast(RoundPoint(s.params, s.round), mask.shape[0])
    return s, nxt, {**stats, "pseudo_steps": jnp.where(mask, n_pseudo, 0).astype(jnp.float32)}


def _validate_palsgd(hparams, n):
    check_outer_and_inner("palsgd", hparams)
    _check_local_steps("palsgd", hparams, n)
    p = np.asarray(hparams["probability"], np.float64)
    if not np.all((p >= 0) & (p < 1)):
        raise ValueError(f"palsgd: probability p must be in [0, 1); got {hparams['probability']!r}")
    _checks.check_stepsize("palsgd", hparams["pull"], argument="pull")


def palsgd(*, stepsize: float = 1.0, local_stepsize: float, local_steps=1, probability: float = 0.1,
           pull: float = 1.0, momentum: float = 0.0, coin: str = "shared", coin_seed: int = 0) -> Algorithm:
    """Pseudo-asynchronous local SGD (see the module docstring).

    Args:
      stepsize, momentum: the outer Nesterov step (η, β).
      local_stepsize: γ. local_steps: H (both step kinds count), or one H_i per worker.
      probability: p ∈ [0, 1), the chance that a local step is a pseudo-synchronisation.
      pull: η_p ≥ 0, the pull towards x̄ of a pseudo-synchronisation step.
      coin: ``"shared"`` (the authors' code: all workers flip the same coins, from ``coin_seed``
        and the round number) or ``"per_worker"`` (from each job's own key).
    With p = 0 this is :func:`local_sgd` (same minibatches; equal to rounding).
    """
    if coin not in COINS:
        raise ValueError(f"palsgd: coin must be one of {list(COINS)}; got {coin!r}")
    hp = {"stepsize": stepsize, "local_stepsize": local_stepsize,
          "local_steps": _local_steps_arg("palsgd", local_steps), "momentum": momentum,
          "probability": probability, "pull": pull, "coin_seed": coin_seed}
    if isinstance(coin_seed, bool) or not isinstance(coin_seed, (int, np.integer)) or not 0 <= coin_seed < 2**31:
        raise ValueError(f"palsgd: coin_seed must be an integer in [0, 2**31); got {coin_seed!r}")
    _validate_palsgd(hp, 0)
    return Algorithm(f"palsgd_{coin}", hp, _init, _PALSGD_WORK[coin], None, lambda s: s.params,
                     apply_round=_palsgd_apply, validate=_validate_palsgd,
                     point_init=lambda hparams, params: RoundPoint(params, jnp.zeros((), jnp.int32)))


# --- EDiT / A-EDiT ---------------------------------------------------------------------------

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


def _make_edit(reducer: str, clip_scope: str, detector_update: str, warmup: int):
    def apply_round(hparams: HParams, s: PeriodicState, deltas: Params, events: Event, mask):
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
            num = _linalg.weighted_sum(wl * kept[:, l], leaf)
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
        x, m = _outer(hparams, s, jax.tree.unflatten(tdef, agg), [layer_alive[l] for l in layer_of])
        stats = {"weight": jnp.mean(w, axis=1), "outlier_layers": jnp.sum(outlier, axis=1).astype(dt)}
        return PeriodicState(x, m, s.round + 1, detector), _broadcast(x, mask.shape[0]), stats

    apply_round.__name__ = f"edit_apply_{reducer}_{clip_scope}_{detector_update}_{warmup}"
    return apply_round


def _validate_edit(hparams, n):
    check_outer_and_inner("edit", hparams)
    _check_local_steps("edit", hparams, n)
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
    outer Nesterov step (see the module docstring and spec §10).

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
    warmup = _check_int("edit", "detector_warmup", detector_warmup)
    if warmup < 2:
        raise ValueError(f"edit: detector_warmup must be >= 2 (its window's spread needs two values); got {warmup}")
    hp = {"stepsize": stepsize, "local_stepsize": local_stepsize, "local_steps": _local_steps_arg("edit", local_steps),
          "momentum": momentum, "temperature": temperature, "threshold": threshold, "ewma": ewma,
          "clip": math.inf if clip is None else clip, "step_weight": step_weight, **extra}
    _validate_edit(hp, 0)

    def init(hparams, params, n):
        L = max(leaf_layer_index(params)) + 1
        dt = jax.tree.leaves(params)[0].dtype
        z = jnp.zeros((L,), dt)
        det = Detector(z, z, jnp.zeros((L,), jnp.int32), jnp.zeros((L, warmup), dt), jnp.zeros((L,), jnp.int32))
        return _init(hparams, params, n)._replace(detector=det)

    return Algorithm("edit", hp, init, INNER[inner], None, lambda s: s.params,
                     apply_round=_make_edit(reducer, clip_scope, detector_update, warmup), validate=_validate_edit)


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
    total = _check_int("a_edit_local_steps", "min_total_steps", min_total_steps)
    m = 1
    while True:
        H = np.ceil(m * window / taus - 1e-12).astype(np.int64)
        H = np.maximum(H, 1)
        if H.sum() >= total:
            return H.astype(np.int32)
        m += 1


# --- DPro-SM-like proactive local steps ----------------------------------------------------

def dpro_sm_like_local_steps(observed, local_steps: int, *, smoothing: float = 0.3) -> np.ndarray:
    """A "DPro-SM-like" proactive rule (spec §13, [INFERRED]; DPro-SM itself is published as an
    abstract only, so its LSTM predictor and allocation rule are not reproduced): per worker, an
    EWMA of its observed per-step times (``observed`` [n, k], oldest first) predicts the next one,
    and the local steps are set so that predicted finish times line up,
    H_i = max(1, round(H · T̂_min / T̂_i)). Run :func:`local_sgd` with ``local_steps=H_i`` on job
    durations worth H_i steps. With equal predictions every worker gets H (plain local SGD)."""
    obs = np.asarray(observed, np.float64)
    if obs.ndim != 2 or obs.shape[1] < 1 or not np.all(np.isfinite(obs)) or np.any(obs <= 0):
        raise ValueError(f"dpro_sm_like_local_steps: observed must be [n, k >= 1] positive step times; got shape {obs.shape}")
    H = _check_int("dpro_sm_like_local_steps", "local_steps", local_steps)
    if not 0 < smoothing <= 1:
        raise ValueError(f"dpro_sm_like_local_steps: smoothing must be in (0, 1]; got {smoothing!r}")
    pred = obs[:, 0].copy()
    for k in range(1, obs.shape[1]):
        pred = (1 - smoothing) * pred + smoothing * obs[:, k]
    return np.maximum(1, np.round(H * pred.min() / pred)).astype(np.int32)


# --- FedShift --------------------------------------------------------------------------------

def quantise_uniform(x: jax.Array, bits) -> jax.Array:
    """Uniform min–max quantisation of one tensor to 2^bits levels spanning [min x, max x] (the
    FedShift code's quantise-then-dequantise); a constant tensor is returned as it is."""
    levels = (2.0 ** jnp.asarray(bits, x.dtype)) - 1.0
    lo, hi = jnp.min(x), jnp.max(x)
    span = hi - lo
    safe = jnp.where(span > 0, span, 1.0)
    q = lo + jnp.round((x - lo) / safe * levels) * safe / levels
    return jnp.where(span > 0, q, x)


def _fedshift_work(hparams: HParams, point: Params, oracle, key):
    end = local_sgd_end(hparams, point, oracle, key)
    quantised = jnp.asarray(hparams["quantised"])[oracle.worker]
    bits = hparams["bits"]
    sent = jax.tree.map(lambda y: jnp.where(quantised, quantise_uniform(y, bits), y), end)
    return jax.tree.map(jnp.subtract, point, sent)


def _fedshift_apply(hparams: HParams, s: PeriodicState, deltas: Params, events: Event, mask):
    ok = mask & events.delivered
    K = jnp.sum(ok)
    q = jnp.asarray(hparams["quantised"])[jnp.where(mask, events.worker, 0)] & ok
    frac = (jnp.sum(q) / jnp.maximum(K, 1))
    mean = jax.tree.map(lambda x, d: x - d, s.params, _uniform_mean(deltas, ok))
    shifted = jax.tree.map(lambda w: w - frac.astype(w.dtype) * jnp.mean(w), mean)
    x = jax.tree.map(lambda new, old: jnp.where(K > 0, new, old), shifted, s.params)
    return (PeriodicState(x, s.momentum, s.round + 1, s.detector), _broadcast(x, mask.shape[0]),
            {"quantised": q.astype(jnp.float32)})


def _validate_fedshift(hparams, n):
    _checks.check_stepsize("fedshift", hparams["local_stepsize"], argument="local_stepsize")
    _check_local_steps("fedshift", hparams, n)
    q = np.asarray(hparams["quantised"])
    if q.dtype != bool or q.ndim != 1 or (n and q.shape[0] != n):
        raise ValueError(f"fedshift: quantised must be one bool per worker ({n or 'n'}); got shape {q.shape}, dtype {q.dtype}")
    bits = np.asarray(hparams["bits"])
    if not np.issubdtype(bits.dtype, np.integer) or np.any(bits < 1) or np.any(bits > 16):
        raise ValueError(f"fedshift: bits must be an integer in 1..16; got {hparams['bits']!r}")


def fedshift(*, local_stepsize: float, local_steps=1, quantised, bits: int = 4) -> Algorithm:
    """FedShift on FedAvg (see the module docstring).

    Args:
      local_stepsize, local_steps: each worker's local SGD from the global model.
      quantised: one bool per worker, True for the workers that upload b-bit weights
        ("inferior" clients: in this simulator, typically the slow ones).
      bits: b ∈ 1..16.
    With no quantised worker this is FedAvg (:func:`local_sgd` with η = 1, β = 0).
    """
    q = np.asarray(quantised)
    if q.dtype != bool or q.ndim != 1:
        raise ValueError(f"fedshift: quantised must be a 1-D sequence of bools, one per worker; got {quantised!r}")
    hp = {"local_stepsize": local_stepsize, "local_steps": _local_steps_arg("fedshift", local_steps),
          "quantised": q, "bits": _check_int("fedshift", "bits", bits)}
    _validate_fedshift(hp, 0)
    return Algorithm("fedshift", hp, _init, _fedshift_work, None, lambda s: s.params,
                     apply_round=_fedshift_apply, validate=_validate_fedshift)
