"""The exchange rules of elastic averaging (docs/theory.md §9.5): the elastic weights (h1, h2) of
each exchange, from the hyperparameters and the worker's :class:`ExchangeContext`."""

from __future__ import annotations

import dataclasses
from typing import Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from delaylab.algos.base import HParams

# --- exchange rules ---------------------------------------------------------------------------


class ExchangeContext(NamedTuple):
    """What an exchange rule may read about one exchange attempt (scalars, in the model's dtype).

    Attributes:
      alpha: α, the moving rate (``hparams["alpha"]``).
      trend: a, the trend of the worker–master log-distance u (0 until ``history`` values are held).
      failed_last: whether this worker's previous arrival was lost (the oracle rule's signal).
      worker: the worker's index.
    """

    alpha: jax.Array
    trend: jax.Array
    failed_last: jax.Array
    worker: jax.Array


def fixed_weights(hparams: HParams, ctx: ExchangeContext) -> tuple:
    """EASGD's rule: (h1, h2) = (α, α)."""
    del hparams
    return ctx.alpha, ctx.alpha


def oracle_weights(hparams: HParams, ctx: ExchangeContext) -> tuple:
    """(1, 0) on an exchange that follows a failure of the same worker, else (α, α) (EAHES-OM,
    the "full reset" reading: the worker is snapped onto the master, which ignores it)."""
    del hparams
    return jnp.where(ctx.failed_last, 1.0, ctx.alpha), jnp.where(ctx.failed_last, 0.0, ctx.alpha)


def oracle_master_side_weights(hparams: HParams, ctx: ExchangeContext) -> tuple:
    """(α, 0) on an exchange that follows a failure, else (α, α): the "master side only" reading
    of the oracle (the master ignores the returning worker, the worker is pulled as usual)."""
    del hparams
    return ctx.alpha, jnp.where(ctx.failed_last, 0.0, ctx.alpha)


@dataclasses.dataclass(frozen=True)
class DynamicWeights:
    """DEAHES-O's weight map, with every part the paper leaves open as a named axis [CHOICE]:

        a' = sign · a;   s = clip((a_start − a') / a0, 0, 1)
        h1 = α + (h1_cap − α) s,   h2 = α (1 − s).

    * ``sign`` (static): +1 reads a failure as a falling trend (a < 0, the paper's convention as
      summarised, and ours for a = −Σ c Δu); −1 the opposite.
    * ``a_start`` (hyperparameter ``a_start``, ≤ 0): where the ramp starts, i.e. the dead zone: 0
      (none: any negative trend acts), −a0, or the failure-free mean of a minus k standard
      deviations (calibrated from runs without failures, as the DEAHES figures do).
    * ``a0`` (hyperparameter, > 0): the ramp's length, from α to the cap.
    * ``h1_cap`` (hyperparameter, in [α, 1]): h1 at the ramp's end: 1 snaps the worker onto the
      master; α leaves the worker's pull alone and only lowers the master's (h2 → 0).
    """

    sign: int = 1

    def __post_init__(self):
        if self.sign not in (1, -1):
            raise ValueError(f"DynamicWeights: sign must be +1 or -1; got {self.sign!r}")

    def __call__(self, hparams: HParams, ctx: ExchangeContext) -> tuple:
        dt = ctx.alpha.dtype
        a = self.sign * ctx.trend
        s = jnp.clip((jnp.asarray(hparams["a_start"], dt) - a) / jnp.asarray(hparams["a0"], dt), 0.0, 1.0)
        cap = jnp.asarray(hparams["h1_cap"], dt)
        return ctx.alpha + (cap - ctx.alpha) * s, ctx.alpha * (1 - s)


def dynamic_weights(hparams: HParams, ctx: ExchangeContext) -> tuple:
    """DEAHES-O's rule with the paper's sign (:class:`DynamicWeights` ``sign=+1``)."""
    return DynamicWeights()(hparams, ctx)


def ramp_weights(a, alpha, a0):
    """(h1, h2): α each for a ≥ 0; toward (1, 0) linearly as a falls to −a0 (the map with no
    dead zone and cap 1)."""
    s = jnp.clip(-a / a0, 0.0, 1.0)
    return alpha + (1 - alpha) * s, alpha * (1 - s)


def _check_a0(name: str, hparams: HParams) -> None:
    if not np.all(np.asarray(hparams["a0"], dtype=np.float64) > 0):
        raise ValueError(f"{name}: a0 must be positive; got {hparams['a0']!r}")


def _check_dynamic(name: str, hparams: HParams) -> None:
    _check_a0(name, hparams)
    start = np.asarray(hparams["a_start"], dtype=np.float64)
    if not np.all(np.isfinite(start) & (start <= 0)):
        raise ValueError(f"{name}: a_start (where the ramp starts) must be finite and <= 0; got {hparams['a_start']!r}")
    cap, alpha = np.asarray(hparams["h1_cap"], dtype=np.float64), np.asarray(hparams["alpha"], dtype=np.float64)
    if not np.all((cap >= alpha) & (cap <= 1)):
        raise ValueError(f"{name}: h1_cap must be in [alpha, 1]; got {hparams['h1_cap']!r} (alpha = {hparams['alpha']!r})")


@dataclasses.dataclass(frozen=True)
class Exchange:
    """An exchange rule: ``weights(hparams, ctx) -> (h1, h2)`` (a module-level function or a
    frozen dataclass: it keys the compiled code), the number ``history`` of u values a worker
    keeps for the trend (p ≥ 2), the hyperparameters the rule reads with their defaults
    (``defaults``: ``((name, value), ...)``) and ``validate(name, hparams)`` for them."""

    weights: Callable
    history: int = 3
    defaults: tuple = ()
    validate: Optional[Callable] = None

    def __post_init__(self):
        h = self.history
        if isinstance(h, bool) or int(h) != h or h < 2:
            raise ValueError(f"exchange rule: history p must be an integer ≥ 2; got {h!r}")
        if not callable(self.weights):
            raise ValueError(f"exchange rule: weights must be a function (hparams, ctx) -> (h1, h2); got {self.weights!r}")


def fixed() -> Exchange:
    return Exchange(fixed_weights)


def oracle(master_side_only: bool = False) -> Exchange:
    """The oracle rule: full reset (:func:`oracle_weights`) or master side only
    (:func:`oracle_master_side_weights`)."""
    return Exchange(oracle_master_side_weights if master_side_only else oracle_weights)


def dynamic(history: int = 3, a0: float = 1.0, a_start: float = 0.0, h1_cap: float = 1.0, sign: int = 1) -> Exchange:
    """DEAHES-O's rule (:class:`DynamicWeights`); ``a0``, ``a_start`` and ``h1_cap`` become
    hyperparameters (traced: one compiled program serves every reading of them).

    Monitoring (a reconstruction, docs/theory.md §9.6). At each exchange attempt the worker
    computes u = log ‖xⁱ − θ̃ᵐ‖, θ̃ᵐ being its estimate of the master: the master it reads now if
    the exchange goes through, else the copy it last received. It keeps the last p = ``history``
    values and a = −Σⱼ cⱼ (u_{j+1} − u_j), c ∝ (1, 2, …, p−1) normalised to sum 1 (the newest
    difference weighted most; :func:`trend`); a failure makes u jump up, so a < 0 after one (the
    paper's sign convention). Until p values are held, a = 0. The weights are piecewise linear in
    a; with the ramp starting at a = 0 and h1 capped at 1 (the plainest reading; the default of
    :func:`deahes_o` starts the ramp at −a0 and caps h1 at 0.5, for the reason given there):

        h1(a) = α + (1 − α) min(1, max(0, −a/a0)),   h2(a) = α (1 − min(1, max(0, −a/a0))).

    ``a0`` is meant to be chosen from failure-free runs (a multiple of the spread of a there); the
    DEAHES figure does this and documents the multiple."""
    weights = dynamic_weights if sign == 1 else DynamicWeights(sign)
    return Exchange(weights, history, (("a0", a0), ("a_start", a_start), ("h1_cap", h1_cap)), _check_dynamic)
