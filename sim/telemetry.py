"""Telemetry for specialisation and divergence: per-layer, per-worker statistics
(docs/theory.md §11).

Everything here is a pure function of arrays, jit- and vmap-safe: pass it the stacked worker
models (a pytree whose leaves have a leading worker axis ``n``), their gradients or updates, or
activations on a fixed probe batch. The classes of the last sections are what ``sim.run(...,
telemetry=...)`` computes at its log points: ``telemetry(data, server_params, workers)``, with
``workers`` a :class:`sim.core.Workers` (the workers' points, read through the algorithm's worker
half: ``workers.models``, ``workers.after_job(keys)``).

Per-layer statistics (:func:`layer_matrices` says what a layer is; notation of
docs/theory.md §11: ``g_i`` worker i's gradient or update in one layer, ``ḡ`` their mean, ``y_i``
worker i's parameters, ``x̄`` the global ones): norms, variance, signal-to-noise, gradient diversity, cosines,
consensus distance, drift, linear and minibatch CKA, the specialisation index and realised shares,
each checked against a plain NumPy implementation in ``tests/sim/test_telemetry.py``.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from delaylab.algos.base import Worker
from delaylab.theory.layers import layer_names, leaf_layers  # noqa: F401  (layer_names is part of this module's API)
from delaylab.theory.linalg import leading_mean, weighted_sum

_TINY = 1e-30


# --- layers -----------------------------------------------------------------------------------

def layer_matrices(stacked) -> dict[str, jax.Array]:
    """``{layer: [n, d_ℓ]}`` from a pytree whose leaves have a leading worker axis ``n``: each
    worker's leaves of the layer, flattened and concatenated in leaf order.

    A *layer* is a parameter pytree's node one level above its leaves: for Flax parameters
    ``{"Dense_0": {"kernel", "bias"}, ...}`` the layers are ``Dense_0``, ...; a leaf with no parent
    dict is a layer on its own. Kernel and bias go into one matrix."""
    leaves = jax.tree_util.tree_flatten_with_path(stacked)[0]
    if not leaves:
        raise ValueError("layer_matrices: the tree has no leaves")
    n = {jnp.shape(v)[0] if jnp.ndim(v) else None for _, v in leaves}
    if len(n) != 1 or None in n:
        raise ValueError(f"layer_matrices: every leaf needs the same leading worker axis; got leading sizes {sorted(map(str, n))}")
    groups: dict[str, list] = {}
    for name, (_, v) in zip(leaf_layers(stacked), leaves):
        groups.setdefault(name, []).append(jnp.reshape(v, (jnp.shape(v)[0], -1)))
    return {k: (v[0] if len(v) == 1 else jnp.concatenate(v, axis=1)) for k, v in groups.items()}


def per_layer(fn: Callable, *stacked) -> dict[str, jax.Array]:
    """Apply ``fn`` to the ``[n, d_ℓ]`` matrices of each layer of one or more stacked trees with
    the same structure: ``{layer: fn(M1_ℓ, M2_ℓ, ...)}``."""
    mats = [layer_matrices(t) for t in stacked]
    return {k: fn(*(m[k] for m in mats)) for k in mats[0]}


# --- gradients and updates --------------------------------------------------------------------

def norms(g: jax.Array) -> jax.Array:
    """``[n]``: each worker's ``‖g_i‖`` (rows of ``g [n, d]``)."""
    return jnp.sqrt(jnp.sum(jnp.square(g), axis=-1))


def variance(g: jax.Array) -> jax.Array:
    """``(1/n) Σ_i ‖g_i − ḡ‖²`` across the rows of ``g [n, d]``."""
    return jnp.mean(jnp.sum(jnp.square(g - leading_mean(g)[None, :]), axis=-1))


def signal_to_noise(g: jax.Array) -> jax.Array:
    """``‖ḡ‖² / V``; ``inf`` when all rows agree."""
    return jnp.sum(jnp.square(leading_mean(g))) / variance(g)


def diversity(g: jax.Array) -> jax.Array:
    """Gradient diversity (Yin et al. 2018) ``Σ_i ‖g_i‖² / ‖Σ_i g_i‖²`` (1/n for identical rows; large
    when they cancel)."""
    total = weighted_sum(jnp.ones((g.shape[0],), g.dtype), g)
    return jnp.sum(jnp.square(g)) / jnp.maximum(jnp.sum(jnp.square(total)), _TINY)


def cosine_matrix(g: jax.Array) -> jax.Array:
    """``[n, n]`` cosines between the rows of ``g [n, d]`` (0 where a row is zero: a zero vector has
    no direction, so its cosines are 0, not NaN)."""
    u = g / jnp.maximum(norms(g), _TINY)[:, None]
    return u @ u.T


def alignment(g: jax.Array, aggregate: jax.Array) -> jax.Array:
    """``[n]``: the cosine of each row of ``g [n, d]`` with ``aggregate [d]`` (0 where either is zero)."""
    a = aggregate / jnp.maximum(jnp.linalg.norm(aggregate), _TINY)
    return (g @ a) / jnp.maximum(norms(g), _TINY)


def consensus_distance(y: jax.Array) -> jax.Array:
    """Consensus distance (Kong et al. 2021) ``Ξ² = (1/n) Σ_i ‖y_i − ȳ‖²`` over the rows of
    ``y [n, d]`` (the same sum as :func:`variance`, named for parameters)."""
    return variance(y)


def drift(y: jax.Array, reference: jax.Array) -> jax.Array:
    """``[n]``: ``‖y_i − x̄‖`` for the rows of ``y [n, d]`` against ``reference [d]``."""
    return norms(y - reference[None, :])


# --- representations --------------------------------------------------------------------------

def centred_gram(x: jax.Array) -> jax.Array:
    """``X̃ X̃ᵀ`` for activations ``x [m, ...]`` (flattened to ``[m, p]``; columns centred)."""
    x = jnp.reshape(x, (x.shape[0], -1))
    xc = x - leading_mean(x)[None, :]
    return xc @ xc.T


def _cka_from_grams(k: jax.Array, l: jax.Array) -> jax.Array:
    num = jnp.sum(k * l)
    return num / jnp.maximum(jnp.sqrt(jnp.sum(k * k) * jnp.sum(l * l)), _TINY)


def linear_cka(x: jax.Array, y: jax.Array) -> jax.Array:
    """Linear CKA (Kornblith et al. 2019) between activations ``x [m, p]`` and ``y [m, q]`` of the
    same m probes: ``‖Ỹᵀ X̃‖²_F / (‖X̃ᵀ X̃‖_F ‖Ỹᵀ Ỹ‖_F)`` on centred activations ``X̃, Ỹ``, computed
    from the centred Gram matrices ``X̃X̃ᵀ`` (the two forms are equal; the Gram one costs ``m²`` per
    pair, which is less when the probe batch is smaller than the layer)."""
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"linear_cka: both activations need the same number of probes (rows); got {x.shape[0]} and {y.shape[0]}")
    return _cka_from_grams(centred_gram(x), centred_gram(y))


def linear_cka_matrix(acts: jax.Array) -> jax.Array:
    """``[n, n]`` linear CKA between every pair of ``acts [n, m, ...]`` (one Gram per worker, then
    one contraction for all pairs)."""
    grams = jax.vmap(centred_gram)(acts)
    hs = jnp.einsum("iab,jab->ij", grams, grams)
    d = jnp.sqrt(jnp.diagonal(hs))
    return hs / jnp.maximum(d[:, None] * d[None, :], _TINY)


def hsic_unbiased(k: jax.Array, l: jax.Array) -> jax.Array:
    """The unbiased HSIC estimator of Song et al. (2012) used by minibatch CKA, from two ``[m, m]``
    Gram matrices (m ≥ 4; the diagonals are zeroed here, giving ``K̃``, ``L̃``):
    ``HSIC₁ = [tr(K̃L̃) + 1ᵀK̃1·1ᵀL̃1/((m−1)(m−2)) − 2/(m−2)·1ᵀK̃L̃1] / (m(m−3))``."""
    m = k.shape[0]
    if m < 4:
        raise ValueError(f"hsic_unbiased: needs at least 4 probes per batch; got {m}")
    kt = k * (1.0 - jnp.eye(m, dtype=k.dtype))
    lt = l * (1.0 - jnp.eye(m, dtype=l.dtype))
    t1 = jnp.sum(kt * lt)  # tr(K̃ L̃), both symmetric
    t2 = jnp.sum(kt) * jnp.sum(lt) / ((m - 1) * (m - 2))
    t3 = 2.0 / (m - 2) * jnp.sum(kt @ lt)
    return (t1 + t2 - t3) / (m * (m - 3))


def _gram(x: jax.Array) -> jax.Array:
    x = jnp.reshape(x, (x.shape[0], -1))
    return x @ x.T


def minibatch_cka(xs: jax.Array, ys: jax.Array) -> jax.Array:
    """Minibatch CKA (Nguyen et al. 2021) between ``xs [b, m, ...]`` and ``ys [b, m, ...]``: b
    batches of m probes each, the same probes on both sides;
    ``CKA = mean_b HSIC₁(K_b, L_b) / √(mean_b HSIC₁(K_b, K_b) · mean_b HSIC₁(L_b, L_b))``."""
    if xs.shape[:2] != ys.shape[:2]:
        raise ValueError(f"minibatch_cka: both sides need the same [batches, probes] shape; got {xs.shape[:2]} and {ys.shape[:2]}")
    kx, ky = jax.vmap(_gram)(xs), jax.vmap(_gram)(ys)
    xy = jnp.mean(jax.vmap(hsic_unbiased)(kx, ky))
    xx = jnp.mean(jax.vmap(hsic_unbiased)(kx, kx))
    yy = jnp.mean(jax.vmap(hsic_unbiased)(ky, ky))
    return xy / jnp.sqrt(jnp.maximum(xx * yy, _TINY))


def minibatch_cka_matrix(acts: jax.Array) -> jax.Array:
    """``[n, n]`` minibatch CKA between every pair of ``acts [n, b, m, ...]``."""
    grams = jax.vmap(jax.vmap(_gram))(acts)  # [n, b, m, m]

    def pair(gi, gj):  # [b, m, m] each: mean over batches of HSIC₁
        return jnp.mean(jax.vmap(hsic_unbiased)(gi, gj))

    hs = jax.vmap(lambda gi: jax.vmap(lambda gj: pair(gi, gj))(grams))(grams)  # [n, n]
    d = jnp.sqrt(jnp.maximum(jnp.diagonal(hs), 0.0))
    return hs / jnp.maximum(d[:, None] * d[None, :], _TINY)


def specialisation_index(cka: jax.Array) -> jax.Array:
    """``1 − mean_{i<j} CKA_ij`` of an ``[n, n]`` CKA matrix (0 when every pair is identical)."""
    n = cka.shape[0]
    if n < 2:
        raise ValueError("specialisation_index: needs at least two workers")
    iu = np.triu_indices(n, k=1)
    return 1.0 - jnp.mean(cka[iu])


def activations(module, params, x) -> dict[str, jax.Array]:
    """Every submodule's output of a Flax ``module`` on probe inputs ``x``, by module name
    (``{"Dense_0": [m, ...], ...}``), from Flax's ``capture_intermediates``."""
    _, state = module.apply({"params": params}, x, capture_intermediates=True, mutable=["intermediates"])
    inter = state["intermediates"]
    return {k: v["__call__"][0] for k, v in inter.items() if isinstance(v, dict) and "__call__" in v}


# --- contributions ----------------------------------------------------------------------------

def realised_shares(worker, weight, num_workers: int) -> np.ndarray:
    """``q_i = Σ weights of worker i / Σ all weights`` over a log of applied contributions
    (``worker[e]``, ``weight[e]``); zeros if nothing was applied."""
    worker = np.asarray(worker)
    weight = np.asarray(weight, np.float64)
    if worker.shape != weight.shape:
        raise ValueError(f"realised_shares: worker and weight need the same shape; got {worker.shape} and {weight.shape}")
    if worker.size and (worker.min() < 0 or worker.max() >= num_workers):
        raise ValueError(f"realised_shares: worker indices must lie in [0, {num_workers}); got {worker.min()}..{worker.max()}")
    tot = np.bincount(worker, weights=weight, minlength=num_workers)
    s = tot.sum()
    return tot / s if s > 0 else tot


# --- at the engine's log points ---------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class WorkerSpread:
    """Per-layer spread of the workers' models, for ``sim.run(..., telemetry=WorkerSpread())``:
    at every log point, ``consensus/<layer>`` = Ξ² of the workers' parameters and
    ``drift/<layer>`` = [n] each worker's distance to the server model.

    The workers' models are ``workers.models`` (what each worker's point holds, read through the
    algorithm's ``Worker.params``: elastic averaging's worker state gives its ``params``). For
    algorithms that hand workers the server model, drift is the distance from the model a worker
    holds to the current one, i.e. how stale its copy is."""

    def __call__(self, data, server, workers) -> dict:
        del data
        ys, xs = layer_matrices(workers.models), layer_matrices(jax.tree.map(lambda v: v[None], server))
        out = {}
        for name, m in ys.items():
            out[f"consensus/{name}"] = consensus_distance(m)
            out[f"drift/{name}"] = drift(m, xs[name][0])
        return out


@dataclasses.dataclass(frozen=True, eq=False)
class Representations:
    """Per-layer representation and gradient telemetry on a fixed probe batch, for
    ``sim.run(..., telemetry=Representations(module, probe_x, probe_y))`` (docs/theory.md §11.1–§11.4).

    At every log point, for each Flax submodule (layer) of ``module``:

    - ``cka/<layer>`` [n]: linear CKA between worker i's activations on the probes and the server
      model's (1: the same representation up to rotation and scale);
    - ``specialisation/<layer>``: ``1 − mean_{i<j}`` of the workers' linear CKA matrix;
    - with ``minibatches = b > 0``: ``cka_mb/<layer>`` [n], minibatch CKA over b equal batches of
      the probes (the unbiased-HSIC estimator; needs m/b ≥ 4 probes per batch);
    - with labels ``probe_y``, per parameter layer: ``grad_norm/<layer>`` [n], the norm of worker
      i's probe-batch gradient at the model it holds; ``grad_cos/<layer>`` [n], its cosine with the
      server model's probe gradient (what the worker would deliver against what is needed now);
      ``grad_var/<layer>`` and ``grad_diversity/<layer>``, the workers' gradient variance and
      diversity.

    The workers' models are ``workers.models`` (as in :class:`WorkerSpread`). The probes are constants of the compiled program: keep them small
    (a few hundred examples). The loss for gradients is the mean softmax cross-entropy.
    """

    module: object
    probe_x: object
    probe_y: object = None
    minibatches: int = 0

    def __post_init__(self):
        m = int(np.shape(self.probe_x)[0])
        b = int(self.minibatches)
        if b < 0 or (b and (m % b or m // b < 4)):
            raise ValueError(f"Representations: minibatches must split the {m} probes into equal batches of >= 4; got {b}")
        if self.probe_y is not None and np.shape(self.probe_y)[0] != m:
            raise ValueError(f"Representations: probe_y needs one label per probe ({m}); got {np.shape(self.probe_y)}")

    def _grads(self, params):
        import optax

        def loss(p):
            logits = self.module.apply({"params": p}, jnp.asarray(self.probe_x))
            return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, jnp.asarray(self.probe_y)))

        return jax.grad(loss)(params)

    def __call__(self, data, server, workers) -> dict:
        del data
        y = workers.models
        x = jnp.asarray(self.probe_x)
        acts_w = jax.vmap(lambda p: activations(self.module, p, x))(y)
        acts_s = activations(self.module, server, x)
        out = {}
        for name, a in acts_w.items():
            s = acts_s[name]
            out[f"cka/{name}"] = jax.vmap(lambda ai: linear_cka(ai, s))(a)
            out[f"specialisation/{name}"] = specialisation_index(linear_cka_matrix(a))
            if self.minibatches:
                b = int(self.minibatches)
                split = lambda v: jnp.reshape(v, (b, v.shape[0] // b) + v.shape[1:])  # noqa: E731
                out[f"cka_mb/{name}"] = jax.vmap(lambda ai: minibatch_cka(split(ai), split(s)))(a)
        if self.probe_y is not None:
            gw = layer_matrices(jax.vmap(self._grads)(y))
            gs = layer_matrices(jax.tree.map(lambda v: v[None], self._grads(server)))
            for name, g in gw.items():
                out[f"grad_norm/{name}"] = norms(g)
                out[f"grad_cos/{name}"] = alignment(g, gs[name][0])
                out[f"grad_var/{name}"] = variance(g)
                out[f"grad_diversity/{name}"] = diversity(g)
        return out


def log_point_key(seed: int, server) -> jax.Array:
    """A key for one log point: ``key(seed)`` folded with the bits of the sum of the server model's
    first leaf, so that every log point draws afresh (telemetry is not told which log point it is
    at; the server model is different at each)."""
    first = jnp.sum(jax.tree.leaves(server)[0]).astype(jnp.float32)
    return jax.random.fold_in(jax.random.key(seed), jax.lax.bitcast_convert_type(first, jnp.uint32))


@dataclasses.dataclass(frozen=True)
class AfterLocalSteps:
    """Telemetry of the models the workers hold *after their local steps*: at every log point each
    worker runs its method's own job (``Worker.job``, with the run's hyperparameters) from the
    point it holds, on its own shard through the problem's oracle, and ``inner`` (e.g.
    :class:`Representations`) is computed on the resulting models, ``Worker.after_job(point,
    message)`` each (:meth:`sim.core.Workers.after_job`).

    For methods whose workers run H local steps from a handed point (local SGD, asynchronous local
    SGD, FedAsync) the engine keeps only that point; the model at the end of the job the worker is
    running is the one this recomputes, with the method's own steps and step sizes but minibatches
    of its own (``fold_in(log_point_key(seed, server), worker)``: fresh at every log point), not the
    job's: the same distribution, other draws.
    For elastic averaging the starting point is the worker's persistent state.

    A value: two instances with equal parts are equal and hash alike, so runs that differ only in
    their seed or hyperparameters share one compiled program."""

    inner: Callable
    seed: int = 0

    def __call__(self, data, server, workers) -> dict:
        keys = jax.vmap(lambda i: jax.random.fold_in(log_point_key(self.seed, server), i))(
            jnp.arange(workers.num_workers))
        models = workers.after_job(keys)
        # the inner telemetry reads the models themselves: points that are models
        return self.inner(data, server, workers._replace(points=models, worker=Worker()))


@dataclasses.dataclass(frozen=True, eq=False)
class ShardLossMatrix:
    """The worker × shard loss matrix of docs/theory.md §11.7 at every log point:
    ``shard_loss`` [n, n] with entry (i, j) = shard j's full loss under worker i's model, from
    the problem's own ``local_objectives`` (pass ``problem.fns.local_objectives``). A diagonal
    below its rows' means is specialisation to one's own shard; with i.i.d. shards none is
    expected. The workers' models are ``workers.models`` (as in :class:`WorkerSpread`)."""

    local_objectives: Callable

    def __call__(self, data, server, workers) -> dict:
        del server
        L = jax.lax.map(lambda p: self.local_objectives(data, p), workers.models)
        n = L.shape[0]
        own = jnp.trace(L) / n
        other = (jnp.sum(L) - jnp.trace(L)) / max(n * (n - 1), 1)
        return {"shard_loss": L, "own_shard_gap": other - own}


# --- per worker, from the schedule (host side) ------------------------------------------------

def worker_timing(schedule) -> dict[str, np.ndarray]:
    """Per-worker timing statistics of a :class:`sim.schedules.Schedule` (docs/theory.md §11.6), each an
    array with one entry per worker:

    - ``updates_per_time``: delivered arrivals per unit of simulated time;
    - ``acceptance``: the fraction of the worker's jobs whose result was delivered (backup
      workers' cancelled jobs and lost results count as not accepted);
    - ``staleness_mean``, ``staleness_max``: over its delivered arrivals (``staleness_hist``
      [n, max + 1]: their counts by staleness);
    - ``compute_mean``: mean job duration, start to the end of its computation;
    - ``idle_fraction``: the part of the run's time the worker was not computing (waiting at a
      barrier, a group average, a staleness bound or after its last job);
    - ``queue_delay_mean``: over its delivered results, the mean time from the end of the
      computation to the server applying it: 0 where results are applied on arrival; to the
      round's last arrival in barrier rounds; to the group's average in hierarchical rounds; to
      the closing check in time-bounded rounds (``Schedule.applied_at``).
    Release events (``Schedule.pull_only``) are not jobs and are left out.
    """
    n = schedule.num_workers
    real = np.ones(schedule.num_events, bool) if schedule.pull_only is None else ~schedule.pull_only
    end = schedule.compute_finish if schedule.compute_finish is not None else schedule.finish
    w, ok = schedule.worker[real], schedule.delivered[real]
    dur = (end - schedule.start)[real]
    st = schedule.staleness[real]
    T_end = schedule.end_time
    jobs = np.bincount(w, minlength=n)
    acc = np.bincount(w[ok], minlength=n)
    busy = np.bincount(w, weights=dur, minlength=n)
    hist = np.zeros((n, int(st[ok].max(initial=0)) + 1), np.int64)
    np.add.at(hist, (w[ok], st[ok]), 1)
    smax = np.array([st[ok & (w == i)].max(initial=0) for i in range(n)])
    if schedule.applied_at is not None:
        applied = schedule.applied_at
    elif schedule.policy == "barrier":  # a round is applied at its last arrival
        last = np.zeros(int(schedule.round.max()) + 1)
        np.maximum.at(last, schedule.round, schedule.finish)
        applied = last[schedule.round]
    else:
        applied = schedule.finish
    wait = (applied - end)[real]
    with np.errstate(invalid="ignore", divide="ignore"):
        return {
            "updates_per_time": acc / T_end,
            "acceptance": np.where(jobs > 0, acc / np.maximum(jobs, 1), np.nan),
            "staleness_mean": np.where(acc > 0, np.bincount(w[ok], weights=st[ok], minlength=n) / np.maximum(acc, 1), np.nan),
            "staleness_max": smax,
            "staleness_hist": hist,
            "compute_mean": np.where(jobs > 0, busy / np.maximum(jobs, 1), np.nan),
            "idle_fraction": 1.0 - busy / T_end,
            "queue_delay_mean": np.where(acc > 0, np.bincount(w[ok], weights=wait[ok], minlength=n) / np.maximum(acc, 1),
                                         np.nan),
        }
