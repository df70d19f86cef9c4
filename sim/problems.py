"""Problems: initial parameters, each worker's stochastic loss, the global objective F.

A :class:`Problem` splits into a static part (:class:`ProblemFns`, pure functions, hashable, what
compiled code depends on) and data (a pytree of arrays passed into compiled code, never closed
over as constants). Worker i samples only from its own data.

Built in here: heterogeneous quadratics and logistic regression on data split across workers.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np

from delaylab.sim.sampling import sample_indices
from delaylab.theory.arguments import as_numbers
from delaylab.theory.fixed_point import quadratic_fixed_point, weighted_minimiser

PyTree = Any


@dataclasses.dataclass(frozen=True)
class ProblemFns:
    """The static functions of a problem; ``data`` is always their first argument.

    Attributes:
      value_and_grad: ``(data, params, worker, key) -> (loss, grad)``: one stochastic gradient
        of worker ``worker``'s loss, with randomness from ``key``.
      local_objectives: ``(data, params) -> [n]``: each F_i at ``params`` (full local data,
        no noise).
      loss: optional ``(data, params, worker, key) -> scalar``: the minibatch loss whose gradient
        ``value_and_grad`` returns (the same draw for the same key), for work that needs more
        than a gradient (Hessian-vector products, AdaHessian).
      global_objective: optional ``(data, params) -> scalar`` replacing the mean of the local
        objectives as F (e.g. the loss over the unique training examples when shards overlap).
      metrics: optional ``(data, params) -> {name: scalar}``, extra quantities logged with F at
        every log point (e.g. test accuracy).
    """

    value_and_grad: Callable
    local_objectives: Callable
    loss: Optional[Callable] = None
    global_objective: Optional[Callable] = None
    metrics: Optional[Callable] = None

    def objective(self, data, params):
        if self.global_objective is not None:
            return self.global_objective(data, params)
        return jnp.mean(self.local_objectives(data, params))


@dataclasses.dataclass(frozen=True, eq=False)
class Problem:
    """A distributed optimisation problem over ``num_workers`` workers.

    Attributes:
      name: short description, used in reports.
      num_workers: n.
      fns: the static functions (see :class:`ProblemFns`).
      data: the arrays the functions read.
      x0: the initial parameters (a pytree).
      minimiser: the minimiser of F where known (float64 NumPy array), else None.
      local_derivatives: ``x -> (G [n, d], H [n, d, d])`` in float64 NumPy, for theory's
        numerical solver of weighted objectives; None where not provided.
      curvature: for quadratics, the (A, b) pair in float64, for closed-form theory.
      convolution: for problems with convolutions, how they are computed ("native" (oneDNN),
        "im2col" or "lax"; :func:`sim.native.conv_impl_for`): float32 results differ in the last
        bits between them, so runs, checkpoints and figure parts record it. None: no convolution.
    """

    name: str
    num_workers: int
    fns: ProblemFns
    data: PyTree
    x0: PyTree
    minimiser: Optional[np.ndarray] = None
    local_derivatives: Optional[Callable] = None
    curvature: Optional[tuple] = None
    convolution: Optional[str] = None

    def objective(self, params) -> float:
        return float(_objective(self.fns, self.data, params))

    def local_objectives(self, params) -> np.ndarray:
        """[n]: each F_i at ``params`` (one compiled program per problem's functions and shapes)."""
        return np.asarray(_local_objectives(self.fns, self.data, params))

    def weighted_minimiser(self, weights) -> np.ndarray:
        """The minimiser of Σ q_i F_i: closed form for quadratics, Newton otherwise."""
        if self.curvature is not None:
            return quadratic_fixed_point(*self.curvature, weights)
        if self.local_derivatives is None:
            raise NotImplementedError(f"{self.name}: no derivatives available to solve the weighted objective")
        x0 = self.minimiser if self.minimiser is not None else np.asarray(self.x0, dtype=np.float64)
        return weighted_minimiser(self.local_derivatives, weights, x0)

    def weighted_gradient(self, params, weights) -> PyTree:
        """∇(Σ_i q_i F_i)(params) with q = ``weights`` normalised, from the full local objectives.

        Zero where ``params`` is stationary for the q-weighted objective: with q the frequency
        weights p, where vanilla ASGD is predicted to settle (docs/theory.md §2); with q uniform,
        ∇F. Works for any problem, networks included (one compiled program per problem's
        functions and shapes)."""
        q = np.asarray(weights, dtype=np.float64)
        if q.shape != (self.num_workers,) or not np.all(np.isfinite(q)) or np.any(q < 0) or not q.sum() > 0:
            raise ValueError(f"weights must be {self.num_workers} finite non-negative numbers, not all zero; got {q}")
        leaves = jax.tree.leaves(self.x0)
        dt = leaves[0].dtype if leaves else jnp.asarray(0.0).dtype
        return _weighted_gradient(self.fns, self.data, params, jnp.asarray(q / q.sum(), dt))

    def derivatives(self, x) -> tuple[np.ndarray, np.ndarray]:
        """(G [n, d], H [n, d, d]): every worker's exact gradient and Hessian at ``x`` (float64)."""
        x = np.asarray(x, dtype=np.float64)
        if self.curvature is not None:
            A, b = self.curvature
            if A.ndim == 2:  # diagonal curvature, stored as [n, d]
                return A * (x[None, :] - b), np.einsum("ij,jk->ijk", A, np.eye(A.shape[1]))
            return np.einsum("ijk,ik->ij", A, x[None, :] - b), A
        if self.local_derivatives is None:
            raise NotImplementedError(f"{self.name}: no local derivatives available")
        return self.local_derivatives(x)


# Compiled with the problem's functions static: called eagerly, a network's local objectives
# (a lax.map over the shards) would be traced and compiled again on every call.
@functools.partial(jax.jit, static_argnums=0)
def _objective(fns: ProblemFns, data, params):
    return fns.objective(data, params)


@functools.partial(jax.jit, static_argnums=0)
def _local_objectives(fns: ProblemFns, data, params):
    return fns.local_objectives(data, params)


@functools.partial(jax.jit, static_argnums=0)
def _weighted_gradient(fns: ProblemFns, data, params, weights):
    return jax.grad(lambda p: jnp.dot(weights, fns.local_objectives(data, p)))(params)


def worker_batch(data, inputs: str, targets: str, worker, key, batch_size: Optional[int]):
    """Worker ``worker``'s examples: its whole shard (``batch_size=None``), or ``batch_size`` rows
    drawn with replacement. Rows are indexed directly (``X[worker, idx]``): under ``vmap``,
    ``X[worker][idx]`` would first copy every worker's whole shard."""
    if batch_size is None:
        return data[inputs][worker], data[targets][worker]
    idx = sample_indices(key, batch_size, data[inputs].shape[1])
    return data[inputs][worker, idx], data[targets][worker, idx]


def _float_dtype(dtype):
    return jnp.dtype(dtype) if dtype is not None else jnp.asarray(0.0).dtype


# --- heterogeneous quadratics -----------------------------------------------------------------


def _quad_value_and_grad(data, x, worker, key):
    A, b, sigma = data["A"][worker], data["b"][worker], data["noise"]
    r = x - b
    # r Aᵀ, not A r: batched over a sweep's runs, XLA then multiplies the [runs, d] points by Aᵀ as
    # one product, transposing the d × d A_i once instead of the points and the result.
    Ar = A * r if A.ndim == 1 else r @ A.T
    loss = 0.5 * jnp.dot(r, Ar)
    # Isotropic gradient noise of total variance σ² (covariance σ²/d · I), docs/theory.md §5.
    xi = jax.random.normal(key, x.shape, dtype=x.dtype)
    noise_term = sigma * xi / jnp.sqrt(jnp.asarray(x.shape[0], x.dtype))
    return loss + jnp.dot(noise_term, x), Ar + noise_term


def _quad_value_and_grad_exact(data, x, worker, key):
    del key
    A, b = data["A"][worker], data["b"][worker]
    r = x - b
    Ar = A * r if A.ndim == 1 else A @ r
    return 0.5 * jnp.dot(r, Ar), Ar


def _quad_local_objectives(data, x):
    r = x[None, :] - data["b"]
    A = data["A"]
    Ar = A * r if A.ndim == 2 else jnp.einsum("ijk,ik->ij", A, r)
    return 0.5 * jnp.sum(r * Ar, axis=1)


def _quad_loss(data, x, worker, key):
    """The minibatch loss whose gradient :func:`_quad_value_and_grad` returns (the noise enters
    as the linear term ξᵀx)."""
    return _quad_value_and_grad(data, x, worker, key)[0]


def _quad_loss_exact(data, x, worker, key):
    return _quad_value_and_grad_exact(data, x, worker, key)[0]


_QUAD_EXACT = ProblemFns(_quad_value_and_grad_exact, _quad_local_objectives, loss=_quad_loss_exact)
_QUAD_NOISY = ProblemFns(_quad_value_and_grad, _quad_local_objectives, loss=_quad_loss)


def quadratic(A, b, *, x0=None, noise: float = 0.0, dtype=None) -> Problem:
    """Heterogeneous quadratics: worker i's loss is ½ (x − b_i)ᵀ A_i (x − b_i).

    With ``noise = σ > 0`` each stochastic gradient gets additive isotropic Gaussian noise of
    total variance σ² (covariance σ²/d · I), independent of x (docs/theory.md §5).

    Args:
      A: [n, d, d] symmetric positive semi-definite curvatures (dense), or [n, d] diagonals
        (non-negative). Σ_i A_i must be positive definite.
      b: [n, d], worker i's local minimiser.
      x0: the initial point [d]; zeros by default.
      noise: σ ≥ 0.
      dtype: float dtype of the simulation (default: JAX's default float).
    """
    A64 = np.asarray(A, dtype=np.float64)
    b64 = np.asarray(b, dtype=np.float64)
    if b64.ndim != 2:
        raise ValueError(f"b must be [n, d] (one local minimiser per worker); got shape {b64.shape}")
    n, d = b64.shape
    if A64.shape not in ((n, d, d), (n, d)):
        raise ValueError(f"A must be [n, d, d] (dense) or [n, d] (diagonal) with n={n}, d={d} from b; got shape {A64.shape}")
    if not (np.all(np.isfinite(A64)) and np.all(np.isfinite(b64))):
        raise ValueError("A and b must be finite")
    if A64.ndim == 3:
        asym = np.max(np.abs(A64 - np.swapaxes(A64, 1, 2)))
        if asym > 1e-10 * max(1.0, np.max(np.abs(A64))):
            raise ValueError(f"each A_i must be symmetric; max |A_i − A_iᵀ| = {asym:.3g}")
        if np.min(np.linalg.eigvalsh(A64)) < -1e-10 * max(1.0, np.max(np.abs(A64))):
            raise ValueError("each A_i must be positive semi-definite")
        if np.min(np.linalg.eigvalsh(A64.sum(0))) <= 0:
            raise ValueError("Σ_i A_i must be positive definite (the objective needs a unique minimiser)")
    else:
        if np.any(A64 < 0):
            raise ValueError("diagonal curvatures A must be >= 0")
        if np.any(A64.sum(0) <= 0):
            raise ValueError("Σ_i A_i must be positive in every coordinate (unique minimiser)")
    sigma = float(noise)
    if not (np.isfinite(sigma) and sigma >= 0):
        raise ValueError(f"noise must be finite and >= 0; got {noise!r}")
    dt = _float_dtype(dtype)
    if x0 is None:
        x0_arr = jnp.zeros(d, dt)
    else:
        x0_np = np.asarray(x0, dtype=np.float64)
        if x0_np.shape != (d,):
            raise ValueError(f"x0 must have shape ({d},) to match b; got {x0_np.shape}")
        x0_arr = jnp.asarray(x0_np, dt)
    data = {"A": jnp.asarray(A64, dt), "b": jnp.asarray(b64, dt), "noise": jnp.asarray(sigma, dt)}
    kind = "dense" if A64.ndim == 3 else "diagonal"
    return Problem(
        name=f"quadratic({kind}, n={n}, d={d}, σ={sigma:g})",
        num_workers=n,
        fns=_QUAD_NOISY if sigma > 0 else _QUAD_EXACT,
        data=data,
        x0=x0_arr,
        minimiser=quadratic_fixed_point(A64, b64, np.ones(n)),
        curvature=(A64, b64),
    )


def random_quadratic(num_workers: int, dim: int, *, diagonal: bool = False, condition: float = 10.0,
                     spread: float = 1.0, noise: float = 0.0, seed: int = 0, dtype=None) -> Problem:
    """Random heterogeneous quadratics: eigenvalues in [1, condition], b_i ~ N(0, spread² I)."""
    for arg, v in (("num_workers", num_workers), ("dim", dim)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"random_quadratic: {arg} must be a positive integer; got {v!r}")
    for arg, v, lo, hi in (("condition", condition, 1.0, 1e12), ("spread", spread, 0.0, np.inf),
                           ("noise", noise, 0.0, np.inf)):
        x = as_numbers(v, f"random_quadratic: {arg}")
        if x.ndim != 0 or not np.isfinite(x) or not lo <= x <= hi:
            raise ValueError(f"random_quadratic: {arg} must be a finite number in [{lo:g}, {hi:g}]; got {v!r}")
    rng = np.random.default_rng(seed)
    b = spread * rng.standard_normal((num_workers, dim))
    if diagonal:
        A = rng.uniform(1.0, condition, (num_workers, dim))
    else:
        A = np.empty((num_workers, dim, dim))
        for i in range(num_workers):
            Q, _ = np.linalg.qr(rng.standard_normal((dim, dim)))
            eig = rng.uniform(1.0, condition, dim)
            A[i] = (Q * eig) @ Q.T
            A[i] = 0.5 * (A[i] + A[i].T)
    return quadratic(A, b, noise=noise, dtype=dtype)


# --- a smooth nonconvex finite sum ------------------------------------------------------------


def _pq_parts(data, x, b):
    """(value, gradient) of ½ (x − b)ᵀ A (x − b) + λ Σ_j x_j²/(1 + x_j²)."""
    r = x - b
    Ar = data["A"] @ r
    u2 = x * x
    lam = data["penalty"]
    return 0.5 * jnp.dot(r, Ar) + lam * jnp.sum(u2 / (1.0 + u2)), Ar + lam * 2.0 * x / (1.0 + u2) ** 2


def _pq_value_and_grad(data, x, worker, key):
    loss, grad = _pq_parts(data, x, data["b"][worker])
    xi = jax.random.normal(key, x.shape, dtype=x.dtype)  # as the quadratic's: total variance σ²
    noise_term = data["noise"] * xi / jnp.sqrt(jnp.asarray(x.shape[0], x.dtype))
    return loss + jnp.dot(noise_term, x), grad + noise_term


def _pq_local_objectives(data, x):
    return jax.vmap(lambda b: _pq_parts(data, x, b)[0])(data["b"])


def _pq_loss(data, x, worker, key):
    return _pq_value_and_grad(data, x, worker, key)[0]


_PENALISED = ProblemFns(_pq_value_and_grad, _pq_local_objectives, loss=_pq_loss)


def nonconvex_quadratic(num_workers: int, dim: int, *, penalty: float = 4.0, condition: float = 4.0,
                        heterogeneity: float = 1.0, noise: float = 1.0, center: float = 2.0, x0=None, seed: int = 0,
                        dtype=None) -> Problem:
    """A smooth nonconvex finite sum with exact heterogeneity: worker i's loss is

        F_i(x) = ½ (x − b_i)ᵀ A (x − b_i) + λ Σ_j x_j² / (1 + x_j²),

    with one A for all workers (eigenvalues uniform in [1, ``condition``], random eigenvectors)
    and b_i = b̄ + δ_i, b̄ ~ N(0, ``center``² I). The penalty's second derivative
    2λ (1 − 3u²)/(1 + u²)³ reaches −λ/2 at |u| = 1, so with λ = ``penalty`` > 2 the Hessian
    A + λ diag(…) has negative eigenvalues where coordinates are near ±1 (at x = 1, it is A − (λ/2) I,
    whose smallest eigenvalue is 1 − λ/2 < 0): F is nonconvex. L ≤ condition + 2λ.

    Since A and the penalty are shared, ∇F_i(x) − ∇F(x) = −A δ_i at every x, and the δ_i are
    centred and scaled so that (1/n) Σ_i ‖A δ_i‖² = ``heterogeneity`` = ζ² exactly. Stochastic
    gradients add isotropic Gaussian noise of total variance σ² = ``noise``² (as :func:`quadratic`).
    ``x0``: the initial point (default 0; at x0 = 1, the vector of ones, a run starts where F is
    not convex). With ``penalty = 0`` this is :func:`quadratic` with A_i = A (closed-form theory
    available)."""
    if int(num_workers) != num_workers or num_workers < 2 or int(dim) != dim or dim < 1:
        raise ValueError(f"need num_workers >= 2 and dim >= 1 (integers); got {num_workers!r}, {dim!r}")
    for label, v, ok in (("penalty", penalty, penalty >= 0), ("condition", condition, condition >= 1),
                         ("heterogeneity", heterogeneity, heterogeneity >= 0), ("noise", noise, noise >= 0),
                         ("center", center, center >= 0)):
        if not (np.isfinite(v) and ok):
            raise ValueError(f"{label} must be finite and in range (penalty, heterogeneity, noise, center >= 0; "
                             f"condition >= 1); got {v!r}")
    n, d = int(num_workers), int(dim)
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    A = (Q * rng.uniform(1.0, condition, d)) @ Q.T
    A = 0.5 * (A + A.T)
    delta = rng.standard_normal((n, d))
    delta -= delta.mean(0)
    spread = np.mean(np.sum((delta @ A) ** 2, axis=1))
    delta *= np.sqrt(heterogeneity / spread) if heterogeneity > 0 else 0.0
    b = center * rng.standard_normal(d) + delta
    if x0 is not None and np.asarray(x0).shape != (d,):
        raise ValueError(f"x0 must have shape ({d},); got {np.asarray(x0).shape}")
    if penalty == 0:
        return quadratic(np.broadcast_to(A, (n, d, d)).copy(), b, x0=x0, noise=noise, dtype=dtype)
    dt = _float_dtype(dtype)
    data = {"A": jnp.asarray(A, dt), "b": jnp.asarray(b, dt), "penalty": jnp.asarray(float(penalty), dt),
            "noise": jnp.asarray(float(noise), dt)}
    lam = float(penalty)

    def local_derivatives(x):
        x = np.asarray(x, np.float64)
        g_pen = lam * 2.0 * x / (1.0 + x * x) ** 2
        h_pen = lam * 2.0 * (1.0 - 3.0 * x * x) / (1.0 + x * x) ** 3
        G = (x[None, :] - b) @ A + g_pen[None, :]
        H = np.broadcast_to(A + np.diag(h_pen), (n, d, d)).copy()
        return G, H

    return Problem(name=f"nonconvex quadratic(n={n}, d={d}, λ={lam:g}, ζ²={heterogeneity:g}, σ={float(noise):g})",
                   num_workers=n, fns=_PENALISED, data=data,
                   x0=jnp.zeros(d, dt) if x0 is None else jnp.asarray(np.asarray(x0, np.float64), dt),
                   local_derivatives=local_derivatives)


# --- logistic regression ----------------------------------------------------------------------


def _logistic_loss(w, X, y, l2):
    margins = y * (X @ w)
    return jnp.mean(jax.nn.softplus(-margins)) + 0.5 * l2 * jnp.dot(w, w)


@dataclasses.dataclass(frozen=True)
class _LogisticValueAndGrad:
    batch_size: Optional[int]  # None: the worker's whole shard (deterministic)

    def __call__(self, data, w, worker, key):
        X, y = worker_batch(data, "X", "y", worker, key, self.batch_size)
        return jax.value_and_grad(_logistic_loss)(w, X, y, data["l2"])


def _logistic_local_objectives(data, w):
    return jax.vmap(_logistic_loss, in_axes=(None, 0, 0, None))(w, data["X"], data["y"], data["l2"])


def _logistic_derivatives_np(X: np.ndarray, y: np.ndarray, l2: float):
    """Per-worker gradients and Hessians of the full local losses, in float64 NumPy."""

    def derivatives(w):
        m = y * np.einsum("imp,p->im", X, w)
        s = 1.0 / (1.0 + np.exp(m))  # σ(−m)
        G = -np.einsum("im,imp->ip", s * y, X) / X.shape[1] + l2 * w
        curv = s * (1.0 - s)
        H = np.einsum("im,imp,imq->ipq", curv, X, X) / X.shape[1] + l2 * np.eye(X.shape[2])
        return G, H

    return derivatives


def logistic_regression(features, labels, *, num_workers: Optional[int] = None, l2: float = 1e-3,
                        batch_size: Optional[int] = None, x0=None, dtype=None) -> Problem:
    """Binary logistic regression with L2 penalty, data split across workers.

    F_i(w) = mean over worker i's examples of log(1 + exp(−y wᵀx)) + (λ/2)‖w‖².

    Args:
      features: [n, m, p] already split (worker i holds ``features[i]``), or [N, p] split
        here into ``num_workers`` contiguous equal shards (a remainder is dropped).
      labels: matching [n, m] or [N], in {0, 1} or {−1, +1}.
      num_workers: needed when ``features`` is [N, p].
      l2: λ > 0 (strong convexity makes the minimiser unique).
      batch_size: examples per stochastic gradient, drawn with replacement from the worker's
        shard; None uses the whole shard (exact local gradients).
    """
    X = np.asarray(features, dtype=np.float64)
    y = np.asarray(labels, dtype=np.float64)
    if X.ndim == 2:
        if num_workers is None or num_workers < 1:
            raise ValueError("features of shape [N, p] need num_workers >= 1 to be split")
        if y.shape != (X.shape[0],):
            raise ValueError(f"labels must have shape ({X.shape[0]},) to match features; got {y.shape}")
        m = X.shape[0] // num_workers
        if m < 1:
            raise ValueError(f"{X.shape[0]} examples cannot be split over {num_workers} workers")
        X = X[: m * num_workers].reshape(num_workers, m, -1)
        y = y[: m * num_workers].reshape(num_workers, m)
    elif X.ndim == 3:
        if y.shape != X.shape[:2]:
            raise ValueError(f"labels must have shape {X.shape[:2]} to match features; got {y.shape}")
    else:
        raise ValueError(f"features must be [n, m, p] or [N, p]; got shape {X.shape}")
    values = set(np.unique(y).tolist())
    if values <= {0.0, 1.0}:
        y = 2.0 * y - 1.0
    elif not values <= {-1.0, 1.0}:
        raise ValueError(f"labels must be in {{0, 1}} or {{−1, +1}}; got values {sorted(values)[:5]}")
    if not (np.isfinite(l2) and l2 > 0):
        raise ValueError(f"l2 must be positive and finite; got {l2!r}")
    if batch_size is not None and (int(batch_size) != batch_size or batch_size < 1):
        raise ValueError(f"batch_size must be a positive integer or None; got {batch_size!r}")
    n, _, p = X.shape
    dt = _float_dtype(dtype)
    x0_arr = jnp.zeros(p, dt) if x0 is None else jnp.asarray(np.asarray(x0, np.float64).reshape(p), dt)
    derivs = _logistic_derivatives_np(X, y, float(l2))
    minimiser = weighted_minimiser(derivs, np.ones(n), np.zeros(p))
    return Problem(
        name=f"logistic(n={n}, m={X.shape[1]}, p={p}, batch={batch_size})",
        num_workers=n,
        fns=ProblemFns(_LogisticValueAndGrad(None if batch_size is None else int(batch_size)), _logistic_local_objectives),
        data={"X": jnp.asarray(X, dt), "y": jnp.asarray(y, dt), "l2": jnp.asarray(l2, dt)},
        x0=x0_arr,
        minimiser=minimiser,
        local_derivatives=derivs,
    )


def synthetic_logistic(num_workers: int, samples_per_worker: int, dim: int, *, heterogeneity: float = 1.0,
                       l2: float = 1e-2, batch_size: Optional[int] = None, seed: int = 0, dtype=None) -> Problem:
    """Logistic regression on synthetic data whose distribution differs across workers.

    Worker i's features are N(μ_i, I) with μ_i ~ N(0, heterogeneity² I), and its labels follow a
    logistic model with its own weights w_0 + heterogeneity · δ_i. A constant feature is
    appended (intercept), so the parameter has dim + 1 entries.
    """
    rng = np.random.default_rng(seed)
    w0 = rng.standard_normal(dim)
    X = np.empty((num_workers, samples_per_worker, dim + 1))
    y = np.empty((num_workers, samples_per_worker))
    for i in range(num_workers):
        mu = heterogeneity * rng.standard_normal(dim)
        wi = w0 + heterogeneity * rng.standard_normal(dim)
        feats = mu + rng.standard_normal((samples_per_worker, dim))
        prob = 1.0 / (1.0 + np.exp(-feats @ wi))
        y[i] = (rng.random(samples_per_worker) < prob).astype(np.float64)
        X[i] = np.concatenate([feats, np.ones((samples_per_worker, 1))], axis=1)
    return logistic_regression(X, y, l2=l2, batch_size=batch_size, dtype=dtype)


# --- least squares (a heterogeneous quadratic with sampling noise) ----------------------------


def _ls_loss(x, M, y):
    r = M @ x - y
    return 0.5 * jnp.mean(r * r)


@dataclasses.dataclass(frozen=True)
class _LeastSquaresValueAndGrad:
    batch_size: Optional[int]  # None: the worker's whole shard (deterministic)

    def __call__(self, data, x, worker, key):
        M, y = worker_batch(data, "M", "y", worker, key, self.batch_size)
        r = M @ x - y
        return 0.5 * jnp.mean(r * r), (M.T @ r) / M.shape[0]


def _ls_local_objectives(data, x):
    return jax.vmap(_ls_loss, in_axes=(None, 0, 0))(x, data["M"], data["y"])


def least_squares(features, targets, *, batch_size: Optional[int] = None, x0=None, dtype=None) -> Problem:
    """Least squares split across workers: F_i(x) = (1/2m) ‖M_i x − y_i‖².

    A heterogeneous quadratic (A_i = M_iᵀM_i/m) whose stochastic gradients come from sampling
    ``batch_size`` rows of worker i's data with replacement, as in Mishchenko et al.'s
    asynchronous-SGD experiments (NeurIPS 2022). The closed-form theory of quadratics
    applies: ``curvature`` holds (A_i, b_i) with A_i b_i = M_iᵀ y_i / m.

    Args:
      features: [n, m, d], worker i's rows M_i.
      targets: [n, m], worker i's y_i.
      batch_size: rows per stochastic gradient; None uses all m (exact local gradients).
    """
    M = np.asarray(features, dtype=np.float64)
    y = np.asarray(targets, dtype=np.float64)
    if M.ndim != 3 or y.shape != M.shape[:2]:
        raise ValueError(f"features must be [n, m, d] and targets [n, m]; got {M.shape} and {y.shape}")
    if batch_size is not None and (int(batch_size) != batch_size or batch_size < 1):
        raise ValueError(f"batch_size must be a positive integer or None; got {batch_size!r}")
    n, m, d = M.shape
    A = np.einsum("imj,imk->ijk", M, M) / m
    rhs = np.einsum("imj,im->ij", M, y) / m
    if np.min(np.linalg.eigvalsh(A.sum(0))) <= 1e-12 * max(1.0, np.abs(A).max()):
        raise ValueError("Σ_i M_iᵀM_i must be positive definite (the objective needs a unique minimiser)")
    b = np.stack([np.linalg.lstsq(A[i], rhs[i], rcond=None)[0] for i in range(n)])
    dt = _float_dtype(dtype)
    x0_arr = jnp.zeros(d, dt) if x0 is None else jnp.asarray(np.asarray(x0, np.float64).reshape(d), dt)
    return Problem(
        name=f"least_squares(n={n}, m={m}, d={d}, batch={batch_size})",
        num_workers=n,
        fns=ProblemFns(_LeastSquaresValueAndGrad(None if batch_size is None else int(batch_size)), _ls_local_objectives),
        data={"M": jnp.asarray(M, dt), "y": jnp.asarray(y, dt)},
        x0=x0_arr,
        minimiser=np.linalg.solve(A.sum(0), rhs.sum(0)),
        local_derivatives=lambda x: (np.einsum("ijk,k->ij", A, x) - rhs, A),
        curvature=(A, b),
    )


def synthetic_least_squares(num_workers: int, rows_per_worker: int, dim: int, *, heterogeneity: float = 1.0,
                            batch_size: Optional[int] = None, seed: int = 0, dtype=None) -> Problem:
    """Least squares whose workers have different true solutions x_0 + heterogeneity · δ_i.

    Rows have uniform entries in [0, 1) divided by √dim (as in Mishchenko et al.'s experiment);
    targets carry N(0, 0.01²) noise.
    """
    rng = np.random.default_rng(seed)
    x_common = rng.standard_normal(dim)
    M = rng.random((num_workers, rows_per_worker, dim)) / np.sqrt(dim)
    sols = x_common + heterogeneity * rng.standard_normal((num_workers, dim))
    y = np.einsum("imd,id->im", M, sols) + 0.01 * rng.standard_normal((num_workers, rows_per_worker))
    return least_squares(M, y, batch_size=batch_size, dtype=dtype)
